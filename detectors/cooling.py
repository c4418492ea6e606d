"""Failing cooling: a GPU running hotter than its node's other GPUs than it usually does, for minutes on end.

A GPU's temperature follows its power through the node's physics (ambient, airflow, thermal lag), which
a hand-written coupling never gets right across fleets; but the GPUs of one node share that physics and,
under data parallelism, the load. So each temperature is read against the median of its node's other
GPUs at the same instant (in degrees, not as a fraction: a fixed offset stays fixed when the load moves
the whole node by 60 °C), the residual averaged over `batch_s`, and each mean judged against the GPU's
own usual offset and spread, learned slowly (a robust EWMA with a six-hour half-life): a GPU that always
runs 4 °C warmer than its neighbours is normal, one whose fan or cold plate is failing creeps away from
its offset for hours. A young spread is widened (it is learned around an offset that follows the means'
slow wander), and a settled one is not learned from a creep building evidence. On a node whose thermal
lag is minutes the means remember each other (rho, learned per node) and a healthy GPU's heat wanders
warm for half an hour: the z-scores are divided by ((1 + rho) / (1 - rho)) ** `memory_power`. Only
warmer counts: the z-scores (clipped at `clip_sigmas`) feed a one-sided CUSUM with slack `slack`, whose
height is calibrated against the series' own history (`TailCalibrator`; the prior is a random walk's,
P(height > h) ~ exp(-2 `tail` slack h), steeper than a Gaussian one's so that a node whose means forget
fast finds a short creep within it). One warm five minutes raises it by `clip_sigmas - slack` at
most: only a creep that lasts builds up. It is capped a little past where p reaches its floor and halved
by a mean back at the usual offset, so once the GPU is back the evidence is gone within a quarter hour,
not after as long as the creep lasted. A series silent for `max_gap_s` (a reboot, a drain) starts its CUSUM
afresh: the GPU that comes back is not the one that left.

The evidence is the `cooling` family's, which may page alone once sustained, as ramping hardware errors
may (`signals.SUSTAINED_FAMILIES`).

>>> import numpy as np
>>> det, ids = CoolingDrift(), np.arange(8, dtype=np.int64)
>>> det.set_groups(ids, np.zeros(8, dtype=np.int64))  # one node's 8 GPU temperatures are peers
>>> det.watch(ids)
>>> rng, offset = np.random.default_rng(1), np.arange(8.0)  # each GPU its own offset
>>> p = [det.update(ids, np.full(8, 15.0 * t), 40 + 40 * (t // 400 % 2) + offset + rng.normal(0, 0.5, 8)
...      + (t > 1600) * np.eye(8)[3] * (t - 1600) / 40) for t in range(2000)]  # GPU 3 creeps from 1600
>>> bool(min(q.min() for q in p[:1600]) > 1e-4), bool(p[-1][3] < 1e-9)
(True, True)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    MAD_TO_SIGMA,
    Floats,
    Ids,
    Packed,
    SeriesState,
    Stored,
    array_pieces,
    by_rounds,
    grown_id_map,
    half_life_weight,
    load_array,
    pack_blobs,
    unpack_blobs,
)
from prexid.detectors.calibration import TailCalibrator
from prexid.detectors.peer import segment_median
from prexid.detectors.signals import TEMPERATURE_METRICS


def is_temperature(name: str, gpu: int | None) -> bool:
    """Whether a series is a GPU temperature (node sensors have no such peers): cooling watches them."""
    return gpu is not None and name in TEMPERATURE_METRICS


class CoolingDrift:
    """Per watched temperature series, a one-sided CUSUM of its batch-mean residuals against the peers'
    median, each standardised against the series' own usual residual, as a tail probability.

    State is kept per watched series, in rows a slot array maps series ids to (a GPU has two
    temperatures among hundreds of series)."""

    name = "cooling_drift"

    def __init__(
        self,
        batch_s: float = 300.0,
        min_peers: int = 4,
        fresh_s: float = 45.0,
        half_life_s: float = 6 * 3600.0,
        warmup: int = 12,  # batches: an hour of the GPU's offset before anything is judged
        abs_floor: float = 0.5,  # °C: whole-degree sensors make a quiet residual look tighter than it is
        clip_sigmas: float = 4.0,
        slack: float = 1.0,
        max_height: float = 15.0,
        max_gap_s: float = 600.0,  # past p's floor (1e-12 under the prior): an end shows within minutes
        youth: float = 3.0,  # the spread is widened by sqrt(1 + youth / means seen)
        settled: int = 36,  # batches: three hours of a spread before a creep may stop its learning
        spread_height: float = 4.0,  # a settled spread does not learn means judged with a CUSUM above this
        max_memory: float = 0.8,  # the means' autocorrelation read at most
        memory_power: float = 0.25,  # z-scores divided by ((1 + rho) / (1 - rho)) ** this
        tail: float = 1.5,  # the height's prior tail is exp(-2 tail slack h)
    ) -> None:
        self.batch_s, self.min_peers, self.fresh_s = batch_s, min_peers, fresh_s
        self.half_life_s, self.warmup, self.abs_floor = half_life_s, warmup, abs_floor
        self.clip_sigmas, self.slack, self.max_height = clip_sigmas, slack, max_height
        self.max_gap_s, self.youth = max_gap_s, youth
        self.settled, self.spread_height = settled, spread_height
        self.max_memory, self.memory_power = max_memory, memory_power
        self.slot = np.full(0, -1, dtype=np.int32)  # series id -> its row among the watched, or -1
        self.group_of = np.full(0, -1, dtype=np.int32)  # series id -> its peer group, as declared
        self._free: list[int] = []  # rows of watched series forgotten, given to the next watched
        self.state = SeriesState(_FIELDS, capacity=_ROWS)  # by row
        u, k = 3.0, tail * slack  # a random walk's tail above u: rate exp(-2 k u), mean excess 1 / (2 k)
        self.calibrator = TailCalibrator(
            threshold=u,
            prior_rate=float(np.exp(-2 * k * u)),
            prior_mean_excess=1 / (2 * k),
            capacity=_ROWS,
        )
        self.rows = 0  # rows handed out so far

    def set_groups(self, ids: Ids, groups: Ids) -> None:
        """Declare each series' peer group (the peer detector's ids; -1: no peers, never judged)."""
        if not len(ids):
            return
        self.group_of = grown_id_map(self.group_of, int(ids.max()) + 1)
        self.group_of[ids] = groups
        seen = self.watches(ids)
        self.state["group"][self.slot[ids[seen]]] = groups[seen]

    def watch(self, ids: Ids) -> None:
        """Watch temperature series (registration time, not per sample), each in its declared group."""
        if not len(ids):
            return
        self.slot = grown_id_map(self.slot, int(ids.max()) + 1)
        self.group_of = grown_id_map(self.group_of, int(ids.max()) + 1)
        new = np.unique(ids[self.slot[ids] < 0])
        reuse = min(len(new), len(self._free))
        reused = np.array([self._free.pop() for _ in range(reuse)], dtype=np.int64)
        self.slot[new] = np.r_[reused, self.rows + np.arange(len(new) - reuse)]
        self.rows += len(new) - reuse
        self.state.ensure(self.rows)
        self.calibrator.ensure(self.rows)
        self.state["group"][self.slot[new]] = self.group_of[new]

    def watches(self, ids: Ids) -> NDArray[np.bool_]:
        """Which of these series are watched temperatures."""
        out = ids < len(self.slot)
        out[out] = self.slot[ids[out]] >= 0
        return out

    def forget(self, ids: Ids) -> None:
        """Unwatch these series: their rows reset, kept for the next watched."""
        ids = ids[ids < len(self.slot)]
        slots = self.slot[ids]
        gone = slots[slots >= 0].astype(np.int64)
        self.slot[ids] = -1
        self.group_of[ids] = -1
        self.state.reset(gone)
        self.calibrator.forget(gone)
        self._free = sorted([*self._free, *gone.tolist()], reverse=True)  # lowest first: as restored

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        """Tail probability of each sample's series creeping warmer than usual against its peers (1 for
        series not watched)."""
        out = np.ones(len(ids))
        watched = np.flatnonzero(self.watches(ids)) if len(ids) else np.zeros(0, dtype=np.int64)
        if len(watched):
            at = self.slot[ids[watched]].astype(np.int64)
            out[watched] = by_rounds(self._round, at, ts[watched], values[watched])
        return out

    def _round(self, at: Ids, ts: Floats, x: Floats) -> Floats:
        st = self.state
        ok = np.isfinite(x) & np.isfinite(ts) & (ts > st["last_ts"][at])
        back = ok & (ts - st["last_ts"][at] > self.max_gap_s) & np.isfinite(st["last_ts"][at])
        if back.any():  # silent a while (a reboot, a drain, a swapped board): no creep runs across it
            c = at[back]
            st["height"][c], st["p"][c], st["bsum"][c], st["bn"][c], st["bstart"][c], st["prev"][c] = (
                0.0,
                1.0,
                0.0,
                0.0,
                np.nan,
                np.nan,  # the GPU that comes back does not continue the last mean's wander
            )
        st.put(at, ok, last=x, last_ts=ts)
        with np.errstate(invalid="ignore"):  # ±Inf samples: no residual, below
            resid = x - self._peer_median(st["group"][at], float(ts[ok].max()) if ok.any() else -np.inf)
        ok &= np.isfinite(resid)
        start = np.where(np.isnan(st["bstart"][at]), ts, st["bstart"][at])
        bsum = st["bsum"][at] + np.where(ok, resid, 0.0)
        bn = st["bn"][at] + ok
        close = ok & (ts - start >= self.batch_s - 1e-9)
        st.put(at, ok & ~close, bsum=bsum, bn=bn, bstart=start)
        shut = np.flatnonzero(close)
        if len(shut):
            c = at[shut]
            st["p"][c] = self._judge(c, ts[shut], bsum[shut] / bn[shut])
            st["bsum"][c], st["bn"][c], st["bstart"][c] = 0.0, 0.0, np.nan
        return st["p"][at]

    def _judge(self, ids: Ids, ts: Floats, mean: Floats) -> Floats:
        """One closed batch mean per series: into the CUSUM, then learned into the usual offset."""
        st = self.state
        center, mad, n = st["center"][ids], st["mad"][ids], st["n"][ids]
        sigma = np.maximum(MAD_TO_SIGMA * mad, self.abs_floor)
        dev = mean - center
        judged = n >= self.warmup
        # a young spread is too tight: the running offset follows the means' slow wander (a thermal lag of
        # minutes makes five-minute means remember half of each other), so they stray little from it and a
        # healthy GPU warm for half an hour two hours in paged (wide-s17, s71, s1015)
        young = sigma * np.sqrt(1.0 + self.youth / np.maximum(n, 1.0))
        rho = self._memory(st["group"][ids])
        memory = ((1.0 + rho) / (1.0 - rho)) ** self.memory_power
        z = np.where(judged, np.minimum(dev / (young * memory), self.clip_sigmas), 0.0)
        height = np.clip(st["height"][ids] + z - self.slack, 0.0, self.max_height)
        height = np.where(judged, np.where(z > 0.0, height, 0.5 * height), 0.0)  # back at its offset
        p = self.calibrator.score(ids, np.where(judged, height, np.nan))
        dt = np.where(np.isfinite(st["mean_ts"][ids]), ts - st["mean_ts"][ids], 0.0)
        alpha = np.maximum(half_life_weight(dt, self.half_life_s), 1.0 / (n + 1.0))
        limit = self.clip_sigmas * sigma
        self._learn_memory(ids, np.clip(dev / sigma, -self.clip_sigmas, self.clip_sigmas), alpha, n)
        first = n == 0
        st["center"][ids] = np.where(first, mean, center + alpha * np.clip(dev, -limit, limit))
        # a settled spread is not widened by the creep it judges (wide-s74's grew 40% and all but hid it)
        creep = (st["height"][ids] > self.spread_height) & (n >= self.settled)
        calm = np.where(creep, 0.0, alpha)
        st["mad"][ids] = np.where(first, 0.0, mad + calm * (np.minimum(np.abs(dev), limit) - mad))
        st["n"][ids], st["mean_ts"][ids], st["height"][ids] = n + 1.0, ts, height
        return p

    def _learn_memory(self, ids: Ids, z: Floats, alpha: Floats, n: Floats) -> None:
        """Each series' lag-1 autocovariance and variance of its standardised batch means, learned only
        pooled by median over the node, so one GPU's creep does not teach it."""
        st = self.state
        prev = st["prev"][ids]
        learn = np.isfinite(prev)
        cxy, cxx = st["cxy"][ids], st["cxx"][ids]
        st["cxy"][ids] = np.where(learn, cxy + alpha * (z * prev - cxy), cxy)
        st["cxx"][ids] = np.where(learn, cxx + alpha * (0.5 * (z * z + prev * prev) - cxx), cxx)
        st["prev"][ids] = np.where(n >= 1, z, np.nan)  # the first mean is the offset itself

    def _memory(self, groups: Floats) -> Floats:
        """How much of one batch mean's deviation the next one keeps, per group: the median over its
        series past warm-up of their lag-1 autocorrelation, in [0, `max_memory`] (0: too few to say).
        Pooled over the node, one GPU's creep does not teach it."""
        st = self.state
        rows = np.flatnonzero((st["group"][: self.rows] >= 0) & (st["n"][: self.rows] >= self.warmup))
        rows = rows[st["cxx"][rows] > 0.0]
        rho, of = st["cxy"][rows] / st["cxx"][rows], st["group"][rows].astype(np.int64)
        median = _group_median(of, rho, groups.astype(np.int64), self.min_peers)
        return np.clip(np.nan_to_num(median, nan=0.0), 0.0, self.max_memory)

    def _peer_median(self, groups: Floats, now: float) -> Floats:
        """The node's common level: median of each group's fresh latest values, each less its own usual
        offset (NaN for a group with fewer than `min_peers`). With offsets spread over degrees, a plain
        median jumps by the gap between two of them when one GPU moves across it (a GPU drawing less
        power for an hour cools, and its neighbours would read warmer); offsets taken out, the GPUs
        read alike and one moving shifts the median by a fraction of the noise."""
        st = self.state
        watched = np.flatnonzero(st["group"][: self.rows] >= 0)
        fresh = watched[np.isfinite(st["last"][watched]) & (st["last_ts"][watched] >= now - self.fresh_s)]
        if not len(fresh):
            return np.full(len(groups), np.nan)
        g, wanted = st["group"][fresh].astype(np.int64), groups.astype(np.int64)
        own = st["center"][fresh]
        level = st["last"][fresh] - np.where(np.isfinite(own), own, 0.0)  # each less its usual offset
        return _group_median(g, level, wanted, self.min_peers)

    def baseline(self, ids: Ids) -> Floats:
        """Each series' usual offset from its peers' median, in its own unit (NaN: not watched)."""
        out = np.full(len(ids), np.nan)
        seen = self.watches(ids)
        out[seen] = self.state["center"][self.slot[ids[seen]]]
        return out

    def bytes_per_series(self) -> int:
        """State bytes one more watched series costs: its row, its tail and its slot."""
        own = self.slot.itemsize + self.group_of.itemsize
        return self.state.nbytes_per_series() + self.calibrator.bytes_per_series() + own

    def snapshot(self) -> Packed:
        """Slots, groups, rows handed out, the rows' state and their tails."""
        return pack_blobs(
            array_pieces(self.slot), array_pieces(self.group_of), array_pieces(np.array([self.rows])),
            self.state.to_pieces(), self.calibrator.snapshot(),
        )  # fmt: skip

    def restore(self, data: Stored) -> None:
        slot, group_of, rows_, state, calibrator = unpack_blobs(data)
        self.slot = load_array(slot).astype(np.int32, copy=False)
        self.group_of = load_array(group_of).astype(np.int32, copy=False)
        self.rows = int(load_array(rows_)[0])
        self.state.load_bytes(state)
        self.calibrator.restore(calibrator)
        used = np.zeros(self.rows, dtype=bool)  # the rows no series holds: forgotten ones
        used[self.slot[self.slot >= 0]] = True
        self._free = np.flatnonzero(~used).tolist()[::-1]


