"""The bank as the pipeline uses it: routing, silence sweeps, peer groups, snapshots, memory budget."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

from prexid.detectors.bank import DetectorBank
from prexid.detectors.base import parse_blobs
from prexid.detectors.catalog import REGISTRY
from prexid.detectors.multivariate import RiverNodeAnomaly
from prexid.detectors.signals import Family, Kind
from prexid.service.app.settings import Settings
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline, PipelineConfig

STEP = 15.0
N = 32


def gauge_bank(multivariate: bool = False) -> DetectorBank:
    bank = DetectorBank(multivariate=multivariate)
    ids = np.arange(N, dtype=np.int64)
    bank.set_kinds(ids, np.full(N, Kind.GAUGE, dtype=np.uint8))
    bank.set_groups(ids, ids // 8, ids // 8)
    return bank


def temps(steps: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.round(62.0 + rng.normal(0, 1, N) + rng.normal(0, 0.4, (steps, N)), 2)


def run(bank: DetectorBank, x: np.ndarray, t0: int = 0) -> np.ndarray:
    ids = np.arange(N, dtype=np.int64)
    return np.array([bank.update(ids, np.full(N, (t0 + t) * STEP), row).p for t, row in enumerate(x)])


def test_a_restored_bank_scores_and_sweeps_exactly_like_an_uninterrupted_one() -> None:
    x = temps(300)
    a, b = gauge_bank(), gauge_bank()
    run(a, x[:200])
    run(b, x[:200])
    restored = DetectorBank()
    restored.restore(parse_blobs(b"".join(b.snapshot())))
    np.testing.assert_array_equal(run(a, x[200:], 200), run(restored, x[200:], 200))
    a_ids, a_p = a.sweep(320 * STEP)
    r_ids, r_p = restored.sweep(320 * STEP)
    np.testing.assert_array_equal(a_ids, r_ids)
    np.testing.assert_array_equal(a_p, r_p)


def test_a_batch_in_any_order_is_scored_as_in_id_order_and_answered_in_its_own() -> None:
    x = temps(200)
    x[150:, 5] += 6.0
    x[120:, 9] = x[119, 9]
    in_order, shuffled = gauge_bank(), gauge_bank()
    ids = np.arange(N, dtype=np.int64)
    for t, row in enumerate(x):
        ts = np.full(N, t * STEP)
        order = np.random.default_rng(t).permutation(N)
        want, got = in_order.update(ids, ts, row), shuffled.update(ids[order], ts[order], row[order])
        np.testing.assert_array_equal(got.ids, ids[order])
        np.testing.assert_array_equal(got.values, row[order])
        np.testing.assert_array_equal(got.p, want.p[order])
        np.testing.assert_array_equal(got.up(), want.up()[order])
    np.testing.assert_array_equal(in_order.sweep(210 * STEP)[1], shuffled.sweep(210 * STEP)[1])


def test_a_snapshot_from_a_bank_with_other_detectors_is_refused() -> None:
    with pytest.raises(ValueError, match="does not match"):
        DetectorBank().restore(parse_blobs(b"".join(gauge_bank(multivariate=True).snapshot())))


def test_a_gauge_sample_gets_the_smallest_detector_p_times_the_detector_count() -> None:
    bank = gauge_bank()
    x = temps(200)
    x[150:, 5] = x[149, 5]  # stuck: only the flatline detector has a reason to speak
    p = run(bank, x)
    assert p[170, 5] < 1e-6
    assert p[:140].min() > 1e-6  # four detectors, Bonferroni: healthy data is no more surprising


def test_silent_series_are_swept_but_ignored_kinds_never_are() -> None:
    bank = gauge_bank()
    bank.set_kinds(np.array([N], dtype=np.int64), np.array([Kind.IGNORED], dtype=np.uint8))
    for t in range(100):
        ids = np.arange(N + 1, dtype=np.int64) if t < 60 else np.arange(8, N, dtype=np.int64)
        bank.update(ids, np.full(len(ids), t * STEP), np.full(len(ids), 60.0 + t % 3))
    ids, p = bank.sweep(100 * STEP)
    assert ids.tolist() == list(range(8)) and p.max() < 1e-3


def test_state_per_gauge_series_stays_within_its_budget() -> None:
    """1,032 bytes: 1 KiB until the trend detector's held jump (8 bytes) took a spike's false slope away."""
    bank = gauge_bank()
    run(bank, temps(50))
    assert bank.bytes_per_series(Kind.GAUGE) <= 1032
    assert sum(map(len, bank.snapshot())) < 1024 * 1024 + 1024 * N  # what a restart reads back


def sample(node: int, gpu: int, t: int, value: float) -> RawSample:
    labels = {"Hostname": f"node-{node}", "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}"}
    return RawSample("DCGM_FI_DEV_GPU_TEMP", labels, t * STEP, value)


def test_the_pipeline_puts_silence_in_the_liveness_family_of_the_silent_gpu() -> None:
    pipe = Pipeline()
    rng = np.random.default_rng(1)
    for t in range(120):
        gpus = [(n, g) for n in range(2) for g in range(8) if t < 80 or (n, g) != (1, 3)]
        pipe.ingest_samples([sample(n, g, t, 62.0 + rng.normal(0, 0.4)) for n, g in gpus])
    silent = pipe.registry.entity_id("node-1", 3)
    assert pipe.fusion.at_tick[silent, Family.LIVENESS] >= 2.0
    others = np.delete(pipe.fusion.at_tick[:, Family.LIVENESS], silent)
    assert (others == 0).all()


def test_the_pipeline_gives_each_gpu_series_its_node_peers() -> None:
    pipe = Pipeline()
    pipe.ingest_samples([sample(n, g, 0, 60.0) for n in range(2) for g in range(8)])
    groups = pipe.bank.peer.state["group"][:16].astype(int).tolist()
    assert groups == [0] * 8 + [1] * 8


def test_the_multivariate_voter_is_off_by_default_and_a_setting_turns_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Pipeline().bank.multivariate is None
    monkeypatch.setenv("PREXID_DETECTION__MULTIVARIATE", "true")
    config = Settings().detection.pipeline_config("c")
    assert isinstance(Pipeline(config).bank.multivariate, RiverNodeAnomaly)
    assert isinstance(Pipeline(PipelineConfig(multivariate=True)).bank.multivariate, RiverNodeAnomaly)


WITH_EXAMPLES = sorted(
    m
    for m in {type(r.make()).__module__ for r in REGISTRY.values()} | {"prexid.detectors.runs"}
    if ">>>" in (importlib.import_module(m).__doc__ or "")
)


@pytest.mark.parametrize("module", WITH_EXAMPLES)
def test_the_examples_in_each_detector_docstring_run(module: str) -> None:
    failed, attempted = doctest.testmod(importlib.import_module(module))
    assert attempted > 0 and failed == 0


def cluster_scrape(t: int, rng: np.random.Generator, idle: bool) -> list[RawSample]:
    """One scrape of 4 nodes x 8 GPUs: temperature, power and utilisation (idle: the job is down)."""
    out = []
    for n in range(4):
        for g in range(8):
            labels = {"Hostname": f"node-{n}", "gpu": str(g), "UUID": f"GPU-{n}-{g}"}
            level = 0.35 if idle else 1.0
            for name, mean, sd in (
                ("DCGM_FI_DEV_GPU_TEMP", 62.0 if not idle else 38.0, 0.4),
                ("DCGM_FI_DEV_POWER_USAGE", 650.0 * level, 8.0),
                ("DCGM_FI_DEV_GPU_UTIL", 97.0 if not idle else 0.0, 0.0 if idle else 1.0),
            ):
                out.append(RawSample(name, labels, t * STEP, round(mean + rng.normal(0, sd) + g * 0.3, 2)))
    return out


def test_a_job_restart_across_the_cluster_pages_no_gpu_or_node() -> None:
    pipe = Pipeline()
    rng = np.random.default_rng(4)
    alerts = []
    for t in range(480):  # two hours; the job is down for 5 minutes after the first hour
        alerts += pipe.ingest_samples(cluster_scrape(t, rng, idle=240 <= t < 260))
    assert alerts == []  # cooling down everywhere at once is the job stopping, not a cooling fault


def test_a_series_back_from_a_long_outage_where_it_was_keeps_its_past() -> None:
    """Five-minute points through a six-hour outage (the generic corpus' `gaps` files), back at the level
    they left: a spike of 10 noise sigmas 100 points later is found. Forgotten at the outage, the series
    was young again, its calibrator's tail heavy, and missed it."""
    bank, ids = DetectorBank(), np.zeros(1, dtype=np.int64)
    bank.set_kinds(ids, np.full(1, Kind.GAUGE, dtype=np.uint8))
    rng = np.random.default_rng(5)
    x = 100.0 + rng.normal(0.0, 1.0, 900)
    x[800] += 10.0
    seen = [t for t in range(900) if not 500 <= t < 572]
    p = {t: float(bank.update(ids, np.array([t * 300.0]), x[t : t + 1]).p[0]) for t in seen}
    assert p[800] < 1e-6
    assert min(p[t] for t in seen if t > 100 and t != 800) > 1e-6


@pytest.mark.parametrize("step_s", [900.0, 1800.0, 3600.0])
def test_a_series_sampled_every_quarter_hour_or_hour_is_judged(step_s: float) -> None:
    """Each point of a series sampled less often than `RETURN_GAP_S` came after a gap longer than it:
    back from a silence, still in its warm-up, every point forgot its past, so the series never left
    its warm-up and a spike of 10 noise sigmas 800 points in scored p = 1 (NAB's hourly and half-hourly
    files). Silence is measured in the series' own intervals too: its spike is found, its noise before
    it is not."""
    bank, ids = DetectorBank(), np.zeros(1, dtype=np.int64)
    bank.set_kinds(ids, np.full(1, Kind.GAUGE, dtype=np.uint8))
    x = 100.0 + np.random.default_rng(5).normal(0.0, 1.0, 900)
    x[800] += 10.0
    p = [float(bank.update(ids, np.array([t * step_s]), x[t : t + 1]).p[0]) for t in range(900)]
    assert p[800] < 1e-5
    assert min(p[100:800]) > 1e-3


def test_an_hourly_series_silent_for_hours_in_another_regime_is_judged_afresh() -> None:
    """The gap that makes a series afresh scales with its interval, it does not go away: an hourly series
    back after a day at a level its past does not know starts afresh (p = 1 while young again), as a GPU
    back from a repair drain does at 15-s scrapes."""
    bank, ids = DetectorBank(), np.zeros(1, dtype=np.int64)
    bank.set_kinds(ids, np.full(1, Kind.GAUGE, dtype=np.uint8))
    x = 100.0 + np.random.default_rng(6).normal(0.0, 1.0, 300)
    x[224:] += 50.0  # back from a day's silence 50 sigmas up
    seen = [t for t in range(300) if not 200 <= t < 224]
    p = {t: float(bank.update(ids, np.array([t * 3600.0]), x[t : t + 1]).p[0]) for t in seen}
    assert p[224] == 1.0 and min(p[t] for t in seen if t > 224) > 1e-6


def test_a_cyclic_series_back_at_another_hour_of_its_day_keeps_its_past() -> None:
    """Five-minute points of a daily cycle 30 noise sigmas deep, silent for eight hours: back at the
    other end of the cycle, far off its level baseline but where its profile expects it. It is the same
    series; forgotten, it was young again and judged the rest of its cycle as news (the generic corpus'
    seed 3 `gaps-2` detected three times after such a return)."""
    bank, ids = DetectorBank(), np.zeros(1, dtype=np.int64)
    bank.set_kinds(ids, np.full(1, Kind.GAUGE, dtype=np.uint8))
    rng, day = np.random.default_rng(11), 288
    t = np.arange(5 * day)
    x = 500.0 + 30.0 * np.sin(2 * np.pi * t / day) + rng.normal(0.0, 1.0, len(t))
    gone = 3 * day + 216  # at the trough of the cycle, back eight hours on above its mean
    seen = [i for i in t if not gone <= i < gone + 96]
    p = {i: float(bank.update(ids, np.array([i * 300.0]), x[i : i + 1]).p[0]) for i in seen}
    assert min(p[i] for i in seen if i >= gone) > 1e-6


@pytest.mark.parametrize(("silent_ticks", "afresh"), [(144, True), (12, False)])
def test_a_series_back_from_a_long_silence_is_judged_afresh_a_short_gap_keeps_its_past(
    silent_ticks: int, afresh: bool
) -> None:
    """A node's GPUs busy at 600 W for two hours, then idle at 150 W; GPU 3 is silent across the change
    (fallen off the bus for 36 minutes, wide-s1280; or a 3-minute exporter restart). Back from the long
    silence, its busy past is void: the GPU that comes back runs another regime. After a short gap it is
    still the same series, and its drop is still news."""
    bank, ids = DetectorBank(), np.arange(8, dtype=np.int64)
    bank.set_kinds(ids, np.full(8, Kind.GAUGE, dtype=np.uint8))
    bank.set_groups(ids, np.zeros(8, dtype=np.int64), np.zeros(8, dtype=np.int64))
    rng, back = np.random.default_rng(2), 480 + silent_ticks
    p3 = []
    for t in range(back + 240):
        x = (600.0 if t < 480 else 150.0) + rng.normal(0.0, 5.0, 8)
        at = ids if t < 480 or t >= back else np.delete(ids, 3)
        ev = bank.update(at, np.full(len(at), t * STEP), x[at])
        if t >= back:
            p3.append(float(ev.p[3]))
    first_hour = min(p3[30:])  # past the warm-up of a series starting afresh
    if afresh:
        assert first_hour > 1e-4
    else:
        assert min(p3) < 1e-8


def _throttle_evidence(hot: list[tuple[int, int]]) -> float:
    """Four hours of 4 nodes x 8 GPUs' thermal-violation counters (microseconds throttled), the `hot`
    GPUs throttling now and then; then node-1 GPU 2, never seen to throttle, throttles for three
    scrapes. Its thermal family's strongest evidence in the following minutes."""
    pipe, rng, total = Pipeline(), np.random.default_rng(3), np.zeros((4, 8))
    peak = 0.0
    for t in range(960):
        for n, g in hot:
            total[n, g] += rng.uniform(2e6, 1.5e7) if rng.random() < 1 / 80 else 0.0
        if t in (900, 901, 902):
            total[1, 2] += 6e6
        pipe.ingest_samples(
            [
                RawSample(
                    "DCGM_FI_DEV_THERMAL_VIOLATION",
                    {"Hostname": f"node-{n}", "gpu": str(g), "UUID": f"GPU-{n}-{g}"},
                    t * STEP,
                    total[n, g],
                )
                for n in range(4)
                for g in range(8)
            ]
        )
        if t >= 900:
            peak = max(peak, float(pipe.fusion.at_tick[pipe.registry.entity_id("node-1", 2), Family.THERMAL]))
    return peak


def test_a_gpus_first_throttling_is_judged_against_its_fleets_throttling() -> None:
    """A throttle-time counter sits still on a cool GPU and moves in episodes, as error counters do.
    Judged by its rate against its own flat past, a GPU's first throttling in a fleet where a few GPUs
    throttle now and then was p 1e-12, and with its clock drop (the throttling's own effect) paged as
    thermal plus utilisation (wide-s1570, s1575). Against its fleet it is a vote; in a fleet that
    never throttles it is still strong evidence."""
    assert _throttle_evidence(hot=[(0, 1), (1, 5), (2, 2), (3, 7)]) < 6.0
    assert _throttle_evidence(hot=[]) >= 10.0
