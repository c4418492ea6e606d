"""Telegraf output: its `json` serializer and its default Influx line protocol.

Names follow Telegraf's own Prometheus output: field `f` of measurement `m` is the series `m_f`; the
fields Telegraf's prometheus input uses for a metric's value (`gauge`, `counter`, `value`, `untyped`)
keep the bare measurement name, and with `metric_version = 2` (measurement `prometheus`) each field
is a metric name. String fields are not samples and are skipped; a message with no numeric field is
an `empty` dead letter. Timestamps may be s, ms, µs or ns (json) / ns (line protocol).
"""

from __future__ import annotations

import re
from typing import Any

from prexid.service.decode.common import epoch_seconds, load_json, metric_name, str_labels, with_host
from prexid.service.decode.types import DecodeError, Samples, utf8

_BARE_FIELDS = frozenset({"gauge", "counter", "value", "untyped"})
_LINE = re.compile(
    r'^(?P<series>(?:[^ \\]|\\.)+) +(?P<fields>(?:[^ "\\]|\\.|"(?:[^"\\]|\\.)*")+)(?: +(?P<ts>-?\d+))? *$'
)
_FIELD = re.compile(r'((?:[^,=\\]|\\.)+)=("(?:[^"\\]|\\.)*"|[^,]*)(?:,|$)')
_ESCAPED = re.compile(r"\\(.)")


def series_name(measurement: str, field: str) -> str:
    if measurement == "prometheus":
        return field
    return measurement if field in _BARE_FIELDS else f"{measurement}_{field}"


def decode_json(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    return decode_json_doc(load_json(payload), ref_ts, host)


def decode_json_doc(doc: Any, ref_ts: float, host: str | None = None) -> Samples:
    """One metric object, or the batch form `{"metrics": [...]}`."""
    if isinstance(doc, dict) and isinstance(doc.get("metrics"), list):
        metrics = doc["metrics"]
    elif isinstance(doc, dict):
        metrics = [doc]
    else:
        raise DecodeError("not_an_object", type(doc).__name__)
    out = Samples()
    for m in metrics:
        if not isinstance(m, dict) or not isinstance(m.get("fields"), dict):
            raise DecodeError("missing_fields")
        name = metric_name(m.get("name"))
        labels = with_host(str_labels(m.get("tags"), "tags"), host)
        ts = epoch_seconds(m["timestamp"]) if m.get("timestamp") is not None else ref_ts
        for field, value in m["fields"].items():
            if isinstance(value, int | float):  # bool is an int: true/false become 1/0
                _append(out, series_name(name, str(field)), labels, ts, float(value))
    if not out.names:
        raise DecodeError("empty", "no numeric fields")
    return out


def decode_line_protocol(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    out = Samples()
    for line in utf8(payload).split("\n"):
        line = line.strip()
        if line and not line.startswith("#"):
            _decode_line(line, ref_ts, host, out)
    if not out.names:
        raise DecodeError("empty", "no numeric fields")
    return out


def _decode_line(line: str, ref_ts: float, host: str | None, out: Samples) -> None:
    m = _LINE.match(line)
    if m is None:
        raise DecodeError("bad_line_protocol", line[:120])
    measurement, *tags = re.split(r"(?<!\\),", m["series"])
    labels: dict[str, str] = {}
    for tag in tags:
        key, eq, value = tag.partition("=")
        if not eq:
            raise DecodeError("bad_line_protocol", line[:120])
        labels[_unescape(key)] = _unescape(value)
    labels = with_host(labels, host)
    ts = epoch_seconds(int(m["ts"]) / 1e9) if m["ts"] else ref_ts
    name = _unescape(measurement)
    for fm in _FIELD.finditer(m["fields"]):
        value = _field_value(fm[2], line)
        if value is not None:
            _append(out, series_name(name, _unescape(fm[1])), labels, ts, value)


def _field_value(text: str, line: str) -> float | None:
    if text.startswith('"'):
        return None
    if text in ("t", "T", "true", "True", "TRUE"):
        return 1.0
    if text in ("f", "F", "false", "False", "FALSE"):
        return 0.0
    try:
        return float(text[:-1] if text[-1:] in ("i", "u") else text)
    except ValueError:
        raise DecodeError("bad_value", line[:120]) from None


def _unescape(text: str) -> str:
    return _ESCAPED.sub(r"\1", text) if "\\" in text else text


def _append(out: Samples, name: str, labels: dict[str, str], ts: float, value: float) -> None:
    out.names.append(name)
    out.labels.append(labels)
    out.ts.append(ts)
    out.values.append(value)
