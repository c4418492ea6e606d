"""Fusion votes across families; the lifecycle needs persistence to fire and hysteresis to resolve."""

from __future__ import annotations

import numpy as np
import pytest

from prexid.detectors.bank import Evidence
from prexid.detectors.fusion import Fusion, FusionConfig, score01
from prexid.detectors.lifecycle import Lifecycle, LifecycleConfig
from prexid.detectors.rate_limit import RateLimiter
from prexid.detectors.signals import Family

FIRE = LifecycleConfig().fire


def evidence(
    entities: list[int], families: list[Family], p: list[float]
) -> tuple[Evidence, np.ndarray, np.ndarray]:
    n = len(p)
    ev = Evidence(np.arange(n, dtype=np.int64), np.zeros(n), np.ones(n), np.array(p))
    return ev, np.array(entities, dtype=np.int64), np.array(families, dtype=np.uint8)


def test_one_family_alone_never_reaches_the_firing_threshold() -> None:
    f = Fusion()
    f.ensure(10)
    f.ingest(*evidence([0, 0, 0], [Family.MEMORY_ECC] * 3, [1e-12, 1e-12, 1e-12]))
    assert f.evaluate(0.0)[0] < FIRE


def test_hard_errors_in_bursts_a_tick_or_two_apart_page_alone_and_one_burst_never_does() -> None:
    """A ramp does not tick every scrape: four strongly surprising bursts with quiet scrapes between
    them are sustained; a lone burst, however strong, fades without paging."""
    ramp, lone = Fusion(), Fusion()
    for f in (ramp, lone):
        f.ensure(2)
    fused_ramp, fused_lone = [], []
    for tick in range(12):
        if tick % 2 == 0:
            ramp.ingest(*evidence([0], [Family.MEMORY_ECC], [1e-12]))
        if tick == 0:
            lone.ingest(*evidence([0], [Family.MEMORY_ECC], [1e-12]))
        fused_ramp.append(ramp.evaluate(15.0 * tick)[0])
        fused_lone.append(lone.evaluate(15.0 * tick)[0])
    assert max(fused_ramp[:6]) < FIRE <= max(fused_ramp)
    assert max(fused_lone) < FIRE


def test_a_sibling_counters_weak_step_does_not_end_a_hard_error_ramp() -> None:
    """The streak follows the family's strongest evidence: a remapped row booked at p=4e-3 (weak) between
    SBE bursts at 1e-12 (both memory ECC) neither ends the ramp's streak nor lowers its score; the
    ramping series' own weak sample does end it."""
    sbe, remap = 0, 1
    fused = {}
    for case in ("alone", "sibling", "own"):
        f = Fusion()
        f.ensure(2)
        fused[case] = []
        for tick in range(12):
            if tick % 2 == 0:
                f.ingest(*evidence([0], [Family.MEMORY_ECC], [1e-12]))  # series `sbe`
            elif case != "alone":
                series = remap if case == "sibling" else sbe
                ev = Evidence(np.array([series]), np.zeros(1), np.ones(1), np.array([4e-3]))
                f.ingest(ev, np.array([0]), np.array([Family.MEMORY_ECC], dtype=np.uint8))
            fused[case].append(f.evaluate(15.0 * tick)[0])
    assert max(fused["alone"]) >= FIRE
    assert fused["sibling"] == fused["alone"]
    assert max(fused["own"]) < FIRE


def _bursts_every(
    gap_s: float, first_s: float, n: int, ticks: int, config: FusionConfig | None = None
) -> list[float]:
    """Fused score of GPU 0 per 15 s tick, with `n` SBE bursts at 1e-12 `gap_s` apart from `first_s`."""
    f = Fusion(config)
    f.ensure(1)
    at = {int((first_s + k * gap_s) / 15.0) for k in range(n)}
    fused = []
    for tick in range(ticks):
        if tick in at:
            f.ingest(*evidence([0], [Family.MEMORY_ECC], [1e-12]))
        fused.append(f.evaluate(15.0 * tick)[0])
    return fused


