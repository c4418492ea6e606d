"""OTLP metrics as JSON (`ExportMetricsServiceRequest`, the OTLP/HTTP JSON encoding): gauge and sum.

Attributes of the resource and of each data point become labels, with dots as underscores
(`k8s.pod.name` -> `k8s_pod_name`); `host.name` becomes `host`, so the entity join finds the node.
Only cumulative sums are read as counters; a delta sum (`aggregationTemporality` 1) is a dead letter
`otlp_delta_sum` for the same reason as Vector's incremental metrics. Histograms are skipped; a
message with no gauge or sum point is an `empty` dead letter.
"""

from __future__ import annotations

from typing import Any

from prexid.service.decode.common import epoch_seconds, load_object, metric_name, number, with_host
from prexid.service.decode.types import DecodeError, Samples

_DELTA = 1


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    return decode_doc(load_object(payload), ref_ts, host)


def decode_doc(doc: dict[str, Any], ref_ts: float, host: str | None = None) -> Samples:
    out = Samples()
    for rm in _items(doc, "resourceMetrics"):
        resource = _attributes(_obj(rm.get("resource")).get("attributes"))
        for sm in _items(rm, "scopeMetrics"):
            for metric in _items(sm, "metrics"):
                _metric(metric, with_host(resource, host), ref_ts, out)
    if not out.names:
        raise DecodeError("empty", "no gauge or sum data points")
    return out


def _metric(metric: dict[str, Any], resource: dict[str, str], ref_ts: float, out: Samples) -> None:
    name = metric_name(metric.get("name"))
    body = metric.get("gauge") or metric.get("sum")
    if body is None:
        return
    body = _obj(body)
    if "sum" in metric and body.get("aggregationTemporality") in (_DELTA, "AGGREGATION_TEMPORALITY_DELTA"):
        raise DecodeError("otlp_delta_sum", name)
    for point in _items(body, "dataPoints"):
        labels = {**resource, **_attributes(point.get("attributes"))}
        value = point.get("asDouble", point.get("asInt"))
        stamp = point.get("timeUnixNano")
        out.names.append(name)
        out.labels.append(labels)
        out.ts.append(epoch_seconds(stamp) if stamp not in (None, 0, "0") else ref_ts)
        out.values.append(number(value))


def _attributes(raw: object) -> dict[str, str]:
    labels: dict[str, str] = {}
    for attr in _list(raw):
        attr = _obj(attr)
        key, value = attr.get("key"), _obj(attr.get("value"))
        if not isinstance(key, str) or not value:
            raise DecodeError("bad_attribute", repr(attr)[:64])
        text = next(iter(value.values()))
        labels["host" if key == "host.name" else key.replace(".", "_")] = str(text)
    return labels


def _items(parent: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [_obj(x) for x in _list(parent.get(key))]


def _list(raw: object) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DecodeError("bad_otlp", f"expected a list, got {type(raw).__name__}")
    return raw


def _obj(raw: object) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise DecodeError("bad_otlp", f"expected an object, got {type(raw).__name__}")
    return raw
