"""The bad-input policy of docs/ingest.md: odd values never move a baseline, bad messages are counted
dead letters, and the cardinality limit shows in a metric."""

from __future__ import annotations

import math
import struct

import numpy as np
from prometheus_client import CollectorRegistry

from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline, PipelineConfig
from prexid.service.pipeline.processor import Message, Processor
from tests.unit import wiring

T0 = 1_796_205_600.0
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]  # Prometheus' stale marker
GPU = {"gpu": "0", "Hostname": "node-1"}
NIC = {"device": "eth0", "instance": "node-1:9100"}


def warmed(name: str, labels: dict[str, str], values: list[float]) -> tuple[Pipeline, int, float]:
    p = Pipeline()
    p.ingest_samples([RawSample(name, labels, T0 + 15 * i, v) for i, v in enumerate(values)])
    p.advance(drain=True)  # score everything the reorder buffer still holds
    sid = p.registry.intern(name, labels)
    return p, sid, float(p.bank.baseline(np.array([sid]))[0])


def test_nan_infinities_and_stale_markers_never_move_a_gauge_baseline() -> None:
    p, sid, before = warmed("DCGM_FI_DEV_GPU_TEMP", GPU, [60.0 + (i % 3) for i in range(60)])
    assert math.isnan(STALE) and struct.pack("<d", STALE) != struct.pack("<d", math.nan)
    odd = [math.nan, math.inf, -math.inf, STALE]
    alerts = p.ingest_samples(
        [RawSample("DCGM_FI_DEV_GPU_TEMP", GPU, T0 + 900 + 15 * i, v) for i, v in enumerate(odd)]
    )
    assert alerts + p.advance(drain=True) == []
    assert float(p.bank.baseline(np.array([sid]))[0]) == before


def test_a_counter_reset_is_read_as_a_restart_not_a_negative_rate() -> None:
    values = [1000.0 * i for i in range(60)] + [0.0, 1000.0, 2000.0]
    p, sid, _ = warmed("node_network_receive_bytes_total", NIC, values)
    rate = float(p.bank.baseline(np.array([sid]))[0])
    assert 60.0 < rate < 70.0  # 1000 bytes per 15 s, undisturbed by the reset


def test_out_of_order_and_duplicate_counter_samples_are_ignored() -> None:
    p, sid, before = warmed("node_network_receive_bytes_total", NIC, [1000.0 * i for i in range(60)])
    last_ts = T0 + 15 * 59
    p.ingest_samples(
        [
            RawSample("node_network_receive_bytes_total", NIC, last_ts - 30, 5.0),  # late
            RawSample("node_network_receive_bytes_total", NIC, last_ts, 59_000.0),  # duplicate
        ]
    )
    p.advance(drain=True)
    assert float(p.bank.baseline(np.array([sid]))[0]) == before


def processor(max_series: int = 2_000_000) -> tuple[Processor, CollectorRegistry]:
    registry = CollectorRegistry()
    return wiring.processor(
        pipeline=Pipeline(PipelineConfig(max_series=max_series)), metrics=registry
    ), registry


def test_a_message_with_no_samples_is_an_empty_dead_letter_and_counted() -> None:
    proc, reg = processor()
    out = proc.process(
        [
            Message(b"# HELP only comments\n", T0, "m", 0, 1),
            Message(b"node_load1 1\n", T0, "m", 0, 2, key=b"n1"),
        ],
        [Message(b"   \n", T0, "l", 0, 3)],
        backlogged=(),
    )
    assert [(d.reason, d.message.offset) for d in out.dead_letters] == [("empty", 1), ("empty", 3)]
    assert reg.get_sample_value("prexid_dead_letters_total", {"reason": "empty"}) == 2.0
    assert reg.get_sample_value("prexid_messages_decoded_total", {"stream": "metrics"}) == 1.0
    assert reg.get_sample_value("prexid_messages_total", {"stream": "metrics"}) == 2.0


def test_the_cardinality_limit_refuses_series_and_says_so_in_a_metric() -> None:
    proc, reg = processor(max_series=3)
    body = "".join(f'node_load1{{cpu="{i}"}} 1\n' for i in range(10)).encode()
    proc.process([Message(body, T0, "m", 0, 0, key=b"node-1")], [], backlogged=())
    assert reg.get_sample_value("prexid_series") == 3.0
    assert reg.get_sample_value("prexid_series_refused_total") == 7.0


def test_the_host_travels_in_a_header_or_the_key() -> None:
    proc, _ = processor()
    proc.process(
        [
            Message(b"node_load1 1\n", T0, "m", 0, 0, key=b"node-7.example.com"),
            Message(b"node_load5 1\n", T0, "m", 0, 1, headers=(("host", b"node-8"),)),
        ],
        [],
        backlogged=(),
    )
    assert {e.node for e in proc.pipeline.registry.entities} == {"node-7", "node-8"}


def test_per_topic_formats_override_the_stream_default() -> None:
    proc = wiring.processor("prom_kafka_adapter", "syslog", {"scrapes": "prom_text", "dmesg": "dmesg"})
    out = proc.process(
        [Message(b"node_load1 1\n", T0, "scrapes", key=b"n1")],
        [Message(b"[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, x", T0, "dmesg", key=b"n1")],
        backlogged=(),
    )
    assert out.dead_letters == [] and [a.xid_code for a in out.alerts] == [79]