def test_hard_error_bursts_minutes_apart_are_one_ramp_once_the_fleet_has_been_watched() -> None:
    """A weakening HBM row books an SBE every few minutes: four strong bursts four minutes apart (the held
    evidence fading below the streak's floor between them) are a ramp, paged alone, but not in the first
    `burst_after_s` of event time, when leaky parts' bursts are not yet known for what they are; three
    bursts are not a ramp."""
    after = FusionConfig().burst_after_s
    late = _bursts_every(240.0, after + 60.0, 4, int((after + 1800.0) / 15.0))
    early = _bursts_every(240.0, 60.0, 4, 120)
    three = _bursts_every(240.0, after + 60.0, 3, int((after + 1800.0) / 15.0))
    assert max(late) >= FIRE
    assert max(early) < FIRE
    assert max(_bursts_every(240.0, 60.0, 4, 120, FusionConfig(burst_after_s=0.0))) >= FIRE  # the gate's
    assert max(three) < FIRE


def test_a_sustained_gpu_stalling_minutes_apart_is_paged_at_its_next_stall() -> None:
    """Once fail-slow is sustained, each stall holds the score above `fire` for a tick or two only: the
    lifecycle waiting three ticks above it would wait for stalls coming closer together (wide-s13's Xid
    119 GPU paged 3.7 minutes after its streak was sustained)."""
    f, life = Fusion(), Lifecycle()
    f.ensure(1)
    at = {int((60.0 + k * 105.0) / 15.0) for k in range(8)}
    fired = []
    for tick in range(120):
        if tick in at:
            f.ingest(*evidence([0], [Family.FAIL_SLOW], [1e-10]))
        fused = f.evaluate(15.0 * tick)
        fired += [tick for t in life.step(fused, 15.0 * tick, None, f.confirmed(FIRE)) if t.firing]
    assert fired and fired[0] <= max(at)


def _stalls_paged(minutes_p: list[tuple[float, float]], ticks: int) -> list[int]:
    """Ticks at which a GPU's fail-slow evidence (scrapes behind at the given minutes, each at the given
    pace p, nothing between) fires through fusion and the lifecycle."""
    f, life = Fusion(), Lifecycle()
    f.ensure(1)
    at = {round(m * 4.0): p for m, p in minutes_p}
    fired = []
    for tick in range(ticks):
        if tick in at:
            f.ingest(*evidence([0], [Family.FAIL_SLOW], [at[tick]]))
        fused = f.evaluate(15.0 * tick)
        fired += [tick for t in life.step(fused, 15.0 * tick, None, f.confirmed(FIRE)) if t.firing]
    return fired


def test_a_gpu_stalling_minutes_apart_is_sustained_fail_slow_across_the_gaps() -> None:
    """wide-s39's Xid 119 GPU (node-04 GPU 3): its GSP stalls came 0.25-3.3 minutes apart, its pace p
    falling to 1e-9 by the fifth; the streak ended whenever the held evidence faded between two stalls,
    never reached four, and the GPU was paged by its Xid only. Its streak outlasts the gaps while the held
    evidence has not faded out: paged at the fifth stall. The same stalls 11 minutes apart are not strung
    together."""
    stalls = [(6.06, 5.7e-5), (6.81, 1.6e-6), (10.06, 5.0e-7), (10.31, 1.4e-8), (11.31, 9.3e-10)]
    fired = _stalls_paged(stalls, 60)
    assert fired and fired[0] == round(11.31 * 4.0)
    apart = [(11.0 * k, p) for k, (_, p) in enumerate(stalls)]
    assert not _stalls_paged(apart, int(11.0 * 4 * 5) + 20)


def test_a_lone_lag_long_after_a_gpu_stopped_stalling_does_not_revive_its_streak() -> None:
    """wide-s34's straggler (node-03 GPU 0), paged, then drained: idle, its clock wobbled 10% behind its
    peers on two scrapes 4 and 13 minutes after its last lag, each at p 1e-12 (its pace window still
    full of the straggler's lag). Bridged by a fixed 10-minute gap the streak of hundreds survived both
    and paged again on the second; faded out, it does not."""
    lagging = [(k * 0.25, 1e-12) for k in range(40)]  # ten minutes behind: sustained, paged
    fired = _stalls_paged([*lagging, (13.75, 1e-12), (23.0, 1e-12)], 120)
    assert fired and fired[0] < 40
    assert all(t < 40 for t in fired)


def test_lifecycle_fires_confirmed_evidence_without_waiting_again() -> None:
    """A hard-error ramp whose streak is sustained already fires on its first tick above the threshold;
    other entities still wait `persist_ticks`."""
    lc = Lifecycle(LifecycleConfig(fire=8, resolve=4, persist_ticks=3, clear_ticks=2))
    confirmed = np.array([True, False])
    fired = [
        (t, tr.entity) for t in range(4) for tr in lc.step(np.array([9.0, 9.0]), float(t), None, confirmed)
    ]
    assert fired == [(0, 0), (2, 1)]


