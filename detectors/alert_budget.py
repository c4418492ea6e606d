"""A false-alert budget: firing thresholds calibrated online against the fleet's own null of fused scores.

A fixed firing threshold holds a false-alert rate only on the physics it was tuned on; a fleet whose
counters are burstier or whose sensors are noisier pages more at the same threshold. So every entity's
fused score is cut into episodes (its sustained score, the least of its last `persist_ticks`, above
`floor` until the raw score falls back below it), and each episode's peak joins the null of its level
(GPUs, nodes) once `confirm_s` has passed without an Xid on its node and if it did not page: episodes of a
failure are not the null, and an alert's are left out too (a fault without an Xid, an Xid hours later),
so the tail is fitted on the fleet's sub-threshold episodes and extrapolated.

Peaks over `tail_from` (the most one family alone may weigh) are modelled with an exponential excess (a
generalised Pareto tail of shape 0, on a scale that is already -log10 p): at a threshold T, a level
pages for nothing at
    rate(T) = episodes over tail_from per node-day x exp(-(T - tail_from) / mean excess),
and each level's threshold is the least T that keeps its rate within half the budget, never below the
configured threshold (the calibration only ever makes a fleet quieter) and at most `max_fire`. Until the
null holds `min_node_days` of exposure and `min_episodes` episodes the configured threshold stands.
Everything is forgotten with `half_life_s` of event time, so a fleet that changes is followed.

The null is a handful of sums (`stats`); the thresholds are fitted (`fit`) at each tick, before it is
folded in, from the fleet's sums: this partition's alone, or every partition's added
(`fleet_null_stats.merge`), so every shard of a fleet pages at the same thresholds however it is split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Floats
from prexid.detectors.fleet_null import DAY, FleetNull
from prexid.detectors.fleet_null_stats import BUDGET_SUMS

LEVELS = ("gpu", "node")


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    pages_per_node_day: float = 0.005  # false pages a node may cost a day, GPU and node pages together
    floor: float = 4.0  # an episode is a sustained score above this (the resolve threshold)
    tail_from: float = 6.0  # the tail is fitted on peaks above this: one family alone is capped at it
    persist_ticks: int = 3  # as the lifecycle: what must be sustained to fire
    confirm_s: float = 6 * 3600.0  # an episode joins the null when no Xid followed within this (a
    # warning is linked to its Xid this long: a failing part ramps for hours)
    min_node_days: float = 4.0
    min_episodes: int = 10
    max_fire: float = 30.0
    prior_excess: float = 2.0  # mean excess over `tail_from`, at one episode's weight
    half_life_s: float = 7 * DAY


class AlertBudget(FleetNull):
    """Per-level firing thresholds that hold `pages_per_node_day` on the fleet's own null."""

    def __init__(self, config: BudgetConfig, fire: float) -> None:
        super().__init__(config.half_life_s)
        self.config = config
        self.fire = fire  # the configured threshold: the least any calibration gives
        self.recent = np.zeros((0, config.persist_ticks))  # each entity's last fused scores
        self.start = np.full(0, np.nan)  # the open episode's start, NaN when none
        self.peak = np.zeros(0)  # ... and its highest sustained score
        # closed episodes waiting for `confirm_s`: entity, start, end, peak, the threshold they met
        self.pending = np.zeros((0, 5))
        # the null per level, forgotten with `half_life_s`: episodes below the threshold they met, their
        # summed excess, pages no Xid followed; node-seconds watched (the denominator of both levels)
        self.episodes = np.zeros(2)
        self.excess = np.zeros(2)
        self.paged = np.zeros(2)
        self.node_seconds = 0.0
        self.thresholds = np.full(2, fire)
        self.fitted = np.zeros(BUDGET_SUMS)  # the (fleet's) sums of the last fit, for `null_rate`

    def _grow(self, grow: int) -> None:
        self.recent = np.vstack([self.recent, np.zeros((grow, self.config.persist_ticks))])
        self.start = np.r_[self.start, np.full(grow, np.nan)]
        self.peak = np.r_[self.peak, np.zeros(grow)]

    def observe(self, tick: float, fused: Floats, is_gpu: NDArray[np.bool_]) -> Floats:
        """Fold one tick's fused scores in; the firing threshold of each entity for this tick (as last
        `fit`, before the tick)."""
        cfg, n = self.config, len(fused)
        dt, fade = self._tick(tick, is_gpu)
        self.episodes *= fade
        self.excess *= fade
        self.paged *= fade
        self.node_seconds = self.node_seconds * fade + dt * float(np.count_nonzero(~is_gpu))

        self.recent[:n] = np.roll(self.recent[:n], 1, axis=1)
        self.recent[:n, 0] = fused
        sustained = self.recent[:n].min(axis=1)
        start, peak = self.start[:n], self.peak[:n]
        opening = ~np.isfinite(start) & (sustained > cfg.floor)
        start[opening] = tick
        open_ = np.isfinite(start)
        peak[open_] = np.maximum(peak[open_], sustained[open_])
        closing = np.flatnonzero(open_ & (fused < cfg.floor))
        if len(closing):
            fire = self.thresholds[self.level_of[closing]]
            ended = np.column_stack(
                [closing, start[closing], np.full(len(closing), tick), peak[closing], fire]
            )
            self.pending = np.vstack([self.pending, ended])
            start[closing], peak[closing] = np.nan, 0.0
        self._confirm(tick)
        return self.thresholds[self.level_of[:n]]

    def _confirm(self, tick: float) -> None:
        """Book the episodes whose `confirm_s` has passed, unless an Xid came on their node meanwhile."""
        cfg = self.config
        due = self.pending[:, 2] + cfg.confirm_s <= tick
        if not due.any():
            return
        done = self.pending[due]
        self.pending = self.pending[~due]
        ent, start, peak, fire = done[:, 0].astype(np.int64), done[:, 1], done[:, 3], done[:, 4]
        null = self.failed_at[ent] < start
        paged = null & (peak >= fire)
        quiet = null & ~paged & (peak > cfg.tail_from)  # fitted below the threshold: a page is left out
        level = self.level_of[ent]
        self.episodes += np.bincount(level[quiet], minlength=2)
        self.excess += np.bincount(level[quiet], peak[quiet] - cfg.tail_from, minlength=2)
        self.paged += np.bincount(level[paged], minlength=2)

    def stats(self) -> Floats:
        """This null's sufficient statistics (`fleet_null_stats.NullStats.budget`): episodes, excess and
        pages per level, node-seconds."""
        return np.asarray(np.r_[self.episodes, self.excess, self.paged, self.node_seconds], dtype=np.float64)

    def fit(self, sums: Floats | None = None) -> None:
        """The thresholds from the null's sums (`stats`; the fleet's, merged over partitions): the
        configured threshold until they hold `min_node_days` and a level `min_episodes`."""
        cfg = self.config
        self.fitted = self.stats() if sums is None else np.asarray(sums, dtype=np.float64)
        episodes, excess, node_days = self.fitted[0:2], self.fitted[2:4], float(self.fitted[6]) / DAY
        if node_days < cfg.min_node_days:
            self.thresholds = np.full(2, self.fire)
            return
        rate = episodes / node_days  # episodes over `tail_from` per node-day, per level
        scale = (excess + cfg.prior_excess) / (episodes + 1.0)
        with np.errstate(divide="ignore"):
            need = cfg.tail_from + scale * np.log(np.maximum(rate / (cfg.pages_per_node_day / 2), 1.0))
        ready = episodes >= cfg.min_episodes
        self.thresholds = np.where(ready, np.clip(need, self.fire, cfg.max_fire), self.fire)

    def null_rate(self) -> Floats:
        """Per level, the false pages a node-day the (fleet's) null of the last fit predicts at the
        current thresholds."""
        cfg = self.config
        episodes, excess = self.fitted[0:2], self.fitted[2:4]
        node_days = max(float(self.fitted[6]) / DAY, 1e-9)
        scale = (excess + cfg.prior_excess) / (episodes + 1.0)
        over = np.exp(-(self.thresholds - cfg.tail_from) / scale)
        return np.asarray(episodes / node_days * over, dtype=np.float64)

    def realised_rate(self) -> Floats:
        """Per level, pages a node-day that no Xid followed within `confirm_s`: false pages at most (a
        fault without an Xid, or with one hours later, counts here too)."""
        return np.asarray(self.paged / max(self.node_seconds / DAY, 1e-9), dtype=np.float64)

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {
            "recent": self.recent,
            "start": self.start,
            "peak": self.peak,
            "failed_at": self.failed_at,
            "pending": self.pending,
            "level_of": self.level_of,
            "null": np.r_[self.episodes, self.excess, self.paged, self.thresholds],
            "clock": np.array([self.node_seconds, self.last_tick]),
        }

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        self.recent = np.asarray(arrays["recent"], dtype=np.float64)
        self.start = np.asarray(arrays["start"], dtype=np.float64)
        self.peak = np.asarray(arrays["peak"], dtype=np.float64)
        self.failed_at = np.asarray(arrays["failed_at"], dtype=np.float64)
        self.pending = np.asarray(arrays["pending"], dtype=np.float64).reshape(-1, 5)
        self.level_of = np.asarray(arrays["level_of"], dtype=np.int64)
        null = np.asarray(arrays["null"], dtype=np.float64)
        self.episodes, self.excess, self.paged, self.thresholds = (
            null[i : i + 2].copy() for i in (0, 2, 4, 6)
        )
        clock = np.asarray(arrays["clock"], dtype=np.float64)
        self.node_seconds, self.last_tick = float(clock[0]), float(clock[1])
