"""Fail-slow: a GPU working slower than its node's other GPUs, scrape after scrape.

Data-parallel ranks run the same kernels, so a GPU whose work rate (its SM clock) reads at least
`shortfall` below the median of its node's other GPUs at the same instant is behind, whatever its own
history says: a throttling, degraded or firmware-stalled part, or a straggler that holds the whole job
back. Each scrape spent behind is one event on a per-GPU counter, and that counter is judged by its
pace (`PaceSurprise`): one lagging scrape at a job's phase change is weak
evidence, a GPU behind on scrape after scrape (or again and again, as stalling firmware is) is strong,
and does not fade as an own-history detector would once the slow level became the GPU's usual one.

Not every GPU behind its peers is degrading. One that runs hotter than the peers keeping pace
(`heat_margin_c` above the median temperature of those not behind: on a hot node several GPUs take
turns at their slowdown temperature, and their heat must not raise the bar; or by any amount, at or
past its fleet's throttle onset, the coolest degree from which the fleet's busy clocks are seen to run
slow: a node at its slowdown temperature has every GPU throttling in turns a degree or two above the
others) and still does its peers' work (its power draw or its tensor pipes' busy share not behind
theirs too) is throttling for heat:
a hot slot, a hot inlet, a poorly cooled part at its slowdown temperature while its peers are not,
again in every busy period. That is its slot's fact, not a
change in the GPU, and its scrapes behind are not counted while its heat is usual: no more than
`new_heat_c` above both its own long-run gap to its peers (an exponential average over `heat_memory_s`,
the plain mean of all it has seen until that much time has passed) and the gap its fleet's hot GPUs
run at now (the `fleet_quantile` of every watched GPU's gap: a fleet at a hot inlet, or with strong
thermal coupling, has many GPUs far above their peers while busy, and a GPU's first busy period must
not read as new heat because its own history held only idle hours). Heat that is new (failing cooling: a
fan, a clogged cold plate) does count once it has lasted `new_heat_s`: the GPU changed. Cooling fails
over hours; heat that came with the load minutes ago is the GPU warming faster than its peers (after a
checkpoint's dip, a hot slot reaches its slowdown temperature while its peers still climb). Parts that
degrade on their own (a straggler, stalling firmware) do less work: they draw less power and their tensor
pipes idle while their peers' are busy, which a GPU slowed by heat does not (its peers wait for it at the
collectives; its pipes stay as busy). Their scrapes behind count even on a GPU whose slot runs hot, at
any temperature: every fresh work series of the GPU (`watch_work`) at least `shortfall` behind its peers.
A GPU's work rate, its temperature and its work series are paired by their entity (`watch_heat`,
`watch_work`); a GPU without a temperature series is judged on its work rate alone, one without work
series as before.
Temperatures are in degrees C as DCGM reports them; with fewer than two peers keeping pace the gap is
against all of them, read back from the peer detector's relative residual (x r / (1 + r): the peers'
median, not their spread, sets its scale).

The residuals against the peers come from a `PeerDeviation`. Built without one, fail-slow has its own,
feeds it each batch and saves it in its snapshot (the catalog's entry, a detector like any other). The
bank passes its own peer detector instead, which has already scored the same samples: fail-slow then
only reads its residuals, and the bank saves the peer detector.

>>> import numpy as np
>>> det, ids = FailSlow(), np.arange(8, dtype=np.int64)
>>> det.set_groups(ids, np.zeros(8, dtype=np.int64))  # the 8 GPUs of one node are peers
>>> det.watch(ids)  # and their values are SM clocks
>>> clock = np.full(8, 1965.0)
>>> clock[5] = 0.7 * 1965.0  # GPU 5 works at 70% of its peers' pace
>>> p = [det.update(ids, np.full(8, 15.0 * t), clock + t % 2) for t in range(40)]
>>> bool(p[-1][5] < 1e-6), bool(np.delete(p[-1], 5).min() == 1.0)
(True, True)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import isotonic_regression

from prexid.detectors.base import (
    Floats,
    Ids,
    Packed,
    Stored,
    array_pieces,
    by_rounds,
    grown_id_map,
    load_array,
    pack_blobs,
    rows,
    unpack_blobs,
)
from prexid.detectors.pace import PaceSurprise
from prexid.detectors.peer import PeerDeviation, segment_median, segment_stats
from prexid.detectors.signals import HEAT_METRICS, WORK_DONE_METRICS, WORK_RATE_METRICS

_FLEET_EVERY_S = 60.0  # how often the fleet's hot gap and clock curve are taken again (event time)
_DEGREES = 128  # the fleet's clock curve: one cell per degree C of die temperature, 0-127
_CURVE_WEIGHT = 20.0  # GPU-minutes (faded) a degree needs before it tells where the fleet throttles
_PACED_MIN = 2  # peers keeping pace that a GPU's heat is measured against (fewer: all its peers)
_SPREAD_Z = 4.0  # idle peers: a lag counts once it is this many of their usual spreads as well
_IDLE_SHARE = 0.5  # peers whose median clock is under this share of the fleet's busy clock are idle


def is_work_rate(name: str, gpu: int | None) -> bool:
    """Whether a series measures how fast a GPU works: the series fail-slow watches."""
    return gpu is not None and name in WORK_RATE_METRICS


def is_heat(name: str, gpu: int | None) -> bool:
    """Whether a series is a GPU's die temperature: what tells heat throttling from a degrading part."""
    return gpu is not None and name in HEAT_METRICS


