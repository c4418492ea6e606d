"""The gauge bank's variance-shift and seasonal detectors: what each must find, and what it must leave
alone (a stationary series, an ordinary daily cycle, a fleet seen for less than two days)."""

from __future__ import annotations

import numpy as np
import pytest

from prexid.detectors.bank import DetectorBank
from prexid.detectors.base import Detector, parse_blobs
from prexid.detectors.seasonal import SeasonalDeviation
from prexid.detectors.signals import Kind
from prexid.detectors.variance import VarianceShift
from prexid.service.offline.evaluate.univariate import score_series

STEP = 300.0  # five-minute points, as the generic corpus and most public series
DAY = 288


def run(det: Detector, x: np.ndarray, step: float = STEP) -> np.ndarray:
    """(time x series) values through one detector a point at a time: the p-values it gave."""
    ids = np.arange(x.shape[1], dtype=np.int64)
    return np.array([det.update(ids, np.full(len(ids), t * step), row) for t, row in enumerate(x)])


def cyclic(days: int, series: int = 4, seed: int = 0) -> np.ndarray:
    """A daily cycle 20 times the noise, per series its own phase and level."""
    rng = np.random.default_rng(seed)
    t = np.arange(days * DAY)[:, None]
    phase = rng.uniform(0, 2 * np.pi, series)
    return 100.0 + 20.0 * np.sin(2 * np.pi * t / DAY + phase) + rng.normal(0.0, 1.0, (len(t), series))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stationary_series_gives_the_variance_detector_no_strong_evidence(seed: int) -> None:
    x = np.random.default_rng(seed).normal(50.0, 2.0, (3 * DAY, 8))
    assert run(VarianceShift(), x)[60:].min() > 1e-4


def test_a_variance_step_without_a_level_change_is_found_within_the_hour() -> None:
    x = np.random.default_rng(3).normal(50.0, 2.0, (3 * DAY, 4))
    at = 2 * DAY
    x[at:, 1] = 50.0 + np.random.default_rng(4).normal(0.0, 8.0, DAY)  # four times the spread, same mean
    p = run(VarianceShift(), x)
    assert p[at : at + 12, 1].min() < 1e-6
    assert np.delete(p[60:], 1, axis=1).min() > 1e-4


def test_an_hourly_variance_step_is_found_within_a_day() -> None:
    """At an hour a point, the 1-hour short mean was one point and the 12-hour reference twelve, so four
    times the spread stayed above p 1e-4 for a day on 3 of 8 series. A point now weighs at most five
    minutes."""
    x = np.random.default_rng(6).normal(50.0, 2.0, (600, 8))
    at = 400
    x[at:] = 50.0 + np.random.default_rng(7).normal(0.0, 8.0, (200, 8))  # four times the spread, same mean
    p = run(VarianceShift(), x, step=3600.0)
    assert (p[at : at + 24].min(axis=0) < 1e-4).all()
    assert p[60:at].min() > 2e-5  # 2,720 ordinary points


def test_less_spread_is_not_evidence_of_a_variance_shift() -> None:
    x = np.random.default_rng(5).normal(50.0, 2.0, (3 * DAY, 4))
    x[2 * DAY :, 1] = 50.0 + np.random.default_rng(6).normal(0.0, 0.5, DAY)
    assert run(VarianceShift(), x)[2 * DAY :, 1].min() > 1e-2


