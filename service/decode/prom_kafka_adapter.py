"""prometheus-kafka-adapter JSON: one sample per message, value as a string, RFC3339 timestamp.

`{"timestamp":"2026-12-02T13:00:15Z","value":"71.5","name":"DCGM_FI_DEV_GPU_TEMP","labels":{...}}`
"""

from __future__ import annotations

from datetime import datetime

import orjson

from service.decode.types import DecodeError, RawSample


def parse_rfc3339(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise DecodeError("bad_timestamp", text[:64]) from exc


def decode(payload: bytes, ref_ts: float) -> list[RawSample]:
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("invalid_json", str(exc)[:120]) from exc
    if not isinstance(doc, dict):
        raise DecodeError("not_an_object")
    name, labels, ts, value = doc.get("name"), doc.get("labels"), doc.get("timestamp"), doc.get("value")
    if not isinstance(name, str) or not name:
        raise DecodeError("missing_name")
    if not isinstance(labels, dict):
        raise DecodeError("missing_labels")
    if not isinstance(ts, str):
        raise DecodeError("missing_timestamp")
    if not isinstance(value, str | int | float):
        raise DecodeError("bad_value", repr(value)[:64])
    try:
        number = float(value)  # the adapter sends strings, "NaN" and "+Inf" included
    except (TypeError, ValueError) as exc:
        raise DecodeError("bad_value", repr(value)[:64]) from exc
    clean = {str(k): str(v) for k, v in labels.items() if k != "__name__"}
    return [RawSample(name, clean, parse_rfc3339(ts), number)]