def test_two_families_with_strong_evidence_fuse_above_the_threshold() -> None:
    f = Fusion()
    f.ensure(10)
    f.ingest(*evidence([0, 0], [Family.MEMORY_ECC, Family.THERMAL], [1e-9, 1e-5]))
    fused = f.evaluate(0.0)
    assert fused[0] >= FIRE
    assert (fused[1:] == 0).all()


def test_weak_evidence_below_the_vote_minimum_does_not_count() -> None:
    f = Fusion()
    f.ensure(10)
    f.ingest(*evidence([0] * 5, list(Family)[:5], [0.05] * 5))
    assert f.evaluate(0.0)[0] == 0.0


def test_a_family_moving_on_most_entities_is_common_mode_and_cleared() -> None:
    f = Fusion()
    f.ensure(10)
    ents = list(range(10))
    dip = Evidence(
        np.arange(10, dtype=np.int64), np.zeros(10), np.ones(10), np.full(10, 1e-12), np.zeros(10, bool)
    )
    f.ingest(
        dip, np.array(ents, dtype=np.int64), np.full(10, Family.UTILIZATION, dtype=np.uint8)
    )  # a checkpoint
    f.ingest(*evidence([4], [Family.THERMAL], [1e-6]))  # hotter while the job dips: not the load's
    fused = f.evaluate(0.0)
    assert fused[4] == 6.0  # thermal alone; utilisation is explained by the cluster
    assert f.common[Family.UTILIZATION]
    assert (f.held[:, Family.UTILIZATION] == 0).all()


def test_held_evidence_decays_with_event_time_across_gaps() -> None:
    f = Fusion(FusionConfig(half_life_s=60.0))
    f.ensure(5)
    f.ingest(*evidence([0], [Family.THERMAL], [1e-6]))
    f.evaluate(0.0)
    f.evaluate(15.0 + 60.0)  # one step plus a one-minute gap
    assert f.at_tick[0, Family.THERMAL] == np.float64(6.0 * 2 ** (-75.0 / 60.0))


def test_lifecycle_fires_after_persistence_and_resolves_with_hysteresis() -> None:
    lc = Lifecycle(LifecycleConfig(fire=8, resolve=4, persist_ticks=3, clear_ticks=2, keep_firing_for_s=0))
    scores = [0, 9, 9, 9, 9, 6, 6, 3, 3, 3]
    events = []
    for t, s in enumerate(scores):
        events += [(t, tr.firing, tr.starts_at) for tr in lc.step(np.array([float(s), 0.0]), float(t))]
    # fires on the 3rd tick above, resolves on the 2nd tick below
    assert events == [(3, True, 1.0), (8, False, 1.0)]


def test_an_alert_on_bursts_minutes_apart_stays_one_alert_until_it_has_been_quiet_for_its_hold() -> None:
    """A weakening HBM row errs in bursts five minutes apart; between them its held evidence decays under
    `resolve`. Without a hold the alert resolved a minute after each burst and fired again on the next
    (one page a burst); with it the alert fires once and resolves ten minutes after the last burst."""

    def transitions(hold: float) -> list[tuple[float, bool]]:
        lc = Lifecycle(
            LifecycleConfig(fire=9, resolve=4, persist_ticks=3, clear_ticks=4, keep_firing_for_s=hold)
        )
        out = []
        for k in range(160):  # 40 minutes of 15-s ticks, a burst every 5 minutes for the first 25
            t = 15.0 * k
            burst_age = t % 300.0 if t < 1500.0 else t - 1200.0
            fused = 12.0 * 2 ** (-burst_age / 60.0)  # held evidence, halved each minute
            out += [(tr.at, tr.firing) for tr in lc.step(np.array([fused]), t, None, np.array([True]))]
        return out

    flapping = transitions(0.0)
    assert sum(firing for _, firing in flapping) == 5  # main: one firing a burst
    held = transitions(600.0)
    assert [firing for _, firing in held] == [True, False]
    assert held[0][0] == 0.0
    last_below = 1200.0 + 60.0 * np.log2(12.0 / 4.0)  # the last burst's evidence fell under resolve
    assert last_below + 600.0 <= held[1][0] <= last_below + 600.0 + 15.0


