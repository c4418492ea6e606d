"""Per-family calibration of surprise against the fleet's own null: what a family's p-values promise,
held to what its healthy entities actually show.

A family's p-values are only as good as its detector's model of the physics: a counter that ticks in
bursts, a noisy sensor or heat lagging the load make them optimistic, and a fixed firing threshold then
pages more on that fleet than on the one it was tuned on. Votes are plentiful where pages are rare, so
each (level, family) is calibrated where the data is: every tick an entity's held evidence of a family
(as the vote sees it, corrected for its series count) crosses up through a surprise level L is an
episode, and a p-value that means what it says crosses L at most once per scrape at chance 10^-L, i.e.
    nominal(L) = ticks per day x 10^-L episodes per entity-day.
Episodes join the null as they open, so a fleet calibrates within its first hours, and are taken back
if within `confirm_s` their node has an Xid or their entity pages (a failure's episodes and an alert's
are not the null). The realised rate over the nominal one is how optimistic the family's p-values
are, in -log10 p; episodes are taken at their Poisson lower bound (`sigmas`) and a prior of
`prior_entity_days` at the nominal rate is added, so a cold start and a handful of episodes move
nothing:
    excess(L) = log10((n - 2 sqrt(n) + prior) / (entity-days x nominal(L) + prior)),
and the family's capped vote is lowered by the largest excess over the levels (never raised:
calibration only ever makes the fleet quieter), so each level's episodes come no more often than its
p-values promise. The hard-error path (sustained evidence that pages alone) is judged the same way on
its own sustained episodes, booked only after `sustained_confirm_s` (a failing part's ramp must not
lower its own family even for a moment), and lowered before its cap (`Fusion.fused`). Everything is
forgotten with `half_life_s` of event time, so a fleet that changes is followed. All state is arrays
over (entity, family, level).

The null is its episode and exposure sums (`stats`); the shifts are fitted (`fit`) at each tick, before
it is folded in, from the fleet's sums: this partition's alone, or every partition's added
(`fleet_null_stats.merge`), so every shard of a fleet lowers a family alike however it is split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Floats, Ids
from prexid.detectors.fleet_null import DAY, FleetNull


@dataclass(frozen=True, slots=True)
class CalibrationConfig:
    levels: tuple[float, ...] = (3.0, 4.0, 5.0, 6.0)  # surprise levels whose crossings are counted
    step_s: float = 15.0  # one tick, one chance per scrape: the nominal rate's unit
    confirm_s: float = 6 * 3600.0  # an episode is taken back if an Xid or a page follows within this
    # a sustained hard-error ramp joins the null only once this has passed without an Xid on its node or
    # a page of its entity: as long as a warning is linked to its Xid (a failing part ramps for hours)
    sustained_confirm_s: float = 6 * 3600.0
    prior_entity_days: float = 1.0  # the cold start: this much exposure at the nominal rate
    sigmas: float = 2.0  # episodes counted at their Poisson lower bound: a few are no evidence
    half_life_s: float = 7 * DAY
    max_shift: float = 6.0


def _crossings(
    evidence: Floats, above: NDArray[np.bool_], levels: Floats, counted: NDArray[np.bool_]
) -> tuple[Ids, Ids, Ids]:
    """(entity, family, level) cells whose evidence crossed up through a level since the last tick, of
    those `counted`; `above` (entities, families, levels) is brought up to date. Only the entities at or
    over the lowest level now or at the last tick are looked at (levels ascend): a few in a quiet fleet."""
    n = len(evidence)
    rows = np.flatnonzero((evidence >= levels[0]).any(axis=1) | above[:n, :, 0].any(axis=1))
    over = evidence[rows, :, None] >= levels
    i, fam, lev = np.nonzero(over & ~above[rows] & counted[rows, :, None])
    above[rows] = over
    return rows[i], fam, lev


class FamilyCalibration(FleetNull):
    """Per (level, family) downward shift of surprise that holds each family's episodes to their nominal
    rate on the fleet's healthy entities."""

    def __init__(self, n_families: int, config: CalibrationConfig | None = None) -> None:
        self.config = config or CalibrationConfig()
        cfg = self.config
        super().__init__(cfg.half_life_s)
        self.n_families = n_families
        self.levels = np.asarray(cfg.levels, dtype=np.float64)
        k = len(self.levels)
        self.nominal = DAY / cfg.step_s * np.power(10.0, -self.levels)  # episodes per entity-day, by L
        self.above = np.zeros((0, n_families, k), dtype=bool)  # held evidence at or over each level
        # episodes booked within `confirm_s`, taken back if their node has an Xid or their entity pages:
        # entity, family, level index, start
        self.pending = np.zeros((0, 4))
        # the null, forgotten with `half_life_s`: episodes per (level, family, L); entity-days watched
        self.episodes = np.zeros((2, n_families, k))
        self.exposure = np.zeros((2, n_families))
        self.shift = np.zeros((2, n_families))  # what each (level, family)'s surprise is lowered by
        # The same for sustained evidence (the hard-error path that pages alone), booked once confirmed
        self.alerted_at = np.full(0, -np.inf)  # the last tick the entity was paging
        self.sustained_above = np.zeros((0, n_families, k), dtype=bool)
        self.sustained_pending = np.zeros((0, 4))
        self.sustained_episodes = np.zeros((2, n_families, k))
        self.sustained_shift = np.zeros((2, n_families))

    def _grow(self, grow: int) -> None:
        k = len(self.levels)
        self.above = np.concatenate([self.above, np.zeros((grow, self.n_families, k), dtype=bool)])
        self.alerted_at = np.r_[self.alerted_at, np.full(grow, -np.inf)]
        self.sustained_above = np.concatenate(
            [self.sustained_above, np.zeros((grow, self.n_families, k), dtype=bool)]
        )

    def failed(self, entities: Ids, at: float) -> None:
        """Also take back the entities' episodes booked before the Xid, within `confirm_s`."""
        super().failed(entities, at)
        self._retract(np.isin(self.pending[:, 0].astype(np.int64), entities) & (self.pending[:, 3] <= at))

    def per_entity(self, is_gpu: NDArray[np.bool_]) -> tuple[Floats, Floats]:
        """Each entity's shifts by family, (entities, families): what to take off its votes, and off its
        sustained evidence."""
        level = np.where(is_gpu, 0, 1)
        return (
            np.asarray(self.shift[level], dtype=np.float64),
            np.asarray(self.sustained_shift[level], dtype=np.float64),
        )

    def observe(
        self,
        tick: float,
        evidence: Floats,
        present: NDArray[np.bool_],
        is_gpu: NDArray[np.bool_],
        alerting: NDArray[np.bool_],
        sustained: NDArray[np.bool_] | None = None,
    ) -> None:
        """Fold one tick in: `evidence` (entities, families) as the vote sees it before any shift,
        `present` where an entity has series of a family, `alerting` the entities paging now,
        `sustained` the cells on the hard-error path (`Fusion.sustained`).

        Episodes are booked as they open, so a fleet calibrates within its first hours: one that turns
        out a failure's (an Xid on its node) or an alert's within `confirm_s` is taken back. The shifts
        move at the next `fit`."""
        cfg, n = self.config, len(evidence)
        dt, fade = self._tick(tick, is_gpu)
        self.episodes *= fade
        self.sustained_episodes *= fade
        watched = present & ~alerting[:, None]
        self.exposure *= fade
        self.exposure[0] += dt / DAY * watched[is_gpu].sum(axis=0)
        self.exposure[1] += dt / DAY * watched[~is_gpu].sum(axis=0)

        ent, fam, lev = _crossings(evidence, self.above, self.levels, watched)
        if len(ent):
            np.add.at(self.episodes, (self.level_of[ent], fam, lev), 1.0)
            opened = np.column_stack([ent, fam, lev, np.full(len(ent), tick)]).astype(np.float64)
            self.pending = np.vstack([self.pending, opened])
        paging = np.flatnonzero(alerting)
        if len(paging):
            self._retract(np.isin(self.pending[:, 0].astype(np.int64), paging))
        confirmed = int(np.searchsorted(self.pending[:, 3], tick - cfg.confirm_s, side="right"))
        self.pending = self.pending[confirmed:]  # in order of start; confirmed ones stay in the null
        self.alerted_at[:n][alerting] = tick
        if sustained is not None:
            self._sustained(tick, np.where(sustained & watched, evidence, 0.0))

    def _sustained(self, tick: float, evidence: Floats) -> None:
        """Sustained episodes wait `sustained_confirm_s` and join the null unless their node had an Xid
        or their entity paged meanwhile: a failing part's ramp lowers nothing even for a moment."""
        ent, fam, lev = _crossings(evidence, self.sustained_above, self.levels, evidence > 0.0)
        if len(ent):
            opened = np.column_stack([ent, fam, lev, np.full(len(ent), tick)]).astype(np.float64)
            self.sustained_pending = np.vstack([self.sustained_pending, opened])
        due = self.sustained_pending[:, 3] + self.config.sustained_confirm_s <= tick
        if not due.any():
            return
        done = self.sustained_pending[due]
        self.sustained_pending = self.sustained_pending[~due]
        ent, fam, lev = (done[:, i].astype(np.int64) for i in range(3))
        start = done[:, 3]
        null = (self.failed_at[ent] < start) & (self.alerted_at[ent] < start)
        weight = np.exp2(-(tick - start[null]) / self.config.half_life_s)
        np.add.at(self.sustained_episodes, (self.level_of[ent[null]], fam[null], lev[null]), weight)

    def _retract(self, rows: NDArray[np.bool_]) -> None:
        """Take these pending episodes back out of the null, at the weight they have faded to."""
        if not rows.any():
            return
        gone = self.pending[rows]
        self.pending = self.pending[~rows]
        ent, fam, lev = (gone[:, i].astype(np.int64) for i in range(3))
        weight = np.exp2(-(self.last_tick - gone[:, 3]) / self.config.half_life_s)
        np.add.at(self.episodes, (self.level_of[ent], fam, lev), -np.minimum(weight, 1.0))
        np.maximum(self.episodes, 0.0, out=self.episodes)

    def stats(self) -> tuple[Floats, Floats, Floats]:
        """This null's sufficient statistics (`fleet_null_stats.NullStats`): episodes per (level,
        family, surprise level), entity-days per (level, family), sustained episodes."""
        return self.episodes, self.exposure, self.sustained_episodes

    def fit(self, sums: tuple[Floats, Floats, Floats] | None = None) -> None:
        """The shifts from the null's sums (`stats`; the fleet's, merged over partitions)."""
        episodes, exposure, sustained = self.stats() if sums is None else sums
        self.shift = self._excess(episodes, exposure)
        self.sustained_shift = self._excess(sustained, exposure)

    def _excess(self, episodes: Floats, exposure: Floats) -> Floats:
        """log10 of the realised over the nominal rate, the largest over the levels, at least 0."""
        cfg = self.config
        prior = cfg.prior_entity_days * self.nominal
        low = np.maximum(episodes - cfg.sigmas * np.sqrt(episodes), 0.0)
        excess = np.log10((low + prior) / (exposure[:, :, None] * self.nominal + prior))
        return np.asarray(np.clip(excess.max(axis=2), 0.0, cfg.max_shift), dtype=np.float64)

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {
            "above": self.above,
            "level_of": self.level_of,
            "pending": self.pending,
            "episodes": self.episodes,
            "exposure": self.exposure,
            "shift": self.shift,
            "clock": np.array([self.last_tick]),
            "failed_at": self.failed_at,
            "alerted_at": self.alerted_at,
            "sustained_above": self.sustained_above,
            "sustained_pending": self.sustained_pending,
            "sustained_episodes": self.sustained_episodes,
            "sustained_shift": self.sustained_shift,
        }

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        k = len(self.levels)
        self.above = np.asarray(arrays["above"], dtype=bool).reshape(-1, self.n_families, k)
        self.level_of = np.asarray(arrays["level_of"], dtype=np.int64)
        self.pending = np.asarray(arrays["pending"], dtype=np.float64).reshape(-1, 4)
        self.episodes = np.asarray(arrays["episodes"], dtype=np.float64).reshape(2, self.n_families, k)
        self.exposure = np.asarray(arrays["exposure"], dtype=np.float64).reshape(2, self.n_families)
        self.shift = np.asarray(arrays["shift"], dtype=np.float64).reshape(2, self.n_families)
        self.last_tick = float(np.asarray(arrays["clock"], dtype=np.float64)[0])
        self.failed_at = np.asarray(arrays["failed_at"], dtype=np.float64)
        self.alerted_at = np.asarray(arrays["alerted_at"], dtype=np.float64)
        self.sustained_above = np.asarray(arrays["sustained_above"], dtype=bool).reshape(
            -1, self.n_families, k
        )
        self.sustained_pending = np.asarray(arrays["sustained_pending"], dtype=np.float64).reshape(-1, 4)
        self.sustained_episodes = np.asarray(arrays["sustained_episodes"], dtype=np.float64).reshape(
            2, self.n_families, k
        )
        self.sustained_shift = np.asarray(arrays["sustained_shift"], dtype=np.float64).reshape(
            2, self.n_families
        )