def _group_median(g: Ids, values: Floats, wanted: Ids, min_count: int) -> Floats:
    """`segment_median` of `values` per group `g`, read for each of `wanted` (NaN: a group with fewer than
    `min_count` values, or -1)."""
    n = int(max(g.max(initial=0), wanted.max(initial=0))) + 1
    median = segment_median(g.astype(np.intp), values, n)
    median[np.bincount(g[np.isfinite(values)], minlength=n) < min_count] = np.nan
    return np.where(wanted >= 0, median[np.maximum(wanted, 0)], np.nan)


_ROWS = 64  # rows to begin with; grown by doubling
_FIELDS = {
    "group": -1.0,  # the peer group (one node's GPUs, one metric)
    "last": np.nan,
    "last_ts": -np.inf,
    "bsum": 0.0,  # the open batch of residuals: sum, count, first sample time
    "bn": 0.0,
    "bstart": np.nan,
    "center": np.nan,  # the usual residual (the GPU's own offset) and its MAD, over batches
    "mad": 0.0,
    "n": 0.0,
    "mean_ts": -np.inf,
    "prev": np.nan,  # the last batch mean's standardised deviation, its lag-1 product and square (EWMA)
    "cxy": 0.0,
    "cxx": 0.0,
    "height": 0.0,  # the CUSUM
    "p": 1.0,  # the last closed batch's evidence
}
