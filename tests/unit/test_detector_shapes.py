"""Each detector finds the fault shape it exists for and stays quiet on the benign shapes of a cluster."""

from __future__ import annotations

import numpy as np

from prexid.detectors.calibration import TailCalibrator
from prexid.detectors.drift import DriftCusum
from prexid.detectors.flatline import Flatline
from prexid.detectors.peer import PeerDeviation
from prexid.detectors.robust import RobustDeviation
from prexid.detectors.seasonal import SeasonalDeviation
from prexid.detectors.staleness import Staleness
from tests.unit.wiring import scores

STEP = 15.0
NODES, GPUS = 6, 8
N = NODES * GPUS


def gpu_temps(steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.round(62.0 + rng.normal(0, 1.2, N) + rng.normal(0, 0.4, (steps, N)), 2)


def with_checkpoints(x: np.ndarray, every: int = 40) -> np.ndarray:
    """Every `every` scrapes the whole job checkpoints: one scrape at 30% of the level."""
    x = x.copy()
    x[every::every] *= 0.3
    return x


def with_job_restart(x: np.ndarray, start: int, length: int = 20) -> np.ndarray:
    """The whole job stops for `length` scrapes: GPUs idle at a low, flat-ish level, then resume."""
    x = x.copy()
    x[start : start + length] = 0.45 * x[start : start + length]
    return x


def peers() -> PeerDeviation:
    det = PeerDeviation()
    ids = np.arange(N, dtype=np.int64)
    det.set_groups(ids, ids // GPUS)
    return det


def test_drift_finds_a_one_degree_an_hour_creep_that_the_level_detector_misses() -> None:
    x = gpu_temps(1200)
    x[500:, 9] += np.arange(700) * (1.0 / 240)  # +1 °C per hour
    drift, level = scores(DriftCusum(), x), scores(RobustDeviation(), x)
    assert drift[500:, 9].min() < 1e-6
    assert level[500:, 9].min() > 1e-4


def test_drift_stays_quiet_on_checkpoints_and_a_job_restart() -> None:
    x = with_job_restart(with_checkpoints(gpu_temps(1000)), 600)
    assert scores(DriftCusum(), x)[100:].min() > 1e-6


def test_drift_restarts_at_the_level_a_job_holds_not_on_its_passing_checkpoint() -> None:
    """A node's CPU temperature, whole degrees: 42.5 C idle for two hours, 47.5 C from its own job's start,
    42.5 C again after the job. The job's checkpoints run it 1.5 C hotter for five minutes; each column
    puts one near where the drift CUSUM restarts, an hour after the jump. Restarted on the checkpoint, the
    ordinary readings summed below the reference for an hour: p 1e-12 (wide-s1329 and s1353 paged the
    node with the job's own traffic). A checkpoint split over the two means it restarts at still leans
    the new reference a little: 2e-5 on one column of 20."""
    rng = np.random.default_rng(7)
    steps, start, stop = 2400, 480, 1680
    offsets = np.arange(220, 300, 4)  # scrapes after the start: 55 to 75 minutes
    x = 42.5 + rng.normal(0.0, 0.5, (steps, len(offsets)))
    x[start:stop] += 5.0
    for col, off in enumerate(offsets):
        x[start + off : start + off + 20, col] += 1.5
    p = scores(DriftCusum(), np.round(x))
    assert p[start:].min() > 1e-6


def test_peer_deviation_finds_a_fail_slow_gpu_while_the_job_changes_phase() -> None:
    x = gpu_temps(600)
    x[400:] += np.linspace(0, 15, 200)[:, None]  # a new phase heats every GPU
    x[400:, 13] += 3.0  # GPU 5 of node 1 runs hotter than its peers
    p = scores(peers(), x)
    assert p[400:, 13].min() < 1e-6
    assert np.delete(p[400:], 13, axis=1).min() > 1e-6


def test_peer_deviation_stays_quiet_on_checkpoints_and_job_restarts() -> None:
    x = with_job_restart(with_checkpoints(gpu_temps(800)), 500)
    assert scores(peers(), x)[40:].min() > 1e-6


def test_flatline_finds_a_frozen_sensor() -> None:
    x = gpu_temps(300)
    x[200:, 4] = x[199, 4]
    p = scores(Flatline(), x)
    assert p[215, 4] < 1e-8
    assert np.delete(p, 4, axis=1).min() > 1e-6


def test_flatline_stays_quiet_on_flat_by_nature_and_idle_zero_series() -> None:
    x = np.zeros((300, 3))
    x[:, 0] = 16.0  # PCIe link width: constant forever
    x[:, 1] = np.r_[np.linspace(0, 50, 150), np.zeros(150)]  # utilisation of a GPU that went idle
    x[:, 2] = np.r_[np.full(150, 1965.0), np.full(150, 1410.0)]  # a clock that changed state once
    assert scores(Flatline(), x).min() > 1e-4


def test_staleness_finds_a_whole_exporter_stopping_and_forgets_it_after_an_hour() -> None:
    det = Staleness()
    x = gpu_temps(500)
    scores(det, x[:200])
    live = np.arange(8, N, dtype=np.int64)  # node 0's exporter stops
    for t in range(200, 500):
        det.update(live, np.full(len(live), t * STEP), x[t, 8:])
    ids, p = det.sweep(205 * STEP)
    assert ids.tolist() == list(range(8)) and p.max() < 1e-3
    assert p.min() >= 10**-3.5  # silence alone stays below fusion's resolve threshold (surprise 4)
    assert det.sweep(200 * STEP + 3700)[0].tolist() == []  # presumed gone, no longer evidence


def test_staleness_learns_slow_scrapes_and_tolerates_an_occasional_miss() -> None:
    det = Staleness()
    for t in range(400):
        det.update(np.array([0]), np.array([t * 60.0]), np.ones(1))  # a 60 s exporter
        if t % 50 != 7:  # a 15 s exporter that drops one scrape in fifty
            det.update(np.array([1]), np.array([t * 15.0]), np.ones(1))
    ids, p = det.sweep(399 * 15.0 + 1)
    assert ids.tolist() == [] or p.min() > 1e-3
    assert det.sweep(399 * 60.0 + 50)[0].tolist() == []


def test_robust_flags_a_job_restart_which_fusion_then_clears_as_common_mode() -> None:
    """Documented division of labour: per-series level detectors see a restart on every GPU at once."""
    p = scores(RobustDeviation(), with_job_restart(gpu_temps(400), 300))
    assert (p[300] < 1e-6).mean() > 0.9  # every GPU at once: > 30% of entities, fusion's common-mode rule


def test_peer_deviation_does_not_judge_a_gpu_against_a_level_lost_in_its_spread() -> None:
    """Idle tensor pipes read exactly 0 on most scrapes and a rounding step now and then, each GPU on its
    own: the peers' median is 0, or a step, inside their spread. A residual relative to it is 0 or
    unbounded (wide-s1309 paged one GPU's 0.0003 against its peers' 0). Busy, the same group is judged."""
    rng = np.random.default_rng(4)
    x = np.where(rng.random((400, N)) < 0.7, 0.0, np.round(rng.uniform(0.0, 0.02, (400, N)), 4))
    assert scores(peers(), x)[40:].min() > 1e-4
    x[300:] += 0.4  # the job starts: busy pipes, one GPU's at half its peers'
    x[350:, 13] -= 0.2
    assert scores(peers(), x)[350:, 13].min() < 1e-6


def test_robust_finds_ten_sigma_spikes_on_five_minute_series_whatever_its_spread_drew() -> None:
    """Five-minute Gaussian points, eight draws: a 10-sigma spike is p < 1e-6 on every one, and no
    ordinary point is rarer than 1e-4. With the spread learned over the half-hour half-life alone (six
    samples at this cadence) it wandered ±20% from sample to sample, the calibrator learned the tail of
    that, and one draw's spike was only p 2e-5 (the generic corpus' spikes inside a cycle)."""
    for seed in range(8):
        det, ids = RobustDeviation(), np.zeros(1, dtype=np.int64)
        rng = np.random.default_rng(seed)
        x = 100.0 + rng.normal(0.0, 1.0, 2000)
        x[1900] += 10.0
        p = np.array([det.update(ids, np.array([t * 300.0]), x[t : t + 1])[0] for t in range(2000)])
        assert p[1900] < 1e-6, seed
        assert p[200:1900].min() > 1e-4, seed


def test_robust_keeps_its_spread_through_an_outage_of_hours() -> None:
    """Five-minute points, silent for eight hours, back at their level: the next ordinary point (2.5
    sigma) is 2.5 sigma, not 9. Weighted as eight hours of evidence, the one point back replaced the
    spread by its own deviation from the level (the corpus' `gaps` files: the points after each outage
    were p 1e-6 and taught the calibrator a heavy tail)."""
    det, ids = RobustDeviation(), np.zeros(1, dtype=np.int64)
    rng = np.random.default_rng(0)
    x = 10.0 + rng.normal(0.0, 1.0, 500)
    for t in range(500):
        det.update(ids, np.array([t * 300.0]), x[t : t + 1])
    back = float(det.baseline(ids)[0]) + 0.1
    det.update(ids, np.array([596 * 300.0]), np.array([back]))
    assert det.deviation(ids, np.array([back + 2.5]))[0] < 3.5


def test_a_held_level_shift_in_heavy_tailed_noise_is_found_by_its_run() -> None:
    """Five-minute Student-t (3 dof) points, eight draws, shifted up by ten robust sigmas for good: the
    level detector finds the shift within an hour (p < 1e-7), and judges every ordinary point as it
    did without runs. Each shifted point alone is a heavy tail's ordinary outlier (p 1e-3 after the
    calibration); their run is what no heavy tail gives (the generic corpus' `heavy_tail` files: 59.6
    on seed 1)."""
    for seed in range(8):
        rng = np.random.default_rng(seed)
        x = 300.0 + rng.standard_t(3, 3000) * 2.0
        x[2800:] += 25.0
        ps = []
        for runs in (True, False):
            det, ids = RobustDeviation(runs=runs), np.zeros(1, dtype=np.int64)
            ps.append(
                np.array([det.update(ids, np.array([t * 300.0]), x[t : t + 1])[0] for t in range(2812)])
            )
        assert ps[0][2800:].min() < 1e-7 < 1e-4 < ps[1][2800:].min(), seed
        assert ps[0][:2800].min() == ps[1][:2800].min(), seed


def test_runs_are_no_evidence_on_a_series_whose_exceedances_come_in_runs() -> None:
    """A 15-s AR(1) gauge (a temperature wandering for minutes): its exceedances come in runs by
    nature, the level detector learns so, and its runs add nothing to its p."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        e, y = rng.normal(0.0, 1.0, 8000), np.zeros(8000)
        for i in range(1, 8000):
            y[i] = 0.97 * y[i - 1] + e[i]
        ps = []
        for runs in (True, False):
            det, ids = RobustDeviation(runs=runs), np.zeros(1, dtype=np.int64)
            ps.append(
                np.array([det.update(ids, np.array([t * 15.0]), 60.0 + y[t : t + 1])[0] for t in range(8000)])
            )
        assert ps[0].min() >= ps[1].min() / 2, seed


def test_a_faults_run_does_not_teach_the_level_that_runs_are_usual() -> None:
    """Five-minute Student-t (3 dof) points shifted by seven of the noise's scale units (about five
    robust sigmas), eight draws: once a run is evidence (p < 1e-4), its further steps no longer teach
    `stick` that exceedances follow each other, so the run keeps its weight until the baseline has
    followed the shift, and its points are not learned as the series' tail (the exceedance rate does
    not rise). Taught by its own steps the run stopped counting within three or four points: p < 1e-6 on
    three draws, and each such episode raised the rate (the corpus' `heavy_tail` files of four to six
    sigmas)."""
    found = 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        x = 300.0 + rng.standard_t(3, 2900) * 2.0
        x[2800:] += 14.0
        det, ids = RobustDeviation(runs=True), np.zeros(1, dtype=np.int64)
        for t in range(2800):
            det.update(ids, np.array([t * 300.0]), x[t : t + 1])
        after = [det.update(ids, np.array([t * 300.0]), x[t : t + 1])[0] for t in range(2800, 2900)]
        found += min(after[:24]) < 1e-6
    assert found >= 6


def cyclic(residual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Five-minute points: a daily cycle of 40 around 300, plus `residual`."""
    t = 300.0 * np.arange(len(residual))
    return t, 300.0 + 40.0 * np.sin(2.0 * np.pi * t / 86400.0) + residual


