"""OTLP metrics as protobuf (`ExportMetricsServiceRequest`): the OpenTelemetry Collector Kafka
exporter's default encoding, `otlp_proto`, one request per record.

Read as `otlp.py` reads the JSON encoding, to the same samples: gauges and cumulative sums, resource
and point attributes as labels (`host.name` -> `host`), a delta sum the dead letter `otlp_delta_sum`,
a `NO_RECORDED_VALUE` point a NaN, histograms, exponential histograms and summaries counted as skipped.
Bytes that are no such request are the dead letter `invalid_protobuf`.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from prexid.service.decode import otlp
from prexid.service.decode.common import metric_name, parse_protobuf, with_host
from prexid.service.decode.types import DecodeError, Samples

# `Metric.data` kinds prexid does not read, with the reason they are counted under
_SKIPPED = {"histogram": "histogram", "exponential_histogram": "exponential_histogram", "summary": "summary"}


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    request = parse_protobuf(ExportMetricsServiceRequest(), payload)
    out = Samples()
    for rm in request.resource_metrics:
        resource = with_host(_attributes(rm.resource.attributes), host)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                _metric(metric, resource, ref_ts, out)
    return otlp.checked(out)


def _metric(metric: Metric, resource: dict[str, str], ref_ts: float, out: Samples) -> None:
    name = metric_name(metric.name)
    kind = metric.WhichOneof("data")
    if kind in _SKIPPED:
        otlp.skip(out, _SKIPPED[kind], len(getattr(metric, kind).data_points))
        return
    if kind == "gauge":
        points = metric.gauge.data_points
    elif kind == "sum":
        if metric.sum.aggregation_temporality == otlp.DELTA:
            raise DecodeError("otlp_delta_sum", name)
        points = metric.sum.data_points
    else:
        return
    for point in points:
        if point.flags & otlp.NO_RECORDED_VALUE:
            value = float("nan")
        elif point.HasField("as_double"):
            value = point.as_double
        elif point.HasField("as_int"):
            value = float(point.as_int)
        else:
            raise DecodeError("bad_value", f"{name}: a point with no value")
        out.names.append(name)
        out.labels.append({**resource, **_attributes(point.attributes)})
        out.ts.append(otlp.point_time(point.time_unix_nano, ref_ts))
        out.values.append(value)


def _attributes(attributes: Iterable[KeyValue]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for attr in attributes:
        labels[otlp.label_name(attr.key)] = _text(attr.value, attr.key)
    return labels


def _text(value: AnyValue, key: str) -> str:
    """As `otlp.value_text` renders the same value's JSON encoding (arrays and maps through it)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return str(value.int_value)
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "double_value":
        return str(value.double_value)
    if kind is None:
        raise DecodeError("bad_attribute", f"{key!r} has no value")
    return otlp.value_text(MessageToDict(value))
