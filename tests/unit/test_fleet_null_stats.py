"""The false-alert budget's thresholds and the family calibration's shifts are the fleet's under
partitions (`detectors/fleet_null_stats`): fitted from every partition's null sums, exactly what one
process holding every entity fits."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest
from numpy.typing import NDArray

from prexid.detectors.alert_budget import AlertBudget, BudgetConfig
from prexid.detectors.family_calibration import FamilyCalibration
from prexid.detectors.fleet_null_stats import NullStats, merge
from prexid.detectors.fleet_vote import Summary
from prexid.detectors.signals import N_FAMILIES, Family
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.fleet import Fleet
from prexid.service.pipeline.fleet_judge import FleetBoard, FleetJudge
from prexid.service.pipeline.fleet_summary import PartitionSummary, SummaryError
from prexid.service.pipeline.pipeline import Pipeline
from tests.unit.test_family_calibration import BURSTY, GPUS
from tests.unit.test_family_calibration import Fleet as CalibrationFleet

STEP = 15.0
FIRE = 9.0
WEEK = 7 * 86400.0
ROW = ((1,) * N_FAMILIES, (0,) * N_FAMILIES)
POWER = "DCGM_FI_DEV_POWER_USAGE"


def _fleet_stats(parts: list[NullStats]) -> NullStats:
    return merge(parts, WEEK, WEEK)


def _budget_run(split: list[NDArray[np.int64]], share: bool, hours: int = 36) -> list[NDArray[np.float64]]:
    """18 entities (GPUs 0-15, nodes 16, 17) split over partitions, each its own budget; GPUs 0-7 have an
    episode every 10 minutes, peaks heavy-tailed over `tail_from`, the others none. `share`: each tick's
    fit is from every partition's sums (what `fleet.Fleet` does). Each partition's GPU and node
    thresholds, every tick."""
    rng = np.random.default_rng(4)
    peaks = 6.0 + rng.exponential(1.5, 1000)
    is_gpu = np.r_[np.ones(16, dtype=bool), np.zeros(2, dtype=bool)]
    config = BudgetConfig(min_node_days=0.5, confirm_s=3600.0)
    budgets = [AlertBudget(config, FIRE) for _ in split]
    out: list[list[NDArray[np.float64]]] = [[] for _ in split]
    for t in range(hours * 240):
        fused = np.zeros(18)
        if t % 40 < 6:
            fused[(t // 40) % 8] = peaks[(t // 40) % len(peaks)]
        fleet = _fleet_stats([NullStats.of(b.last_tick, b.stats(), None) for b in budgets]) if share else None
        for i, (budget, rows) in enumerate(zip(budgets, split, strict=True)):
            budget.fit(None if fleet is None else fleet.budget)
            budget.observe(t * STEP, fused[rows], is_gpu[rows])
            out[i].append(budget.thresholds.copy())
    return [np.array(o) for o in out]


def test_partitions_fit_the_budget_thresholds_one_process_fits() -> None:
    """The noisy GPUs are all in the first partition. Fitted on its own entities, the quiet partition
    keeps the configured threshold (and the noisy one, with half the exposure, pages at another);
    fitted from the merged sums, both partitions page at exactly one process's thresholds, every tick."""
    one = np.arange(18, dtype=np.int64)
    halves = [np.r_[np.arange(8), 16].astype(np.int64), np.r_[np.arange(8, 16), 17].astype(np.int64)]
    (whole,) = _budget_run([one], share=False)
    alone = _budget_run(halves, share=False)
    shared = _budget_run(halves, share=True)
    assert whole[-1, 0] > FIRE + 1.0  # the fleet's heavy tail raises its GPU threshold
    assert (alone[1] == FIRE).all()  # the quiet partition alone: the configured threshold throughout
    assert np.abs(alone[0] - whole).max() > 0.1  # ... and the noisy one another than the fleet's
    for part in shared:
        np.testing.assert_allclose(part, whole, rtol=1e-12)


