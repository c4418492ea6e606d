"""Every metric format decodes its real shapes to the same samples, and rejects the rest with a reason."""

from __future__ import annotations

import math

import pytest

from prexid.service.decode import formats
from prexid.service.decode.types import DecodeError, RawSample

REF = 1_796_205_600.0  # 2026-12-02T10:00:00Z
T = 1_796_216_415.0  # 2026-12-02T13:00:15Z
GPU = {"gpu": "3", "Hostname": "node-17"}

CASES: list[tuple[str, bytes, str | None, list[RawSample]]] = [
    (
        "prom_kafka_adapter",
        b'{"timestamp":"2026-12-02T13:00:15Z","value":"71.5","name":"DCGM_FI_DEV_GPU_TEMP",'
        b'"labels":{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"3","Hostname":"node-17"}}',
        None,
        [RawSample("DCGM_FI_DEV_GPU_TEMP", GPU, T, 71.5)],
    ),
    (
        "prom_text",
        b"# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        b'DCGM_FI_DEV_GPU_TEMP{gpu="3",Hostname="node-17"} 71.5\n'
        b"node_load1 0.25 1796216415000\n",
        "node-17",
        [
            RawSample("DCGM_FI_DEV_GPU_TEMP", GPU, REF, 71.5),
            RawSample("node_load1", {"host": "node-17"}, T, 0.25),
        ],
    ),
    (
        "prom_text",
        b'{"host":"node-9","ts":"2026-12-02T13:00:15Z","body":"node_load1 1.5\\nnode_up{a=\\"x y}\\"} 1\\n"}',
        None,
        [
            RawSample("node_load1", {"host": "node-9"}, T, 1.5),
            RawSample("node_up", {"a": "x y}", "host": "node-9"}, T, 1.0),
        ],
    ),
    (
        "vector",
        b'{"name":"node_network_receive_bytes_total","namespace":"host","tags":{"device":"eth0","host":"n1"},'
        b'"timestamp":"2026-12-02T13:00:15Z","kind":"absolute","counter":{"value":1000.0}}',
        None,
        [RawSample("node_network_receive_bytes_total", {"device": "eth0", "host": "n1"}, T, 1000.0)],
    ),
    (
        "vector",
        b'{"name":"lat","tags":{"host":"n1"},"timestamp":"2026-12-02T13:00:15Z","kind":"absolute",'
        b'"aggregated_histogram":{"buckets":[{"upper_limit":0.5,"count":3}],"count":3,"sum":0.9}}',
        None,
        [
            RawSample("lat_count", {"host": "n1"}, T, 3.0),
            RawSample("lat_sum", {"host": "n1"}, T, 0.9),
            RawSample("lat_bucket", {"host": "n1", "le": "0.5"}, T, 3.0),
        ],
    ),
    (
        "telegraf_json",
        b'{"fields":{"gauge":71.5},"name":"DCGM_FI_DEV_GPU_TEMP","tags":{"gpu":"3","Hostname":"node-17"},'
        b'"timestamp":1796216415}',
        None,
        [RawSample("DCGM_FI_DEV_GPU_TEMP", GPU, T, 71.5)],
    ),
    (
        "telegraf_json",
        b'{"metrics":[{"fields":{"usage_idle":92.5,"note":"x","up":true},"name":"cpu","tags":{"host":"web01"},'
        b'"timestamp":1796216415000}]}',
        None,
        [
            RawSample("cpu_usage_idle", {"host": "web01"}, T, 92.5),
            RawSample("cpu_up", {"host": "web01"}, T, 1.0),
        ],
    ),
    (
        "influx",
        b'cpu,host=web01,cpu=cpu\\ 0 usage_idle=92.5,count=3i,msg="a b,c" 1796216415000000000\n'
        b"mem,host=web01 used=1u\n",
        None,
        [
            RawSample("cpu_usage_idle", {"host": "web01", "cpu": "cpu 0"}, T, 92.5),
            RawSample("cpu_count", {"host": "web01", "cpu": "cpu 0"}, T, 3.0),
            RawSample("mem_used", {"host": "web01"}, REF, 1.0),
        ],
    ),
    (
        "otlp_json",
        b'{"resourceMetrics":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"node-17"}}]},'
        b'"scopeMetrics":[{"scope":{},"metrics":[{"name":"gpu_temp","gauge":{"dataPoints":[{"attributes":'
        b'[{"key":"gpu","value":{"stringValue":"3"}}],"timeUnixNano":"1796216415000000000","asDouble":71.5}]}},'
        b'{"name":"gpu_xids","sum":{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":'
        b'[{"timeUnixNano":"1796216415000000000","asInt":"4"}]}}]}]}]}',
        None,
        [
            RawSample("gpu_temp", {"host": "node-17", "gpu": "3"}, T, 71.5),
            RawSample("gpu_xids", {"host": "node-17"}, T, 4.0),
        ],
    ),
]