def test_a_held_alert_restored_without_the_start_of_its_quiet_run_still_resolves() -> None:
    """State from before alerts were held has a firing entity's quiet run but not when it began: the
    hold counts from the first tick after the restore, it is not held forever."""
    lc = Lifecycle(LifecycleConfig(fire=9, resolve=4, persist_ticks=1, clear_ticks=4, keep_firing_for_s=600))
    lc.restore_arrays(
        {
            "phase": np.array([2]),
            "run": np.array([3]),
            "since": np.array([0.0]),
            "quiet_from": np.array([np.nan]),
        }
    )
    resolved = [t for t in range(100, 2000, 15) for tr in lc.step(np.array([0.0]), float(t)) if not tr.firing]
    assert resolved == [700]


def test_lifecycle_one_noisy_tick_never_fires() -> None:
    lc = Lifecycle()
    fired = [
        tr for t, s in enumerate([0, 20, 0, 20, 0, 20, 0]) for tr in lc.step(np.array([float(s)]), float(t))
    ]
    assert fired == []


def test_score_is_one_half_at_the_firing_threshold() -> None:
    assert score01(np.array([0.0, 8.0, 1e9]), 8.0).tolist() == [0.0, 0.5, 1.0]


def test_a_flapping_entity_is_muted_after_its_cap_and_its_resolve_withheld_too() -> None:
    limiter = RateLimiter(max_firings=2, window_s=3600.0)
    decisions = [(limiter.allow_firing(7, t), limiter.allow_resolve(7)) for t in (0.0, 600.0, 1200.0)]
    assert decisions == [(True, True), (True, True), (False, False)]
    assert limiter.withheld == 1
    assert limiter.allow_firing(7, 3601.0)  # the first firing left the window
    assert limiter.allow_firing(8, 1200.0)  # other entities are unaffected


def node_cluster(nodes: int = 4, gpus: int = 8) -> Fusion:
    """Entities laid out as the registry does: each node entity followed by its GPUs."""
    f = Fusion()
    f.ensure(nodes * (gpus + 1))
    for n in range(nodes):
        base = n * (gpus + 1)
        f.parent[base + 1 : base + gpus + 1] = base
        f.present[base + 1 : base + gpus + 1, :] = True
    return f


def test_most_gpus_of_one_node_moving_together_is_that_nodes_fault_not_theirs() -> None:
    f = node_cluster()
    sick = [1, 2, 3, 4, 5]  # five of node 0's eight GPUs
    f.ingest(*evidence(sick * 2, [Family.PCIE] * 5 + [Family.THERMAL] * 5, [1e-8] * 5 + [1e-6] * 5))
    f.ingest(*evidence([11, 11], [Family.PCIE, Family.THERMAL], [1e-8, 1e-6]))  # one GPU of node 1
    fused = f.evaluate(0.0)
    assert fused[0] == 12.0  # node 0: pcie and thermal, credited from its GPUs
    assert (fused[sick] == 0).all()
    assert fused[11] == 12.0  # a lone GPU keeps its own evidence
    assert fused[9] == 0.0


def test_a_single_node_jobs_phase_is_cleared_from_its_gpus_and_not_credited_to_the_node() -> None:
    f = node_cluster()
    gpus = list(range(1, 9))
    f.ingest(*evidence(gpus * 2, [Family.UTILIZATION] * 8 + [Family.POWER] * 8, [1e-12] * 16))
    fused = f.evaluate(0.0)
    assert fused.max() == 0.0


def test_ecc_errors_stay_with_each_gpu_even_when_neighbours_have_them_too() -> None:
    f = node_cluster()
    gpus = [1, 2, 3, 4, 5]
    f.ingest(*evidence(gpus * 2, [Family.MEMORY_ECC] * 5 + [Family.THERMAL] * 5, [1e-9] * 5 + [1e-6] * 5))
    fused = f.evaluate(0.0)
    assert (fused[gpus] == 6.0).all()  # ECC kept per GPU, thermal lifted to the node
    assert fused[0] == 6.0


def test_one_sick_gpu_of_a_two_gpu_node_stays_a_gpu_fault() -> None:
    f = node_cluster(nodes=4, gpus=2)
    f.ingest(*evidence([1, 1], [Family.PCIE, Family.THERMAL], [1e-8, 1e-6]))
    fused = f.evaluate(0.0)
    assert fused[1] == 12.0
    assert fused[0] == 0.0


