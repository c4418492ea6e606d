"""The error counters' fleet prior is the fleet's under partitions (`detectors/fleet_prior`)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from prexid.detectors.base import Stored, pack_arrays, parse_blobs, unpack_arrays
from prexid.detectors.error_counter import ErrorCounterSurprise
from prexid.detectors.fleet_prior import PriorStats, merge
from prexid.detectors.fleet_vote import Summary
from prexid.detectors.signals import N_FAMILIES
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.fleet import Fleet
from prexid.service.pipeline.fleet_judge import FleetBoard, FleetJudge
from prexid.service.pipeline.fleet_summary import PartitionSummary, SummaryError
from prexid.service.pipeline.pipeline import Pipeline

STEP = 15.0
ROW = ((1,) * N_FAMILIES, (0,) * N_FAMILIES)
METRIC = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"


def _bursty_fleet() -> NDArray[np.float64]:
    """64 parts for 24 h: parts 0, 2, ..., 30 (the first half's) repeat an episode of five bursts every
    2 h; the second half is clean but for part 40's first episode of the same, near the end."""
    rows = 24 * 240
    steps = np.zeros((rows, 64))
    for k, part in enumerate(range(0, 32, 2)):
        for start in range(40 + 37 * k, rows - 5, 480):
            steps[start : start + 5, part] = (2, 3, 1, 4, 2)
    steps[-30:-25, 40] = (2, 3, 1, 4, 2)
    return np.cumsum(steps, axis=0)


def _run(split: list[NDArray[np.int64]], x: NDArray[np.float64], share: bool) -> NDArray[np.float64]:
    """Each part's p with the parts split over partitions, each its own detector; `share`: each refit
    adds the other partitions' statistics as of that refit (what `fleet.Fleet` does)."""
    dets = [ErrorCounterSurprise() for _ in split]
    for det, cols in zip(dets, split, strict=True):
        det.set_fields(np.arange(len(cols), dtype=np.int64), np.zeros(len(cols), dtype=np.int64))
    p = np.ones_like(x)
    for t, row in enumerate(x):
        for i, (det, cols) in enumerate(zip(dets, split, strict=True)):
            at = det.due(t * STEP)
            if share and at is not None:
                det.set_outside(merge([d.stats_at(at) for j, d in enumerate(dets) if j != i]))
            p[t, cols] = det.update(
                np.arange(len(cols), dtype=np.int64), np.full(len(cols), t * STEP), row[cols]
            )
    return p


def test_a_partition_of_clean_parts_learns_the_other_partitions_leaky_bursts() -> None:
    """The leaky parts are all in one partition. Fitted on its own parts, the clean partition judged a
    part's first five-burst episode against a clean fleet (a page); with the partitions' statistics
    merged it is the fleet's ordinary episode, exactly as one process holding every part sees it."""
    x = _bursty_fleet()
    halves = [np.arange(32, dtype=np.int64), np.arange(32, 64, dtype=np.int64)]
    one = _run([np.arange(64, dtype=np.int64)], x, share=False)
    alone = _run(halves, x, share=False)
    shared = _run(halves, x, share=True)
    assert one[-30:-25, 40].min() > 1e-4
    assert alone[-30:-25, 40].min() < 1e-7  # the partition-local prior: a clean fleet
    np.testing.assert_allclose(shared, one, rtol=1e-9)


def _stats() -> PriorStats:
    det = ErrorCounterSurprise()
    det.set_fields(np.arange(64, dtype=np.int64), np.zeros(64, dtype=np.int64), np.array([7], dtype=np.int64))
    x = _bursty_fleet()[:2000]
    for t, row in enumerate(x):
        det.update(np.arange(64, dtype=np.int64), np.full(64, t * STEP), row)
    return det.stats(2000 * STEP)


def test_prior_stats_survive_the_wire_and_a_capped_partition_merges_to_nearly_its_own() -> None:
    stats = _stats()
    assert stats.keys.tolist() == [7] and stats.stand_for[0] == 16  # 16 leaky parts, more than CAP sizes
    back = PriorStats.from_wire(stats.to_wire())
    np.testing.assert_array_equal(back.sums, stats.sums)
    assert len(back.sizes) == 16 and (back.at, back.started) == (stats.at, stats.started)
    whole, capped = merge([stats, PriorStats.empty()]), merge([back, PriorStats.empty()])
    np.testing.assert_allclose(np.median(capped.spread()[0], axis=0), np.median(whole.spread()[0], axis=0))


@pytest.mark.parametrize(
    "mangle",
    [
        lambda w: w[:-8],  # truncated
        lambda w: "AQAAAAA" + w[7:],  # another version (v1: bursts an episode, not their excess)
        lambda w: w + "!",  # not base64
    ],
)
def test_a_bad_prior_record_is_a_clear_summary_error_not_a_crash(mangle: object) -> None:
    wire = _stats().to_wire()
    with pytest.raises(ValueError, match=r"prior stats|base64|Incorrect padding|Invalid"):
        PriorStats.from_wire(mangle(wire))  # type: ignore[operator]
    record = PartitionSummary(0, Summary(15.0, ROW, ROW, ROW), prior=_stats()).to_bytes()
    assert PartitionSummary.from_bytes(record).prior is not None
    bad = record.replace(b'"ec":"', b'"ec":"A' + b"x")
    with pytest.raises(SummaryError, match="unreadable summary"):
        PartitionSummary.from_bytes(bad)


def test_the_board_keeps_each_partitions_latest_prior_stats_across_records_without_them() -> None:
    board, stats = FleetBoard(), _stats()
    board.observe(PartitionSummary(1, Summary(15.0, ROW, ROW, ROW), prior=stats))
    board.observe(PartitionSummary(1, Summary(30.0, ROW, ROW, ROW)))
    assert board.priors[1] is stats


def _replay_counters(partitions: list[list[str]], mode: str = "fleet") -> list[Pipeline]:
    """Four nodes of 8 GPUs, 3 h of one PCIe replay counter each: node-00's GPUs 0-3 replay five bursts
    every 40 minutes, the rest stay clean. One pipeline per partition (nodes listed), stepped as one
    `Fleet`, or each with a fleet judge on one board, records read one scrape late ("judged"), or each
    alone ("alone")."""
    pipes = [Pipeline() for _ in partitions]
    board = FleetBoard()
    judged = mode != "fleet"
    judges = (
        [FleetJudge(p, i, board, lateness_s=120.0) for i, p in enumerate(pipes)] if mode == "judged" else []
    )
    fleet = None if judged else Fleet(pipes)
    total = np.zeros((4, 8))
    for t in range(720):
        if t % 160 in range(20, 25):
            total[0, :4] += (2, 3, 1, 4, 2)[t % 160 - 20]
        for pipe, nodes in zip(pipes, partitions, strict=True):
            rows = [
                RawSample(
                    METRIC,
                    {"gpu": str(g), "Hostname": node},
                    1.8e9 + t * STEP,
                    float(total[int(node[-1]), g]),
                )
                for node in nodes
                for g in range(8)
            ]
            pipe.add_samples(rows, "metrics:0")
        if fleet is not None:
            fleet.advance()
        for pipe in pipes if judged else ():
            pipe.advance()
        for judge in judges:
            for record in judge.take_outbox():
                board.observe(PartitionSummary.from_bytes(record.to_bytes()))
    return pipes


def _prior(pipe: Pipeline) -> NDArray[np.float64]:
    prior = pipe.bank.error_counter.prior
    return np.array([prior.alpha[0], prior.beta[0], prior.bursts_mean[0], prior.errors_per_burst[0]])


def test_partitions_stepped_as_a_fleet_fit_the_prior_one_process_fits() -> None:
    """The leaky GPUs are all on node-00, in the first partition: the second partition's prior is the
    fleet's (one process's) in a `Fleet` exactly, and under `prexid run`'s judges from the other
    partition's last record (a refit late at most); fitted on its own clean GPUs it expects no bursts."""
    (one,) = _replay_counters([["node-00", "node-01", "node-02", "node-03"]])
    halves = [["node-00", "node-01"], ["node-02", "node-03"]]
    fleet = _replay_counters(halves)
    assert one.bank.error_counter.prior.bursts_mean[0] > 2.0  # the fleet's episodes: five bursts
    for pipe in fleet:
        np.testing.assert_allclose(_prior(pipe), _prior(one), rtol=1e-9)
    judged = _replay_counters(halves, "judged")
    assert judged[1].bank.error_counter.prior.bursts_mean[0] > 2.0
    alone = _replay_counters(halves, "alone")
    assert alone[1].bank.error_counter.prior.bursts_mean[0] < 1.5  # the partition-local prior


def test_the_fleet_prior_keeps_a_bursts_errors_and_a_cold_fleets_episode_books_one_a_burst() -> None:
    """The fleet's second size is errors a burst (its episodes' errors are their bursts' times that, so a
    leaky part's chained single errors are no more errors than bursts): the median leaky part's
    episode of five bursts books 12 errors, 2.4 a burst, shrunk to the hyperprior's one at one part's
    weight. The hyperprior's episode is 1.25 bursts of one error each: 1.25 errors, as before."""
    x = _bursty_fleet()
    det = ErrorCounterSurprise()
    det.set_fields(np.arange(64, dtype=np.int64), np.zeros(64, dtype=np.int64))
    for t, row in enumerate(x):
        det.update(np.arange(64, dtype=np.int64), np.full(64, t * STEP), row)
    assert det.prior.errors_per_burst[0] == pytest.approx((1.0 + 16 * 2.4) / 17, rel=0.02)
    assert det.prior.default()[2:] == (1.25, 1.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, 2.5, 1e19])
def test_a_snapshot_whose_fleet_keys_are_not_whole_numbers_is_refused(bad: float) -> None:
    """A damaged key cast to int64 was a silent garbage key (numpy warns, then restores it); refused."""

    def stored(pieces: list[bytes | memoryview]) -> Stored:
        return parse_blobs(b"".join(pieces))

    prior = ErrorCounterSurprise().prior
    prior.keys = np.array([3, 7], dtype=np.int64)
    arrays = {k: np.asarray(v) for k, v in unpack_arrays(stored(prior.snapshot())).items()}
    arrays["keys"] = np.array([3.0, bad])
    with pytest.raises(ValueError, match="keys"):
        ErrorCounterSurprise().prior.restore(stored(pack_arrays(arrays)))
    restored = ErrorCounterSurprise().prior
    restored.restore(stored(prior.snapshot()))
    assert restored.keys.tolist() == [3, 7]
