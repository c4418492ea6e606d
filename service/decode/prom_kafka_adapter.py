"""prometheus-kafka-adapter JSON: one sample per message, value as a string, RFC3339 timestamp.

`{"timestamp":"2026-12-02T13:00:15Z","value":"71.5","name":"DCGM_FI_DEV_GPU_TEMP","labels":{...}}`
"""

from __future__ import annotations

from typing import Any

from service.decode.common import load_object, metric_name, number, parse_rfc3339, str_labels, with_host
from service.decode.types import DecodeError, Samples


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    return decode_doc(load_object(payload), ref_ts, host)


def decode_doc(doc: dict[str, Any], ref_ts: float, host: str | None = None) -> Samples:
    name = metric_name(doc.get("name"))
    labels, ts = doc.get("labels"), doc.get("timestamp")
    if not isinstance(labels, dict):
        raise DecodeError("missing_labels")
    if not isinstance(ts, str):
        raise DecodeError("missing_timestamp")
    value = number(doc.get("value"))  # the adapter sends strings, "NaN" and "+Inf" included
    return Samples([name], [with_host(str_labels(labels), host)], [parse_rfc3339(ts)], [value])
