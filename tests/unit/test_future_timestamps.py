"""One future-dated sample must not end detection: it would move its source's progress, and so the
watermark and the next tick, to its date, and no tick would be evaluated again (the state snapshotted
that way). Samples dated further ahead of their source than the skew limit are dead letters."""

from __future__ import annotations

import numpy as np
import orjson

from prexid.detectors.watermark import Watermarks
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.decode.common import parse_rfc3339
from prexid.service.offline.sim.wire import adapter_json, gpu_labels
from prexid.service.pipeline.processor import Message
from prexid.service.schemas import Alert, rfc3339
from prexid.service.sources.demo_cluster import DemoCluster, simulate

YEAR_2199 = 7_226_582_400.0


def replay(cluster: DemoCluster, poison_at: int | None, record_time: bool) -> tuple[list[Alert], list[str]]:
    """The demo cluster through one processor, with one sample dated 2199 in tick `poison_at`; record
    times as Kafka gives them (the scrape's time) or none (a file replayed)."""
    _, processor = build(Settings())
    alerts: list[Alert] = []
    reasons: list[str] = []
    for k, tick in enumerate(simulate(cluster)):
        payloads = list(tick.metrics)
        if k == poison_at:
            payloads.insert(
                len(payloads) // 2, adapter_json("DCGM_FI_DEV_GPU_TEMP", gpu_labels(1, 2), YEAR_2199, 60.0)
            )
        rec = tick.ts if record_time else np.nan
        out = processor.process([Message(m, rec, "metrics", 0) for m in payloads], [], ())
        alerts += out.alerts
        reasons += [d.reason for d in out.dead_letters]
    alerts += processor.process([], [], (), drain=True).alerts
    return alerts, reasons


def firing(alerts: list[Alert]) -> list[tuple[str, str, int | None]]:
    return [(a.kind, a.node, a.gpu) for a in alerts if a.status == "firing"]


def test_one_sample_dated_2199_is_a_dead_letter_and_detection_goes_on() -> None:
    cluster = DemoCluster()
    clean, _ = replay(cluster, None, record_time=True)
    assert any(kind == "pre_xid" for kind, _, _ in firing(clean))
    for record_time in (True, False):
        poisoned, reasons = replay(cluster, poison_at=10, record_time=record_time)
        assert reasons == ["future_timestamp"]
        assert firing(poisoned) == firing(clean)


def test_the_dropped_sample_is_counted_for_its_source() -> None:
    state, processor = build(Settings())
    now = 1_764_756_000.0
    good = adapter_json("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0, 0), now, 60.0)
    bad = adapter_json("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0, 1), now + 301.0, 60.0)
    out = processor.process([Message(good, now, "metrics", 3), Message(bad, now, "metrics", 3)], [], ())
    assert [(d.reason, d.message.payload) for d in out.dead_letters] == [("future_timestamp", bad)]
    assert "301 s ahead of metrics:3" in out.dead_letters[0].detail
    sample = state.telemetry.registry.get_sample_value
    assert sample("prexid_future_samples_total", {"source": "metrics:3"}) == 1.0
    assert sample("prexid_messages_decoded_total", {"stream": "metrics"}) == 1.0
    assert processor.pipeline.watermarks.progress["metrics:3"] == now


def test_a_source_with_no_record_time_that_moved_on_as_a_whole_is_believed() -> None:
    """A file replayed after a gap: every sample of three batches in a row is ahead, not one line."""
    marks = Watermarks(lateness_s=10.0, future_skew_s=300.0)
    marks.observe("file", 1000.0)
    later = np.array([5000.0, 5000.0])
    assert marks.ahead("file", later, np.nan).all() and marks.ahead("file", later, np.nan).all()
    assert not marks.ahead("file", later, np.nan).any()
    marks.observe("file", 5000.0)
    assert not marks.ahead("file", np.array([5015.0]), np.nan).any()


def test_with_record_times_a_wholly_ahead_source_is_never_believed() -> None:
    marks = Watermarks(lateness_s=10.0, future_skew_s=300.0)
    now = 1_764_756_000.0
    marks.observe("kafka:0", now)
    for _ in range(5):
        assert marks.ahead("kafka:0", np.array([YEAR_2199]), now + 10.0).all()
    assert not marks.ahead("kafka:0", np.array([now + 3000.0]), now + 2990.0).any()  # back after an outage


def test_a_record_time_in_microseconds_or_none_at_all_is_no_reference() -> None:
    marks = Watermarks(lateness_s=10.0, future_skew_s=300.0)
    now = 1_764_756_000.0
    for bogus in (now * 1000.0, -0.001, 0.0, np.nan):
        assert not marks.ahead("fresh", np.array([now]), bogus).any()
    assert marks.ahead("fresh", np.array([now]), now - 600.0).all()


def shifted(payload: bytes, by: float) -> bytes:
    doc = orjson.loads(payload)
    doc["timestamp"] = rfc3339(parse_rfc3339(doc["timestamp"]) + by)
    return orjson.dumps(doc)


def test_a_node_whose_clock_runs_an_hour_slow_is_dropped_and_counted_not_scored_an_hour_late() -> None:
    """Its samples would be scored an hour late, their evidence aged away at once: the node looks
    watched and is not. Dropped and counted (PrexidClockBehind), the rest of its shard unchanged."""
    cluster = DemoCluster()
    clean, _ = replay(cluster, None, record_time=True)
    state, processor = build(Settings())
    alerts: list[Alert] = []
    for tick in simulate(cluster):
        payloads = [shifted(m, -3600.0) if b'"node-01"' in m else m for m in tick.metrics]
        alerts += processor.process([Message(m, tick.ts, "metrics", 0) for m in payloads], [], ()).alerts
    alerts += processor.process([], [], (), drain=True).alerts
    assert firing(alerts) == firing(clean)
    late = state.telemetry.registry.get_sample_value("prexid_late_samples_total", {"source": "metrics:0"})
    per_tick = sum(b'"node-01"' in m for m in next(iter(simulate(cluster))).metrics)
    assert late is not None and late >= per_tick * (cluster.duration_s / cluster.step_s - 2)


def test_a_slow_host_alone_in_its_partition_is_told_by_its_record_times() -> None:
    marks = Watermarks(lateness_s=10.0, late_drop_s=300.0)
    now = 1_764_756_000.0
    assert marks.behind("p:7", np.array([now - 3600.0, now - 30.0]), now).tolist() == [True, False]
    assert not marks.behind("p:7", np.array([now - 3600.0]), np.nan).any()  # nothing to judge by


def test_a_backlog_read_in_one_batch_loses_no_sample_to_the_lateness_check() -> None:
    """Found by the replica-kill test: judged against the batch's newest record, the first ten minutes
    of a twelve-minute batch read from a backlog were 'late' and dropped."""
    state, processor = build(Settings())
    ticks = list(simulate(DemoCluster()))[:48]
    msgs = [Message(m, t.ts, "metrics", 0) for t in ticks for m in t.metrics]
    processor.process(msgs, [], ())
    assert (
        state.telemetry.registry.get_sample_value("prexid_late_samples_total", {"source": "metrics:0"})
        is None
    )
    pipe = processor.pipeline
    assert pipe.samples_seen + len(pipe.buffer) == len(msgs)