def work_done_kind(name: str, gpu: int | None) -> int:
    """Which of a GPU's work series (`WORK_DONE_METRICS`) a series is: its place there, or -1."""
    return WORK_DONE_METRICS.index(name) if gpu is not None and name in WORK_DONE_METRICS else -1


class FailSlow:
    """Scrapes spent behind the peers, per watched series, judged by their pace."""

    name = "fail_slow"

    def __init__(
        self,
        peer: PeerDeviation | None = None,
        shortfall: float = 0.1,
        window_s: float = 1800.0,
        heat_margin_c: float = 2.0,
        new_heat_c: float = 8.0,
        new_heat_s: float = 600.0,
        heat_memory_s: float = 6 * 3600.0,
        fleet_quantile: float = 0.9,
    ) -> None:
        self.owns_peer = peer is None  # fed and saved here; else its owner feeds it first and saves it
        self.peer = PeerDeviation() if peer is None else peer
        self.shortfall = shortfall
        self.heat_margin_c, self.new_heat_c, self.heat_memory_s = heat_margin_c, new_heat_c, heat_memory_s
        self.new_heat_s = new_heat_s
        self.fleet_quantile = fleet_quantile
        self._fleet_gap, self._fleet_ts = np.nan, -np.inf  # the fleet's hot gap, and when it was taken
        self._onset = np.nan  # the fleet's throttle onset: the coolest degree its busy clocks run slow from
        self._busy = np.nan  # the fleet's busy clock: the highest top of its fresh clocks seen
        self._busy_ts = -np.inf  # ... and when it was last taken
        self._curve = np.zeros((2, _DEGREES))  # per degree: faded GPU-minutes, their median clock share
        self.slot = np.full(0, -1, dtype=np.int32)  # series id -> its row among the watched, or -1
        self.behind = np.zeros(0)  # per watched series: scrapes spent behind its peers (a counter)
        self.entity = np.zeros(0, dtype=np.int64)  # per watched series: its GPU (entity id), or -1
        self.heat = np.full(0, -1, dtype=np.int64)  # entity id -> its temperature series id, or -1
        self.work = np.full((0, len(WORK_DONE_METRICS)), -1, dtype=np.int64)  # entity -> its work series
        self.gap = np.zeros(0)  # per watched series: its GPU's usual heat over its peers (C; NaN: unseen)
        self.gap_ts = np.zeros(0)  # ... when it was last learned
        self.gap_from = np.zeros(0)  # ... and first (until `heat_memory_s` has passed: a plain mean)
        self.new_from = np.zeros(0)  # ... since when its heat has been new, unbroken (inf: it is not)
        self._free: list[int] = []  # rows of watched series forgotten, given to the next watched
        # Slowness is a state that lasts: scrapes behind add up over half an hour (hardware errors: minutes)
        self.events = PaceSurprise(window_s=window_s)

    def set_groups(self, ids: Ids, groups: Ids) -> None:
        """Declare each series' peer group (-1: no peers), as `PeerDeviation.set_groups`."""
        self.peer.set_groups(ids, groups)

    def watch(self, ids: Ids, entities: Ids | None = None) -> None:
        """Watch these series (a GPU's work rate: registration time, not per sample), each of the GPU
        `entities` (ids shared with its temperature series, `watch_heat`; None: no pairing)."""
        if not len(ids):
            return
        ents = np.full(len(ids), -1, dtype=np.int64) if entities is None else entities.astype(np.int64)
        self.slot = grown_id_map(self.slot, int(ids.max()) + 1)
        new, first = np.unique(ids[self.slot[ids] < 0], return_index=True)
        new_ents = ents[self.slot[ids] < 0][first]
        reuse = min(len(new), len(self._free))
        reused = np.array([self._free.pop() for _ in range(reuse)], dtype=np.int64)
        self.slot[new] = np.r_[reused, len(self.behind) + np.arange(len(new) - reuse)]
        self.behind = np.r_[self.behind, np.zeros(len(new) - reuse)]
        self.entity = np.r_[self.entity, np.full(len(new) - reuse, -1, dtype=np.int64)]
        self.gap = np.r_[self.gap, np.full(len(new) - reuse, np.nan)]
        self.gap_ts = np.r_[self.gap_ts, np.full(len(new) - reuse, -np.inf)]
        self.gap_from = np.r_[self.gap_from, np.full(len(new) - reuse, np.inf)]
        self.new_from = np.r_[self.new_from, np.full(len(new) - reuse, np.inf)]
        rows_ = self.slot[new]
        self.entity[rows_], self.gap[rows_] = new_ents, np.nan
        self.gap_ts[rows_], self.gap_from[rows_], self.new_from[rows_] = -np.inf, np.inf, np.inf

    def watch_heat(self, ids: Ids, entities: Ids) -> None:
        """These series are the temperatures of GPU `entities` (registration time): a GPU behind while
        hotter than its peers is throttling for heat, not counted."""
        if not len(ids):
            return
        self.heat = grown_id_map(self.heat, int(entities.max()) + 1)
        self.heat[entities] = ids

    def watch_work(self, ids: Ids, entities: Ids, kinds: Ids) -> None:
        """These series measure how much work GPU `entities` does, each the `kinds`-th of
        `WORK_DONE_METRICS` (registration time): a GPU behind while hotter than its peers, doing less
        work than they do too, is stalling or degrading, not throttling for heat."""
        if not len(ids):
            return
        self.work = grown_id_map(self.work, int(entities.max()) + 1)
        self.work[entities, kinds] = ids

    def forget(self, ids: Ids) -> None:
        """Unwatch these series: their rows (counter, its judge, GPU and usual heat) reset and kept for the
        next watched, and a temperature among them unpaired; the peer detector forgets them itself when
        it is not fail-slow's own."""
        self.heat[np.isin(self.heat, ids)] = -1  # any id: temperatures are not watched, not in `slot`
        self.work[np.isin(self.work, ids)] = -1  # nor are work series
        if self.owns_peer:
            self.peer.forget(ids)
        ids = ids[ids < len(self.slot)]
        slots = self.slot[ids]
        gone = slots[slots >= 0].astype(np.int64)
        self.slot[ids] = -1
        self.behind[gone] = 0.0
        self.entity[gone], self.gap[gone] = -1, np.nan
        self.gap_ts[gone], self.gap_from[gone], self.new_from[gone] = -np.inf, np.inf, np.inf
        self.events.forget(gone)
        self._free = sorted([*self._free, *gone.tolist()], reverse=True)  # lowest first: as restored

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        """p of each sample of a watched series (1 elsewhere and on scrapes not behind).

        With a peer detector of its own, the batch goes through it in rounds, each round judged on the
        residuals it left. A shared peer detector has seen the whole batch already: a batch repeating a
        series is then judged on the residuals the whole batch left.
        """
        if not len(ids):
            return np.ones(0, dtype=np.float64)
        if self.owns_peer:
            return by_rounds(self._update_round, ids, ts, values)
        return self._judge(ids, ts)

    def _update_round(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        self.peer.update(ids, ts, values)
        return self._judge(ids, ts)

    def _judge(self, ids: Ids, ts: Floats) -> Floats:
        """Count the watched series' scrapes behind their peers (the peer detector's residuals for these
        samples) and judge the counts."""
        p = np.ones(len(ids))
        if not len(self.behind):
            return p
        if int(ids.max()) < len(self.slot):  # the usual case: one gather (a view for a run of ids)
            slot = self.slot[rows(ids)]
        else:
            known = ids < len(self.slot)
            slot = np.where(known, self.slot[np.where(known, ids, 0)], -1)
        sel = np.flatnonzero(slot >= 0)
        if not len(sel):
            return p
        watched = slot[sel].astype(np.int64)
        with np.errstate(invalid="ignore"):
            resid = self.peer.shortfall(ids[sel])
        late = resid <= -self.shortfall
        if late.any():
            late &= ~self._idle_scatter(ids[sel], ts[sel], resid)
        deep = resid <= -2.0 * self.shortfall
        heat = self._usual_heat(ids[sel], watched, ts[sel], late)
        less = np.zeros(len(sel), dtype=bool)
        if late.any():
            at = np.flatnonzero(late)
            less[at] = self._less_work(watched[at], ts[sel][at])
        late &= ~(heat & ~less)
        np.add.at(self.behind, watched, late)
        # a run of scrapes deep behind doing less work too (stalling firmware, a straggler) is judged against
        # the pace before it; lags doing the peers' work (throttling in turns on a hot node, wide-s61) or
        # shallow ones (an idle GPU 11-14% behind its idle peers, its idle power 10% under theirs: wide-s1070)
        # teach it as before
        p[sel] = self.events.update(watched, ts[sel], self.behind[watched], held=late & less & deep)
        return p

    def _idle_scatter(self, ids: Ids, ts: Floats, resid: Floats) -> NDArray[np.bool_]:
        """Whether each lag is within the scatter of idle peers: their median clock under `_IDLE_SHARE`
        of the fleet's busy clock, and the lag short of `_SPREAD_Z` of their usual spread. Idle clocks
        scatter ~5% scrape to scrape, so an idle GPU reads 10-12% under its idle peers now and then
        (wide-s1236: a node drained after its Xid); busy peers' spread is their throttling by different
        amounts, which a straggler's lag must not be measured against (wide-s66, s79 flapped)."""
        now = float(ts.max())
        if now - self._busy_ts >= _FLEET_EVERY_S:
            watched = np.flatnonzero(self.slot >= 0)
            clocks = self.peer.last_fresh(watched, np.full(len(watched), now))
            clocks = clocks[np.isfinite(clocks)]
            if len(clocks) >= 8:
                self._busy = float(np.fmax(self._busy, np.quantile(clocks, self.fleet_quantile)))
            self._busy_ts = now
        with np.errstate(invalid="ignore", divide="ignore"):
            peers = self.peer.last_fresh(ids, ts) / (1.0 + resid)  # x = median (1 + r)
            idle = peers < _IDLE_SHARE * self._busy
            return np.asarray(idle & (resid > -_SPREAD_Z * self.peer.spread(ids)))

    def _usual_heat(self, ids: Ids, watched: Ids, ts: Floats, late: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Whether each watched series' GPU reads hotter than its peers now, by no more than is usual for
        it and for its fleet's hot GPUs (throttling for heat, as they do); and learn each GPU's usual gap.
        The `late` ones are also asked whether their node throttles at their heat now (`_node_throttles`)."""
        temp = self._temps(watched, ts)
        gap = self._gaps(ids, watched, ts, temp)
        seen = np.isfinite(gap)
        if not seen.any():
            return np.zeros(len(watched), dtype=bool)
        self._fleet_heat(float(ts.max()))
        with np.errstate(invalid="ignore"):
            usual = np.fmax(self.gap[watched], self._fleet_gap)
            # at or past the fleet's throttle onset, any heat over the peers keeping pace will do: a node
            # at its slowdown temperature has its GPUs throttling in turns, each a degree or two above the
            # others, and there a degree costs a tenth of the clock (wide-s24, wide-s1186)
            throttling = (gap > 0.0) & ((temp >= self._onset) | self._node_throttles(ids, ts, temp, late))
            hot = (
                seen
                & ((gap >= self.heat_margin_c) | throttling)
                & ~self._new_heat(watched, ts, gap > usual + self.new_heat_c)
            )
        self._learn_gap(watched[seen], ts[seen], gap[seen])
        return np.asarray(hot)

    def _node_throttles(
        self, ids: Ids, ts: Floats, temp: Floats, late: NDArray[np.bool_]
    ) -> NDArray[np.bool_]:
        """Whether each `late` series' clock is what its node's clocks fall to at its heat now: its peers'
        clocks fitted on their temperatures (least squares, falling with heat) and the GPU within
        `shortfall / 2` of the fit at its own. A node heating fast after a restart throttles its GPUs in
        turns, each clock lower the hotter its GPU, before the fleet's curve has GPU-minutes at those
        degrees (wide-s1280: 48 to 90 C in 15 minutes at a 33.5 C inlet, its hottest GPU 10% behind,
        1.6 C above the peers keeping pace); a straggler's peers run at full pace whatever their heat."""
        out = np.zeros(len(ids), dtype=bool)
        at = np.flatnonzero(late & np.isfinite(temp))
        if not len(at):
            return out
        slot, member = self.peer.peers_of(ids[at])
        known = (member < len(self.slot)) & (member != ids[at][slot])
        row = np.where(known, self.slot[np.where(known, member, 0)], -1)
        when = ts[at][slot]
        t = np.where(row >= 0, self._temps(np.maximum(row, 0), when), np.nan)
        c = np.where(row >= 0, self.peer.last_fresh(member, when), np.nan)
        ok = np.isfinite(t) & np.isfinite(c)
        slot, t, c = slot[ok], t[ok], c[ok]
        n = np.bincount(slot, minlength=len(at)).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_t = np.bincount(slot, t, len(at)) / n
            mean_c = np.bincount(slot, c, len(at)) / n
            dt = t - mean_t[slot]
            var = np.bincount(slot, dt * dt, len(at)) / n
            slope = np.bincount(slot, dt * (c - mean_c[slot]), len(at)) / n / var
            fit = mean_c + slope * (temp[at] - mean_t)
            clock = self.peer.last_fresh(ids[at], ts[at])
            out[at] = (n >= 3) & (var > 0.0) & (slope < 0.0) & (clock >= (1.0 - self.shortfall / 2) * fit)
        return out

    def _new_heat(self, watched: Ids, ts: Floats, over: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Whether each row's heat, `over` its usual by more than `new_heat_c` now, has been so unbroken
        for `new_heat_s` (a row whose heat is not over starts again)."""
        self.new_from[watched[~over]] = np.inf
        np.minimum.at(self.new_from, watched[over], ts[over])
        return np.asarray(over & (ts - self.new_from[watched] >= self.new_heat_s))

    def _less_work(self, watched: Ids, ts: Floats) -> NDArray[np.bool_]:
        """Whether each watched row's GPU does less work than its peers now: every one of its work series
        fresh at `ts` at least `shortfall` behind its peers' median, and at least one such series."""
        ent = self.entity[watched]
        paired = (ent >= 0) & (ent < len(self.work))
        if not paired.any():
            return np.zeros(len(watched), dtype=bool)
        sids = np.where(paired[:, None], self.work[np.where(paired, ent, 0)], -1)
        known = sids >= 0
        at = np.where(known, sids, 0)
        last_ts = self.peer.state.read("last_ts", at.ravel()).reshape(at.shape)
        fresh = known & (last_ts >= ts[:, None] - self.peer.fresh_s)
        resid = self.peer.shortfall(at.ravel()).reshape(at.shape)
        working = self._peers_working(at.ravel(), np.repeat(ts, at.shape[1])).reshape(at.shape)
        with np.errstate(invalid="ignore"):
            seen = fresh & np.isfinite(resid) & working
            behind = ~seen | (resid <= -self.shortfall)
        return np.asarray(seen.any(axis=1) & behind.all(axis=1))

    def _peers_working(self, ids: Ids, ts: Floats) -> NDArray[np.bool_]:
        """Whether each work series' peers do measurable work on it at `ts`: their median clear of zero
        by twice their spread (`segment_stats`: IQR/1.349 in groups as small as a node's). Idle tensor
        pipes read 0 or a rounding step on every GPU of an idle node, and a GPU whose pipes idle as its
        peers' do is not thereby keeping their pace: on such a node only its power tells a stall
        (wide-s70's Xid 119, 4 C hotter than its idle peers, its stalls taken for heat throttling at 50 C)."""
        slot, member = self.peer.peers_of(ids)
        keep = member != ids[slot]
        slot, member = slot[keep], member[keep]
        median, spread, _ = segment_stats(slot, self.peer.last_fresh(member, ts[slot]), len(ids))
        with np.errstate(invalid="ignore"):
            return np.asarray(np.abs(median) > 2.0 * spread)

    def _temps(self, watched: Ids, ts: Floats) -> Floats:
        """Each watched row's GPU temperature, when fresh at `ts` (NaN: none of its own)."""
        ent = self.entity[watched]
        paired = (ent >= 0) & (ent < len(self.heat))
        if not paired.any():
            return np.full(len(watched), np.nan)
        heat = np.where(paired, self.heat[np.where(paired, ent, 0)], -1)
        return np.where(heat >= 0, self.peer.last_fresh(np.where(heat >= 0, heat, 0), ts), np.nan)

    def _gaps(self, ids: Ids, watched: Ids, ts: Floats, temp: Floats) -> Floats:
        """Degrees C each watched series' GPU (`ids`, their rows `watched`, its temperatures `temp` as
        `_temps` reads them) reads above the median temperature of its peers that keep pace (NaN: no
        fresh temperature of its own). Peers behind are
        left out: on a hot node several GPUs take turns at their slowdown temperature, and their heat
        would raise the median that a GPU throttling as they do is measured against. With fewer than
        `_PACED_MIN` peers keeping pace, against the median of all its peers."""
        if not np.isfinite(temp).any():
            return temp
        slot, member = self.peer.peers_of(ids)
        keep = member != ids[slot]
        slot, member = slot[keep], member[keep]
        known = member < len(self.slot)
        row = np.where(known, self.slot[np.where(known, member, 0)], -1)
        paced = (row >= 0) & self._keeps_pace(member)
        peer_temp = np.where(paced, self._temps(np.maximum(row, 0), ts[slot]), np.nan)
        median = segment_median(slot, peer_temp, len(ids))
        count = np.bincount(slot[np.isfinite(peer_temp)], minlength=len(ids))
        # too few peers keeping pace: all of them (the peer detector's residual, x r / (1 + r))
        fresh = np.isfinite(temp)  # paired: its entity has a temperature series
        r = self.peer.shortfall(np.where(fresh, self.heat[np.where(fresh, self.entity[watched], 0)], 0))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count >= _PACED_MIN, temp - median, temp * r / (1.0 + r))

    def _keeps_pace(self, ids: Ids) -> NDArray[np.bool_]:
        """Whether each series' last scrape was not `shortfall` behind its peers (no residual: keeps it)."""
        with np.errstate(invalid="ignore"):
            return np.asarray(~(self.peer.shortfall(ids) <= -self.shortfall))

    def _fleet_heat(self, now: float) -> None:
        """The gap the fleet's hot GPUs run at now (the `fleet_quantile` of every watched GPU's gap), and
        the fleet's clock curve and throttle onset (`_learn_onset`), refreshed once a minute of event
        time."""
        if now - self._fleet_ts < _FLEET_EVERY_S:
            return
        ids = np.flatnonzero(self.slot >= 0)
        ids = ids[self.entity[self.slot[ids]] >= 0]
        rows_, at = self.slot[ids].astype(np.int64), np.full(len(ids), now)
        temps = self._temps(rows_, at)
        gaps = self._gaps(ids, rows_, at, temps)
        clocks = np.where(self._keeps_pace(ids), self.peer.last_fresh(ids, at), np.nan)
        self._learn_onset(temps, clocks, now - self._fleet_ts)
        gaps = gaps[np.isfinite(gaps)]
        self._fleet_gap = float(np.quantile(gaps, self.fleet_quantile)) if len(gaps) >= 8 else np.nan
        self._fleet_ts = now

    def _learn_onset(self, temps: Floats, clocks: Floats, elapsed: float) -> None:
        """Learn where this fleet's clocks fall with heat, from the clocks of its busy GPUs keeping their
        peers' pace (NaN: not), as a share of its fast ones', by degree, faded over `heat_memory_s`; the
        onset is the coolest degree where that curve, fitted as falling with heat (isotonic, weighted by
        GPU-minutes), runs `shortfall / 2` slower than at its coolest known degree. A fixed slowdown
        temperature, or the fleet's hottest share, is a fact about one model and one job mix: half a fleet
        idle moves the hottest share, and the slowdown point differs by model. Heat slows a node's GPUs
        together, so the ones keeping pace show it; a GPU behind its peers (a straggler, or one taking its
        turn to throttle) teaches nothing of its degree, and the fit pools a lone slow degree with the
        faster hotter ones around it."""
        ok = np.isfinite(temps) & np.isfinite(clocks) & (clocks > 0.0)
        if ok.sum() < 8:
            return
        temps, clocks = temps[ok], clocks[ok]
        busy = clocks >= 0.5 * clocks.max()  # idle clocks (a fifth of busy ones) and deep stalls are not heat
        temps, clocks = temps[busy], clocks[busy]
        share = clocks / np.quantile(clocks, self.fleet_quantile)
        degree = np.clip(temps, 0, _DEGREES - 1).astype(np.intp)
        now = segment_median(degree, share, _DEGREES)
        count = np.bincount(degree, minlength=_DEGREES).astype(np.float64)
        weight, median = self._curve
        weight *= 0.5 ** (min(elapsed, 64 * self.heat_memory_s) / self.heat_memory_s)
        weight += count
        seen = count > 0
        median[seen] += count[seen] / weight[seen] * (now[seen] - median[seen])
        known = np.flatnonzero(weight >= _CURVE_WEIGHT)
        if len(known) == 0:
            return
        fit = isotonic_regression(median[known], weights=weight[known], increasing=False).x
        slow = np.flatnonzero(fit <= (1.0 - self.shortfall / 2) * fit[0])
        self._onset = float(known[slow[0]]) if len(slow) else np.nan

    def _learn_gap(self, rows_: Ids, ts: Floats, gap: Floats) -> None:
        """Each GPU's usual gap to its peers: the plain mean of its gaps until `heat_memory_s` has passed
        since the first (a cold start learns from all it has seen, not from its first scrape), then an
        exponential average with that half-life."""
        start = np.minimum(self.gap_from[rows_], ts)
        dt = np.maximum(ts - self.gap_ts[rows_], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_w = np.where(ts > start, dt / (ts - start + dt), 1.0)
        w = np.clip(np.maximum(mean_w, 1.0 - np.exp2(-dt / self.heat_memory_s)), 0.0, 1.0)
        was = self.gap[rows_]
        self.gap[rows_] = np.where(np.isfinite(was), was + (gap - was) * w, gap)
        self.gap_ts[rows_], self.gap_from[rows_] = ts, start

    def baseline(self, ids: Ids) -> Floats:
        """No reading is expected of its own: the evidence is a count of scrapes behind the peers."""
        return np.full(len(ids), np.nan)

    def bytes_per_series(self) -> int:
        """State bytes one more watched series costs: its slot, its counter and the counter's judge, and
        the peer detector's state when that is fail-slow's own."""
        own = self.slot.itemsize + self.behind.itemsize + self.entity.itemsize + self.heat.itemsize
        own += self.work.itemsize * self.work.shape[1]
        own += self.gap.itemsize + self.gap_ts.itemsize + self.gap_from.itemsize + self.new_from.itemsize
        own += self.events.bytes_per_series()
        return own + (self.peer.bytes_per_series() if self.owns_peer else 0)

    def snapshot(self) -> Packed:
        """Slots, counters, GPU pairing and the counters' judge; then the peer detector, when it is
        fail-slow's own."""
        peer = [self.peer.snapshot()] if self.owns_peer else []
        fleet = np.r_[
            self._fleet_gap, self._fleet_ts, self._onset, self._busy, self._busy_ts, self._curve.ravel()
        ]
        pairs = tuple(
            array_pieces(a)
            for a in (
                self.entity,
                self.heat,
                self.work,
                self.gap,
                self.gap_ts,
                self.gap_from,
                self.new_from,
                fleet,
            )
        )
        return pack_blobs(
            array_pieces(self.slot), array_pieces(self.behind), *pairs, self.events.snapshot(), *peer
        )

    def restore(self, data: Stored) -> None:
        slot, behind, entity, heat, work, gap, gap_ts, gap_from, new_from, fleet, events, *peer = (
            unpack_blobs(data)
        )
        if len(peer) != int(self.owns_peer):
            which = "without" if self.owns_peer else "with"
            raise ValueError(f"snapshot of a fail-slow detector {which} a peer detector of its own")
        self.slot = load_array(slot).astype(np.int32, copy=False)
        self.behind = load_array(behind).astype(np.float64, copy=False)
        self.entity = load_array(entity).astype(np.int64, copy=False)
        self.heat = load_array(heat).astype(np.int64, copy=False)
        self.work = load_array(work).astype(np.int64, copy=False).reshape(-1, len(WORK_DONE_METRICS))
        self.gap = load_array(gap).astype(np.float64, copy=False)
        self.gap_ts = load_array(gap_ts).astype(np.float64, copy=False)
        self.gap_from = load_array(gap_from).astype(np.float64, copy=False)
        self.new_from = load_array(new_from).astype(np.float64, copy=False)
        used = np.zeros(len(self.behind), dtype=bool)  # the rows no series holds: forgotten ones
        used[self.slot[self.slot >= 0]] = True
        self._free = np.flatnonzero(~used).tolist()[::-1]
        stored = load_array(fleet).astype(np.float64)
        self._fleet_gap, self._fleet_ts, self._onset, self._busy, self._busy_ts = (
            float(v) for v in stored[:5]
        )
        self._curve = stored[5:].reshape(2, _DEGREES).copy()
        self.events.restore(events)
        if self.owns_peer:
            self.peer.restore(peer[0])
