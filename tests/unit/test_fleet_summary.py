"""The summaries topic's records (they read back as written, a foreign one is a clear error), the
board's lateness, and the aggregator's watermark over partitions."""

from __future__ import annotations

import orjson
import pytest

from prexid.detectors.fleet_vote import Summary
from prexid.detectors.signals import N_FAMILIES
from prexid.service.pipeline.aggregator import Aggregator
from prexid.service.pipeline.fleet_judge import FleetBoard
from prexid.service.pipeline.fleet_summary import NodeRow, PartitionSummary, SummaryError
from prexid.service.pipeline.pipeline import PipelineConfig

ROW = ((1,) * N_FAMILIES, (0,) * N_FAMILIES)


def record(partition: int, tick: float, **extra: object) -> PartitionSummary:
    counts = Summary(tick, ROW, ROW, ((2,) * N_FAMILIES, (1,) * N_FAMILIES))
    return PartitionSummary(partition, counts, **extra)  # type: ignore[arg-type]


def test_a_record_reads_back_as_written() -> None:
    full = record(
        3,
        1_796_205_615.0,
        nodes=(NodeRow("node-07", 200, 0b1_1000_0000, True, ((0, 12), (5, 250))),),
        names=(("node-07", (0, 5)), ("node-08", ())),
        alerts=({"fingerprint": "abc"},),
    )
    assert PartitionSummary.from_bytes(full.to_bytes()) == full
    stalled = PartitionSummary(3, Summary(1_796_205_615.0, ROW, ROW, ROW, stalled=ROW))
    assert PartitionSummary.from_bytes(stalled.to_bytes()) == stalled  # votes with NFS timeouts too
    bare = record(0, 1_796_205_615.0)
    assert PartitionSummary.from_bytes(bare.to_bytes()) == bare
    assert b"names" not in bare.to_bytes() and b"alerts" not in bare.to_bytes()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "unreadable summary"),
        (orjson.dumps({"v": 2, "p": 0}), "summary version 2"),
        (orjson.dumps({"v": 1, "p": 0, "t": 1.0}), "unreadable summary"),
        (orjson.dumps({"v": 1, "p": 0, "t": 1.0, "c": [[["x"]]] * 3, "n": []}), "unreadable summary"),
    ],
)
def test_a_record_this_version_cannot_read_is_refused_with_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(SummaryError, match=why):
        PartitionSummary.from_bytes(raw)


def test_the_board_leaves_out_partitions_too_far_from_the_tick_and_forgets_silent_ones() -> None:
    board = FleetBoard(forget_s=3600.0)
    for p, tick in ((0, 1000.0), (1, 990.0), (2, 700.0)):
        board.observe(record(p, tick))
    near, missing = board.others(0, 1000.0, lateness_s=120.0)
    assert len(near) == 1 and missing == [2]  # partition 1 counts, 2 is 300 s behind
    board.observe(record(0, 4700.0))
    assert sorted(board.latest) == [0]  # the others fell silent for over an hour: forgotten


def test_the_aggregator_stops_waiting_for_a_partition_past_lateness_and_counts_its_late_summaries() -> None:
    agg = Aggregator(PipelineConfig(), lateness_s=60.0)
    judged: list[float] = []
    offset = 0

    def send(partition: int, tick: float) -> None:
        nonlocal offset
        agg.observe(record(partition, tick), offset)
        offset += 1
        judged.extend(j.tick for j in agg.advance()[1])

    for k in range(10):  # both partitions in step
        send(0, 15.0 * k)
        send(1, 15.0 * k)
    assert judged == [15.0 * k for k in range(10)]  # every tick, once both partitions reported it
    before = len(judged)
    for k in range(10, 14):  # partition 1 falls silent: partition 0's ticks wait within lateness
        send(0, 15.0 * k)
    assert len(judged) == before
    for k in range(14, 20):  # past lateness: judged without it, counted
        send(0, 15.0 * k)
    assert judged[-1] > 15.0 * 13 and agg.missing_ticks > 0
    for k in range(10, 12):  # its summaries for ticks already judged arrive at last
        send(1, 15.0 * k)
    assert agg.late == 2


def test_a_summary_of_another_builds_families_is_refused_not_merged() -> None:
    """A replica built with another family count (a rolling upgrade adding one) must not crash the
    aggregator's merge: its summaries are refused, with the reason."""
    old = ((1,) * (N_FAMILIES - 1), (0,) * (N_FAMILIES - 1))
    raw = PartitionSummary(0, Summary(0.0, old, old, old)).to_bytes()
    with pytest.raises(SummaryError, match="families"):
        PartitionSummary.from_bytes(raw)


def test_the_aggregators_timing_of_the_jobs_storage_bursts_survives_its_published_state() -> None:
    """The elected aggregator raises the cluster alert; the one taking over from its published state
    must know the job's checkpoint length and the rise under way, or the next long checkpoint pages."""
    agg = Aggregator(PipelineConfig(), lateness_s=60.0)
    io = agg.fusion.job_io
    for t in range(0, 300, 15):
        io.step(float(t), t < 240, 0.0)  # one checkpoint of four minutes, the job changing phase with it
    for t in range(3600, 3660, 15):
        io.step(float(t), True, 3600.0)  # the next one under way
    doc = orjson.loads(orjson.dumps(agg.snapshot()))
    again = Aggregator(PipelineConfig(), lateness_s=60.0)
    again.restore(doc)
    assert again.fusion.job_io.allowance() == io.allowance() == 1.5 * 225.0
    assert again.fusion.job_io.explains(3700.0) and again.fusion.job_io.start == 3600.0
