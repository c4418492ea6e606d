"""A GPU creeping warmer than its node's other GPUs (failing cooling) is the cooling family's evidence, and
pages alone; the load moving the whole node, a neighbour cooling, a reboot or the creep's end are not."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from prexid.detectors.bank import Evidence
from prexid.detectors.base import parse_blobs
from prexid.detectors.cooling import CoolingDrift
from prexid.detectors.fusion import Fusion
from prexid.detectors.signals import N_FAMILIES, Family
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline

GPUS = 8
START = 1_796_205_600.0
IDS = np.arange(GPUS, dtype=np.int64)


def node_temps(t: int, rng: np.random.Generator, offsets: np.ndarray) -> np.ndarray:
    """One node's GPU temperatures at scrape `t`: the job swings the node between idle and busy every
    100 minutes (40 °C apart), each GPU at its own offset, half a degree of noise."""
    return 40.0 + 40.0 * (t // 400 % 2) + offsets + rng.normal(0.0, 0.5, GPUS)


def detect(
    temps: list[np.ndarray], det: CoolingDrift | None = None, gaps: set[int] = frozenset()
) -> np.ndarray:
    """p per scrape and GPU; scrapes in `gaps` are missing for every GPU but 0 and 1."""
    if det is None:
        det = CoolingDrift()
        det.set_groups(IDS, np.zeros(GPUS, dtype=np.int64))
        det.watch(IDS)
    out = np.ones((len(temps), GPUS))
    for t, x in enumerate(temps):
        at = IDS[:2] if t in gaps else IDS
        out[t, at] = det.update(at, np.full(len(at), START + 15.0 * t), x[at])
    return out


def test_a_creep_against_the_peers_is_found_and_the_load_swinging_the_node_is_not() -> None:
    rng = np.random.default_rng(1)
    offsets = rng.normal(0.0, 3.0, GPUS)
    creep = np.zeros(GPUS)
    temps = []
    for t in range(2000):
        creep[3] = max(0.0, (t - 1500) / 60.0)  # +1 °C every 15 minutes from scrape 1500
        temps.append(node_temps(t, rng, offsets) + creep)
    p = detect(temps)
    assert p[:1500].min() > 1e-4  # five load swings of 40 °C: nothing
    assert np.delete(p, 3, axis=1).min() > 1e-4  # nor on the neighbours while GPU 3 creeps
    called = np.flatnonzero(p[:, 3] < 1e-9)
    assert len(called) and 1500 < called[0] < 1800  # within 75 minutes, 5 °C up


def wandering_temps(seed: int, scrapes: int, warm: float = 0.0, creep: float = 0.0) -> list[np.ndarray]:
    """A node whose GPUs' heat wanders as a nine-minute thermal lag lets it (wide-s17, wide-s71: five-minute
    means remember half of each other), the job swinging the node as `node_temps`. GPU 3 runs `warm` °C
    warmer for 40 minutes from scrape 480 (two hours in) as such a wander does at times, and creeps `creep`
    °C warmer, steadily, over the 4.4 hours from scrape 1500 (its cooling failing; back after)."""
    rng = np.random.default_rng(seed)
    offsets = rng.normal(0.0, 3.0, GPUS)
    keep, heat = np.exp(-15.0 / 540.0), np.zeros(GPUS)
    temps = []
    for t in range(scrapes):
        heat = keep * heat + rng.normal(0.0, 0.5, GPUS)
        x = 40.0 + 40.0 * (t // 400 % 2) + offsets + heat
        x[3] += warm * np.sin(np.pi * (t - 480) / 160) if 480 <= t < 640 else 0.0
        x[3] += creep * (t - 1500) / 1060 if 1500 <= t < 2560 else 0.0
        temps.append(x)
    return temps


def test_a_young_gpu_warm_for_a_while_as_its_heat_wanders_does_not_page() -> None:
    """Two hours in, a GPU's spread is learned from two dozen means that follow each other, against an
    offset that follows them: too tight, and a healthy wander of 6 °C paged (wide-s17, s71, s1015)."""
    assert detect(wandering_temps(3, 960, warm=6.0))[:, 3].min() > 2e-9


def test_a_slow_creep_does_not_widen_the_spread_it_is_judged_against() -> None:
    """A settled GPU creeping 8 °C over four hours: learned into the spread, the creep widened it as fast
    as its evidence grew and was never called (wide-s74 was called 19 minutes before its end). A 5 °C
    creep through this wander is no longer called once the node's memory scales the z-scores."""
    p = detect(wandering_temps(3, 2880, creep=8.0))
    assert p[:1500].min() > 1e-6
    called = np.flatnonzero(p[:, 3] < 1e-9)
    assert len(called) and 1500 < called[0] < 2560


