"""OTLP metric requests as the OpenTelemetry Collector's Prometheus receiver builds them, for tests.

`request` turns decoded samples back into an `ExportMetricsServiceRequest`: one resource per node
(`host.name`, the short host name `resourcedetection` gives), scope `otelcol/prometheusreceiver`, a cumulative monotonic sum for counter names, a
gauge for the rest, every other label a string point attribute. Unit tests compare its two
encodings; the integration test produces its protobuf to the real broker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE

from prexid.service.decode.types import RawSample
from prexid.service.pipeline.series_registry import node_of

COUNTER = re.compile(r"(_total|_TOTAL|_COUNTER|_COUNT)$")


def attr(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def request(rows: Iterable[RawSample]) -> ExportMetricsServiceRequest:
    by_host: dict[str, dict[str, list[RawSample]]] = {}
    for row in rows:
        by_host.setdefault(node_of(row.labels), {}).setdefault(row.name, []).append(row)
    req = ExportMetricsServiceRequest()
    for host, metrics in by_host.items():
        rm = req.resource_metrics.add()
        if host != "unknown":
            rm.resource.attributes.append(attr("host.name", host))
        sm = rm.scope_metrics.add()
        sm.scope.name, sm.scope.version = "otelcol/prometheusreceiver", "0.115.0"
        for name, points in metrics.items():
            metric = sm.metrics.add(name=name)
            if COUNTER.search(name):
                metric.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
                metric.sum.is_monotonic = True
                data = metric.sum.data_points
            else:
                data = metric.gauge.data_points
            for row in points:
                point = data.add(time_unix_nano=round(row.ts * 1e9), as_double=row.value)
                point.attributes.extend(attr(k, v) for k, v in row.labels.items() if k != "host")
    return req
