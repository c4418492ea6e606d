"""OTLP protobuf (`otlp_proto`) decodes to the samples its JSON encoding does, counts the point kinds
it skips, and turns bytes that are no request into a dead letter with a reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    AGGREGATION_TEMPORALITY_DELTA,
    DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK,
)
from prometheus_client import CollectorRegistry

from prexid.service.decode import formats, otlp, otlp_proto
from prexid.service.decode.types import DecodeError, RawSample, Samples
from prexid.service.pipeline.processor import Message
from prexid.service.sources.demo_cluster import DemoCluster, simulate
from tests.otlp_requests import attr, request
from tests.unit import wiring

REF = 1_796_205_600.0  # 2026-12-02T10:00:00Z
T = 1_796_216_415.0  # 2026-12-02T13:00:15Z
NS = int(T) * 1_000_000_000


def collector_request() -> ExportMetricsServiceRequest:
    """What the Collector's Prometheus receiver sends for one node's dcgm-exporter and node-exporter
    scrape: resource attributes, typed point attributes, and histogram/summary families beside."""
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.extend(
        [
            attr("host.name", "node-17"),
            attr("k8s.pod.name", "dcgm-exporter-x7"),
            KeyValue(key="server.port", value=AnyValue(int_value=9400)),
        ]
    )
    sm = rm.scope_metrics.add()
    sm.scope.name = "otelcol/prometheusreceiver"
    temp = sm.metrics.add(name="DCGM_FI_DEV_GPU_TEMP", unit="C")
    for gpu, value in (("0", 61.5), ("3", 71.5)):
        p = temp.gauge.data_points.add(time_unix_nano=NS, as_double=value)
        p.attributes.extend([attr("gpu", gpu), attr("UUID", f"GPU-{gpu}"), attr("Hostname", "node-17")])
    xid = sm.metrics.add(name="DCGM_FI_DEV_XID_ERRORS")
    xid.gauge.data_points.add(time_unix_nano=NS, as_int=0).attributes.append(attr("gpu", "0"))
    ecc = sm.metrics.add(name="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
    ecc.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
    ecc.sum.is_monotonic = True
    p = ecc.sum.data_points.add(start_time_unix_nano=NS - 10**12, time_unix_nano=NS, as_int=4)
    p.attributes.extend(
        [
            attr("gpu", "0"),
            KeyValue(key="healthy", value=AnyValue(bool_value=True)),
            KeyValue(key="ratio", value=AnyValue(double_value=0.25)),
            KeyValue(
                key="links",
                value=AnyValue(
                    array_value=ArrayValue(values=[AnyValue(string_value="a"), AnyValue(int_value=2)])
                ),
            ),
        ]
    )
    gone = sm.metrics.add(name="node_load1")
    gone.gauge.data_points.add(time_unix_nano=NS, flags=DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK)
    unstamped = sm.metrics.add(name="node_load5")
    unstamped.gauge.data_points.add(as_double=0.5)
    hist = sm.metrics.add(name="node_disk_io_time_seconds")
    for _ in range(3):
        hist.histogram.data_points.add(time_unix_nano=NS, count=2, sum=1.0, bucket_counts=[1, 1])
    sm.metrics.add(name="rpc_latency").exponential_histogram.data_points.add(time_unix_nano=NS, count=1)
    sm.metrics.add(name="go_gc_duration_seconds").summary.data_points.add(time_unix_nano=NS, count=1)
    return req


def both(req: ExportMetricsServiceRequest) -> tuple[bytes, bytes]:
    """The request in the Kafka exporter's two encodings: `otlp_proto`, `otlp_json`."""
    return req.SerializeToString(), MessageToJson(req).encode()


RESOURCE = {"host": "node-17", "k8s_pod_name": "dcgm-exporter-x7", "server_port": "9400"}


def same(a: Samples, b: Samples) -> bool:
    """Equal samples, a NaN value equal to a NaN."""
    values = np.array_equal(np.array(a.values), np.array(b.values), equal_nan=True)
    return values and (a.names, a.labels, a.ts, a.skipped) == (b.names, b.labels, b.ts, b.skipped)


