"""Simulator variants (issue 16): knobs in range, today's physics unchanged byte for byte, random per
seed, resets and restarts in the output, the weak row-remap fault, and the matrix's worst case."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from prexid.service.app import cli
from prexid.service.offline.matrix.report import render
from prexid.service.offline.matrix.score import Score
from prexid.service.offline.matrix.sets import REPORT_VARIANTS, TUNING_VARIANTS, cells
from prexid.service.offline.matrix.spread import spread
from prexid.service.offline.sim.boot import BOOT_TIME
from prexid.service.offline.sim.command import cmd_simulate
from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.engine import ClusterSim
from prexid.service.offline.sim.physics import (
    GROUPS,
    Counters,
    Exporters,
    Knobs,
    Physics,
    Precursors,
    Thermal,
)
from prexid.service.offline.sim.schedule import Phase
from prexid.service.offline.sim.variants import NAMED, NAMES, bounds, choices, random_physics, resolve

SMALL = SimConfig(nodes=4, gpus=2, days=0.2, failures_per_day=40.0, warmup_s=3600.0, seed=3)
# SMALL simulated by main at 1f1c7e2, before variants existed: values, kernel lines, labels
MAIN_VALUES = "e2a11950ee82f5ea900035ff41d51b579476f7a51036731df905947e3ed125cf"
MAIN_LOGS = "023b2a0420fe75311e5379dbc065e5a6c30eb80bc69f80f62d6e4d474c8432dc"
MAIN_LABELS = "9d9caee22800f6c73522b303d37d3997b19ebfb484518c3109e430f3160bff43"


def digests(sim: ClusterSim) -> tuple[str, str, str]:
    """Hashes of every value but the boot times' (added after these digests were taken, on a generator
    of their own), of the kernel lines and of the labels."""
    values, logs = hashlib.sha256(), hashlib.sha256()
    measured = np.array([name != BOOT_TIME for name, _ in sim.series])
    for frame in sim.frames():
        assert len(frame.values) == len(sim.series)
        values.update(frame.values[measured].tobytes())
        for _, line in frame.logs:
            logs.update(line + b"\n")
    return values.hexdigest(), logs.hexdigest(), hashlib.sha256(orjson.dumps(sim.labels())).hexdigest()


def matrix(sim: ClusterSim) -> np.ndarray:
    return np.vstack([f.values for f in sim.frames()])


def column(sim: ClusterSim, name: str, **labels: str) -> int:
    hits = [
        i
        for i, (n, lab) in enumerate(sim.series)
        if n == name and all(lab.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, (name, labels, len(hits))
    return hits[0]


def knob_groups(ph: Physics) -> list[Knobs]:
    return [getattr(ph, g) for g in GROUPS]


@pytest.mark.parametrize("ph", [*NAMED.values(), *(random_physics(s) for s in range(12))], ids=str)
def test_every_knob_of_every_variant_lies_in_its_declared_range(ph: Physics) -> None:
    for group in knob_groups(ph):
        model = type(group)
        for name in model.model_fields:
            value = getattr(group, name)
            if (rng := bounds(model, name)) is not None:
                assert rng[0] <= value <= rng[1], (model.__name__, name, value)
            else:
                assert value in choices(model, name), (model.__name__, name, value)
    assert ph.counters.leaky_lo <= ph.counters.leaky_hi


def test_a_knob_out_of_its_range_or_misspelt_is_refused() -> None:
    with pytest.raises(ValidationError):
        Thermal(lag_s=5.0)
    with pytest.raises(ValidationError):
        Counters(leaky_shar=0.1)  # type: ignore[call-arg]


def test_each_named_variant_has_its_own_physics() -> None:
    knobs = [orjson.dumps(ph.knobs(), option=orjson.OPT_SORT_KEYS) for ph in NAMED.values()]
    assert len(set(knobs)) == len(knobs)
    assert NAMED["default"].is_default and not any(p.is_default for n, p in NAMED.items() if n != "default")
    assert set(NAMES) == {*NAMED, "random", "wide"}


def test_default_variant_is_byte_identical_to_the_simulator_before_variants() -> None:
    assert digests(ClusterSim(SMALL)) == (MAIN_VALUES, MAIN_LOGS, MAIN_LABELS)
    assert digests(ClusterSim(SMALL, resolve("default", 3))) == (MAIN_VALUES, MAIN_LOGS, MAIN_LABELS)


def simulate(out: Path, *extra: str) -> None:
    size = ["--nodes", "3", "--gpus", "2", "--days", "0.05", "--seed", "4"]
    cmd_simulate(cli.parser().parse_args(["simulate", "--out", str(out), *size, *extra]))


def test_cli_default_variant_writes_the_same_files_as_no_variant(tmp_path: Path) -> None:
    simulate(tmp_path / "a")
    simulate(tmp_path / "b", "--variant", "default")
    simulate(tmp_path / "c", "--variant", "noisy-exporters")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    meta = orjson.loads((tmp_path / "c" / "meta.json").read_bytes())
    assert meta["variant"] == "noisy-exporters" and meta["physics"]["scrape"]["stale_p"] == 0.03
    assert "variant" not in orjson.loads((tmp_path / "a" / "meta.json").read_bytes())


def test_random_variant_is_deterministic_per_seed_and_differs_across_seeds() -> None:
    assert random_physics(5) == random_physics(5)
    assert random_physics(5).knobs() != random_physics(6).knobs()
    cfg = SimConfig(nodes=3, gpus=2, days=0.05, failures_per_day=0.0, warmup_s=600.0, seed=5)
    assert digests(ClusterSim(cfg, resolve("random", 5))) == digests(ClusterSim(cfg, resolve("random", 5)))
    assert (
        digests(ClusterSim(cfg, resolve("random", 5)))[0] != digests(ClusterSim(cfg, resolve("random", 6)))[0]
    )


def test_wide_draws_the_same_ranges_on_a_stream_no_random_seed_shares() -> None:
    """The tuning set's `wide` must never simulate a report-set `random` cell's physics."""
    tuning_seeds = [*range(1, 40), *range(1000, 1040)]  # both of wide's declared ranges
    wide = [random_physics(s, "wide").knobs() for s in tuning_seeds]
    report = [random_physics(s).knobs() for s in range(100, 140)]
    assert not any(w == r for w in wide for r in report)
    assert resolve("wide", 3) == random_physics(3, "wide") and resolve("wide", 3).name == "wide"
    assert {random_physics(s, "wide").workload.mix for s in range(40)} == {
        "training",
        "inference",
        "idle",
        "mixed",
    }


def test_random_draws_span_the_ranges_not_just_the_defaults() -> None:
    lags = [random_physics(s).thermal.lag_s for s in range(40)]
    mixes = {random_physics(s).workload.mix for s in range(40)}
    assert min(lags) < 100 and max(lags) > 300
    assert mixes == {"training", "inference", "idle", "mixed"}


RESETS = Physics(
    name="resets",
    exporters=Exporters(
        dcgm_restarts_per_day=30.0, reset_share=1.0, node_restarts_per_day=20.0, nic_resets_per_day=10.0
    ),
)
QUIET = SimConfig(
    nodes=3, gpus=2, days=0.25, failures_per_day=0.0, drains_per_day=0.0, warmup_s=600.0, seed=8
)


def test_exporter_restarts_reset_gpu_counters_and_node_series_vanish_and_return() -> None:
    sim = ClusterSim(QUIET, RESETS)
    values = matrix(sim)
    events = sim.schedule.events
    resets = [e for e in events if e.type == "counter_reset"]
    gaps = [e for e in events if e.type == "node_exporter_restart"]
    nics = [e for e in events if e.type == "nic_reset"]
    assert resets and gaps and nics
    for e in resets:  # the energy counter drops back to about one scrape's worth, then climbs again
        k = QUIET.tick_of(e.ts)
        col = column(sim, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Hostname=e.node, gpu="0")
        before = values[:k, col][~np.isnan(values[:k, col])]
        assert values[k, col] < min(1e8, before[-1] / 10) and values[k + 2, col] > values[k, col]
    for e in gaps:
        col = column(sim, "node_load1", instance=f"{e.node}:9100")
        k0, k1 = QUIET.tick_of(e.ts), QUIET.tick_of(e.end_ts)
        assert np.isnan(values[k0:k1, col]).all() and not np.isnan(values[k1 + 1, col])
    for e in nics:
        k = QUIET.tick_of(e.ts)
        col = column(sim, "node_network_receive_bytes_total", instance=f"{e.node}:9100")
        cpu = column(sim, "node_cpu_seconds_total", instance=f"{e.node}:9100")
        assert values[k, col] < values[k - 1, col] / 100  # NIC counters restart from zero
        assert values[k, cpu] > values[k - 1, cpu]  # the rest of the node does not


def test_noisy_exporters_leave_samples_stale_or_missing() -> None:
    sim = ClusterSim(QUIET, NAMED["noisy-exporters"])
    values = matrix(sim)
    col = column(sim, "DCGM_FI_DEV_POWER_USAGE", Hostname="node-00", gpu="0")
    power = values[:, col]
    assert np.isnan(power).any()
    present = power[~np.isnan(power)]
    assert np.array_equal(present, np.round(present))  # whole watts on this exporter
    assert (np.diff(power) == 0).sum() > 0  # a stale sample repeats the last reading exactly


WEAK = Physics(
    name="weak-row-remap",
    precursors=Precursors(row_remap="weak"),
    counters=Counters(leaky_share=0.0, clean_rate=1e-6),
)
REMAP_CFG = SimConfig(nodes=4, gpus=2, days=0.25, failures_per_day=60.0, warmup_s=1800.0, seed=2)


def test_weak_row_remap_is_a_few_sbes_over_minutes_then_its_remap_fields() -> None:
    sim = ClusterSim(REMAP_CFG, WEAK)
    values = matrix(sim)
    remaps = [f for f in sim.failures if f.type.startswith(("xid63", "xid64")) and f.has_precursor]
    assert {f.type for f in remaps} == {"xid63_row_remap", "xid64_row_remap_failure"}
    for f in remaps:
        assert f.xid_ts is not None and 300 <= f.xid_ts - f.onset_ts <= 1800
        where = {"Hostname": f.node, "gpu": str(f.gpu)}
        k0, kx = REMAP_CFG.tick_of(f.onset_ts), REMAP_CFG.tick_of(f.xid_ts)

        def at(name: str, k: int, where: dict[str, str] = where) -> float:
            return float(values[k, column(sim, name, **where)])

        sbes = at("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", kx) - at("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", k0 - 1)
        assert 1 <= sbes <= 20
        rows = at("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", kx + 1)
        assert rows >= 1
        after = kx + 2
        if f.type.startswith("xid63"):
            assert at("DCGM_FI_DEV_ROW_REMAP_PENDING", after) == 1
            assert at("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", after) == 1
        else:
            assert at("DCGM_FI_DEV_ROW_REMAP_FAILURE", after) == 1
        assert at("DCGM_FI_DEV_ROW_REMAP_FAILURE", k0) == 0


def test_stock_exporters_ship_dcgm_default_counters_and_hundreds_of_node_series() -> None:
    sim = ClusterSim(QUIET, NAMED["stock-exporters"])
    names = {n for n, _ in sim.series}
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" not in names and "DCGM_FI_DEV_THERMAL_VIOLATION" not in names
    assert {
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    } <= names
    per_node = sum(1 for _, lab in sim.series if lab.get("instance") == "node-00:9100")
    assert per_node >= 300
    assert len({(n, orjson.dumps(lab, option=orjson.OPT_SORT_KEYS)) for n, lab in sim.series}) == len(
        sim.series
    )
    frame = next(iter(sim.frames()))
    assert len(frame.values) == len(sim.series)


def test_benign_events_run_to_hundreds_per_two_days_on_sixteen_nodes() -> None:
    cfg = SimConfig(nodes=16, gpus=8, days=2.0, seed=1)
    counts = {
        name: len(ClusterSim(cfg, NAMED[name]).schedule.events)
        for name in ("bursty-counters", "weak-precursors")
    }
    assert all(n >= 200 for n in counts.values()), counts
    kinds = {e.type for e in ClusterSim(cfg, NAMED["bursty-counters"]).schedule.events}
    assert {"cooling_excursion", "error_burst", "link_flap", "counter_reset"} <= kinds


def test_inference_load_is_bursty_where_training_is_flat() -> None:
    cfg = SimConfig(
        nodes=3, gpus=2, days=0.1, failures_per_day=0.0, drains_per_day=0.0, warmup_s=600.0, seed=4
    )
    spreads = {}
    for name in ("default", "inference-fleet"):
        sim = ClusterSim(cfg, NAMED[name])
        util = matrix(sim)[:, column(sim, "DCGM_FI_DEV_GPU_UTIL", Hostname="node-00", gpu="0")]
        running = sim.schedule.phase[:, 0] == Phase.RUN  # checkpoints dip both: compare runs only
        run = util[running & ~np.isnan(util)]
        spreads[name] = float(np.std(run[40:]))
    assert spreads["inference-fleet"] > 5 * spreads["default"], spreads


def score(cell: str, set_: str, detected: float | None, false: float, system: str = "prexid") -> Score:
    return Score(cell, set_, system, 4, detected, 4, 0.5, 1.0, 12.0, int(false * 4), false)


def test_matrix_spread_picks_the_worst_cell_per_metric_in_its_own_set() -> None:
    scores = [
        score("a-s1", "report", 1.0, 0.0),
        score("b-s1", "report", 0.75, 0.02),
        score("c-s1", "report", None, 0.5),  # no predictable failure: out of detection, in false alerts
        score("d-s1", "report", 0.9, 0.01),
        score("t-s1", "tuning", 0.1, 9.0),  # worse, but in the tuning set
    ]
    det = spread(scores, "report", "prexid", "detected")
    assert det is not None and (det.worst, det.worst_cell, det.best_cell, det.cells) == (
        0.75,
        "b-s1",
        "a-s1",
        3,
    )
    assert det.median == pytest.approx(0.9)
    fa = spread(scores, "report", "prexid", "false_per_node_day")
    assert fa is not None and (fa.worst, fa.worst_cell, fa.best, fa.best_cell) == (0.5, "c-s1", 0.0, "a-s1")
    text = render("t", "prexid matrix", scores)
    assert text.index("Report set") < text.index("Tuning set")
    first = next(line for line in text.splitlines() if line.startswith("| prexid | detected"))
    assert "**75%** | b-s1" in first and "**missed**" in first


def test_tuning_and_report_sets_are_disjoint_and_a_variant_in_both_is_refused() -> None:
    assert not set(TUNING_VARIANTS) & set(REPORT_VARIANTS)
    assert set(TUNING_VARIANTS) | set(REPORT_VARIANTS) == set(NAMES)
    with pytest.raises(SystemExit, match="both"):
        cells(("default",), (1,), ("default",), (100,))


def test_a_failed_cell_leads_the_report() -> None:
    text = render("t", "prexid matrix", [score("a-s1", "report", 1.0, 0.0)], ["b-s1: `prexid replay` failed"])
    assert text.index("failed to run") < text.index("Report set")


def test_every_cell_reports_its_realised_false_alert_rate_against_the_budget() -> None:
    scores = [score("a-s100", "report", 1.0, 0.01), score("t-s1", "tuning", 1.0, 0.25)]
    text = render("t", "prexid matrix", scores, budget=0.005)
    assert "budget: 0.005 per node-day" in text
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| report |")}
    rows |= {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| tuning |")}
    assert rows["a-s100"].endswith("| 0.010 | 2.0x |")
    assert rows["t-s1"].endswith("| 0.250 | 50.0x |")


def test_false_alerts_are_pooled_over_each_sets_node_days() -> None:
    """Two 4 node-day cells with one false alert between them: 0.125 a node-day pooled, where the worst
    cell alone reads 0.25 (one alert is the least a cell of 4 node-days can show)."""
    scores = [
        replace(score("a-s100", "report", 1.0, 0.25), node_days=4.0),
        replace(score("b-s100", "report", 1.0, 0.0), node_days=4.0),
        replace(score("t-s1", "tuning", 1.0, 0.0), node_days=4.0),
    ]
    text = render("t", "prexid matrix", scores)
    assert "| report | prexid | 2 | 8 | 1 | 0.125 | 0.250 |" in text
    assert "| tuning | prexid | 1 | 4 | 0 | 0.000 | 0.250 |" in text
