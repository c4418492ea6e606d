"""The false-alert budget raises a noisy fleet's firing threshold until its null holds the budget, and
leaves a quiet fleet's, and failures' episodes, alone."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.alert_budget import AlertBudget, BudgetConfig
from prexid.service.pipeline.pipeline import Pipeline

STEP = 15.0
FIRE = 9.0


def _run(
    budget: AlertBudget, peaks: NDArray[np.float64], every: int, hours: float, gpus: int = 16
) -> list[float]:
    """`gpus` GPU entities plus 2 nodes; every `every` ticks one GPU (in turn) has an episode of 6 ticks
    at the next of `peaks`. Returns the GPU threshold at each tick."""
    n = gpus + 2
    is_gpu = np.r_[np.ones(gpus, dtype=bool), np.zeros(2, dtype=bool)]
    out, k = [], 0
    for t in range(int(hours * 240)):
        fused = np.zeros(n)
        phase = t % every
        if phase < 6:
            fused[(t // every) % gpus] = peaks[k % len(peaks)]
        elif phase == 6:
            k += 1
        budget.fit()  # as the pipeline does before each tick
        out.append(float(budget.observe(t * STEP, fused, is_gpu)[0]))
    return out


def test_a_fleet_with_a_heavy_tail_of_episodes_is_given_a_higher_threshold() -> None:
    rng = np.random.default_rng(0)
    peaks = 6.0 + rng.exponential(1.5, 500)  # above one family's cap, often: noisier physics
    budget = AlertBudget(BudgetConfig(min_node_days=1.0), FIRE)
    thresholds = _run(budget, peaks, every=40, hours=48)
    assert thresholds[0] == FIRE
    assert thresholds[-1] > 12.0
    assert budget.null_rate()[0] <= 0.005 / 2 + 1e-9


def test_a_quiet_fleet_keeps_the_configured_threshold() -> None:
    peaks = np.full(50, 5.0)  # single-family episodes only
    budget = AlertBudget(BudgetConfig(min_node_days=1.0), FIRE)
    assert set(_run(budget, peaks, every=40, hours=48)) == {FIRE}


def test_episodes_on_a_node_with_an_xid_are_not_the_null() -> None:
    rng = np.random.default_rng(0)
    peaks = 6.0 + rng.exponential(1.5, 500)
    budget = AlertBudget(BudgetConfig(min_node_days=1.0), FIRE)
    budget.ensure(18)
    for hour in range(48):  # every GPU's node has an Xid each hour: every episode is a failure's
        budget.failed(np.arange(16, dtype=np.int64), hour * 3600.0 + 3000.0)
        _run_hour(budget, peaks, hour)
    assert budget.thresholds[0] == FIRE
    assert budget.episodes[0] == 0.0


def _run_hour(budget: AlertBudget, peaks: NDArray[np.float64], hour: int) -> None:
    is_gpu = np.r_[np.ones(16, dtype=bool), np.zeros(2, dtype=bool)]
    for t in range(hour * 240, (hour + 1) * 240):
        fused = np.zeros(18)
        if t % 40 < 6:
            fused[(t // 40) % 16] = peaks[(t // 40) % len(peaks)]
        budget.fit()
        budget.observe(t * STEP, fused, is_gpu)


def test_a_restored_budget_continues_as_an_uninterrupted_one() -> None:
    rng = np.random.default_rng(1)
    peaks = 6.0 + rng.exponential(1.5, 500)
    whole = AlertBudget(BudgetConfig(min_node_days=1.0), FIRE)
    first = AlertBudget(BudgetConfig(min_node_days=1.0), FIRE)
    for hour in range(24):
        _run_hour(whole, peaks, hour)
        _run_hour(first, peaks, hour)
    second = AlertBudget(BudgetConfig(min_node_days=1.0), FIRE)
    second.restore_arrays({k: np.array(v, copy=True) for k, v in first.snapshot_arrays().items()})
    for hour in range(24, 48):
        _run_hour(whole, peaks, hour)
        _run_hour(second, peaks, hour)
    np.testing.assert_array_equal(whole.thresholds, second.thresholds)
    np.testing.assert_array_equal(whole.episodes, second.episodes)
    assert whole.thresholds[0] > FIRE


def test_the_thresholds_and_null_rate_are_exported_per_level() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from prexid.service.app.settings import DetectionSettings
    from prexid.service.pipeline.pipeline import Pipeline
    from prexid.service.sinks.prometheus import BudgetCollector

    pipe = Pipeline(DetectionSettings().pipeline_config("c1"))
    assert pipe.budget is not None
    pipe.budget.thresholds[:] = (12.5, 9.0)
    registry = CollectorRegistry()
    registry.register(BudgetCollector(lambda: [pipe]))
    text = generate_latest(registry).decode()
    assert 'prexid_fire_threshold{cluster="c1",level="gpu"} 12.5' in text
    assert 'prexid_fire_threshold{cluster="c1",level="node"} 9.0' in text
    assert 'prexid_false_alert_budget{cluster="c1"} 0.005' in text
    off = Pipeline(DetectionSettings(false_alert_budget=0).pipeline_config("c1"))
    assert off.budget is None


def test_a_raised_threshold_does_not_silence_a_single_sustained_family_carrying_the_score() -> None:
    """A budget that raised the GPU threshold to 15 still lets a sustained hard-error ramp at the cap
    page at the configured 9 (its rate is its family calibration's to hold); a sum of families needs 15."""
    pipeline = Pipeline()
    assert pipeline.budget is not None
    pipeline.budget.ensure(3)
    pipeline.budget.thresholds[:] = 15.0
    pipeline.fusion.alone = np.array([10.0, 0.0, 0.0])  # GPU 0: one family, sustained, at the cap
    fused = np.array([10.0, 12.0, 12.0])
    fire = pipeline._fire_thresholds(pipeline.budget, 0.0, fused, np.array([True, True, False]))
    np.testing.assert_allclose(fire, [FIRE, 15.0, 15.0])


def test_an_xid_on_entities_not_seen_yet_grows_their_rows() -> None:
    """The budget and the family calibration share `FleetNull.failed`: an Xid may name entities no tick
    has shown the budget yet, and is kept for them rather than indexing past its rows."""
    budget = AlertBudget(BudgetConfig(), FIRE)
    budget.failed(np.array([3, 4], dtype=np.int64), 100.0)
    assert budget.failed_at.tolist() == [-np.inf, -np.inf, -np.inf, 100.0, 100.0]
    assert budget.level_of.tolist() == [1, 1, 1, 1, 1] and len(budget.start) == len(budget.recent) == 5