def directed(
    families: list[Family], p: list[float], rising: list[bool]
) -> tuple[Evidence, np.ndarray, np.ndarray]:
    """Evidence on entity 0, each family's series above (True) or below its baseline."""
    n = len(p)
    ev = Evidence(np.arange(n, dtype=np.int64), np.zeros(n), np.ones(n), np.array(p), np.array(rising))
    return ev, np.zeros(n, dtype=np.int64), np.array(families, dtype=np.uint8)


def fused_once(
    families: list[Family], p: list[float], rising: list[bool], errors: list[bool] | None = None
) -> float:
    """Entity 0's fused score on a fresh fusion layer after one tick of `directed` evidence."""
    f = Fusion()
    f.ensure(2)
    f.ingest(*directed(families, p, rising), None if errors is None else np.array(errors))
    return float(f.evaluate(0.0)[0])


def test_storage_latency_rising_with_the_nodes_own_io_is_the_load_not_a_fault() -> None:
    assert fused_once([Family.STORAGE_IO, Family.UTILIZATION], [1e-12, 1e-12], [True, True]) == (
        FusionConfig().workload_cap
    )


def test_storage_latency_rising_while_the_node_moves_fewer_bytes_counts_on_its_own() -> None:
    cfg = FusionConfig()
    assert fused_once([Family.STORAGE_IO, Family.UTILIZATION], [1e-12, 1e-12], [True, False]) == (
        cfg.family_cap + cfg.workload_cap
    )


def test_retransmits_rising_with_the_nodes_traffic_are_the_load_but_link_errors_never_are() -> None:
    cfg = FusionConfig()
    traffic = [Family.NETWORK, Family.UTILIZATION], [1e-12, 1e-12], [True, True]
    assert fused_once(*traffic) == cfg.workload_cap
    # the same, but the network family's strongest series is an error counter
    assert fused_once(*traffic, errors=[True, False]) == cfg.family_cap + cfg.workload_cap


def test_load_moving_both_ways_at_once_explains_a_family_moving_either_way() -> None:
    """At a checkpoint a node's fabric traffic falls (strongly) while its NFS writes rise: retransmits
    rising with the writes are the load's, though the strongest load move was downwards."""
    checkpoint = (
        [Family.UTILIZATION, Family.UTILIZATION, Family.NETWORK],
        [1e-12, 1e-4, 1e-9],
        [False, True, True],
    )
    assert fused_once(*checkpoint) == FusionConfig().workload_cap


def test_latency_left_behind_by_io_already_cleared_as_shared_is_still_the_loads() -> None:
    """A checkpoint's I/O votes on every node and is cleared as a shared cause at once; the latency
    it leaves on one node for minutes after is still explained by it, not a fault of that node."""
    cfg = FusionConfig()
    f = Fusion()
    f.ensure(10)
    nodes = list(range(10))
    n = len(nodes)
    io = Evidence(np.arange(n, dtype=np.int64), np.zeros(n), np.ones(n), np.full(n, 1e-12), np.ones(n, bool))
    f.ingest(io, np.array(nodes, dtype=np.int64), np.full(n, Family.UTILIZATION, dtype=np.uint8))
    f.ingest(*directed([Family.STORAGE_IO], [1e-12], [True]))
    f.evaluate(0.0)
    assert f.held[:, Family.UTILIZATION].max() == 0.0  # cleared as shared
    for tick in (15.0, 30.0, 45.0):
        assert f.evaluate(tick)[0] <= cfg.workload_cap
    f.evaluate(3600.0)
    f.ingest(*directed([Family.STORAGE_IO], [1e-12], [True]))  # new latency, the I/O an hour quiet
    assert f.evaluate(3615.0)[0] == cfg.family_cap


def test_heat_falling_as_the_job_stops_is_the_load_and_heat_against_it_is_not() -> None:
    cfg = FusionConfig()
    job_stop = [Family.THERMAL, Family.UTILIZATION], [1e-12, 1e-12], [False, False]
    assert fused_once(*job_stop) == cfg.workload_cap
    # hotter while the GPU does less: a cooling fault, its own vote
    cooling = [Family.THERMAL, Family.UTILIZATION], [1e-12, 1e-12], [True, False]
    assert fused_once(*cooling) == cfg.family_cap + cfg.workload_cap


