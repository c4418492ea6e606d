"""The job's own storage bursts are timed, so that only a rise outlasting them counts as a stall."""

from __future__ import annotations

import numpy as np

from prexid.detectors.job_io import KEEP, OUTLAST, PRIOR_S, JobIO

STEP = 15.0


def timed(length: float) -> float:
    """A burst's length as timed: from its first tick rising to its last."""
    return length - STEP


def burst(
    io: JobIO, start: float, length: float, shift_at: float | None, quiet_after: float = 300.0
) -> list[bool]:
    """Storage rising from `start` for `length` seconds, the workload shifting at `shift_at` (None:
    never); then quiet. Whether the rise was explained, tick by tick while it rose."""
    explained = []
    t = start
    while t < start + length + quiet_after:
        rising = t < start + length
        shift = shift_at if shift_at is not None and shift_at <= t else -np.inf
        io.step(t, rising, shift)
        if rising:
            explained.append(io.explains(t))
        t += STEP
    return explained


def test_a_rise_that_begins_with_the_jobs_phase_change_is_explained_until_it_outlasts_the_prior() -> None:
    io = JobIO()
    explained = burst(io, 0.0, 2 * PRIOR_S, shift_at=0.0)
    assert all(explained[: int(PRIOR_S / STEP)])
    assert not any(explained[int(PRIOR_S / STEP) :])


def test_the_workload_shift_may_come_a_few_scrapes_after_the_rise() -> None:
    assert JobIO().explains(0.0) is False
    io = JobIO()
    assert all(burst(io, 0.0, 300.0, shift_at=45.0)[3:])


def test_a_rise_without_a_workload_shift_is_never_explained() -> None:
    """A storage server failing mid-run: the job did not change phase, so the rise is judged as it is."""
    io = JobIO()
    assert not any(burst(io, 0.0, 300.0, shift_at=None))
    assert not any(burst(io, 5000.0, 300.0, shift_at=4000.0))  # a shift long before is another phase


def test_the_allowance_follows_the_jobs_own_checkpoints() -> None:
    """After a few 3-minute checkpoints a rise is explained for 1.5 x 3 minutes, not the 10-minute prior:
    a storm starting as a checkpoint that cannot finish is judged 4.5 minutes in."""
    io = JobIO()
    for k in range(4):
        burst(io, 3600.0 * k, 180.0, shift_at=3600.0 * k)
    assert io.allowance() == OUTLAST * timed(180.0)
    explained = burst(io, 20_000.0, 1800.0, shift_at=20_000.0)
    assert sum(explained) == np.ceil(OUTLAST * timed(180.0) / STEP)


def test_a_storm_among_the_jobs_checkpoints_does_not_move_the_allowance() -> None:
    """A storm is not a checkpoint: were its length learned, the next storm would pass for one."""
    io = JobIO()
    for k in range(3):
        burst(io, 3600.0 * k, 240.0, shift_at=3600.0 * k)
    burst(io, 20_000.0, 3000.0, shift_at=20_000.0)
    assert io.allowance() == OUTLAST * timed(240.0)


def test_a_job_whose_checkpoints_grow_is_learned_again() -> None:
    io = JobIO()
    for k in range(KEEP + 3):
        burst(io, 3600.0 * k, 120.0 if k < 3 else 300.0, shift_at=3600.0 * k)
    assert io.allowance() == OUTLAST * timed(300.0)  # the three short ones were overwritten


def test_a_pause_of_a_scrape_or_two_does_not_end_the_rise() -> None:
    io = JobIO()
    for t in np.arange(0.0, 600.0, STEP):
        io.step(float(t), not 300.0 <= t < 330.0, 0.0)
    assert io.start == 0.0


def test_the_timing_survives_a_snapshot() -> None:
    io = JobIO()
    burst(io, 0.0, 210.0, shift_at=0.0)
    burst(io, 3600.0, 100.0, shift_at=3600.0, quiet_after=0.0)  # under way
    again = JobIO()
    again.restore_arrays(io.snapshot_arrays())
    assert again.allowance() == io.allowance() == OUTLAST * timed(210.0)
    assert again.explains(3700.0) and again.start == io.start
    fresh = JobIO()
    fresh.restore_arrays(JobIO().snapshot_arrays())
    assert np.isnan(fresh.start) and fresh.allowance() == PRIOR_S


def test_a_blip_as_the_job_changes_phase_does_not_zero_the_allowance() -> None:
    """A scrape of storage votes with the job's phase change, then 3-minute checkpoints: the allowance
    is theirs. Timed at 0 s, the blip made the allowance 0, every later checkpoint was capped at twice
    that, and none was explained again (wide-s1497 paged `cluster` at a checkpoint's end)."""
    io = JobIO()
    burst(io, 0.0, STEP, shift_at=0.0)
    for k in range(1, 4):
        burst(io, 3600.0 * k, 180.0, shift_at=3600.0 * k)
    assert io.allowance() == OUTLAST * timed(180.0)
    assert all(burst(io, 20_000.0, 180.0, shift_at=20_000.0))