def seasonal_scores(t: np.ndarray, x: np.ndarray, runs: bool) -> np.ndarray:
    det, ids = SeasonalDeviation(), np.zeros(1, dtype=np.int64)
    if not runs:
        det.calibrator = TailCalibrator()  # type: ignore[assignment]
    return np.array([det.update(ids, t[i : i + 1], x[i : i + 1])[0] for i in range(len(t))])


def test_a_held_shift_inside_a_daily_cycle_in_heavy_tailed_noise_is_found_by_its_run() -> None:
    """A cyclic five-minute series in Student-t (3 dof) noise, shifted by seven of the noise's scale units
    (a fifth of the cycle's range), eight draws: the seasonal detector finds the shift within eight
    points (p < 1e-7), by its run of residuals over the threshold; every ordinary point is judged as
    without runs. Without runs every draw's shift stayed above p 1e-4: each point is a heavy tail's
    outlier, and the one-hour mean of the residual was judged against a tail that its own long episodes
    had taught (the corpus' cyclic `heavy_tail` and `level_shift` files)."""
    for seed in range(8):
        rng = np.random.default_rng(seed)
        t, x = cyclic(rng.standard_t(3, 288 * 10) * 2.0)
        x[288 * 9 :] += 14.0
        ps = [seasonal_scores(t[: 288 * 9 + 8], x[: 288 * 9 + 8], runs) for runs in (True, False)]
        assert ps[0][288 * 9 :].min() < 1e-6, seed
        assert ps[0][: 288 * 9].min() == ps[1][: 288 * 9].min(), seed


def test_seasonal_runs_are_no_evidence_on_a_cycle_whose_residual_wanders() -> None:
    """A cyclic five-minute series whose residual wanders (AR(1), 0.9 a step), two weeks: its exceedances
    come in runs by nature, the seasonal detector learns so, and once it has (a week in) its runs add
    nothing to its p."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        e, y = rng.normal(0.0, 1.0, 288 * 14), np.zeros(288 * 14)
        for i in range(1, len(y)):
            y[i] = 0.9 * y[i - 1] + e[i]
        t, x = cyclic(y)
        ps = [seasonal_scores(t, x, runs)[288 * 7 :] for runs in (True, False)]
        assert ps[0].min() >= ps[1].min() / 2, seed