def test_heat_of_a_job_starting_on_every_gpu_of_a_node_is_not_credited_to_the_node() -> None:
    f = Fusion()
    f.ensure(9)
    f.parent[1:9] = 0  # entity 0 is the node, 1..8 its GPUs
    gpus = list(range(1, 9))
    n = len(gpus)
    ev = Evidence(np.arange(2 * n, dtype=np.int64), np.zeros(2 * n), np.ones(2 * n), np.full(2 * n, 1e-12))
    families = np.array([Family.THERMAL] * n + [Family.UTILIZATION] * n, dtype=np.uint8)
    f.ingest(ev, np.array(gpus + gpus, dtype=np.int64), families)
    fused = f.evaluate(0.0)
    assert fused[0] < FIRE and (fused[1:] < FIRE).all()
    assert f.at_tick[0, Family.THERMAL] == 0.0


def test_heat_on_every_gpu_of_a_node_with_no_load_change_is_the_nodes_cooling() -> None:
    f = Fusion()
    f.ensure(9)
    f.parent[1:9] = 0
    gpus = list(range(1, 9))
    f.ingest(*evidence(gpus, [Family.THERMAL] * 8, [1e-12] * 8))
    f.evaluate(0.0)
    assert f.at_tick[0, Family.THERMAL] > 0.0


def test_the_strongest_of_many_series_counts_for_less_than_a_lone_series_at_the_same_p() -> None:
    f = Fusion()
    f.ensure(2)
    f.add_series(np.zeros(15, dtype=np.int64), np.full(15, Family.UTILIZATION, dtype=np.uint8))
    f.add_series(np.ones(1, dtype=np.int64), np.full(1, Family.PCIE, dtype=np.uint8))
    f.ingest(*evidence([0, 1], [Family.UTILIZATION, Family.PCIE], [1e-3, 1e-3]))
    f.evaluate(0.0)
    assert f.voting_families(0) == []  # 3 - log10(15) < vote_min: one of 15 at p=1e-3 is ordinary
    assert f.voting_families(1) == [Family.PCIE]
    assert f.n_series[0, Family.LIVENESS] == 15 and f.n_series[1, Family.LIVENESS] == 1


def test_heat_following_a_load_step_minutes_later_is_still_the_loads() -> None:
    """A job phase steps the node's load once; its heat settles over the next minutes (and the drift
    detector holds it for up to an hour). Heat rising five minutes after the load step is the step's,
    not a cooling fault; the same heat an hour after the load last moved is its own vote."""
    cfg = FusionConfig()
    f = Fusion()
    f.ensure(1)
    f.ingest(*directed([Family.HOST], [1e-6], [True]))
    for tick in np.arange(0.0, 300.0, cfg.step_s):
        f.evaluate(float(tick))
    f.ingest(*directed([Family.THERMAL], [1e-12], [True]))
    assert f.evaluate(300.0)[0] == cfg.workload_cap
    for tick in np.arange(315.0, 3900.0, cfg.step_s):
        f.evaluate(float(tick))
    f.ingest(*directed([Family.THERMAL], [1e-12], [True]))
    assert f.evaluate(3900.0)[0] == cfg.family_cap


def _heat_after_the_host_eased(heat_rising_later: bool) -> list[float]:
    """Entity 0 (a node): its CPU load eases once (host down) and its board temperature falls with it,
    then keeps falling for 40 minutes, ever more surprising to its own baseline (a sensor's thermal lag)
    while its job's traffic stays high (utilisation up); or, `heat_rising_later`, turns and rises while
    no load moves."""
    f = Fusion()
    f.ensure(2)
    f.ingest(*directed([Family.HOST, Family.THERMAL], [1e-3, 1e-3], [False, False]))
    out = [float(f.evaluate(0.0)[0])]
    for k in range(1, 160):
        heat_p = 10.0 ** -(3.0 + 7.0 * k / 160)
        if heat_rising_later:
            f.ingest(*directed([Family.THERMAL], [heat_p], [True]))
        else:
            f.ingest(*directed([Family.UTILIZATION, Family.THERMAL], [1e-12, heat_p], [True, False]))
        out.append(float(f.evaluate(15.0 * k)[0]))
    return out


def test_heat_still_falling_after_the_load_eased_stays_the_loads_however_surprising() -> None:
    """Classic tuning cell bursty-counters seed 3 paged a node for this: the host's memory of easing
    (15-minute half-life) faded while the board kept cooling, and new, stronger evidence of the same
    fall was judged afresh as the node's own (thermal 6 + the job's traffic 4)."""
    assert max(_heat_after_the_host_eased(False)) <= FusionConfig().workload_cap


