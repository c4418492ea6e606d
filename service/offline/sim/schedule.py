"""The workload: every node's phase at every tick, and the benign events that must not page anyone.

Nodes are grouped into job slots (one large pretraining job and a few small ones); the nodes of a slot
move together. A job loads its checkpoint (read burst), runs, checkpoints every few tens of minutes
(write burst, cluster-wide utilisation dip), is restarted from checkpoint now and then, and small jobs
start and stop. Failures add a job restart and a drain of the broken node (with its reboot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.faults import BY_NAME, Failure
from prexid.service.offline.sim.physics import Workload


class Phase(IntEnum):
    IDLE = 0
    RUN = 1
    CHECKPOINT = 2
    LOAD = 3  # job (re)start: reading the dataset and the checkpoint
    DRAINED = 4


@dataclass(frozen=True, slots=True)
class BenignEvent:
    type: str  # job_start, job_stop, checkpoint, job_restart, planned_drain, exporter_restart, reboot
    node: str  # a host, or the comma-separated node indices of a whole job
    ts: float
    end_ts: float


@dataclass
class Schedule:
    phase: NDArray[np.uint8]  # [ticks, nodes]
    slot_of: NDArray[np.int64]  # [nodes] job slot of each node
    checkpoints: list[float] = field(default_factory=list)
    events: list[BenignEvent] = field(default_factory=list)
    exporter_gap: set[tuple[int, int]] = field(default_factory=set)  # (tick, node): no DCGM scrape
    node_down: set[tuple[int, int]] = field(default_factory=set)  # (tick, node): rebooting, no scrape at all
    reboot_ticks: set[tuple[int, int]] = field(default_factory=set)  # counters reset at this tick


def slots_for(nodes: int, main_share: float = 0.89) -> NDArray[np.int64]:
    """Slot 0 is the big job (~90% of nodes by default); the rest share two small-job slots."""
    main = max(1, round(nodes * main_share))
    slot = np.zeros(nodes, dtype=np.int64)
    rest = np.arange(main, nodes)
    slot[rest] = 1 + (rest - main) % 2
    return slot


MAIN_SHARE = {"training": 0.89, "inference": 0.89, "mixed": 0.5, "idle": 0.3}


def build_schedule(cfg: SimConfig, rng: np.random.Generator, wl: Workload | None = None) -> Schedule:
    """An idle fleet's big job holds a third of the nodes; the small jobs, with long gaps, the rest."""
    wl = wl or Workload()
    slot_of = slots_for(cfg.nodes, MAIN_SHARE[wl.mix])
    sched = Schedule(np.zeros((cfg.ticks, cfg.nodes), dtype=np.uint8), slot_of)
    for slot in range(int(slot_of.max()) + 1):
        _fill_slot(cfg, rng, sched, slot, wl)
    return sched


def _ticks(cfg: SimConfig, seconds: float) -> int:
    return max(1, round(seconds / cfg.step_s))


def _fill_slot(cfg: SimConfig, rng: np.random.Generator, sched: Schedule, slot: int, wl: Workload) -> None:
    cols = np.flatnonzero(sched.slot_of == slot)
    big = slot == 0
    k = 0 if big else _ticks(cfg, float(rng.uniform(0, 4 * 3600)))
    while k < cfg.ticks:
        length = _ticks(cfg, float(rng.uniform(4, 9) * 86400 if big else rng.uniform(2, 12) * 3600))
        end = min(cfg.ticks, k + length)
        _run_job(cfg, rng, sched, cols, k, end, big, wl.checkpoint_s)
        gap = _ticks(cfg, float(rng.uniform(600, 7200)) * (1.0 if big else wl.idle_gap_scale))
        k = end + gap