def test_a_collector_request_decodes_to_its_gauges_and_sums() -> None:
    got = otlp_proto.decode(collector_request().SerializeToString(), REF)
    rows = list(got.rows())
    assert rows[:4] == [
        RawSample(
            "DCGM_FI_DEV_GPU_TEMP", {**RESOURCE, "gpu": "0", "UUID": "GPU-0", "Hostname": "node-17"}, T, 61.5
        ),
        RawSample(
            "DCGM_FI_DEV_GPU_TEMP", {**RESOURCE, "gpu": "3", "UUID": "GPU-3", "Hostname": "node-17"}, T, 71.5
        ),
        RawSample("DCGM_FI_DEV_XID_ERRORS", {**RESOURCE, "gpu": "0"}, T, 0.0),
        RawSample(
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            {**RESOURCE, "gpu": "0", "healthy": "true", "ratio": "0.25", "links": '["a","2"]'},
            T,
            4.0,
        ),
    ]
    stale, unstamped = rows[4:]
    assert stale.name == "node_load1" and math.isnan(stale.value)  # the Collector's stale marker
    assert (unstamped.name, unstamped.ts, unstamped.value) == ("node_load5", REF, 0.5)
    assert got.skipped == {"histogram": 3, "exponential_histogram": 1, "summary": 1}


def test_protobuf_and_json_of_the_same_request_decode_identically() -> None:
    proto, json = both(collector_request())
    a, b = otlp_proto.decode(proto, REF, "node-9"), otlp.decode(json, REF, "node-9")
    assert same(a, b) and len(a) == 6 and sum(map(math.isnan, a.values)) == 1


def test_a_simulated_cluster_scrape_decodes_identically_in_both_encodings() -> None:
    tick = next(iter(simulate(DemoCluster(nodes=4, gpus=8, duration_s=60.0))))
    rows = [r for m in tick.metrics for r in formats.decode_metrics_auto(m, tick.ts).rows()]
    proto, json = both(request(rows))
    a, b = otlp_proto.decode(proto, REF), otlp.decode(json, REF)
    assert len(a) == len(rows) and a == b
    assert {(r.name, r.value) for r in a.rows()} == {(r.name, r.value) for r in rows}


def test_the_transport_host_is_used_only_when_the_resource_names_none() -> None:
    req = ExportMetricsServiceRequest()
    req.resource_metrics.add().scope_metrics.add().metrics.add(name="m").gauge.data_points.add(as_double=1.0)
    [row] = otlp_proto.decode(req.SerializeToString(), REF, "node-3").rows()
    assert row.labels == {"host": "node-3"}
    named = otlp_proto.decode(collector_request().SerializeToString(), REF, "node-3")
    assert {labels["host"] for labels in named.labels} == {"node-17"}


def only(kind: str) -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    metric = req.resource_metrics.add().scope_metrics.add().metrics.add(name="m")
    getattr(metric, kind).data_points.add(time_unix_nano=NS)
    getattr(metric, kind).data_points.add(time_unix_nano=NS)
    return req


@pytest.mark.parametrize(("kind", "reason"), [("histogram", "histogram"), ("summary", "summary")])
def test_a_request_of_only_skipped_points_decodes_to_no_samples_in_both_encodings(
    kind: str, reason: str
) -> None:
    proto, json = both(only(kind))
    for got in (otlp_proto.decode(proto, REF), otlp.decode(json, REF)):
        assert len(got) == 0 and got.skipped == {reason: 2}


def test_delta_sums_are_refused_in_both_encodings() -> None:
    req = ExportMetricsServiceRequest()
    metric = req.resource_metrics.add().scope_metrics.add().metrics.add(name="requests")
    metric.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_DELTA
    metric.sum.data_points.add(time_unix_nano=NS, as_int=3)
    for decode, payload in zip((otlp_proto.decode, otlp.decode), both(req), strict=True):
        with pytest.raises(DecodeError) as err:
            decode(payload, REF)
        assert (err.value.reason, err.value.detail) == ("otlp_delta_sum", "requests")


