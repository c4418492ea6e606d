"""OTLP metrics as JSON (`ExportMetricsServiceRequest`, the OTLP/HTTP JSON encoding): gauge and sum.

Attributes of the resource and of each data point become labels, with dots as underscores
(`k8s.pod.name` -> `k8s_pod_name`); `host.name` becomes `host`, so the entity join finds the node.
Only cumulative sums are read as counters; a delta sum (`aggregationTemporality` 1) is a dead letter
`otlp_delta_sum` for the same reason as Vector's incremental metrics. A point flagged
`NO_RECORDED_VALUE` (the Collector's Prometheus stale marker) is a NaN sample, as the stale marker is.
Histograms, exponential histograms and summaries are skipped and counted (`Samples.skipped`,
`prexid_points_skipped_total`); a message with no point at all is an `empty` dead letter.
`otlp_proto.py` reads the protobuf encoding to the same samples.
"""

from __future__ import annotations

from typing import Any

import orjson

from prexid.service.decode.common import epoch_seconds, load_object, metric_name, number, with_host
from prexid.service.decode.types import DecodeError, Samples

DELTA = 1  # AggregationTemporality
NO_RECORDED_VALUE = 1  # DataPointFlags bit
# point kinds prexid does not read, by their JSON key, with the reason they are counted under
SKIPPED = {"histogram": "histogram", "exponentialHistogram": "exponential_histogram", "summary": "summary"}


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    return decode_doc(load_object(payload), ref_ts, host)


def decode_doc(doc: dict[str, Any], ref_ts: float, host: str | None = None) -> Samples:
    out = Samples()
    for rm in _items(doc, "resourceMetrics"):
        resource = _attributes(_obj(rm.get("resource")).get("attributes"))
        for sm in _items(rm, "scopeMetrics"):
            for metric in _items(sm, "metrics"):
                _metric(metric, with_host(resource, host), ref_ts, out)
    return checked(out)


def checked(out: Samples) -> Samples:
    """A decoded message, or the `empty` dead letter when it held no point at all."""
    if not out.names and not out.skipped:
        raise DecodeError("empty", "no gauge or sum data points")
    return out


def skip(out: Samples, reason: str, points: int) -> None:
    if points:
        out.skipped[reason] = out.skipped.get(reason, 0) + points


def point_time(stamp: object, ref_ts: float) -> float:
    """A point's `timeUnixNano`; 0 or none means the record's time."""
    return epoch_seconds(stamp) if stamp not in (None, 0, "0") else ref_ts


def _metric(metric: dict[str, Any], resource: dict[str, str], ref_ts: float, out: Samples) -> None:
    name = metric_name(metric.get("name"))
    body = metric.get("gauge") or metric.get("sum")
    if body is None:
        for key, reason in SKIPPED.items():
            if key in metric:
                skip(out, reason, len(_items(_obj(metric[key]), "dataPoints")))
        return
    body = _obj(body)
    if "sum" in metric and body.get("aggregationTemporality") in (DELTA, "AGGREGATION_TEMPORALITY_DELTA"):
        raise DecodeError("otlp_delta_sum", name)
    for point in _items(body, "dataPoints"):
        labels = {**resource, **_attributes(point.get("attributes"))}
        value = point.get("asDouble", point.get("asInt"))
        flags = point.get("flags")
        out.names.append(name)
        out.labels.append(labels)
        out.ts.append(point_time(point.get("timeUnixNano"), ref_ts))
        stale = flags and isinstance(flags, int) and not isinstance(flags, bool) and flags & NO_RECORDED_VALUE
        out.values.append(float("nan") if stale else number(value))


def _attributes(raw: object) -> dict[str, str]:
    labels: dict[str, str] = {}
    for attr in _list(raw):
        attr = _obj(attr)
        key, value = attr.get("key"), _obj(attr.get("value"))
        if not isinstance(key, str) or not value:
            raise DecodeError("bad_attribute", repr(attr)[:64])
        text = value.get("stringValue")  # nearly every attribute: no call for it
        labels[label_name(key)] = text if isinstance(text, str) and len(value) == 1 else value_text(value)
    return labels


def label_name(key: str) -> str:
    return "host" if key == "host.name" else key.replace(".", "_")


def value_text(value: dict[str, Any]) -> str:
    """An `AnyValue` as label text: strings as they are, numbers and booleans as the Collector's
    Prometheus exporter writes them, arrays and maps as compact JSON."""
    kind, text = next(iter(value.items()))
    if isinstance(text, bool):
        return "true" if text else "false"
    if kind == "doubleValue" and isinstance(text, int | float | str):
        return str(number(text))
    if isinstance(text, dict | list):
        return orjson.dumps(_plain(value)).decode()
    return str(text)


def _plain(value: object) -> object:
    """An `AnyValue` in its JSON encoding as the value it holds: arrays and maps unwrapped, scalars
    as the encoding has them (64-bit integers as strings)."""
    kind, inner = next(iter(_obj(value).items()), ("", None))
    if kind == "arrayValue":
        return [_plain(v) for v in _list(_obj(inner).get("values"))]
    if kind == "kvlistValue":
        pairs = [_obj(kv) for kv in _list(_obj(inner).get("values"))]
        return {str(kv.get("key")): _plain(kv.get("value")) for kv in pairs}
    return inner


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
