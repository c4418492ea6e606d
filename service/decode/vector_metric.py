"""Vector metric events in its `json` codec, one metric per message.

`{"name":"node_network_receive_bytes_total","namespace":"host","tags":{"device":"eth0","host":"n1"},
"timestamp":"2026-09-24T12:11:02.540933Z","kind":"absolute","counter":{"value":1000.0}}`

Only `absolute` metrics are read: an `incremental` value is a delta whose meaning depends on Vector's
flush interval, and summing it into a counter silently would be wrong (dead letter `vector_incremental`;
configure the sink after an `aggregate` transform or from a `prometheus_scrape` source). Histograms and
summaries become Prometheus-style `_bucket{le}`, `{quantile}`, `_count` and `_sum` series.
`namespace` is not prefixed to the name (Vector's `host_metrics` names already read like node-exporter's).
"""

from __future__ import annotations

from typing import Any

from prexid.service.decode.common import (
    epoch_seconds,
    load_object,
    metric_name,
    number,
    str_labels,
    with_host,
)
from prexid.service.decode.types import DecodeError, Samples

_VALUE_KINDS = ("counter", "gauge", "set", "distribution", "aggregated_histogram", "aggregated_summary")


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    return decode_doc(load_object(payload), ref_ts, host)


def decode_doc(doc: dict[str, Any], ref_ts: float, host: str | None = None) -> Samples:
    name = metric_name(doc.get("name"))
    if doc.get("kind") == "incremental":
        raise DecodeError("vector_incremental", name)
    labels = with_host(str_labels(doc.get("tags"), "tags"), host)
    ts = epoch_seconds(doc["timestamp"]) if doc.get("timestamp") is not None else ref_ts
    present = [k for k in _VALUE_KINDS if k in doc]
    if len(present) != 1 or not isinstance(doc[present[0]], dict):
        raise DecodeError("bad_vector_value", f"{name}: value kinds {present}")
    out = Samples()
    for suffix, extra, value in _expand(present[0], doc[present[0]]):
        out.names.append(name + suffix)
        out.labels.append({**labels, **extra} if extra else labels)
        out.ts.append(ts)
        out.values.append(value)
    return out


def _expand(kind: str, body: dict[str, Any]) -> list[tuple[str, dict[str, str], float]]:
    if kind in ("counter", "gauge"):
        return [("", {}, number(body.get("value")))]
    if kind == "set":
        return [("", {}, float(len(_list(body, "values"))))]
    if kind == "distribution":
        points = [(_num(p, "value"), _num(p, "rate")) for p in _list(body, "samples")]
        return [("_count", {}, sum(r for _, r in points)), ("_sum", {}, sum(v * r for v, r in points))]
    rows: list[tuple[str, dict[str, str], float]] = [
        ("_count", {}, number(body.get("count"))),
        ("_sum", {}, number(body.get("sum"))),
    ]
    if kind == "aggregated_histogram":
        rows += [
            ("_bucket", {"le": _le(_num(b, "upper_limit"))}, _num(b, "count")) for b in _list(body, "buckets")
        ]
    else:
        rows += [
            ("", {"quantile": repr(_num(q, "quantile"))}, _num(q, "value")) for q in _list(body, "quantiles")
        ]
    return rows


def _list(body: dict[str, Any], key: str) -> list[Any]:
    items = body.get(key)
    if not isinstance(items, list):
        raise DecodeError("bad_vector_value", f"{key} is not a list")
    return items


def _num(item: object, key: str) -> float:
    if not isinstance(item, dict):
        raise DecodeError("bad_vector_value", repr(item)[:64])
    return number(item.get(key))


def _le(limit: float) -> str:
    return "+Inf" if limit == float("inf") else repr(limit)
