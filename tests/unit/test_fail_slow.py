"""A GPU falling behind the other GPUs of its node is fail-slow evidence; the whole node slowing is not."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from prexid.detectors.base import parse_blobs
from prexid.detectors.fail_slow import FailSlow
from prexid.detectors.peer import PeerDeviation
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.schemas import Alert

GPUS = 8
START = 1_796_205_600.0


def scrape(t: int, rng: np.random.Generator, slow: set[int], factor: float) -> list[RawSample]:
    """One scrape of one node: SM clock and power of each GPU, the `slow` ones at `factor`."""
    out: list[RawSample] = []
    for g in range(GPUS):
        labels = {"Hostname": "node-00", "gpu": str(g), "pci_bus_id": f"00000000:{0x18 + 16 * g:02x}:00.0"}
        f = factor if g in slow else 1.0
        ts = START + 15.0 * t
        out.append(RawSample("DCGM_FI_DEV_SM_CLOCK", labels, ts, 1965.0 * f + rng.normal(0, 4.0)))
        out.append(RawSample("DCGM_FI_DEV_POWER_USAGE", labels, ts, 900.0 * f + rng.normal(0, 7.0)))
    return out


def run(slow: set[int], factor: float, slow_from: int = 300, ticks: int = 340) -> list[Alert]:
    rng = np.random.default_rng(3)
    pipeline = Pipeline()
    alerts: list[Alert] = []
    for t in range(ticks):
        alerts += pipeline.ingest_samples(scrape(t, rng, slow if t >= slow_from else set(), factor))
    return alerts + pipeline.advance(drain=True)


def test_one_gpu_at_seventy_percent_of_its_peers_pages_as_fail_slow() -> None:
    alerts = run({5}, 0.7)
    firing = [a for a in alerts if a.status == "firing"]
    assert [(a.kind, a.gpu) for a in firing] == [("pre_xid", 5)]
    assert "fail-slow" in {s.family for s in firing[0].signals}


def test_every_gpu_of_the_node_slowing_together_is_the_job_not_a_fault() -> None:
    assert run(set(range(GPUS)), 0.7) == []


def test_a_single_slow_scrape_does_not_page() -> None:
    alerts = run({5}, 0.6, slow_from=300, ticks=301)
    assert [a for a in alerts if a.status == "firing"] == []


def test_a_gpu_stalling_now_and_then_pages_as_its_stalls_keep_coming() -> None:
    """Stalling firmware (the run-up to an Xid 119): the clock drops to 60% on one scrape in three."""
    rng = np.random.default_rng(3)
    pipeline = Pipeline()
    alerts: list[Alert] = []
    for t in range(400):
        stalled = {5} if t >= 300 and t % 3 == 0 else set()
        alerts += pipeline.ingest_samples(scrape(t, rng, stalled, 0.6))
    firing = [a for a in alerts if a.status == "firing"]
    assert [(a.kind, a.gpu) for a in firing] == [("pre_xid", 5)]
    assert "fail-slow" in {s.family for s in firing[0].signals}


def test_fail_slow_counts_scrapes_behind_the_peers_and_judges_them_as_an_error_counter() -> None:
    peer = PeerDeviation()
    fs = FailSlow(peer)
    ids = np.arange(GPUS, dtype=np.int64)
    peer.set_groups(ids, np.zeros(GPUS, dtype=np.int64))
    fs.watch(ids[5:6])
    rng = np.random.default_rng(0)
    out = []
    for t in range(120):
        x = 1965.0 + rng.normal(0, 4.0, GPUS)
        if t in (100, 110, 111, 112, 113):
            x[5] *= 0.7
        ts = np.full(GPUS, 15.0 * t)
        peer.update(ids, ts, x)
        out.append(fs.update(ids, ts, x))
    p = np.array(out)
    assert (p[:, [0, 1, 2, 3, 4, 6, 7]] == 1.0).all()  # not watched
    assert p[100, 5] > 1e-3  # one lagging scrape: weak
    assert p[113, 5] < 1e-8  # four more in a row: strong
    assert p[114:, 5].min() == 1.0  # back with its peers: no evidence


def test_fail_slow_over_the_banks_peer_detector_scores_as_one_over_its_own() -> None:
    """The bank's fail-slow reads the residuals of the peer detector the bank has fed the same samples;
    the catalog's feeds a peer detector of its own."""
    peer = PeerDeviation()
    shared, own = FailSlow(peer), FailSlow()
    ids = np.arange(2 * GPUS, dtype=np.int64)
    for det in (peer, own):
        det.set_groups(ids, ids // GPUS)
    shared.watch(ids)
    own.watch(ids)
    rng, out = np.random.default_rng(1), []
    for t in range(200):
        x = 1965.0 + rng.normal(0, 4.0, len(ids))
        x[5] *= 0.7 if t >= 100 else 1.0  # behind from the 100th scrape on
        x[12] *= 0.8 if t % 3 == 0 else 1.0  # stalling on one scrape in three
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        out.append(shared.update(ids, ts, x))
        np.testing.assert_array_equal(out[-1], own.update(ids, ts, x))
    p = np.array(out)
    assert p[:, 5].min() < 1e-8 and p[:, 12].min() < 1e-8  # the runs compared evidence, not ones


def node_scrape(
    t: int,
    rng: np.random.Generator,
    slow: int,
    clock: float,
    power: float,
    heat: float,
    memory_temp: bool = False,
) -> list[RawSample]:
    """One scrape of one node with temperatures: GPU `slow` at `clock` x its peers' clock and `power` x
    their power, `heat` degrees C off their temperature (it always was: its slot, not a change); with
    `memory_temp`, every GPU's HBM temperature too, the same on all."""
    out: list[RawSample] = []
    for g in range(GPUS):
        labels = {"Hostname": "node-00", "gpu": str(g), "pci_bus_id": f"00000000:{0x18 + 16 * g:02x}:00.0"}
        c, p = (clock, power) if g == slow else (1.0, 1.0)
        ts = START + 15.0 * t
        out.append(RawSample("DCGM_FI_DEV_SM_CLOCK", labels, ts, 1965.0 * c + rng.normal(0, 4.0)))
        out.append(RawSample("DCGM_FI_DEV_POWER_USAGE", labels, ts, 900.0 * p + rng.normal(0, 7.0)))
        temp = 82.0 + (heat if g == slow else 0.0) + rng.normal(0, 0.3)
        out.append(RawSample("DCGM_FI_DEV_GPU_TEMP", labels, ts, round(temp)))
        if memory_temp:
            out.append(RawSample("DCGM_FI_DEV_MEMORY_TEMP", labels, ts, 70.0))
    return out


def run_with_heat(
    clock: float,
    power: float,
    heat: float,
    slow_from: int = 300,
    ticks: int = 380,
    memory_temp: bool = False,
) -> list[Alert]:
    rng = np.random.default_rng(5)
    pipeline = Pipeline()
    alerts: list[Alert] = []
    for t in range(ticks):
        slowed = t >= slow_from
        alerts += pipeline.ingest_samples(
            node_scrape(t, rng, 5, clock if slowed else 1.0, power if slowed else 1.0, heat, memory_temp)
        )
    return [a for a in alerts + pipeline.advance(drain=True) if a.status == "firing"]


def test_a_gpu_throttling_for_heat_on_a_hot_slot_does_not_page() -> None:
    """The hottest GPU of a node (6 C above its peers, as always) runs its clock down 20% at their power
    when the job heats up: thermal slowdown on a hot slot (wide-s2's 47 pages), not a GPU changing."""
    assert run_with_heat(clock=0.8, power=1.0, heat=6.0) == []


def test_heat_throttling_is_read_on_the_die_temperature_not_the_memorys() -> None:
    """A stock exporter also sends each GPU's HBM temperature, registered after the die's: paired with
    the clock instead, it reads the hot slot as no hotter than its peers and pages its throttling."""
    assert run_with_heat(clock=0.8, power=1.0, heat=6.0, memory_temp=True) == []


def test_a_straggler_running_cooler_than_its_peers_still_pages_as_fail_slow() -> None:
    """A degrading part does less work: clock and power down, and it is no hotter than its peers."""
    firing = run_with_heat(clock=0.72, power=0.82, heat=-3.0)
    assert [(a.kind, a.gpu) for a in firing] == [("pre_xid", 5)]
    assert "fail-slow" in {s.family for s in firing[0].signals}


def test_a_straggler_on_a_hot_slot_pages_as_it_does_less_work() -> None:
    """wide-s8 node-07 GPU 7: a straggler (clock -28%, power -18%) on a slot that always runs 6 C above
    its peers, at 48-53 C. Its scrapes behind were put down to heat throttling and it paged 40 minutes
    late; a GPU slowed by heat draws its peers' power, this one does less work."""
    firing = run_with_heat(clock=0.72, power=0.82, heat=6.0)
    assert [(a.kind, a.gpu) for a in firing] == [("pre_xid", 5)]
    assert "fail-slow" in {s.family for s in firing[0].signals}


def paired(hot: float, work: bool = False) -> tuple[PeerDeviation, FailSlow, np.ndarray]:
    """A bank-like pair over one node: ids 0-7 SM clocks, 8-15 the same GPUs' temperatures (entities
    0-7), with `work` also 16-23 their power and 24-31 their tensor activity; GPU 5 at 70% of its peers'
    clock from the 40th scrape on, `hot` C off their temperature."""
    peer, ids = PeerDeviation(), np.arange((4 if work else 2) * GPUS, dtype=np.int64)
    fs = FailSlow(peer)
    peer.set_groups(ids, ids // GPUS)
    gpus = np.arange(GPUS, dtype=np.int64)
    fs.watch(gpus, gpus)
    fs.watch_heat(gpus + GPUS, gpus)
    if work:
        fs.watch_work(np.r_[gpus + 2 * GPUS, gpus + 3 * GPUS], np.r_[gpus, gpus], np.repeat([0, 1], GPUS))
    return peer, fs, ids


def feed(
    peer: PeerDeviation, fs: FailSlow, ids: np.ndarray, hot: float, ticks: int = 80, t0: int = 0
) -> np.ndarray:
    rng, out = np.random.default_rng(2 + t0), []
    for t in range(t0, t0 + ticks):
        x = np.r_[1965.0 + rng.normal(0, 4.0, GPUS), 80.0 + rng.normal(0, 0.3, GPUS)]
        x[5] *= 0.7 if t >= 40 else 1.0
        x[GPUS + 5] += hot
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        out.append(fs.update(ids, ts, x))
    return np.array(out)


def test_fail_slow_does_not_count_scrapes_behind_while_the_gpu_is_hotter_than_its_peers() -> None:
    peer, fs, ids = paired(5.0)
    assert feed(peer, fs, ids, 5.0)[:, 5].min() == 1.0
    peer, fs, ids = paired(-2.0)  # cooler: a degrading part, counted
    assert feed(peer, fs, ids, -2.0)[:, 5].min() < 1e-8


def run_node(
    hot: float, ticks: int, seed: int, frame: Callable[[np.random.Generator, int], np.ndarray]
) -> np.ndarray:
    """`feed`'s node with a power and a tensor-activity series per GPU too (ids 16-23, 24-31), each scrape's
    values from `frame` and GPU 5 `hot` C above its peers: p of each GPU's clock per scrape."""
    peer, fs, ids = paired(hot, work=True)
    rng, out = np.random.default_rng(seed), []
    for t in range(ticks):
        x = frame(rng, t)
        x[GPUS + 5] += hot
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        out.append(fs.update(ids, ts, x))
    return np.array(out)[:, :GPUS]


def busy(rng: np.random.Generator) -> np.ndarray:
    """One scrape of a busy node: every GPU's clock, temperature, power and tensor activity, at pace."""
    x: np.ndarray = np.r_[
        1965.0 + rng.normal(0, 4.0, GPUS),
        80.0 + rng.normal(0, 0.3, GPUS),
        900.0 + rng.normal(0, 7.0, GPUS),
        0.4 + rng.normal(0, 0.004, GPUS),
    ]
    return x


def with_work(hot: float, work: float) -> np.ndarray:
    """A busy node, GPU 5's clock at 70% and its power and activity at `work` x its peers' from the 40th
    scrape on."""

    def frame(rng: np.random.Generator, t: int) -> np.ndarray:
        x = busy(rng)
        if t >= 40:
            x[5] *= 0.7
            x[[2 * GPUS + 5, 3 * GPUS + 5]] *= work
        return x

    return run_node(hot, 80, 7, frame)


def test_a_hot_gpu_behind_counts_when_it_does_less_work_than_its_peers() -> None:
    assert with_work(5.0, 1.0)[:, 5].min() == 1.0  # at its peers' power and activity: heat throttling
    assert with_work(5.0, 0.95)[:, 5].min() == 1.0  # a little less is not less work
    assert with_work(5.0, 0.75)[:, 5].min() < 1e-8  # a quarter less power and activity: stalling


def idle_node_with_a_stalling_gpu(hot: float) -> np.ndarray:
    """An idle node (345 MHz, idle power, tensor pipes at 0 or a rounding step on every GPU), GPU 5 `hot` C
    above its peers and, from the 40th scrape on, stalling on one scrape in three (clock at 60%, power at
    75%, pipes idle as before: stalling firmware on an idle GPU, wide-s70's Xid 119): p of each clock."""

    def frame(rng: np.random.Generator, t: int) -> np.ndarray:
        x = np.r_[
            345.0 + rng.normal(0, 4.0, GPUS),
            45.0 + rng.normal(0, 0.3, GPUS),
            145.0 + rng.normal(0, 5.0, GPUS),
            np.round(np.clip(rng.normal(0, 0.005, GPUS), 0.0, 1.0), 2),
        ]
        if t >= 40 and t % 3 == 0:
            x[5] *= 0.6
            x[2 * GPUS + 5] *= 0.75
        return x

    return run_node(hot, 120, 8, frame)


def test_idle_pipes_on_an_idle_node_do_not_make_a_hot_gpus_stalls_heat_throttling() -> None:
    """Pipes idle on every GPU say nothing of keeping pace: its power, a quarter behind, tells the stall."""
    assert idle_node_with_a_stalling_gpu(4.0)[:, 5].min() < 1e-6
    assert np.delete(idle_node_with_a_stalling_gpu(4.0), 5, axis=1).min() == 1.0


def test_fail_slow_keeps_its_pairing_through_a_snapshot_and_drops_a_forgotten_temperature() -> None:
    peer, fs, ids = paired(5.0)
    feed(peer, fs, ids, 5.0, ticks=30)
    restored_peer = PeerDeviation()
    restored_peer.restore(parse_blobs(b"".join(peer.snapshot())))
    restored = FailSlow(restored_peer)
    restored.restore(parse_blobs(b"".join(fs.snapshot())))
    assert feed(restored_peer, restored, ids, 5.0, t0=30)[:, 5].min() == 1.0  # still paired: not counted
    restored.forget(ids[GPUS + 5 : GPUS + 6])  # its temperature series expired: judged on its clock
    restored_peer.forget(ids[GPUS + 5 : GPUS + 6])
    assert feed(restored_peer, restored, ids, 5.0, t0=110)[:, 5].min() < 1e-8


def test_fail_slow_counts_heat_that_is_new_for_the_gpu_failing_cooling() -> None:
    """A GPU at its peers' temperature for an hour, then 15 C above them and behind: its cooling failed
    (the GPU changed), unlike a slot that always ran hot."""
    peer, fs, ids = paired(0.0)
    rng, out = np.random.default_rng(4), []
    for t in range(400):
        x = np.r_[1965.0 + rng.normal(0, 4.0, GPUS), 80.0 + rng.normal(0, 0.3, GPUS)]
        if t >= 300:
            x[5] *= 0.8
            x[GPUS + 5] += 15.0
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        out.append(fs.update(ids, ts, x))
    assert np.array(out)[:, 5].min() < 1e-8


def test_forgetting_a_temperature_registered_after_every_clock_unpairs_its_gpu() -> None:
    """Temperatures are not watched series, so their ids may lie beyond the clocks' slot map."""
    peer = PeerDeviation()
    fs = FailSlow(peer)
    clocks, temps = np.arange(GPUS, dtype=np.int64), 5000 + np.arange(GPUS, dtype=np.int64)
    fs.watch(clocks, clocks)
    fs.watch_heat(temps, clocks)
    fs.forget(temps[5:6])
    assert fs.heat[5] == -1 and (fs.heat[:GPUS] >= 0).sum() == GPUS - 1


def test_a_gpu_throttling_as_its_hot_neighbours_do_is_not_counted() -> None:
    """A hot node (wide-s10 node-07): GPUs 0 and 2 at 94-95 C throttle well behind, 6 and 7 at 89 C
    throttle a little (not behind), GPU 5 at 90 C throttles behind. Against all its peers' median (89 C)
    it reads only 1 C hot; against the peers keeping pace (85 C) it is clearly the hot one it is."""
    peer, fs, ids = paired(0.0)
    temps = np.array([95.0, 84.0, 94.0, 80.0, 85.0, 90.0, 89.0, 89.0])
    clocks = np.array([0.79, 1.0, 0.79, 1.0, 1.0, 0.85, 0.95, 0.95])
    rng, out = np.random.default_rng(6), []
    for t in range(120):
        busy = t >= 40  # idle and cool for ten minutes, then the job heats the node up
        x = np.r_[
            1965.0 * (clocks if busy else 1.0) + rng.normal(0, 4.0, GPUS),
            np.round((temps if busy else 40.0) + rng.normal(0, 0.3, GPUS)),
        ]
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        out.append(fs.update(ids, ts, x))
    p = np.array(out)
    assert p[:, 5].min() == 1.0  # GPU 5's scrapes behind are not counted
    assert p[:, 0].min() == 1.0 and p[:, 2].min() == 1.0  # nor the hottest ones'
    assert fs.behind[fs.slot[5]] == 0.0


# a cool node, one at its slowdown temperature, a hotter one, an idle one
NODE_HEAT = (75.0, 88.0, 93.0, 40.0)


def _throttled(temp: np.ndarray) -> np.ndarray:
    """A busy GPU's clock share at a die temperature: a tenth less for each 1.5 C past 87 C, 80% at most."""
    return 1.0 - 0.2 * np.clip((temp - 87.0) / 3.0, 0.0, 1.0)


def _turns(slow_node: int) -> tuple[FailSlow, np.ndarray]:
    """Four nodes of 8 GPUs (`NODE_HEAT`; ids 0-31 SM clocks, 32-63 their temperatures), the busy ones'
    clocks falling with heat, the idle one at its idle clock; on `slow_node`, from the 40th scrape, its
    GPUs take turns 1.5 C hotter than the others and 12% behind them. Returns fail-slow and each scrape's
    p per clock."""
    nodes = len(NODE_HEAT)
    peer, ids = PeerDeviation(), np.arange(2 * nodes * GPUS, dtype=np.int64)
    fs = FailSlow(peer)
    peer.set_groups(ids, ids // GPUS)
    clocks = np.arange(nodes * GPUS, dtype=np.int64)
    fs.watch(clocks, clocks)
    fs.watch_heat(clocks + nodes * GPUS, clocks)
    rng, out = np.random.default_rng(8), []
    base = np.repeat(NODE_HEAT, GPUS)
    idle = base < 50.0
    for t in range(160):
        temp = base + rng.normal(0, 0.3, nodes * GPUS)
        turn = slow_node * GPUS + (t // 4) % GPUS
        if t >= 40:
            temp[turn] += 1.5
        clock = np.where(idle, 345.0, 1965.0 * _throttled(temp)) + rng.normal(0, 4.0, nodes * GPUS)
        if t >= 40:
            clock[turn] = 0.88 * np.median(
                np.delete(clock[slow_node * GPUS : (slow_node + 1) * GPUS], turn % GPUS)
            )
        x = np.r_[clock, temp]
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        out.append(fs.update(ids, ts, x))
    return fs, np.array(out)[:, : nodes * GPUS]


def test_gpus_throttling_in_turns_at_their_slowdown_temperature_are_not_counted() -> None:
    """Wide tuning cells 24 and 1186: a node at its slowdown temperature has its GPUs throttling in turns,
    each 1-2 C above the others (under `heat_margin_c`), and fail-slow paged them. At 1186 a hotter node
    and half the fleet idle put the fleet's hottest tenth at 92 C, above the node's 88-89 C: where the
    fleet's clocks are seen to fall with heat, any heat over the peers keeping pace is heat. The same
    turns on a node as cool as the clocks run full are counted."""
    fs, p = _turns(slow_node=1)
    assert p.min() == 1.0 and fs.behind.sum() == 0.0
    assert 87.0 <= fs._onset <= 88.0
    fs, p = _turns(slow_node=0)
    assert fs.behind[:GPUS].sum() >= 100.0 and p[:, :GPUS].min() < 1e-3


def test_the_throttle_onset_is_where_the_fitted_curve_falls() -> None:
    """Wide tuning cell seed 61: most of the fleet hot and its hottest GPUs a little faster than the
    throttled ones around them (clock offsets), so not every degree past the onset runs slow. The curve,
    fitted as falling with heat, still falls at 88 C."""
    fs = FailSlow()
    temps = np.r_[np.linspace(70.0, 86.0, 16), np.linspace(88.0, 103.0, 48)]
    share = np.where(temps < 87.0, 1.0, _throttled(temps))
    share[-3:] = 0.97
    for _ in range(30):
        fs._learn_onset(temps, 1965.0 * share, 60.0)
    assert fs._onset == 88.0


def test_the_throttle_onset_survives_a_snapshot() -> None:
    """The fleet's clock curve is learned over hours: a restart must not forget where it throttles."""
    fs, _ = _turns(slow_node=1)
    again = FailSlow(PeerDeviation())
    again.restore(parse_blobs(b"".join(fs.snapshot())))
    assert again._onset == fs._onset and np.array_equal(again._curve, fs._curve)


def test_a_hot_slot_reaching_its_slowdown_temperature_first_after_a_dip_is_not_new_heat() -> None:
    """Wide tuning cell seed 40 (node-00 GPU 0): a slot 6 C hotter than its peers throttles in every busy
    hour; after a checkpoint's dip it warms faster than they do and throttles at 16 C over them for two
    minutes while they still climb, and fail-slow paged it as new heat. Heat that came with the load
    minutes ago is not failing cooling (that lasts: `test_fail_slow_counts_heat_that_is_new_...`)."""
    peer, fs, ids = paired(0.0)
    rng, out = np.random.default_rng(9), []
    for t in range(330):
        dip, warming = 240 <= t < 260, 260 <= t < 268
        peers = 50.0 if dip else 70.0 if warming else 80.0
        temp = np.full(GPUS, peers) + rng.normal(0, 0.3, GPUS)
        temp[5] = 55.0 if dip else 86.0
        clock = 1965.0 + rng.normal(0, 4.0, GPUS)
        clock[5] *= 1.0 if dip else 0.85  # at its slowdown temperature: throttling
        x = np.r_[clock, np.round(temp)]
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        out.append(fs.update(ids, ts, x))
    assert np.array(out)[:, 5].min() == 1.0
    assert fs.behind[fs.slot[5]] == 0.0


def lags_p(every: int, clean: int, ticks: int, clock: float, work: float) -> list[float]:
    """p of GPU 5's clock at each of its lags: a busy node (`with_work`'s) at its peers' pace for `clean`
    scrapes, then GPU 5 at `clock` x its peers' clock, its power and tensor activity at `work` x
    theirs, on every `every`-th scrape for `ticks` more (at its peers' temperature)."""

    def frame(rng: np.random.Generator, t: int) -> np.ndarray:
        x = busy(rng)
        if t >= clean and (t - clean) % every == 0:
            x[5] *= clock
            x[[2 * GPUS + 5, 3 * GPUS + 5]] *= work
        return x

    p = run_node(0.0, clean + ticks, 5, frame)[clean:, 5]
    return [float(v) for v in p[::every]]


def test_a_run_of_stalls_is_judged_against_the_pace_from_before_it() -> None:
    """Stalling firmware after two clean hours, one scrape in five (clock at 60%, power and pipes behind):
    its fourth stall is page-strong (6.8e-7 when the stalls' fading window weight taught the GPU their
    own pace)."""
    assert lags_p(5, 480, 20, 0.6, 0.6)[3] < 1e-9


def test_a_run_of_lags_doing_the_peers_work_still_teaches_its_pace() -> None:
    """A GPU throttling in turns on a hot node (wide-s61: 10-13% behind, as hot as its peers, its power and
    pipes at theirs) is learned as before (its fourth lag 4e-8; held out as stalls are, 1e-10)."""
    assert lags_p(2, 480, 10, 0.88, 1.0)[3] > 1e-9
    # shallow lags doing less work (an idle GPU's power spreads widely: wide-s1070) teach it too; deep
    # ones are a run of stalls
    assert lags_p(2, 480, 10, 0.88, 0.6)[3] > 1e-9
    assert lags_p(2, 480, 10, 0.6, 0.6)[3] < 1e-9


def test_a_gpu_lagging_every_ten_minutes_for_hours_is_learned_as_its_habit() -> None:
    assert lags_p(40, 480, 40 * 24 * 6, 0.6, 0.6)[-1] > 0.1


def test_lags_within_the_scatter_of_idle_peers_are_not_counted_busy_ones_are() -> None:
    """An idle node's clocks scatter ~5% scrape to scrape, so a healthy idle GPU reads 10-12% under its
    peers now and then (wide-s1236: a node drained after its Xid paged fail-slow). Those lags are the
    peers' own scatter; a stall far past it still counts, and on a busy node (peers throttling by
    different amounts, wide-s66) a straggler's lag counts at the fixed shortfall alone."""
    nodes = 3  # 0: busy, a straggler at 80%; 1: idle, healthy; 2: idle, GPU 3 stalling to 50%
    ids = np.arange(nodes * GPUS, dtype=np.int64)
    fs = FailSlow()
    fs.set_groups(ids, ids // GPUS)
    fs.watch(ids)
    rng = np.random.default_rng(5)
    busy_throttle = 1.0 - rng.uniform(0.0, 0.12, GPUS)  # each busy GPU throttles by its own amount
    stalled = 0
    for t in range(480):
        busy = 1965.0 * busy_throttle * (1.0 + rng.normal(0.0, 0.005, GPUS))
        busy[2] = 0.8 * 1965.0 * busy_throttle.max()
        idle = 345.0 * (1.0 + rng.normal(0.0, 0.05, 2 * GPUS))
        if t % 4 == 0:
            idle[GPUS + 3] = 0.5 * 345.0
            stalled += 1
        fs.update(ids, np.full(len(ids), 15.0 * t), np.r_[busy, idle])
    behind = fs.behind[fs.slot[ids]]
    assert behind[2] >= 470  # the straggler, on (nearly) every scrape
    assert behind[GPUS : 2 * GPUS].max() <= 2  # idle scatter: next to nothing (10%: ~1 scrape in 25)
    assert behind[2 * GPUS + 3] >= stalled - 2  # the idle GPU's stalls, each one


def throttling_node(falls_with_heat: bool) -> np.ndarray:
    """Five minutes of a node just heated to 87-89.5 C, its GPUs taking turns at the hottest: with
    `falls_with_heat` each clock runs 10% slower per degree over 87 C (throttling, the node's own curve),
    else only GPU 5 slows that way, its peers as hot at full pace. Power and activity at pace on every
    GPU. The fleet's clock curve has no GPU-minutes at these degrees yet: a cold start. Scrapes counted
    behind, per GPU."""
    peer, fs, ids = paired(0.0, work=True)
    rng = np.random.default_rng(11)
    for t in range(20):
        x = busy(rng)
        heat = rng.uniform(0.0, 2.5, GPUS)  # the hottest within 2 C of its peers keeping pace
        x[GPUS : 2 * GPUS] = 87.0 + heat
        slows = heat if falls_with_heat else np.where(np.arange(GPUS) == 5, heat, 0.0)
        x[:GPUS] *= 1.0 - 0.1 * slows
        ts = np.full(len(ids), 15.0 * t)
        peer.update(ids, ts, x)
        fs.update(ids, ts, x)
    return fs.behind[fs.slot[np.arange(GPUS)]]


def test_a_node_whose_clocks_fall_with_heat_is_throttling_before_the_fleet_learned_where() -> None:
    """wide-s1280 node-05: 48 to 90 C in 15 minutes after a restart at a 33.5 C inlet; its hottest GPU
    read 10% behind the others, each clock lower the hotter its GPU, and fail-slow paged it."""
    assert throttling_node(falls_with_heat=True).sum() == 0
    assert throttling_node(falls_with_heat=False)[5] >= 3  # as hot as its peers, yet alone slow: counted
