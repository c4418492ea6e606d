"""Calibrated p-values are close to uniform in the tail on healthy data; a raw Gaussian z is not."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import erfc

from prexid.detectors.calibration import TailCalibrator
from prexid.detectors.drift import DriftCusum
from prexid.detectors.robust import RobustDeviation
from prexid.detectors.runs import RunCalibrator
from prexid.detectors.variance import VarianceShift

STEP = 15.0
SERIES, STEPS, BURN_IN = 400, 4000, 1500


def healthy_stream(shape: str, rng: np.random.Generator) -> np.ndarray:
    """(time x series) healthy data: heavy-tailed noise, or a daily cycle plus heavy-tailed noise."""
    noise = rng.standard_t(3, (STEPS, SERIES))
    if shape == "student_t":
        return 50.0 + noise
    t = np.arange(STEPS)[:, None] * STEP
    phase = rng.uniform(0, 2 * np.pi, SERIES)
    return 50.0 + 3.0 * np.sin(2 * np.pi * t / 86400.0 + phase) + noise


def tail_rate(p: np.ndarray, alpha: float) -> float:
    return float((p < alpha).mean() / alpha)


@pytest.mark.parametrize("shape", ["student_t", "seasonal"])
def test_robust_p_values_are_uniform_in_the_tail_where_a_gaussian_z_is_not(shape: str) -> None:
    rng = np.random.default_rng(0)
    x = healthy_stream(shape, rng)
    det = RobustDeviation()
    ids = np.arange(SERIES, dtype=np.int64)
    calibrated, gaussian = [], []
    for t, row in enumerate(x):
        base = det.baseline(ids)
        p = det.update(ids, np.full(SERIES, t * STEP), row)
        if t >= BURN_IN:
            calibrated.append(p)
            z = (row - base) / x[:BURN_IN].std(axis=0)  # what a Gaussian z against the same baseline says
            gaussian.append(erfc(np.abs(z) / np.sqrt(2)))
    cal, raw = np.concatenate(calibrated), np.concatenate(gaussian)
    assert 1 / 3 < tail_rate(cal, 1e-3) < 3
    assert 1 / 3 < tail_rate(cal, 1e-2) < 3
    assert tail_rate(raw, 1e-3) > 3  # the heavy tail fools the Gaussian assumption


def test_drift_cusum_heights_calibrate_on_heavy_tailed_noise() -> None:
    """Drift judges 5-minute means, so its calibration needs batches, not scrapes: 500 of them here."""
    rng = np.random.default_rng(1)
    x = 50.0 + rng.standard_t(3, (10_000, SERIES))
    det = DriftCusum()
    ids = np.arange(SERIES, dtype=np.int64)
    p = np.array([det.update(ids, np.full(SERIES, t * STEP), row) for t, row in enumerate(x)])
    assert 1 / 3 < tail_rate(p[4_000:], 1e-3) < 3
    assert 1 / 3 < tail_rate(p[4_000:], 1e-2) < 3


def test_a_sustained_fault_does_not_calibrate_itself_away() -> None:
    cal = TailCalibrator()
    ids = np.arange(1, dtype=np.int64)
    rng = np.random.default_rng(2)
    for _ in range(2000):
        cal.score(ids, np.abs(rng.normal(size=1)))
    fault = [float(cal.score(ids, np.array([6.0 + k * 0.01]))[0]) for k in range(500)]
    assert max(fault) < 1e-5  # 500 samples in a row, still judged against the healthy tail


def test_a_series_learns_its_own_heavier_tail() -> None:
    gaussian, heavy = TailCalibrator(), TailCalibrator()
    ids = np.arange(1, dtype=np.int64)
    rng = np.random.default_rng(3)
    for _ in range(5000):
        gaussian.score(ids, np.abs(rng.normal(size=1)))
        heavy.score(ids, np.abs(rng.standard_t(2.5, size=1)))
    probe = np.array([6.0])
    assert heavy.tail(ids, probe)[0] > 100 * gaussian.tail(ids, probe)[0]


def test_a_young_series_far_tail_is_heavy_until_its_history_says_otherwise() -> None:
    """Minutes of a series have not shown its rare spikes (a stale exporter's zero rate): a young
    series' far tail is judged heavy, and the Gaussian prior returns as its history grows."""
    ids = np.arange(1, dtype=np.int64)
    rng = np.random.default_rng(4)
    plain, young = TailCalibrator(), TailCalibrator(young_xi=0.45)
    probe = np.array([10.0])
    for _ in range(100):
        z = np.abs(rng.normal(size=1))
        plain.score(ids, z)
        young.score(ids, z)
    assert plain.tail(ids, probe)[0] < 1e-8  # the Gaussian prior, taken as known
    assert young.tail(ids, probe)[0] > 1e-6
    for _ in range(20_000):
        z = np.abs(rng.normal(size=1))
        plain.score(ids, z)
        young.score(ids, z)
    assert young.tail(ids, probe)[0] < 10 * plain.tail(ids, probe)[0] + 1e-10


def test_a_counter_rate_that_starts_at_zero_learns_its_spread_in_the_warm_up() -> None:
    """A counter whose first rates are 0 (retransmits before the job's traffic): clipping its warm-up
    against a spread of 0 left its MAD at 1e-6 and paged its ordinary rate at p=1e-12 (wide tuning cell
    seed 81)."""
    rng = np.random.default_rng(5)
    det = RobustDeviation()
    ids = np.zeros(1, dtype=np.int64)
    rates = np.concatenate([np.zeros(4), rng.poisson(2.0, 60) / 15.0])
    p = np.array([det.update(ids, np.array([STEP * t]), np.array([r]))[0] for t, r in enumerate(rates)])
    assert p[det.warmup :].min() > 1e-4


def test_a_spike_in_the_warm_up_of_a_series_that_has_moved_is_still_clipped() -> None:
    """Only a series that has not moved yet learns unclipped: one with a spread keeps its baseline."""
    det = RobustDeviation()
    ids = np.zeros(1, dtype=np.int64)
    for t in range(10):
        det.update(ids, np.array([STEP * t]), np.array([60.0 + (t % 2) * 0.4]))
    det.update(ids, np.array([STEP * 10]), np.array([1000.0]))
    assert abs(float(det.baseline(ids)[0]) - 60.2) < 1.0


def test_a_run_that_was_evidence_is_not_learned_as_the_tail() -> None:
    """Eight scores of 3.5 in a row on a Gaussian |z| history: each alone is a tail the series has (p
    1e-3), their run is evidence, and like a fault's episode it is not folded into the tail: after it,
    the exceedance rate is the one a series that never exceeded has."""
    z = np.abs(np.random.default_rng(0).normal(0.0, 1.0, 2000))
    rates = []
    for run in (np.full(8, 3.5), np.full(8, 0.5)):
        cal, ids = RunCalibrator(), np.zeros(1, dtype=np.int64)
        p = [cal.score(ids, v) for v in np.r_[z, run, 0.5].reshape(-1, 1)]
        rates.append(float(cal.rate(ids)[0]))
        if run[0] > 2.0:
            assert min(p[-9:])[0] < 1e-6 < 1e-4 < min(p[-9:-7])[0]
    assert rates[0] == rates[1]


def test_one_spike_does_not_make_a_gaussian_tail_heavy() -> None:
    """A lone 10-sigma score on a Gaussian |z| history is learned, as no larger than the tail's own
    `learn_gate` point: a second one later is still p < 1e-7, eight draws. Learned at its size, it set
    the moments' shape to about 0.36, and the second was p 4e-5 on six of them (the hourly corpus'
    `spike` files)."""
    for seed in range(8):
        z = np.abs(np.random.default_rng(seed).normal(0.0, 1.0, 3000))
        z[1000] = z[2900] = 10.0
        cal, ids = TailCalibrator(), np.zeros(1, dtype=np.int64)
        p = [float(cal.score(ids, v)[0]) for v in z.reshape(-1, 1)]
        assert p[1000] < 1e-8 and p[2900] < 1e-7, seed


def test_a_heavy_tail_still_learns_from_its_spikes_that_were_evidence() -> None:
    """Student-t (2.5 dof) scores whose outliers start out rarer than `learn_gate` under the Gaussian
    prior: they recur, each pushes the tail's gate point outward, and after a few thousand samples a
    score of 8 is no rarer than 1e-4 (as `test_a_series_learns_its_own_heavier_tail` has it)."""
    cal, ids = TailCalibrator(), np.zeros(1, dtype=np.int64)
    rng = np.random.default_rng(3)
    for _ in range(5000):
        cal.score(ids, np.abs(rng.standard_t(2.5, size=1)))
    assert cal.tail(ids, np.array([8.0]))[0] > 1e-4


def test_excursions_of_the_noise_past_the_gate_are_learned() -> None:
    """The variance detector on 200 stationary five-minute series of Student-t noise (3 dof), two weeks
    each: its score wanders in episodes, and those that reach p 1e-4 to 1e-6 are the series' own noise.
    Each now counts once at the tail's gate point, and at most 10 series reach p 1e-7; left out of the
    tail, 20 did, to 1e-9."""
    rng = np.random.default_rng(7)
    x = 300.0 + rng.standard_t(3.0, (4032, 200)) * rng.uniform(1.0, 20.0, 200)
    det, ids = VarianceShift(), np.arange(200, dtype=np.int64)
    p = np.array([det.update(ids, np.full(200, 300.0 * t), x[t]) for t in range(4032)])
    assert (p[600:] < 1e-7).any(axis=0).sum() <= 10
