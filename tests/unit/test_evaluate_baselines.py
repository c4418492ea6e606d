"""Baselines alert the way their rules say: `for:` durations, counter resets, the right entity."""

from __future__ import annotations

import numpy as np

from prexid.service.offline.baselines.episodes import Layout
from prexid.service.offline.baselines.static_rules import StaticRules
from prexid.service.offline.baselines.zscore import ZScore

SERIES: list[dict[str, object]] = [
    {"name": "DCGM_FI_DEV_GPU_TEMP", "labels": {"gpu": "0", "Hostname": "node-00"}},
    {"name": "DCGM_FI_DEV_GPU_TEMP", "labels": {"gpu": "1", "Hostname": "node-00"}},
    {"name": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "labels": {"gpu": "0", "Hostname": "node-00"}},
    {"name": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "labels": {"gpu": "1", "Hostname": "node-00"}},
    {"name": "node_load1", "labels": {"instance": "node-00:9100"}},
]


def run(rows: list[list[float]]) -> list[dict[str, object]]:
    rules = StaticRules(Layout.from_series(SERIES))
    for k, row in enumerate(rows):
        rules.observe(15.0 * k, np.array(row))
    return [a for a in rules.alerts() if a["status"] == "firing"]


def test_temperature_rule_needs_one_minute_above_threshold_and_fires_once_on_that_gpu() -> None:
    hot = [[70.0, 90.0, 0.0, 0.0, 1.0]]
    assert run(hot * 3) == []
    alerts = run(hot * 10)
    assert len(alerts) == 1
    assert (alerts[0]["node"], alerts[0]["gpu"], alerts[0]["emitted_at"]) == ("node-00", 1, 45.0)


def test_counter_reset_is_not_a_burst_of_errors() -> None:
    rows = [[70.0, 70.0, 1000.0, 0.0, 1.0]] * 5 + [[70.0, 70.0, 3.0, 0.0, 1.0]] * 5
    assert run(rows) == []


def test_replay_burst_within_five_minutes_fires_on_the_gpu_that_has_it() -> None:
    rows = [[70.0, 70.0, 10.0 * k * k, 0.0, 1.0] for k in range(10)]
    alerts = run(rows)
    assert [(a["node"], a["gpu"]) for a in alerts] == [("node-00", 0)]


def test_node_series_belong_to_the_node_entity() -> None:
    layout = Layout.from_series(SERIES)
    assert layout.describe(int(layout.entity[4])) == ("node-00", None)
    assert layout.describe(int(layout.entity[1])) == ("node-00", 1)


def test_zscore_alerts_on_a_sustained_level_shift_after_warm_up_only() -> None:
    rng = np.random.default_rng(0)
    z = ZScore(Layout.from_series(SERIES))
    for k in range(200):
        temp1 = 70.0 + rng.normal(0, 0.5) + (15.0 if k >= 150 else 0.0)
        z.observe(15.0 * k, np.array([70.0 + rng.normal(0, 0.5), temp1, 0.0, 0.0, 1.0]))
    firing = [a for a in z.alerts() if a["status"] == "firing"]
    assert firing and all(float(a["emitted_at"]) >= 150 * 15.0 for a in firing)  # type: ignore[arg-type]
    assert {(a["node"], a["gpu"]) for a in firing} == {("node-00", 1)}