def _calibration_run(split: list[NDArray[np.int64]], share: bool) -> list[NDArray[np.float64]]:
    """The 64 GPUs of `test_family_calibration.Fleet` for 8 h, only GPUs 0-31 bursty, split over
    partitions each with its own calibration; `share` as in `_budget_run`. Each partition's shifts
    (vote and sustained) every tick."""
    source = CalibrationFleet(seed=5)
    source.burst_at[32:] = np.inf  # never bursts
    cals = [FamilyCalibration(N_FAMILIES) for _ in split]
    quiet = np.zeros(GPUS, dtype=bool)
    out: list[list[NDArray[np.float64]]] = [[] for _ in split]
    for i in range(8 * 240):
        t = i * STEP
        evidence = source.evidence(t)
        fleet = _fleet_stats([NullStats.of(c.last_tick, None, c.stats()) for c in cals]) if share else None
        for k, (cal, rows) in enumerate(zip(cals, split, strict=True)):
            cal.fit(None if fleet is None else (fleet.episodes, fleet.exposure, fleet.sustained))
            out[k].append(np.r_[cal.shift.ravel(), cal.sustained_shift.ravel()])
            cal.observe(t, evidence[rows], source.present[rows], source.is_gpu[rows], quiet[rows])
    return [np.array(o) for o in out]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf % period: the clean GPUs never burst
def test_partitions_fit_the_family_shifts_one_process_fits() -> None:
    one = np.arange(GPUS, dtype=np.int64)
    halves = [np.arange(32, dtype=np.int64), np.arange(32, 64, dtype=np.int64)]
    (whole,) = _calibration_run([one], share=False)
    alone = _calibration_run(halves, share=False)
    shared = _calibration_run(halves, share=True)
    bursty = BURSTY  # the GPU level's bursty family: column BURSTY of the vote shifts
    assert whole[-1, bursty] > 1.0
    assert alone[1][-1, bursty] < 0.1  # the partition of clean GPUs alone: their p-values hold
    for part in shared:
        np.testing.assert_allclose(part, whole, rtol=1e-9, atol=1e-12)


def _replay_power(partitions: list[list[str]], mode: str = "fleet") -> list[Pipeline]:
    """Four nodes of 8 GPUs, 3 h of power draw with noise: every GPU of node-00 and node-01 jumps by
    120 W for two scrapes every 30 minutes (in turn), node-02's and node-03's never do. One pipeline
    per partition (nodes listed), stepped as one `Fleet`, or each with a fleet judge on one board, its
    records read one scrape late ("judged"), or each alone ("alone")."""
    pipes = [Pipeline() for _ in partitions]
    board = FleetBoard()
    judges = (
        [FleetJudge(p, i, board, lateness_s=120.0) for i, p in enumerate(pipes)] if mode == "judged" else []
    )
    fleet = Fleet(pipes) if mode == "fleet" else None
    rng = np.random.default_rng(2)
    for t in range(720):
        noise = rng.normal(0.0, 2.0, (4, 8))
        for pipe, nodes in zip(pipes, partitions, strict=True):
            rows = []
            for node in nodes:
                n = int(node[-1])
                for g in range(8):
                    jump = 120.0 if n < 2 and (t + 37 * (8 * n + g)) % 120 < 2 else 0.0
                    labels = {"gpu": str(g), "Hostname": node}
                    rows.append(RawSample(POWER, labels, 1.8e9 + t * STEP, 300.0 + noise[n, g] + jump))
            pipe.add_samples(rows, "metrics:0")
        if fleet is not None:
            fleet.advance()
        for pipe in pipes if fleet is None else ():
            pipe.advance()
        for judge in judges:
            for record in judge.take_outbox():
                board.observe(PartitionSummary.from_bytes(record.to_bytes()))
    return pipes


def _null(pipe: Pipeline) -> NDArray[np.float64]:
    assert pipe.calibration is not None and pipe.budget is not None
    return np.r_[pipe.calibration.shift.ravel(), pipe.calibration.sustained_shift.ravel(), pipe.budget.fitted]


def _power_shift(pipe: Pipeline) -> float:
    assert pipe.calibration is not None
    return float(pipe.calibration.shift[0, Family.POWER])


def test_pipelines_stepped_as_a_fleet_fit_the_shifts_and_sums_one_process_fits() -> None:
    """The jumpy GPUs are all in the first partition. Stepped as one `Fleet`, both partitions fit one
    process's shifts from one process's sums, exactly; alone, the second lowers nothing; under
    `prexid run`'s judges it learns the fleet's from the first's records (10 minutes late at most)."""
    (one,) = _replay_power([["node-00", "node-01", "node-02", "node-03"]])
    halves = [["node-00", "node-01"], ["node-02", "node-03"]]
    fleet = _replay_power(halves)
    assert _power_shift(one) > 2.0  # 32 GPUs' jumps over 4 GPU-days: p-values far too optimistic
    for pipe in fleet:
        np.testing.assert_allclose(_null(pipe), _null(one), rtol=1e-9, atol=1e-12)
    alone = _replay_power(halves, "alone")
    assert _power_shift(alone[1]) == 0.0  # the partition-local null: its own GPUs' power holds
    judged = _replay_power(halves, "judged")
    assert _power_shift(judged[1]) > 2.0