def _run_job(
    cfg: SimConfig,
    rng: np.random.Generator,
    sched: Schedule,
    cols: NDArray[np.int64],
    k0: int,
    k1: int,
    big: bool,
    checkpoint_s: float = 150.0,
) -> None:
    """One job from k0 to k1: load, run with checkpoints, occasional restarts from checkpoint."""
    who = ",".join(str(c) for c in cols)
    sched.events.append(BenignEvent("job_start", who, cfg.ts(k0), cfg.ts(k0 + _ticks(cfg, 240))))
    if k1 < cfg.ticks:
        sched.events.append(BenignEvent("job_stop", who, cfg.ts(k1), cfg.ts(k1 + 1)))
    sched.phase[k0:k1, cols] = Phase.RUN
    sched.phase[k0 : min(k1, k0 + _ticks(cfg, 240)), cols] = Phase.LOAD
    every = _ticks(cfg, cfg.checkpoint_every_s if big else 3600.0)
    dur = _ticks(cfg, checkpoint_s)
    for c in range(k0 + every, k1 - dur, every):
        sched.phase[c : c + dur, cols] = Phase.CHECKPOINT
        if big:
            sched.checkpoints.append(cfg.ts(c))
        sched.events.append(BenignEvent("checkpoint", who, cfg.ts(c), cfg.ts(c + dur)))
    n_restart = rng.poisson(cfg.restarts_per_day * (k1 - k0) * cfg.step_s / 86400)
    for _ in range(n_restart):
        at = int(rng.integers(k0, max(k0 + 1, k1)))
        restart(cfg, sched, cols, at, k1)


def restart(cfg: SimConfig, sched: Schedule, cols: NDArray[np.int64], at: int, until: int) -> None:
    """A job restarted from its checkpoint: processes die, a few idle minutes, then a read burst."""
    down, load = _ticks(cfg, 240), _ticks(cfg, 240)
    running = sched.phase[min(at, cfg.ticks - 1), cols] != Phase.DRAINED
    live = cols[running]
    sched.phase[at : min(until, at + down), live] = Phase.IDLE
    sched.phase[at + down : min(until, at + down + load), live] = Phase.LOAD
    who = ",".join(str(c) for c in cols)
    sched.events.append(BenignEvent("job_restart", who, cfg.ts(at), cfg.ts(at + down + load)))


def drain(cfg: SimConfig, sched: Schedule, node: int, at: int, hours: float, why: str) -> None:
    """Node out of the job for repair or maintenance; it reboots (DCGM gap, counters reset) on the way."""
    until = min(cfg.ticks, at + _ticks(cfg, hours * 3600))
    sched.phase[at:until, node] = Phase.DRAINED
    reboot = min(until - 1, at + _ticks(cfg, 1800))
    for k in range(reboot, min(until, reboot + _ticks(cfg, 300))):
        sched.exporter_gap.add((k, node))
        sched.node_down.add((k, node))
    sched.reboot_ticks.add((min(until, reboot + _ticks(cfg, 300)), node))
    sched.events.append(BenignEvent(why, f"node-{node:02d}", cfg.ts(at), cfg.ts(until)))


def add_benign(cfg: SimConfig, rng: np.random.Generator, sched: Schedule) -> None:
    for _ in range(rng.poisson(cfg.drains_per_day * cfg.days)):
        drain(
            cfg,
            sched,
            int(rng.integers(cfg.nodes)),
            int(rng.integers(cfg.ticks)),
            rng.uniform(2, 8),
            "planned_drain",
        )
    for _ in range(rng.poisson(cfg.exporter_restarts_per_day * cfg.days)):
        node, at = int(rng.integers(cfg.nodes)), int(rng.integers(cfg.ticks))
        for k in range(at, min(cfg.ticks, at + int(rng.integers(2, 5)))):
            sched.exporter_gap.add((k, node))
        sched.events.append(BenignEvent("exporter_restart", f"node-{node:02d}", cfg.ts(at), cfg.ts(at + 4)))


def apply_failures(
    cfg: SimConfig, rng: np.random.Generator, sched: Schedule, failures: list[Failure]
) -> None:
    """What a failure does to the workload afterwards: the job restarts, the broken node is drained."""
    for f in failures:
        ftype = BY_NAME[f.type]
        if f.node == "*":
            cols = np.flatnonzero(sched.slot_of == 0)
            k0, k1 = cfg.tick_of(f.onset_ts), cfg.tick_of(f.end_ts)
            live = cols[sched.phase[k0, cols] != Phase.DRAINED]
            sched.phase[k0:k1, live] = Phase.CHECKPOINT  # the checkpoint cannot finish
            continue
        at = cfg.tick_of(f.end_ts) + 1
        if at >= cfg.ticks:
            continue
        cols = np.flatnonzero(sched.slot_of == sched.slot_of[f.node_index])
        if sched.phase[at, f.node_index] in (Phase.RUN, Phase.CHECKPOINT, Phase.LOAD):
            restart(cfg, sched, cols, at, cfg.ticks)
        if ftype.fatal:
            drain(cfg, sched, f.node_index, at, float(rng.uniform(3, 8)), "repair_drain")