def no_value() -> bytes:
    req = ExportMetricsServiceRequest()
    req.resource_metrics.add().scope_metrics.add().metrics.add(name="m").gauge.data_points.add(
        time_unix_nano=NS
    )
    return req.SerializeToString()


def no_attribute_value() -> bytes:
    req = ExportMetricsServiceRequest()
    req.resource_metrics.add().resource.attributes.add(key="host.name")
    return req.SerializeToString()


def far_future() -> bytes:
    req = ExportMetricsServiceRequest()
    metric = req.resource_metrics.add().scope_metrics.add().metrics.add(name="m")
    metric.gauge.data_points.add(time_unix_nano=2**64 - 1, as_double=1.0)
    return req.SerializeToString()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "empty"),
        (b"\x0a\x05\x0a\x03", "invalid_protobuf"),  # cut short
        (b"\xff\xff\xff", "invalid_protobuf"),
        (b'{"resourceMetrics":[]}', "invalid_protobuf"),  # JSON given to the protobuf decoder
        (collector_request().SerializeToString()[:-7], "invalid_protobuf"),
        (no_value(), "bad_value"),
        (no_attribute_value(), "bad_attribute"),
        (far_future(), "bad_timestamp"),
    ],
)
def test_bytes_that_are_no_request_are_rejected_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        formats.metric_decoder("otlp_proto")(payload, REF)
    assert err.value.reason == reason


def test_the_otlp_format_tells_the_encodings_apart_by_the_first_byte() -> None:
    proto, json = both(collector_request())
    decode = formats.metric_decoder("otlp")
    assert same(decode(proto, REF), otlp_proto.decode(proto, REF))
    assert same(decode(json, REF), otlp.decode(json, REF))
    # a request whose first resource is 123 bytes long starts `\n{`: protobuf, not JSON after a newline
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.scope_metrics.add().metrics.add(name="m").gauge.data_points.add(time_unix_nano=NS, as_double=2.0)
    rm.resource.attributes.append(attr("host.name", ""))
    pad = 123 - len(rm.SerializeToString())
    rm.resource.attributes[0].value.string_value = "n" * pad
    payload = req.SerializeToString()
    assert payload[:2] == b"\n{"
    [row] = decode(payload, REF).rows()
    assert (row.name, row.labels, row.value) == ("m", {"host": "n" * pad}, 2.0)


def test_the_processor_counts_skipped_points_and_dead_letters_bad_bytes() -> None:
    registry = CollectorRegistry()
    processor = wiring.processor("otlp_proto", metrics=registry)
    msgs = [
        Message(collector_request().SerializeToString(), T, "metrics", 0, 0),
        Message(only("histogram").SerializeToString(), T, "metrics", 0, 1),
        Message(b"\xff\xff\xff", T, "metrics", 0, 2),
    ]
    out = processor.process(msgs, [], ())
    assert [(d.message.offset, d.reason) for d in out.dead_letters] == [(2, "invalid_protobuf")]
    value = registry.get_sample_value
    assert value("prexid_points_skipped_total", {"reason": "histogram"}) == 5
    assert value("prexid_points_skipped_total", {"reason": "summary"}) == 1
    assert value("prexid_messages_decoded_total", {"stream": "metrics"}) == 2  # the histogram-only one too
    assert value("prexid_samples_total") == len(otlp_proto.decode(msgs[0].payload, T))
    assert value("prexid_dead_letters_total", {"reason": "invalid_protobuf"}) == 1


def test_samples_extend_adds_skipped_counts() -> None:
    a, b = Samples(skipped={"histogram": 2}), Samples(skipped={"histogram": 1, "summary": 4})
    a.extend(b)
    assert a.skipped == {"histogram": 3, "summary": 4}