def _stats() -> NullStats:
    episodes = np.zeros((2, N_FAMILIES, 4))
    episodes[0, BURSTY] = (40.0, 12.5, 3.25, 0.5)
    exposure = np.zeros((2, N_FAMILIES))
    exposure[0, :4], exposure[1, 6] = 3.5, 0.4
    sustained = np.zeros((2, N_FAMILIES, 4))
    sustained[0, BURSTY, 0] = 2.0
    return NullStats(
        1.8e9, np.array([11.0, 2.0, 9.5, 1.0, 0.0, 0.0, 86400.0 * 4]), episodes, exposure, sustained
    )


def test_null_stats_survive_the_wire_and_merge_faded_to_the_newest() -> None:
    stats = _stats()
    wire = stats.to_wire()
    back = NullStats.from_wire(wire)
    assert back.at == stats.at and back.shape == (N_FAMILIES, 4)
    for a, b in (
        (back.budget, stats.budget),
        (back.episodes, stats.episodes),
        (back.exposure, stats.exposure),
    ):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.sustained, stats.sustained)
    assert len(wire) < 260  # the nonzero sums only (of 241), whatever the node count
    older = NullStats(stats.at - WEEK, stats.budget, stats.episodes, stats.exposure, stats.sustained)
    both = _fleet_stats([stats, older])
    assert both.at == stats.at
    np.testing.assert_allclose(both.budget, 1.5 * stats.budget)  # a week old: half its weight
    np.testing.assert_allclose(both.episodes, 1.5 * stats.episodes)
    off = NullStats.of(stats.at, stats.budget, None)  # a build with the calibration off
    with pytest.raises(ValueError, match="different shapes"):
        _fleet_stats([stats, off])
    assert NullStats.from_wire(off.to_wire()).shape == (0, 0)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda raw: raw[:-3], "truncated"),
        (lambda raw: raw[:5], "too short"),
        (lambda raw: bytes([2]) + raw[1:], "v2"),
        (lambda raw: raw[:11] + bytes([0xFF] * 31) + raw[42:], "past their end|truncated"),
        (lambda raw: raw[:-8] + np.array([-1.0]).tobytes(), "negative"),
        (lambda raw: raw[:-8] + np.array([np.nan]).tobytes(), "non-finite"),
        (lambda raw: raw[:1] + bytes([3]) + raw[2:], "families without levels|truncated|past their end"),
    ],
)
def test_damaged_null_stats_are_a_clear_error(damage: object, reason: str) -> None:
    raw = base64.b64decode(_stats().to_wire())
    assert callable(damage)
    with pytest.raises(ValueError, match=reason):
        NullStats.from_wire(base64.b64encode(damage(raw)).decode())


def test_a_summary_carries_null_stats_and_a_bad_one_is_a_summary_error_not_a_crash() -> None:
    record = PartitionSummary(1, Summary(15.0, ROW, ROW, ROW), null=_stats())
    back = PartitionSummary.from_bytes(record.to_bytes())
    assert back.null is not None
    np.testing.assert_array_equal(back.null.episodes, _stats().episodes)
    old = orjson.loads(record.to_bytes())
    del old["fn"]  # a record of a build before null stats: still read
    assert PartitionSummary.from_bytes(orjson.dumps(old)).null is None
    for bad in ("%%", "AAAA", base64.b64encode(b"\x01" * 40).decode(), 7):
        doc = {**old, "fn": bad}
        with pytest.raises(SummaryError, match="unreadable summary"):
            PartitionSummary.from_bytes(orjson.dumps(doc))


def test_the_board_keeps_each_partition_s_latest_null_and_the_judge_leaves_other_shapes_out() -> None:
    board = FleetBoard()
    stats = _stats()
    board.observe(PartitionSummary(1, Summary(15.0, ROW, ROW, ROW), null=stats))
    board.observe(PartitionSummary(1, Summary(30.0, ROW, ROW, ROW)))
    assert board.nulls[1] is stats
    board.observe(
        PartitionSummary(2, Summary(30.0, ROW, ROW, ROW), null=NullStats.of(stats.at, stats.budget, None))
    )
    judge = FleetJudge(Pipeline(), 0, board, lateness_s=120.0)
    own = NullStats(stats.at, stats.budget, stats.episodes, stats.exposure, stats.sustained)
    fleet = judge.null(stats.at, own)
    np.testing.assert_allclose(fleet.episodes, 2 * stats.episodes)  # partition 2's (no calibration) left out
    np.testing.assert_allclose(fleet.budget, 2 * stats.budget)