def test_heat_turning_to_rise_against_the_eased_load_is_judged_afresh() -> None:
    cfg = FusionConfig()
    rising = _heat_after_the_host_eased(True)
    assert rising[0] <= cfg.workload_cap
    assert max(rising) == cfg.family_cap  # hotter while no load moved: the node's own vote


def test_a_fusion_restored_mid_ramp_confirms_and_scores_like_an_uninterrupted_one() -> None:
    """`alone_hard` is not in the snapshot: every tick takes it again before `confirmed` reads it, so a
    fusion restored while a hard-error ramp is sustained fires at the same ticks with the same scores."""
    after = FusionConfig().burst_after_s
    at = {int((after + 60.0 + k * 240.0) / 15.0) for k in range(6)}
    first, second = Fusion(), Fusion()
    first.ensure(1)
    cut = sorted(at)[4] + 1  # past the fourth burst: the ramp is sustained and bursts count
    out: dict[str, list[tuple[float, bool]]] = {"whole": [], "restored": []}
    for tick in range(int((after + 2400.0) / 15.0)):
        if tick == cut:
            assert first.alone_hard[0] > 0.0  # the restore happens while the ramp's vote is held
            second.restore_arrays({k: np.array(v, copy=True) for k, v in first.snapshot_arrays().items()})
        for name, f in (("whole", first), ("restored", second)):
            if name == "restored" and tick < cut:
                continue
            if tick in at:
                f.ingest(*evidence([0], [Family.MEMORY_ECC], [1e-12]))
            fused = f.evaluate(15.0 * tick)
            if tick >= cut:
                out[name].append((float(fused[0]), bool(f.confirmed(FIRE)[0])))
    assert out["restored"] == out["whole"]
    assert any(confirmed for _, confirmed in out["whole"])


def test_cooling_and_thermal_on_one_gpu_are_one_vote() -> None:
    """Cooling and the thermal gauges read the same temperatures: together they weigh what the stronger
    does alone, where two families of their own (thermal and PCIe) add up past the firing threshold."""
    same, other = Fusion(), Fusion()
    for f in (same, other):
        f.ensure(2)
    same.ingest(*evidence([0, 0], [Family.THERMAL, Family.COOLING], [1e-5, 1e-5]))
    other.ingest(*evidence([0, 0], [Family.THERMAL, Family.PCIE], [1e-5, 1e-5]))
    fused_same, fused_other = same.evaluate(0.0)[0], other.evaluate(0.0)[0]
    assert fused_same == pytest.approx(5.0, abs=0.5)
    assert fused_same < FIRE <= fused_other


def test_cooling_moving_with_the_load_is_the_loads_vote_until_sustained_alone() -> None:
    """A GPU's offset from its peers follows the load level: cooling voting just after the GPU's power
    moved (either way) is the job's capped vote, not a second family; a creep sustained alone still
    pages on its own vote, load or not."""
    for power_up in (True, False):
        f = Fusion()
        f.ensure(1)
        f.ingest(*directed([Family.POWER], [1e-5], [power_up]))
        f.evaluate(0.0)
        f.ingest(*directed([Family.COOLING], [1e-6], [True]))
        assert f.evaluate(15.0)[0] <= FusionConfig().workload_cap
        scores = []
        for tick in range(2, 12):
            f.ingest(*directed([Family.COOLING], [1e-11], [True]))
            scores.append(f.evaluate(15.0 * tick)[0])
        assert max(scores[:2]) < FIRE <= scores[-1]


def test_a_throttling_gpus_clock_drop_is_one_vote_with_its_throttling() -> None:
    """Throttling for heat slows a GPU: its throttle-time counter (an error counter) rising and its clocks
    falling are one fact, one vote (wide-s1570, s1574, s1575 paged them as thermal plus utilisation).
    A GPU running hot by its temperature gauges while its clocks fall, with no throttling booked, is
    still two families."""
    cfg = FusionConfig()
    families, p, rising = [Family.THERMAL, Family.UTILIZATION], [1e-12, 1e-12], [True, False]
    assert fused_once(families, p, rising, errors=[True, False]) == cfg.family_cap
    assert fused_once(families, p, rising, errors=[False, False]) == cfg.family_cap + cfg.workload_cap