def lagged_temps(
    seed: int, lag_s: float, noise: float, creep: float = 0.0, over: int = 100
) -> list[np.ndarray]:
    """Twelve hours of one node whose GPUs' heat relaxes with a thermal lag of `lag_s` (each GPU's own
    noise, `noise` °C a scrape, integrated), the job swinging the node as `node_temps`; GPU 3's cooling
    fails from scrape 1500 when `creep` is set: `creep` °C up over `over` scrapes, fastest at first, until
    it is repaired."""
    rng = np.random.default_rng(seed)
    offsets = rng.normal(0.0, 3.0, GPUS)
    keep, heat = np.exp(-15.0 / lag_s), np.zeros(GPUS)
    temps = []
    for t in range(2880):
        heat = keep * heat + rng.normal(0.0, noise, GPUS)
        x = 40.0 + 40.0 * (t // 400 % 2) + offsets + heat
        x[3] += creep * np.sqrt(min(1.0, (t - 1500) / over)) if 1500 <= t < 1500 + over else 0.0
        temps.append(x)
    return temps


def test_a_healthy_gpu_whose_heat_wanders_slowly_does_not_page() -> None:
    """Five-minute means of heat relaxing over nine minutes remember over half of each other: read as
    independent, a healthy GPU warm by chance for half an hour built a page (p 1e-12 here; wide-s56, s63,
    s75, s1054). Scaled by the node's memory, it does not."""
    assert detect(lagged_temps(14, 540.0, 0.65)).min() > 2e-9


def test_a_short_creep_on_a_node_whose_heat_forgets_fast_is_found_within_it() -> None:
    """A node with a 45-second thermal lag, its means all but independent: GPU 3 3 °C up within 25 minutes
    is found before its end (wide-s1006, s1019, s1063 were paged after theirs, or not at all)."""
    p = detect(lagged_temps(1, 45.0, 0.5, creep=3.0))
    assert p[:1500].min() > 1e-4
    called = np.flatnonzero(p[:, 3] < 1e-9)
    assert len(called) and 1500 < called[0] < 1600


def test_a_neighbour_running_cooler_does_not_make_a_gpu_look_warmer() -> None:
    """A GPU drawing less power for hours (data-dependent work) cools. Against a plain median of offsets
    spread over degrees, its neighbour in the ranking read 3 °C warmer for hours and paged (wide-s5);
    each peer less its own usual offset, the median does not move."""
    rng = np.random.default_rng(2)
    offsets = np.arange(GPUS) * 3.0  # 0, 3, ..., 21 °C
    temps = []
    for t in range(1600):
        x = node_temps(t, rng, offsets)
        if t >= 600:
            x[4] -= 10.0  # GPU 4 drops to the bottom of the ranking, past GPU 3
        temps.append(x)
    p = detect(temps)
    assert p.min() > 1e-4


def test_the_evidence_fades_within_a_quarter_hour_once_the_gpu_is_back() -> None:
    rng = np.random.default_rng(3)
    offsets = rng.normal(0.0, 2.0, GPUS)
    temps = []
    for t in range(1800):
        x = node_temps(t, rng, offsets)
        if 800 <= t < 1400:
            x[5] += 8.0 * (t - 800) / 600  # creeps 8 °C over 2.5 hours, then the fan is fixed
        temps.append(x)
    p = detect(temps)
    assert p[1300:1400, 5].min() < 1e-11
    assert p[1400 + 80 :, 5].min() > 1e-6  # 20 minutes on: no longer a page's worth


def test_a_gpu_back_from_silence_starts_afresh() -> None:
    """A reboot or a drain breaks the creep: the last batch's evidence is not carried over the gap."""
    rng = np.random.default_rng(4)
    offsets = rng.normal(0.0, 2.0, GPUS)
    temps = []
    for t in range(1400):
        x = node_temps(t, rng, offsets)
        if 800 <= t < 1100:
            x[6] += 6.0 * (t - 800) / 300
        temps.append(x)
    p = detect(temps, gaps=set(range(1100, 1200)))  # GPUs 2-7 silent for 25 minutes, back normal
    assert p[1099, 6] < 1e-6
    assert p[1200:, 6].min() > 1e-3


def test_snapshot_restores_slots_and_state_and_forgotten_rows_are_reused() -> None:
    rng = np.random.default_rng(5)
    offsets = rng.normal(0.0, 2.0, GPUS)
    temps = [node_temps(t, rng, offsets) + np.eye(GPUS)[2] * max(0, t - 500) / 40 for t in range(900)]
    ids = IDS + 100  # sparse ids: only watched series hold rows
    one = CoolingDrift()
    one.set_groups(ids, np.zeros(GPUS, dtype=np.int64))
    one.watch(ids)
    two = CoolingDrift()
    for t, x in enumerate(temps):
        ts = np.full(GPUS, START + 15.0 * t)
        p = one.update(ids, ts, x)
        if t == 600:
            two.restore(parse_blobs(b"".join(one.snapshot())))
        if t > 600:
            assert np.array_equal(p, two.update(ids, ts, x))
    assert one.rows == GPUS and one.watches(np.array([3, 102])).tolist() == [False, True]
    one.forget(ids[:2])
    one.set_groups(np.array([7, 9]), np.zeros(2, dtype=np.int64))
    one.watch(np.array([7, 9]))
    assert one.rows == GPUS  # the forgotten rows, reused
    assert np.isnan(one.baseline(np.array([7]))).all()  # reset: a new series' offset is unknown


def test_sustained_cooling_evidence_pages_alone() -> None:
    """The cooling family may page alone once sustained, as hard errors and fail-slow may: a failing
    fan has no second family to join it until the GPU throttles."""
    fusion = Fusion()
    fusion.ensure(2)
    fusion.parent[:] = [-1, 0]  # entity 1 is a GPU of node 0
    fused = np.zeros(2)
    for tick in range(8):
        ev = Evidence(np.array([0]), np.array([15.0 * tick]), np.array([80.0]), np.array([1e-11]))
        fusion.ingest(ev, np.array([1]), np.array([Family.COOLING], dtype=np.uint8))
        fused = fusion.evaluate(15.0 * tick)
    assert N_FAMILIES > Family.COOLING
    assert fused[1] >= 9.0


def scrape(t: int, rng: np.random.Generator, offsets: np.ndarray, creep_from: int) -> list[RawSample]:
    x = node_temps(t, rng, offsets)
    x[3] += max(0.0, (t - creep_from) / 40.0)
    out = []
    for g in range(GPUS):
        labels = {"Hostname": "node-00", "gpu": str(g), "pci_bus_id": f"00000000:{0x18 + 16 * g:02x}:00.0"}
        ts = START + 15.0 * t
        out.append(RawSample("DCGM_FI_DEV_GPU_TEMP", labels, ts, round(float(x[g]))))
        out.append(RawSample("DCGM_FI_DEV_POWER_USAGE", labels, ts, 145.0 + 800.0 * (t // 400 % 2)))
    return out


def test_the_pipeline_pages_a_gpu_whose_cooling_fails_and_only_it() -> None:
    rng = np.random.default_rng(6)
    offsets = rng.normal(0.0, 3.0, GPUS)
    pipeline = Pipeline()
    alerts = []
    for t in range(1100):
        alerts += pipeline.ingest_samples(scrape(t, rng, offsets, creep_from=800))
    alerts += pipeline.advance(drain=True)
    firing = [a for a in alerts if a.status == "firing"]
    assert firing, "the creeping GPU paged"
    assert {(a.node, a.gpu) for a in firing} == {("node-00", 3)}
    first = min(datetime.fromisoformat(a.starts_at.replace("Z", "+00:00")).timestamp() for a in firing)
    assert START + 15.0 * 800 < first < START + 15.0 * 1100
    assert "cooling" in {s.family for s in firing[0].signals}
