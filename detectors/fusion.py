"""Multi-signal fusion: per-entity evidence by signal family, combined across families per tick.

Within a family the strongest series speaks for it (the correlated metrics of one GPU are one vote, not
many), its vote lowered by log10 of the number of series it was the strongest of (Bonferroni: the
smallest of 15 utilisation p-values is not as rare as the one PCIe replay counter's). Across families,
capped surprises (-log10 p) of the families that clear `vote_min` are summed, so two independent
families at p=1e-4 weigh as much as one at 1e-8. Family evidence is max-held and decays with an
event-time half-life, which is what lets scrapes of different series, arriving a few seconds apart,
meet in one vote.

Entities are GPUs and nodes alike (a node's own series, node-exporter's, form the node entity); the
registry decides which entity a series belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.bank import Evidence
from prexid.detectors.base import Floats, Ids
from prexid.detectors.fleet_vote import Summary, Verdict, judge
from prexid.detectors.job_io import JobIO
from prexid.detectors.signals import (
    HARD_ERROR_FAMILIES,
    INTERMITTENT_FAMILIES,
    JOB_COUPLED,
    LOAD_COUPLED,
    LOAD_COUPLED_EITHER_WAY,
    N_FAMILIES,
    PER_DEVICE_FAMILIES,
    SAME_SENSOR_FAMILIES,
    SHARED_CAUSE_FAMILIES,
    STALL_FAMILIES,
    SUSTAINED_FAMILIES,
    WORKLOAD_FAMILIES,
    Family,
)

SURPRISE_CAP = 12.0


@dataclass(frozen=True, slots=True)
class FusionConfig:
    step_s: float = 15.0  # evaluation tick, one scrape interval
    half_life_s: float = 120.0  # decay of held family evidence
    # decay of the load's recent evidence (`recent_up` / `recent_down`): a job phase that moved the load
    # once still explains the heat, latency and retransmits that follow it while they settle
    load_memory_half_life_s: float = 900.0
    vote_min: float = 2.0  # a family votes when its surprise is at least this (p <= 0.01)
    family_cap: float = 6.0  # below the firing threshold: one family alone never pages
    workload_cap: float = 4.0  # the job's own signals: a second opinion, never the main evidence
    # Hard error families may page alone once their errors are surprising on `sustain_ticks` ticks in a
    # row, quiet ticks between bursts allowed while the held evidence stays strong (a ramp, not one
    # burst of a leaky part).
    hard_error_cap: float = 10.0
    sustain_ticks: int = 4
    sustain_surprise: float = 4.0
    # Hard errors arrive in bursts minutes apart (a weakening HBM row books an SBE every few minutes for
    # hours before it fails): their streak counts strongly surprising bursts, ended only by this long
    # without one, and once sustained such a family fires without waiting `persist_ticks` again. Not
    # in the first `burst_after_s` of event time: the error counters' fleet prior learns what a leaky
    # part's episodes look like only once the first ones (up to an hour long) are over, and until then
    # a leaky part's bursts are surprising enough to be strung into a ramp.
    sustain_gap_s: float = 600.0
    burst_after_s: float = 7200.0
    # Fail-slow's evidence comes on the scrapes behind only (stalling firmware: one in several): its streak
    # outlasts the quiet scrapes while its held evidence is at least this (p 0.1 once decayed at
    # `half_life_s`: a stall at p 1e-6 bridges about five minutes, one at 1e-12 about seven).
    intermittent_hold: float = 1.0
    # A decisive event (a row remap pending or failed: `signals.DECISIVE_METRICS`) holds its family at the
    # hard-error cap, sustained, for this long: one counter step is a page by itself.
    decisive_hold_s: float = 600.0
    # A family voting on several entities of one level (GPUs, or nodes) at once has a shared cause: at
    # least `shared_min_votes` of that level and `shared_share` of those carrying it. Hysteresis: it
    # stays shared until votes fall below half of that.
    shared_min_gpu_votes: int = 5
    shared_min_node_votes: int = 3  # a small job's checkpoint moves three or four nodes together
    shared_share: float = 0.03
    common_mode_frac: float = 0.3  # rising on this share of its entities: a cluster-wide event
    # a `signals.STALL_FAMILIES` family voting rising with its own error counters on this many entities
    # at once is a cluster event whatever their share (a stall hits only the nodes using the server)
    stall_min_votes: int = 2
    node_mode_frac: float = 0.5  # a family voting on this share of one node's GPUs is a node-level cause


def family_mask(families: frozenset[Family]) -> NDArray[np.bool_]:
    """A (family,) mask of these families: for (entity, family) tables."""
    out = np.zeros(N_FAMILIES, dtype=bool)
    out[[int(f) for f in families]] = True
    return out


def _sum_rows(values: NDArray[np.bool_], rows: NDArray[np.int64], n_rows: int) -> Floats:
    """Row i of `values` added into row rows[i] of an (n_rows, families) table: `np.add.at` with whole
    rows, by one bincount (np.add.at took 20x as long, 4% of a replica's time)."""
    width = values.shape[1]
    cells = (rows[:, None] * width + np.arange(width)).ravel()
    sums = np.bincount(cells, weights=values.ravel(), minlength=n_rows * width)
    return np.asarray(sums, dtype=np.float64).reshape(n_rows, width)


def surprise(p: Floats) -> Floats:
    """-log10 p, capped, so p=1 gives 0 and p=1e-12 gives 12."""
    return np.minimum(-np.log10(np.clip(p, 1e-300, 1.0)), SURPRISE_CAP)


def score01(fused: Floats, fire_threshold: float) -> Floats:
    """Map fused surprise to a 0..1 score: 0.5 exactly at the firing threshold."""
    return 1.0 - np.exp2(-fused / fire_threshold)


class Fusion:
    """Held per-(entity, family) evidence and its fusion into one score per entity."""

    def __init__(self, config: FusionConfig | None = None) -> None:
        self.config = config or FusionConfig()
        self.held = np.zeros((0, N_FAMILIES))
        self.top_series = np.full((0, N_FAMILIES), -1, dtype=np.int64)
        self.top_value = np.full((0, N_FAMILIES), np.nan)
        self.top_rising = np.zeros((0, N_FAMILIES), dtype=bool)  # the top series is above its baseline
        self.top_error = np.zeros((0, N_FAMILIES), dtype=bool)  # ... is an error counter (never the load's)
        # Evidence as held but never cleared by shared causes, by direction: what the load did in the last
        # minutes, so a checkpoint's I/O, cleared as shared at once, still explains the latency, heat and
        # retransmits it leaves, whichever way its other series moved meanwhile.
        self.recent_up = np.zeros((0, N_FAMILIES))
        self.recent_down = np.zeros((0, N_FAMILIES))
        self.explained = np.zeros((0, N_FAMILIES), dtype=bool)  # held evidence already judged the load's
        # error counters' own evidence, max-held and decaying as `held` but never cleared as shared: an
        # entity whose family carries errors (NFS timeouts) votes in the cluster vote whatever its load did
        self.error_held = np.zeros((0, N_FAMILIES))
        self.last_tick = -np.inf
        self.fresh = np.zeros((0, N_FAMILIES))  # strongest surprise ingested since the last tick
        self.fresh_top = np.zeros((0, N_FAMILIES))  # ... from the series holding the cell's evidence
        self.streak = np.zeros((0, N_FAMILIES), dtype=np.int32)  # surprising evidence, fresh, in a row
        self.workload_shift_at = -np.inf  # last tick a workload family moved on much of the cluster
        self.job_io = JobIO()  # cluster-wide storage rises timed against the job's phase changes
        self.latched_at = np.full((0, N_FAMILIES), -np.inf)  # the last decisive event per cell (`latch`)
        self.strong_at = np.full((0, N_FAMILIES), -np.inf)  # the last tick of strong fresh evidence
        self.first_tick = np.inf  # event time this fusion was first evaluated at (`burst_after_s`)
        self.present = np.zeros((0, N_FAMILIES), dtype=bool)  # entity has series of this family
        self.n_series = np.zeros((0, N_FAMILIES), dtype=np.int64)  # ... and how many (`add_series`)
        self.parent = np.full(0, -1, dtype=np.int64)  # a GPU's node entity; -1 for nodes themselves
        self.common = np.zeros(N_FAMILIES, dtype=bool)  # families common-mode at the last tick
        self.shared_levels = np.zeros((2, N_FAMILIES), dtype=bool)  # ... at the GPU / node level
        self.common_share = np.zeros(N_FAMILIES)  # share of a family's entities voting at the last tick
        self.rising_share = np.zeros(N_FAMILIES)  # ... voting with their top series above its baseline
        self.stalled_votes = np.zeros(N_FAMILIES)  # ... rising with the family's error counters too
        self.at_tick = self.held.copy()
        self.alone = np.zeros(0)  # per entity, its strongest sustained family's capped vote (`fused`)
        self.alone_hard = np.zeros(0)  # ... of the hard-error families, once bursts count (`confirmed`)
        self.alone_intermittent = np.zeros(0)  # ... of fail-slow (`INTERMITTENT_FAMILIES`; `confirmed`)
        # per (entity, family), what the family calibration takes off its vote, and off its evidence on
        # the hard-error path (`apply`); and which cells were on that path at the last tick
        self.shift = np.zeros((0, N_FAMILIES))
        self.sustained_shift = np.zeros((0, N_FAMILIES))
        self.sustained = np.zeros((0, N_FAMILIES), dtype=bool)

    def ensure(self, n_entities: int) -> None:
        have = len(self.held)
        if n_entities <= have:
            return
        grow = n_entities - have  # exact: spare rows would dilute the common-mode share
        self.held = np.vstack([self.held, np.zeros((grow, N_FAMILIES))])
        self.top_series = np.vstack([self.top_series, np.full((grow, N_FAMILIES), -1, dtype=np.int64)])
        self.top_value = np.vstack([self.top_value, np.full((grow, N_FAMILIES), np.nan)])
        self.present = np.vstack([self.present, np.zeros((grow, N_FAMILIES), dtype=bool)])
        self.n_series = np.vstack([self.n_series, np.zeros((grow, N_FAMILIES), dtype=np.int64)])
        self.top_rising = np.vstack([self.top_rising, np.zeros((grow, N_FAMILIES), dtype=bool)])
        self.top_error = np.vstack([self.top_error, np.zeros((grow, N_FAMILIES), dtype=bool)])
        self.recent_up = np.vstack([self.recent_up, np.zeros((grow, N_FAMILIES))])
        self.recent_down = np.vstack([self.recent_down, np.zeros((grow, N_FAMILIES))])
        self.explained = np.vstack([self.explained, np.zeros((grow, N_FAMILIES), dtype=bool)])
        self.error_held = np.vstack([self.error_held, np.zeros((grow, N_FAMILIES))])
        self.fresh = np.vstack([self.fresh, np.zeros((grow, N_FAMILIES))])
        self.fresh_top = np.vstack([self.fresh_top, np.zeros((grow, N_FAMILIES))])
        self.streak = np.vstack([self.streak, np.zeros((grow, N_FAMILIES), dtype=np.int32)])
        self.parent = np.r_[self.parent, np.full(grow, -1, dtype=np.int64)]
        self.latched_at = np.vstack([self.latched_at, np.full((grow, N_FAMILIES), -np.inf)])
        self.strong_at = np.vstack([self.strong_at, np.full((grow, N_FAMILIES), -np.inf)])

    def add_series(self, entity: Ids, family: NDArray[np.uint8], count: int = 1) -> None:
        """Count newly registered series per (entity, family) (`count=-1`: expired ones leave); each also
        counts for its entity's liveness (staleness evidence of any series lands there)."""
        known = (entity >= 0) & (family < N_FAMILIES)
        ent, fam = entity[known], family[known].astype(np.int64)
        np.add.at(self.n_series, (ent, fam), count)
        np.add.at(self.n_series[:, Family.LIVENESS], ent[fam != Family.LIVENESS], count)

    def ingest(
        self, ev: Evidence, entity: Ids, family: NDArray[np.uint8], errors: NDArray[np.bool_] | None = None
    ) -> None:
        """Max-hold each sample's surprise into its (entity, family) cell and remember the top series;
        `errors` marks samples of error counters (a fault whatever the load does, see `load_coupled`)."""
        s = surprise(ev.p)
        known = entity >= 0
        self.present[entity[known], family[known]] = True
        hot = (s > 0) & known
        if not hot.any():
            return
        ent, fam, s = entity[hot], family[hot].astype(np.int64), s[hot]
        flat = self.held.reshape(-1)
        cells = ent * N_FAMILIES + fam
        np.maximum.at(flat, cells, s)
        np.maximum.at(self.fresh.reshape(-1), cells, s)
        up = ev.up()[hot]
        np.maximum.at(self.recent_up.reshape(-1), cells[up], s[up])
        np.maximum.at(self.recent_down.reshape(-1), cells[~up], s[~up])
        if errors is not None:
            err = errors[hot]
            np.maximum.at(self.error_held.reshape(-1), cells[err], s[err])
        won = s >= flat[cells]
        top = cells[won]
        # new top evidence the other way, or from an error counter, is judged afresh against the load; the
        # same movement going on (heat still falling a quarter of an hour after the CPU load eased, on a
        # sensor's thermal lag) stays the load's while its evidence holds, however its surprise grows
        turned = self.top_rising.reshape(-1)[top] != up[won]
        self.top_series.reshape(-1)[top] = ev.ids[hot][won]
        self.top_value.reshape(-1)[top] = ev.values[hot][won]
        self.top_rising.reshape(-1)[top] = up[won]
        self.top_error.reshape(-1)[top] = False if errors is None else errors[hot][won]
        self.explained.reshape(-1)[top] &= ~turned & ~self.top_error.reshape(-1)[top]
        own = ev.ids[hot] == self.top_series.reshape(-1)[cells]  # the cell's strongest series speaking
        np.maximum.at(self.fresh_top.reshape(-1), cells[own], s[own])

    def latch(self, entity: Ids, family: NDArray[np.uint8], at: Floats) -> None:
        """Decisive events (a row remap pending, failed, or for an uncorrectable error): their cells page
        alone for `decisive_hold_s`, at the hard-error cap, as sustained hard errors do."""
        if len(entity):
            np.maximum.at(self.latched_at, (entity, family.astype(np.int64)), at)

    def evaluate(self, tick: float) -> Floats:
        """Fused score per entity at `tick`, judged on this fusion's own entities alone (one process
        holding the whole cluster): `summarise`, `judge` its counts, `apply` the verdict."""
        return self.apply(tick, self.judge(self.summarise(tick)))

    def summarise(self, tick: float) -> Summary:
        """First half of a tick: the counts the shared-cause and cluster votes are judged on.

        Evidence held from before a gap in the data is aged by the whole gap first; load coupling and
        node-level causes are a node's own business and settled here (see `lift_node_causes`).

        The cluster vote (`rising`) leaves out an entity whose family rose with its own job
        (`job_coupled`) unless the family carries error counters' evidence too (NFS timeouts: a stall,
        whatever the job did). Whether a family is shared, and so cleared, is judged on every vote.
        """
        cfg = self.config
        if np.isfinite(self.last_tick) and tick - self.last_tick > cfg.step_s:
            self.decay(tick - self.last_tick - cfg.step_s)
        erring = self.error_held >= cfg.vote_min
        own = ~self.job_coupled() | erring
        self.lift_node_causes(self.load_coupled())
        voting = self.held >= cfg.vote_min
        return Summary.of(tick, voting, self.top_rising & own, self.present, self.parent >= 0, erring)

    def wide_rising(self) -> NDArray[np.bool_]:
        """Per family: common-mode at the last tick and rising on at least `common_mode_frac` of its
        entities (a cluster-wide event, `cluster.py`)."""
        return np.asarray(self.common & (self.rising_share >= self.config.common_mode_frac))

    def judge(self, summary: Summary, previous: NDArray[np.bool_] | None = None) -> Verdict:
        """The verdict of `summary`'s counts (this fusion's own, or a fleet's merged) under this config,
        with the `previous` verdict's shared families as hysteresis (by default this fusion's last)."""
        cfg = self.config
        last = self.shared_levels if previous is None else previous
        return judge(summary, last, cfg.shared_min_gpu_votes, cfg.shared_min_node_votes, cfg.shared_share)

    def apply(self, tick: float, verdict: Verdict, shift: tuple[Floats, Floats] | None = None) -> Floats:
        """Second half of a tick: clear the families `verdict` calls shared, then fuse and age.

        A family voting on many entities of a level at once has a shared cause (a checkpoint, a job
        restart, a storage stall): it is evidence against no single GPU, so its held evidence is cleared
        for everyone at that level, before its decaying tail could leak into a few entities' sums. The
        verdict may be the fleet's (all partitions' counts merged) or this fusion's own (`evaluate`).
        Load coupling is not consulted for it: an NFS storm begins with a checkpoint's writes, so
        coupling would explain away the very storm the cluster alert is for.

        `shift`: surprise the family calibration takes off each (entity, family) cell's capped vote, and
        off its evidence on the hard-error path, before that cap (`detectors/family_calibration.py`);
        None takes off nothing.
        """
        cfg = self.config
        self.shift, self.sustained_shift = (
            (np.zeros_like(self.held), np.zeros_like(self.held)) if shift is None else shift
        )
        self.shared_levels = verdict.shared_levels()
        self.common = np.asarray(self.shared_levels.any(axis=0))
        self.common_share = np.asarray(verdict.common_share, dtype=np.float64)
        self.rising_share = np.asarray(verdict.rising_share, dtype=np.float64)
        self.stalled_votes = np.asarray(verdict.stalled or np.zeros(N_FAMILIES), dtype=np.float64)
        if (self.common & family_mask(WORKLOAD_FAMILIES)).any():
            self.workload_shift_at = tick
        self.job_io.step(
            tick, bool(self.wide_rising()[family_mask(STALL_FAMILIES)].any()), self.workload_shift_at
        )
        for level, rows in enumerate((self.parent >= 0, self.parent < 0)):
            self.held[np.ix_(rows, self.shared_levels[level])] = 0.0
        self.first_tick = min(self.first_tick, tick)
        self.streak = self.sustain_streak(tick)
        latched = tick - self.latched_at <= cfg.decisive_hold_s
        if latched.any():  # at the cap once the series count's correction is taken off
            floor = cfg.hard_error_cap + np.log10(np.maximum(self.n_series, 1))
            self.held = np.where(latched, np.maximum(self.held, floor), self.held)
            self.streak = np.where(latched, np.maximum(self.streak, cfg.sustain_ticks), self.streak).astype(
                np.int32
            )
            self.shift = np.where(latched, 0.0, self.shift)  # a decisive event is never calibrated away
            self.sustained_shift = np.where(latched, 0.0, self.sustained_shift)
        self.fresh[:] = 0.0
        self.fresh_top[:] = 0.0
        self.at_tick = self.corrected()  # what the vote saw, for explanations
        fused = self.fused(self.at_tick, self.explained)  # the load coupling `summarise` found
        if not self.bursting(tick):
            self.alone_hard[:] = 0.0
        self.decay(cfg.step_s)
        self.last_tick = tick
        return fused

    def confirmed(self, fire: float) -> NDArray[np.bool_]:
        """Entities whose score reaches `fire` on a sustained family's vote alone, which is persistence
        already: a hard-error ramp once bursts count, or fail-slow, whose streak counts scrapes behind
        that its pace judged strongly surprising (stalls minutes apart hold the score above `fire` for a
        tick or two only: waiting for more would wait for the next stall). The lifecycle fires them at
        once."""
        return np.asarray(np.maximum(self.alone_hard, self.alone_intermittent) >= fire)

    def bursting(self, tick: float) -> bool:
        """Whether hard errors' bursts minutes apart count as one ramp yet (`burst_after_s`)."""
        return tick - self.first_tick >= self.config.burst_after_s

    def sustain_streak(self, tick: float) -> NDArray[np.int32]:
        """Ticks with strongly surprising fresh evidence, in a row: a tick without keeps the streak while
        the held evidence is still strong (errors arrive in bursts, not every scrape); faded held
        evidence, or weak fresh evidence from the very series holding it, ends it. A sibling series'
        weak sample (a row remapped while SBEs ramp, both memory ECC) says nothing of the ramp. Once
        `bursting`, a hard-error family's streak lasts while its last strong burst is at most
        `sustain_gap_s` old: a ramp's bursts come minutes apart. Fail-slow's lasts while its held evidence
        has not faded out (`intermittent_hold`), from the first tick: stalling firmware is behind its peers
        on one scrape in several, and its pace detector has judged the count of scrapes behind against the
        GPU's own pace already (a strong one is no chance lag). A stronger stall bridges a longer gap; a
        lone lag long after a GPU stopped stalling does not revive its streak."""
        cfg = self.config
        strong = self.fresh >= cfg.sustain_surprise
        self.strong_at = np.where(strong, tick, self.strong_at)
        weakened = (self.fresh_top > 0.0) & (self.fresh_top < cfg.sustain_surprise)
        waiting = ~weakened & (self.held >= cfg.sustain_surprise)
        if self.bursting(tick):
            waiting |= family_mask(HARD_ERROR_FAMILIES) & (tick - self.strong_at <= cfg.sustain_gap_s)
        waiting |= ~weakened & family_mask(INTERMITTENT_FAMILIES) & (self.held >= cfg.intermittent_hold)
        return np.where(strong, self.streak + 1, np.where(waiting, self.streak, 0)).astype(np.int32)

    def load_coupled(self) -> NDArray[np.bool_]:
        """(entity, family) cells of a `LOAD_COUPLED` family voting the same way as one of its load
        families moved on the same entity in the last minutes (of a `LOAD_COUPLED_EITHER_WAY` one, voting
        while one moved at all): the load's evidence, not the family's own.

        The load is read from `recent_up` / `recent_down`, which shared causes never clear: any of its
        series moving the family's way counts (a checkpoint's NFS writes rise while its fabric traffic
        falls; heat still falling a minute after a power dip, while power already climbs back, is the
        dip's). All is judged before this tick's clearing and node lifting: a checkpoint's I/O, cleared
        as shared at once, still explains the latency, retransmits and heat it leaves behind, and the
        heat of a job starting on every GPU of a node is not credited to the node as a cooling fault.
        A cell once explained stays so while its evidence holds, until evidence the other way (or from
        an error counter) tops it: a sensor's thermal lag outlasts the load's memory, and heat still
        falling the same way, ever more surprising to its own baseline, is the same movement. A cell
        whose strongest series is an error counter is never the load's.
        """
        moved = self._moved_with(LOAD_COUPLED) | self._moved_with(LOAD_COUPLED_EITHER_WAY, either_way=True)
        out = (self.explained & (self.held >= self.config.vote_min)) | moved
        self.explained = out
        return out

    def job_coupled(self) -> NDArray[np.bool_]:
        """(entity, family) cells of a `JOB_COUPLED` family voting the same way as the entity's own job
        moved in the last minutes (judged afresh every tick): that job's regime, not a shared fault."""
        return self._moved_with(JOB_COUPLED)

    def _moved_with(
        self, coupling: dict[Family, tuple[Family, ...]], either_way: bool = False
    ) -> NDArray[np.bool_]:
        """Voting cells of each family of `coupling` whose strongest series moved the way one of its load
        families did on the same entity lately (`either_way`: while one moved at all); a top series
        that is an error counter never did."""
        vote_min = self.config.vote_min
        voting = self.held >= vote_min
        out = np.zeros_like(voting)
        for family, loads in coupling.items():
            rising = self.top_rising[:, family]
            for load in loads:
                up, down = self.recent_up[:, load], self.recent_down[:, load]
                moved = (np.maximum(up, down) if either_way else np.where(rising, up, down)) >= vote_min
                out[:, family] |= voting[:, family] & moved & ~self.top_error[:, family]
        return out

    def lift_node_causes(self, coupled: NDArray[np.bool_]) -> None:
        """Move evidence shared by most of a node's GPUs up to the node entity.

        Several GPUs of one node moving together (a PCIe or NVLink switch, the node's cooling) are one
        node fault, not several GPU faults: a shared-cause family is credited to the node entity and
        cleared from its GPUs; a workload or load-coupled family (a single-node job's phase) is only
        cleared; per-device families (ECC, Xid) stay with their GPU.
        """
        gpus = np.flatnonzero(self.parent >= 0)
        if not len(gpus):
            return
        nodes = self.parent[gpus]
        hot = self.held[gpus] >= self.config.vote_min
        votes = _sum_rows(hot, nodes, len(self.held))
        carriers = _sum_rows(self.present[gpus], nodes, len(self.held))
        node_wide = (votes >= 2) & (votes >= self.config.node_mode_frac * carriers)  # never one GPU alone
        moved = node_wide[nodes] & hot  # (gpu, family) cells explained by their node
        if not moved.any():
            return
        shared, per_device = family_mask(SHARED_CAUSE_FAMILIES), family_mask(PER_DEVICE_FAMILIES)
        rows, fams = np.nonzero(moved & shared & ~coupled[gpus])  # a load-coupled move is the job's
        credit = self.held[gpus[rows], fams]
        cells = nodes[rows] * N_FAMILIES + fams
        flat = self.held.reshape(-1)
        np.maximum.at(flat, cells, credit)
        won = credit >= flat[cells]
        self.top_series.reshape(-1)[cells[won]] = self.top_series[gpus[rows], fams][won]
        self.top_value.reshape(-1)[cells[won]] = self.top_value[gpus[rows], fams][won]
        self.present[nodes[rows], fams] = True
        clear_rows, clear_fams = np.nonzero(moved & ~per_device)
        self.held[gpus[clear_rows], clear_fams] = 0.0

    def corrected(self) -> Floats:
        """Held evidence less log10 of the series each family's strongest one was picked from.

        Only the vote is corrected: whether a family moves on many entities at once (shared causes) or
        with the load (coupling) is judged on the evidence as held, so a checkpoint that makes one of a
        node's many network series jump is still recognised everywhere at once.
        """
        return np.maximum(self.held - np.log10(np.maximum(self.n_series, 1)), 0.0)

    def fused(self, evidence: Floats, coupled: NDArray[np.bool_]) -> Floats:
        """Fused surprise per entity: sum of the capped held evidence of families that vote, the
        workload families (utilisation, power, host load move together) counting as one vote, joined by
        the load-coupled cells (`load_coupled`) and by fail-slow evidence, which is not capped as a
        workload vote is: it may page alone once sustained, as ramping hardware errors may. Families
        reading one sensor (`SAME_SENSOR_FAMILIES`) are one vote too, and no entity scores less than its
        strongest sustained family's vote alone."""
        cfg = self.config
        sustained = (self.streak >= cfg.sustain_ticks) & family_mask(SUSTAINED_FAMILIES)
        self.sustained = sustained
        # a family's vote lowered under its cap; a ramp of errors under its own calibration, before the
        # cap, so headroom above it is spent first
        capped = np.where(
            sustained,
            np.minimum(evidence - self.sustained_shift, cfg.hard_error_cap),
            np.minimum(evidence, cfg.family_cap) - self.shift,
        )
        votes = np.where(capped >= cfg.vote_min, capped, 0.0)
        self.alone = np.where(sustained, votes, 0.0).max(axis=1, initial=0.0)
        hard = sustained & family_mask(HARD_ERROR_FAMILIES)
        self.alone_hard = np.where(hard, votes, 0.0).max(axis=1, initial=0.0)
        intermittent = sustained & family_mask(INTERMITTENT_FAMILIES)
        self.alone_intermittent = np.where(intermittent, votes, 0.0).max(axis=1, initial=0.0)
        load = np.where(coupled, votes, 0.0)
        own = np.where(coupled, 0.0, votes)
        job = np.maximum(votes[:, family_mask(WORKLOAD_FAMILIES)].max(axis=1, initial=0.0), load.max(axis=1))
        # a GPU behind its peers is the job's signals too (one vote with them), but not its phase
        job = np.maximum(np.minimum(job, cfg.workload_cap), votes[:, Family.FAIL_SLOW])
        sensor = own[:, list(SAME_SENSOR_FAMILIES)].max(axis=1)  # one sensor's two readings: one vote
        rest = ~family_mask(WORKLOAD_FAMILIES | {Family.FAIL_SLOW, *SAME_SENSOR_FAMILIES})
        # a GPU throttling for heat (its throttle-time counter voting) runs slower: its clocks' drop and
        # its lag behind its peers are the throttling's own effect, one vote with its heat (wide-s1574's
        # inference load, s1570's cooling excursion: throttling plus its clock drop paged as two families)
        throttled = self.error_held[:, Family.THERMAL] >= cfg.vote_min
        fused: Floats = own[:, rest].sum(axis=1) + np.where(throttled, np.maximum(sensor, job), sensor + job)
        # a sustained family's vote alone is a score its entity reaches, even where the load took it
        # into the job's capped vote (cooling, `LOAD_COUPLED_EITHER_WAY`)
        return np.maximum(fused, self.alone)

    def voting_families(self, entity: int) -> list[int]:
        """Families of one entity that voted at the last evaluation, strongest first (explanations)."""
        row = self.at_tick[entity]
        order = np.argsort(-row, kind="stable")
        return [int(f) for f in order if row[f] >= self.config.vote_min]

    def decay(self, elapsed_s: float) -> None:
        cfg = self.config
        for held, half_life in (
            (self.held, cfg.half_life_s),
            (self.recent_up, cfg.load_memory_half_life_s),
            (self.recent_down, cfg.load_memory_half_life_s),
            (self.error_held, cfg.half_life_s),
        ):
            held *= np.exp2(-elapsed_s / half_life)
            held[held < 1e-3] = 0.0

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {
            "held": self.held,
            "top_series": self.top_series,
            "top_value": self.top_value,
            "top_rising": self.top_rising,
            "top_error": self.top_error,
            "recent_up": self.recent_up,
            "recent_down": self.recent_down,
            "explained": self.explained,
            "error_held": self.error_held,
            "last_tick": np.array([self.last_tick]),
            "present": self.present,
            "n_series": self.n_series,
            "common": self.common,
            "shared_levels": self.shared_levels,
            "workload_shift_at": np.array([self.workload_shift_at]),
            "fresh": self.fresh,
            "fresh_top": self.fresh_top,
            "streak": self.streak,
            "latched_at": self.latched_at,
            "strong_at": self.strong_at,
            "first_tick": np.array([self.first_tick]),
            "parent": self.parent,
            "at_tick": self.at_tick,
            "common_share": self.common_share,
            "rising_share": self.rising_share,
            "stalled_votes": self.stalled_votes,
            "alone": self.alone,
            "shift": self.shift,
            "sustained_shift": self.sustained_shift,
            "sustained": self.sustained,
            **self.job_io.snapshot_arrays(),
        }

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        self.held = np.asarray(arrays["held"], dtype=np.float64)
        self.top_series = np.asarray(arrays["top_series"], dtype=np.int64)
        self.top_value = np.asarray(arrays["top_value"], dtype=np.float64)
        self.top_rising = np.asarray(arrays["top_rising"], dtype=bool)
        self.top_error = np.asarray(arrays["top_error"], dtype=bool)
        self.recent_up = np.asarray(arrays["recent_up"], dtype=np.float64)
        self.recent_down = np.asarray(arrays["recent_down"], dtype=np.float64)
        self.explained = np.asarray(arrays["explained"], dtype=bool)
        self.error_held = np.asarray(arrays["error_held"], dtype=np.float64).reshape(-1, N_FAMILIES)
        self.last_tick = float(arrays["last_tick"][0])
        self.present = np.asarray(arrays["present"], dtype=bool)
        self.n_series = np.asarray(arrays["n_series"], dtype=np.int64)
        self.common = np.asarray(arrays["common"], dtype=bool)
        self.shared_levels = np.asarray(arrays["shared_levels"], dtype=bool)
        self.workload_shift_at = float(arrays["workload_shift_at"][0])
        self.fresh = np.asarray(arrays["fresh"], dtype=np.float64)
        self.fresh_top = np.asarray(arrays["fresh_top"], dtype=np.float64).reshape(-1, N_FAMILIES)
        self.streak = np.asarray(arrays["streak"], dtype=np.int32)
        self.latched_at = np.asarray(arrays["latched_at"], dtype=np.float64)
        self.strong_at = np.asarray(arrays["strong_at"], dtype=np.float64).reshape(-1, N_FAMILIES)
        self.first_tick = float(arrays["first_tick"][0])
        self.parent = np.asarray(arrays["parent"], dtype=np.int64)
        self.at_tick = np.asarray(arrays["at_tick"], dtype=np.float64)
        self.common_share = np.asarray(arrays["common_share"], dtype=np.float64)
        self.rising_share = np.asarray(arrays["rising_share"], dtype=np.float64)
        self.stalled_votes = np.asarray(arrays.get("stalled_votes", np.zeros(N_FAMILIES)), dtype=np.float64)
        self.alone = np.asarray(arrays["alone"], dtype=np.float64)
        self.alone_hard = np.zeros_like(self.alone)  # both taken again by the next tick before `confirmed`
        self.alone_intermittent = np.zeros_like(self.alone)
        self.shift = np.asarray(arrays["shift"], dtype=np.float64).reshape(-1, N_FAMILIES)
        self.sustained_shift = np.asarray(arrays["sustained_shift"], dtype=np.float64).reshape(-1, N_FAMILIES)
        self.sustained = np.asarray(arrays["sustained"], dtype=bool).reshape(-1, N_FAMILIES)
        self.job_io.restore_arrays(arrays)