def test_an_ordinary_daily_cycle_does_not_score_while_a_broken_one_does() -> None:
    x = cyclic(6)
    broken = 5 * DAY
    x[broken : broken + DAY // 4, 2] += 15.0 * np.sin(2 * np.pi * np.arange(DAY // 4) / (DAY // 4))
    p = run(SeasonalDeviation(), x)
    assert p[2 * DAY :, [0, 1, 3]].min() > 1e-4  # the cycle itself, however large, is no evidence
    assert p[broken : broken + DAY // 4, 2].min() < 1e-6
    assert p[2 * DAY : broken, 2].min() > 1e-4


def test_a_spike_inside_the_cycles_range_is_found_only_with_the_profile() -> None:
    x = cyclic(5)
    x[4 * DAY + 100, 1] += 10.0  # ten times the noise, half the cycle's amplitude
    bank = DetectorBank()
    bank.set_kinds(np.arange(4, dtype=np.int64), np.full(4, Kind.GAUGE, dtype=np.uint8))
    p = run(bank.detectors[Kind.GAUGE][0], x)  # the level detector alone: the cycle's lag hides it
    assert p[4 * DAY + 100, 1] > 1e-6
    assert run(SeasonalDeviation(), x)[4 * DAY + 100, 1] < 1e-6


def test_the_seasonal_detector_is_silent_without_a_cycle_or_before_two_days() -> None:
    rng = np.random.default_rng(7)
    flat = rng.normal(100.0, 1.0, (4 * DAY, 4))
    flat[3 * DAY, 0] += 30.0  # a spike is the level detector's: this one stays out
    assert (run(SeasonalDeviation(), flat) == 1.0).all()
    young = cyclic(2)[: 2 * DAY - 1]
    young[-10, 0] += 40.0
    assert (run(SeasonalDeviation(), young) == 1.0).all()


def test_a_gpu_fleets_first_hours_at_15_s_never_reach_the_seasonal_detector() -> None:
    x = cyclic(1, seed=8)[:, :2].repeat(20, axis=0)  # a day of 15-s scrapes
    assert (run(SeasonalDeviation(), x, step=15.0) == 1.0).all()


@pytest.mark.parametrize("make", [VarianceShift, SeasonalDeviation])
def test_a_restored_detector_scores_exactly_like_an_uninterrupted_one(make: type[Detector]) -> None:
    x = cyclic(4, seed=9)
    x[3 * DAY + 50 :, 0] += np.random.default_rng(1).normal(0.0, 6.0, DAY - 50)
    a, b = make(), make()
    run(a, x[: 3 * DAY])
    run(b, x[: 3 * DAY])
    restored = make()
    restored.restore(parse_blobs(b"".join(b.snapshot())))
    ids = np.arange(x.shape[1], dtype=np.int64)
    for t in range(3 * DAY, 4 * DAY):
        ts = np.full(len(ids), t * STEP)
        np.testing.assert_array_equal(a.update(ids, ts, x[t]), restored.update(ids, ts, x[t]))


def test_truncating_a_series_after_any_point_leaves_every_earlier_score_and_decision_unchanged() -> None:
    """Causality of the whole gauge path (`replay --csv`) where the new detectors answer: a cyclic
    series with a variance change and a broken cycle, past two days."""
    x = cyclic(4, series=1, seed=10)[:, 0]
    x[3 * DAY :][:100] += np.random.default_rng(2).normal(0.0, 6.0, 100)
    x[3 * DAY + 150 :] += 25.0
    ts = np.arange(len(x)) * STEP
    scores, fired = score_series(ts, x)
    assert fired[3 * DAY :].any()
    for cut in (3 * DAY + 10, 3 * DAY + 140, 3 * DAY + 160):
        s, f = score_series(ts[:cut], x[:cut])
        np.testing.assert_array_equal(s, scores[:cut])
        np.testing.assert_array_equal(f, fired[:cut])


def test_on_a_cyclic_series_the_bank_leaves_the_cycle_to_the_seasonal_detector() -> None:
    """Level and drift baselines lag a daily cycle (the drift CUSUM read it as creep, hour after hour);
    where the series' own profile explains it, their evidence is left out."""
    x = cyclic(5, series=4, seed=11)
    bank = DetectorBank()
    ids = np.arange(4, dtype=np.int64)
    bank.set_kinds(ids, np.full(4, Kind.GAUGE, dtype=np.uint8))
    p = np.array([bank.update(ids, np.full(4, t * STEP), row).p for t, row in enumerate(x)])
    assert p[3 * DAY :].min() > 1e-5
    assert bank.seasonal.explains(ids).all()


def test_a_flatline_of_hours_is_one_detection_not_one_per_cooldown() -> None:
    rng = np.random.default_rng(12)
    x = 50.0 + rng.normal(0.0, 1.0, 1000)
    x[600:800] = x[599]
    _, fired = score_series(np.arange(1000) * STEP, x)
    assert fired[600:620].sum() == 1
    assert fired[620:820].sum() == 0


def test_an_hourly_daily_cycle_is_read_whole_between_the_cells_it_visits() -> None:
    """A series sampled hourly learns every other half-hour cell of its profile. The cells between were
    read as 0, so the profile came out at half the cycle between its points, never explained the series,
    and a spike of 8 noise sigmas inside a cycle of 20 scored p = 1. After a whole period a cell never
    learned reads as its neighbour."""
    hour, day = 3600.0, 24
    t = np.arange(30 * day)
    x = 500.0 + 20.0 * np.sin(2 * np.pi * t / day) + np.random.default_rng(3).normal(0.0, 1.0, len(t))
    x[25 * day + 5] += 8.0
    det, ids = SeasonalDeviation(), np.zeros(1, dtype=np.int64)
    p = np.array([det.update(ids, np.array([i * hour]), x[i : i + 1])[0] for i in t])
    midnight, one_am = det.season(np.zeros(2, dtype=np.int64), 30 * 86400.0 + np.array([0.0, hour]))
    assert abs(one_am - midnight - 20.0 * np.sin(2 * np.pi / day)) < 1.0  # 5.2; half of it before
    assert det.explains(ids).all()
    assert p[25 * day + 5] < 1e-4
    assert np.delete(p[5 * day :], 20 * day + 5).min() > 1e-4


def test_an_hourly_point_weighs_no_more_than_five_minutes_in_the_seasonal_model() -> None:
    """Event-time half-lives of hours are a handful of hourly points: the residual's one-hour mean was
    the point itself, and its spread learned a held shift within hours. A point now weighs at most what
    a five-minute one does: a shift of 4 noise sigmas inside a daily cycle of 20, held 12 hours, builds
    evidence (the mean of the last twelve points) on eight draws of the noise, and the other days stay
    quieter than 1e-3."""
    hour, day = 3600.0, 24
    t = np.arange(30 * day)
    onset = 25 * day + 3
    for seed in range(8):
        x = 500.0 + 20.0 * np.sin(2 * np.pi * t / day) + np.random.default_rng(seed).normal(0.0, 1.0, len(t))
        x[onset : onset + 12] += 4.0
        det, ids = SeasonalDeviation(), np.zeros(1, dtype=np.int64)
        p = np.array([det.update(ids, np.array([i * hour]), x[i : i + 1])[0] for i in t])
        assert p[onset : onset + 12].min() < 1e-4
        assert np.delete(p, np.arange(onset, onset + 24))[5 * day :].min() > 1e-3
