"""The trend detector: a slope of a few hundredths of the noise a point, where the drift CUSUM restarts."""

from __future__ import annotations

import numpy as np
import pytest

from prexid.detectors.bank import DetectorBank
from prexid.detectors.base import parse_blobs
from prexid.detectors.seasonal import SeasonalDeviation
from prexid.detectors.trend import TrendShift
from prexid.service.offline.evaluate.univariate import score_series

STEP = 300.0  # five-minute points, as the generic corpus
DAY = 288
ONSET = 3 * DAY


def series(slope: float, cycle: float = 0.0, seed: int = 0, days: int = 4) -> np.ndarray:
    """Unit noise on a level, an optional daily cycle of `cycle` noise sigmas, and from day 3 a slope of
    `slope` sigmas a point."""
    rng = np.random.default_rng(seed)
    i = np.arange(days * DAY)
    x = 100.0 + cycle * np.sin(2 * np.pi * i / DAY + rng.uniform(0, 6.3)) + rng.normal(0.0, 1.0, len(i))
    return x + slope * np.maximum(i - ONSET, 0)


def run(det: TrendShift, x: np.ndarray, season: SeasonalDeviation | None = None) -> np.ndarray:
    ids = np.zeros(1, dtype=np.int64)
    out = []
    for t, v in enumerate(x):
        ts, vs = np.array([t * STEP]), np.array([v])
        out.append(det.update(ids, ts, vs)[0])
        if season is not None:  # after the trend detector, as in the bank: it reads the profile as was
            season.update(ids, ts, vs)
    return np.array(out)


@pytest.mark.parametrize(("slope", "cycle"), [(0.03, 0.0), (-0.03, 0.0), (0.03, 1.0), (0.03, 5.0)])
def test_a_slow_slope_is_found_by_replay_within_eight_hours(slope: float, cycle: float) -> None:
    """The whole gauge path (`replay --csv`) fires within 100 points of a slope of 0.03 sigma a point
    (3 sigma by then), with or without a daily cycle, and never in the day before it. Without the trend
    detector it did not fire: the drift CUSUM restarts after an hour off its reference."""
    x = series(slope, cycle, seed=3)
    _, fired = score_series(np.arange(len(x)) * STEP, x)
    assert not fired[ONSET - DAY : ONSET].any()
    assert fired[ONSET : ONSET + 100].any()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stationary_or_cyclic_series_gives_no_strong_evidence(seed: int) -> None:
    sd = SeasonalDeviation()
    p = run(TrendShift(seasonal=sd), series(0.0, cycle=3.0 * seed, seed=seed, days=6), sd)
    assert p.min() > 1e-5


def test_a_step_is_not_a_slope() -> None:
    """A job restart to another level is the level detector's business, not a trend."""
    x = series(0.0, seed=4)
    x[ONSET:] += 30.0
    assert run(TrendShift(), x)[ONSET:].min() > 1e-4


def test_a_fresh_series_is_not_judged_for_two_days() -> None:
    """Every gauge of a GPU fleet in its first two days is judged exactly as without the detector."""
    x = series(0.0, seed=5, days=2) + 0.2 * np.arange(2 * DAY)  # a steep slope from the start
    assert (run(TrendShift(), x) == 1.0).all()


def test_a_restored_detector_scores_exactly_like_an_uninterrupted_one() -> None:
    x = series(0.04, seed=6)
    a, b = TrendShift(), TrendShift()
    run(a, x[: ONSET + 20])
    run(b, x[: ONSET + 20])
    restored = TrendShift()
    restored.restore(parse_blobs(b"".join(b.snapshot())))
    ids = np.zeros(1, dtype=np.int64)
    for t in range(ONSET + 20, len(x)):
        ts, v = np.array([t * STEP]), x[t : t + 1]
        np.testing.assert_array_equal(a.update(ids, ts, v), restored.update(ids, ts, v))


def test_truncating_a_series_after_any_point_leaves_every_earlier_score_unchanged() -> None:
    """Causality of the gauge path where the trend detector answers: a cyclic series with a slope."""
    x = series(0.03, cycle=5.0, seed=7)
    ts = np.arange(len(x)) * STEP
    scores, fired = score_series(ts, x)
    assert fired[ONSET:].any()
    for cut in (ONSET + 10, ONSET + 60, ONSET + 61):
        s, f = score_series(ts[:cut], x[:cut])
        np.testing.assert_array_equal(s, scores[:cut])
        np.testing.assert_array_equal(f, fired[:cut])


def test_the_bank_reads_the_trend_detector_on_every_gauge() -> None:
    bank = DetectorBank()
    assert any(isinstance(d, TrendShift) for d in bank.all_detectors())


def test_noise_after_a_stuck_reading_is_not_a_trend() -> None:
    """A reading stuck for a day says nothing about the noise: learning its zero steps shrank the noise
    to the floor, and the ordinary slopes once the series moved again scored as trends for days."""
    x = series(0.0, seed=8, days=6)
    x[ONSET : ONSET + DAY] = x[ONSET - 1]
    assert run(TrendShift(), x)[ONSET:].min() > 1e-5


def test_a_slope_held_for_hours_becomes_the_series_new_normal() -> None:
    """A trend is evidence while it is news: one that has held for `max_run_s` (6 h) is the series'
    new regime (as the drift CUSUM re-baselines), so a series rising for days does not score at the
    floor for days."""
    p = run(TrendShift(), series(0.05, seed=9, days=6))
    assert p[ONSET : ONSET + 100].min() < 1e-7
    assert p[ONSET + DAY :].min() > 1e-4


@pytest.mark.parametrize(("seed", "height"), [(10, 10.0), (11, -10.0), (12, 20.0), (13, -40.0)])
def test_a_spike_leaves_no_slope_behind(seed: int, height: float) -> None:
    """A single mean far off its forecast is a jump; the next one back is another. Shifting the smoother
    by both left it at the return mean, its noise kept with weight 1, and the ordinary means after it
    read as a slope (z 5 within 30 means). A jump is now held back until the next mean confirms it."""
    x = series(0.0, seed=seed)
    x[ONSET] += height
    assert run(TrendShift(), x)[ONSET:].min() > 1e-4