@pytest.mark.parametrize(("fmt", "payload", "host", "expected"), CASES)
def test_each_format_decodes_its_real_shape(
    fmt: str, payload: bytes, host: str | None, expected: list[RawSample]
) -> None:
    assert list(formats.metric_decoder(fmt)(payload, REF, host).rows()) == expected


@pytest.mark.parametrize(("fmt", "payload", "host", "expected"), CASES)
def test_auto_detection_decodes_every_format_the_same(
    fmt: str, payload: bytes, host: str | None, expected: list[RawSample]
) -> None:
    assert list(formats.decode_metrics_auto(payload, REF, host).rows()) == expected


@pytest.mark.parametrize(
    ("fmt", "payload", "reason"),
    [
        ("prom_text", b"# only comments\n", "empty"),
        ("prom_text", b"node_load1 abc\n", "bad_value"),
        ("prom_text", b"9bad 1\n", "bad_metric_name"),
        ("prom_text", b'm{a="1" 2\n', "bad_labels"),
        ("prom_text", b"m{a=1} 2\n", "bad_labels"),
        ("prom_text", b"m 1 2 3\n", "bad_sample_line"),
        ("prom_text", b'{"host":"h"}', "missing_body"),
        ("vector", b'{"name":"m","kind":"incremental","counter":{"value":1}}', "vector_incremental"),
        (
            "vector",
            b'{"name":"m","kind":"absolute","counter":{"value":1},"gauge":{"value":1}}',
            "bad_vector_value",
        ),
        ("telegraf_json", b'{"name":"m","fields":{"s":"text"}}', "empty"),
        ("telegraf_json", b'{"name":"m"}', "missing_fields"),
        ("influx", b"cpu usage=abc\n", "bad_value"),
        ("influx", b"just-a-word\n", "bad_line_protocol"),
        ("otlp_json", b'{"resourceMetrics":[]}', "empty"),
        ("otlp_json", b'{"resourceMetrics":{}}', "bad_otlp"),
        (
            "otlp_json",
            b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x","sum":{"aggregationTemporality":1,'
            b'"dataPoints":[]}}]}]}]}',
            "otlp_delta_sum",
        ),
        (
            "prom_kafka_adapter",
            b'{"timestamp":"2026-12-02T13:00:15Z","value":true,"name":"m","labels":{}}',
            "bad_value",
        ),
        (
            "prom_kafka_adapter",
            b'{"timestamp":"99999-01-01T00:00:00Z","value":"1","name":"m","labels":{}}',
            "bad_timestamp",
        ),
        ("auto", b'{"what":"ever"}', "unknown_format"),
        ("auto", b"\xff\xfe", "not_utf8"),
    ],
)
def test_bad_messages_are_rejected_with_a_reason(fmt: str, payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        formats.metric_decoder(fmt)(payload, REF)
    assert err.value.reason == reason


@pytest.mark.parametrize("fmt", ["prom_kafka_adapter", "prom_text"])
def test_nan_and_infinities_pass_through_as_values(fmt: str) -> None:
    payloads = {
        "prom_kafka_adapter": [
            b'{"timestamp":"2026-12-02T13:00:15Z","value":"%s","name":"m","labels":{}}' % v
            for v in (b"NaN", b"+Inf", b"-Inf")
        ],
        "prom_text": [b"m NaN\nm +Inf\nm -Inf\n"],
    }[fmt]
    values = [v for p in payloads for v in formats.metric_decoder(fmt)(p, REF).values]
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf]


def test_exposition_host_comes_from_the_transport_unless_a_host_label_exists() -> None:
    body = b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="node-1"} 50\nnode_load1 1\n'
    s = formats.metric_decoder("prom_text")(body, REF, "node-2")
    assert [lab.get("host") for lab in s.labels] == [None, "node-2"]


def test_openmetrics_exemplars_are_cut_off() -> None:
    body = b'http_requests_bucket{le="0.5"} 3 # {trace_id="abc"} 0.4 1796216415.0\nq{a=" # "} 2\n# EOF\n'
    rows = [(s.name, s.labels, s.value) for s in formats.metric_decoder("prom_text")(body, REF).rows()]
    assert rows == [("http_requests_bucket", {"le": "0.5"}, 3.0), ("q", {"a": " # "}, 2.0)]


def test_escaped_label_values_are_unescaped() -> None:
    [s] = formats.metric_decoder("prom_text")(b'm{path="C:\\\\x",q="say \\"hi\\"",n="a\\nb"} 1\n', REF).rows()
    assert s.labels == {"path": "C:\\x", "q": 'say "hi"', "n": "a\nb"}
