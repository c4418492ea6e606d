"""Alert lifecycle per entity: inactive -> pending -> firing -> resolved, with hysteresis.

Firing needs the fused score above `fire` for `persist_ticks` consecutive ticks (one noisy scrape never
pages), unless the evidence carrying it is persistence already (`confirmed`: a hard-error ramp strongly
surprising on four bursts, each within minutes of the last, pages alone; so does fail-slow strongly
surprising on four scrapes behind, stalls minutes apart): that is not waited for a second time, as its
bursts or stalls minutes apart hold the score above `fire` for a tick or two each.
Resolving needs it below `resolve` (< fire) for `clear_ticks` ticks, and for `keep_firing_for_s` of
event time (Prometheus' `keep_firing_for`): a weakening HBM row books its errors in bursts minutes apart,
its held evidence decays below `resolve` between them, and the alert resolved and fired again up to four
times an hour on the same GPU (58 of 723 resolutions on tuning and report cells came back within half an
hour, most within five minutes), each a new page, and the Xid's lead time was read from the last of
them. Any tick at or above `resolve` while it is held keeps the alert firing. All state is arrays over
entities; Python only touches the few entities that change state in a tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Floats


class Phase(IntEnum):
    INACTIVE = 0
    PENDING = 1
    FIRING = 2


@dataclass(frozen=True, slots=True)
class LifecycleConfig:
    fire: float = 9.0
    resolve: float = 4.0
    persist_ticks: int = 3
    clear_ticks: int = 4
    keep_firing_for_s: float = 600.0  # the hard-error streak's gap (`FusionConfig.sustain_gap_s`)


@dataclass(frozen=True, slots=True)
class Transition:
    """An entity started or stopped firing at event time `at`."""

    entity: int
    firing: bool
    starts_at: float
    at: float
    fused: float


class Lifecycle:
    def __init__(self, config: LifecycleConfig | None = None) -> None:
        self.config = config or LifecycleConfig()
        self.phase = np.zeros(0, dtype=np.int8)
        self.run = np.zeros(0, dtype=np.int32)  # consecutive ticks above fire (pending) / below resolve
        self.since = np.full(0, np.nan)  # when the current pending/firing episode began
        self.quiet_from = np.full(0, np.nan)  # a firing entity's first tick of its run below resolve

    def ensure(self, n: int) -> None:
        have = len(self.phase)
        if n <= have:
            return
        grow = max(n, 2 * have) - have
        self.phase = np.r_[self.phase, np.zeros(grow, dtype=np.int8)]
        self.run = np.r_[self.run, np.zeros(grow, dtype=np.int32)]
        self.since = np.r_[self.since, np.full(grow, np.nan)]
        self.quiet_from = np.r_[self.quiet_from, np.full(grow, np.nan)]

    def step(
        self,
        fused: Floats,
        at: float,
        fire: Floats | None = None,
        confirmed: NDArray[np.bool_] | None = None,
    ) -> list[Transition]:
        """Advance every entity by one tick of fused scores; return the transitions it caused. `fire`:
        each entity's firing threshold this tick (a false-alert budget's), else the configured one;
        `confirmed`: entities whose score above it is sustained evidence already, fired at once."""
        cfg = self.config
        n = len(fused)
        self.ensure(n)
        phase, run, since, quiet_from = self.phase[:n], self.run[:n], self.since[:n], self.quiet_from[:n]
        above, below = fused >= (cfg.fire if fire is None else fire), fused < cfg.resolve

        start = (phase == Phase.INACTIVE) & above
        phase[start], run[start], since[start] = Phase.PENDING, 0, at
        pending = phase == Phase.PENDING
        run[pending & above] += 1
        drop = pending & ~above
        phase[drop], run[drop], since[drop] = Phase.INACTIVE, 0, np.nan
        fires = (phase == Phase.PENDING) & (run >= cfg.persist_ticks)
        if confirmed is not None:
            fires |= (phase == Phase.PENDING) & above & confirmed[:n]
        phase[fires], run[fires] = Phase.FIRING, 0

        firing = (phase == Phase.FIRING) & ~fires
        quiet_from[firing & ~below] = np.nan
        quiet_from[firing & below & np.isnan(quiet_from)] = at  # also a run restored without its start
        run[firing & below] += 1
        run[firing & ~below] = 0
        resolves = firing & (run >= cfg.clear_ticks) & (at - quiet_from >= cfg.keep_firing_for_s)

        out = [Transition(int(e), True, float(since[e]), at, float(fused[e])) for e in np.flatnonzero(fires)]
        out += [
            Transition(int(e), False, float(since[e]), at, float(fused[e])) for e in np.flatnonzero(resolves)
        ]
        phase[resolves], run[resolves], since[resolves] = Phase.INACTIVE, 0, np.nan
        quiet_from[resolves] = np.nan
        return out

    def firing(self) -> NDArray[np.intp]:
        return np.flatnonzero(self.phase == Phase.FIRING)

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {"phase": self.phase, "run": self.run, "since": self.since, "quiet_from": self.quiet_from}

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        self.phase = np.asarray(arrays["phase"], dtype=np.int8)
        self.run = np.asarray(arrays["run"], dtype=np.int32)
        self.since = np.asarray(arrays["since"], dtype=np.float64)
        self.quiet_from = np.asarray(arrays["quiet_from"], dtype=np.float64)
