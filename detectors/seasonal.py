"""Daily cycles: each series against its own time-of-day profile, once that profile explains it.

Many real series follow the day (traffic, load, temperature in a room). The level detector follows a
cycle with a lag, so its spread is the cycle's size, and a spike, a shift or a broken cycle the size of
the noise hides inside it. This detector keeps a Holt-Winters-style decomposition per series: a level
(robust EWMA of the value less its season) and a profile of `bins` time-of-day cells (each an EWMA of
the value less the level, over the days), read between cell centres by linear interpolation. Its
residual is judged against its own robust spread and calibrated against the series' history
(`TailCalibrator`), as the other gauge detectors are.

It answers only where the cycle is real: after `min_periods` days of history, and while the profile
cuts the spread of the residual to at most `gate` of what the level alone leaves (the series' own
evidence of a period, measured continuously). Elsewhere its p is 1, so a series without a daily
cycle, or one seen for less than two days (every gauge of a fresh GPU fleet), is judged exactly as
before, and costs a few array passes a sample. Time of day is event time modulo `period_s`: irregular
scrapes and replays agree.

The residual's |z| is calibrated with its runs (`runs.RunCalibrator`): a held shift inside the cycle's
range is, in heavy-tailed noise, a run of residuals each of which the tail has seen (corpus seed 1's
`heavy_tail-1`: its second shift's points at p 1e-2 to 1e-3, never found). The one-hour mean's |z| is
judged against the same tail, read and not learned: an hour's mean stays high for an hour, so its
exceedances come in runs by nature. Calibrated together as one score (before), the mean held the
residual's episodes open: as runs, healthy cyclic series paged on their own slow wander, and a first
shift's long episode taught `stick` that runs are usual (0.54 on that file), so the second counted
for nothing. Whether the profile explains the series is read from its spreads and its first and last
learned times: it costs no state of its own.

A point weighs at most `max_weight_s` (five minutes) of event time in the level, spread and drift
averages: their half-lives are hours, a handful of points of an hourly series, whose one-hour mean was
then the point itself and whose spread learned a held shift within hours. Series sampled every five
minutes or faster are weighed by time exactly as before; a series back from an outage is not weighed
as hours of evidence by its first point.

A cycle of a day needs no 15-s resolution: the model learns from one sample every `learn_s` (every
sample of a five-minute series, one in twenty of a 15-s scrape), which is most of the detector's
cost; every sample of an explained series is judged, against the model as last learned, and its
residual's one-hour mean is the drift evidence (a trend or a broken cycle the size of the noise).

>>> import numpy as np
>>> det, rng, ids = SeasonalDeviation(), np.random.default_rng(1), np.zeros(1, dtype=np.int64)
>>> t = 300.0 * np.arange(288 * 5)
>>> x = 100 + 20 * np.sin(2 * np.pi * t / 86400) + rng.normal(0, 1, len(t))
>>> x[-100] += 10.0  # a spike of 10 sigma, well inside the cycle's range
>>> ps = np.array([det.update(ids, t[i : i + 1], x[i : i + 1])[0] for i in range(len(t))])
>>> bool(ps[-288:].min() == ps[-100] < 1e-6), bool(np.delete(ps[-288:], 188).min() > 1e-4)
(True, True)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    ABS_TO_SIGMA,
    MAD_TO_SIGMA,
    Floats,
    Ids,
    Index,
    Packed,
    Stored,
    array_pieces,
    floored_sigma,
    half_life_weight,
    load_array,
    pack_blobs,
    pick,
    rows,
    subset,
    unpack_blobs,
)
from prexid.detectors.calibration import Calibrated
from prexid.detectors.runs import RunCalibrator


class Profiles:
    """Per-series time-of-day cells, float32 (NaN: a cell not visited yet), one row per cell and one
    column per series (a scrape at one time of day reads one contiguous row), grown by doubling."""

    def __init__(self, bins: int, capacity: int = 64) -> None:
        self.bins = bins
        self.cells: NDArray[np.float32] = np.full((bins, capacity), np.nan, dtype=np.float32)

    def ensure(self, max_id: int) -> None:
        cap = self.cells.shape[1]
        if max_id < cap:
            return
        grown = np.full((self.bins, max(2 * cap, max_id + 1)), np.nan, dtype=np.float32)
        grown[:, :cap] = self.cells
        self.cells = grown

    def bytes_per_series(self) -> int:
        return self.bins * self.cells.itemsize

    def snapshot(self) -> Packed:
        return pack_blobs(array_pieces(self.cells))

    def restore(self, data: Stored) -> None:
        (blob,) = unpack_blobs(data)
        cells = load_array(blob)
        if cells.ndim != 2 or cells.shape[0] != self.bins or cells.dtype != np.float32:
            raise ValueError(f"profiles of shape {cells.shape} {cells.dtype}, not ({self.bins}, n) float32")
        self.cells = cells.astype(np.float32, copy=False)

    def forget(self, ids: Ids) -> None:
        self.cells[:, ids[ids < self.cells.shape[1]]] = np.nan


class SeasonalDeviation(Calibrated):
    """Robust |z| of each sample against level + time-of-day profile, where the profile explains the
    series; a tail probability."""

    name = "seasonal_deviation"
    baseline_of = "level"
    nested = ("calibrator", "profile")
    calibrator: RunCalibrator

    def __init__(
        self,
        period_s: float = 86400.0,
        bins: int = 48,
        level_half_life_s: float = 3 * 3600.0,
        cell_half_life_periods: float = 2.0,
        spread_half_life_s: float = 12 * 3600.0,
        drift_half_life_s: float = 3600.0,
        learn_s: float = 270.0,
        max_weight_s: float = 300.0,
        min_periods: float = 2.0,
        gate: float = 0.5,
        clip_sigmas: float = 3.0,
        rel_floor: float = 1e-3,
        abs_floor: float = 1e-6,
    ) -> None:
        self.period_s = period_s
        self.bins = bins
        self.level_half_life_s = level_half_life_s
        self.cell_half_life_periods = cell_half_life_periods
        self.cell_visit_s = period_s / bins  # how long each period dwells in one cell
        self.spread_half_life_s = spread_half_life_s
        self.drift_half_life_s = drift_half_life_s
        self.learn_s = learn_s
        self.max_weight_s = max_weight_s
        self.min_periods = min_periods
        self.gate = gate
        self.clip_sigmas = clip_sigmas
        self.rel_floor = rel_floor
        self.abs_floor = abs_floor
        super().__init__(
            {
                "level": np.nan,
                "mean": 0.0,  # the profile's mean: the level is the cycle's mean
                "drift": 0.0,  # short EWMA of the residual, and its usual size
                "dabs": 0.0,
                "mad": 0.0,
                "plain": 0.0,  # EWMA of |value - level|: the spread the profile is judged against
                "n": 0.0,
                "first_ts": np.nan,
                "last_ts": -np.inf,  # the last sample learned
                "seen_ts": -np.inf,  # the last sample seen
            },
            capacity=64,  # grown on demand: a bank's fixed size stays small (profiles are wide)
            calibrator=RunCalibrator(),
        )
        self.profile = Profiles(bins)

    def grow(self, max_id: int) -> None:
        super().grow(max_id)
        self.profile.ensure(max_id)

    def explains(self, ids: Ids) -> NDArray[np.bool_]:
        """Whether each series' profile is old enough and halves its spread: where it does, this
        detector judges the series against its cycle, and a baseline without the cycle judges the cycle."""
        if len(ids) and int(ids.max()) < self.state.capacity:
            return self._explained(rows(ids))
        out = np.zeros(len(ids), dtype=bool)
        known = np.flatnonzero(ids < self.state.capacity)
        out[known] = self._explained(ids[known])
        return out

    def _explained(self, at: Index) -> NDArray[np.bool_]:
        """`explains`, from what the last learned sample left (a series never learned: NaN, False)."""
        st = self.state
        old = np.asarray(st["last_ts"][at] - st["first_ts"][at] >= self.min_periods * self.period_s)
        if not old.any():  # a fleet seen for less than two days: no spread to compare
            return old
        return old & (st["mad"][at] <= self.gate * st["plain"][at])

    def season(self, ids: Ids, ts: Floats) -> Floats:
        """Each series' profile less its mean at these times of day, as last learned (0 where nothing
        is learned yet): what the cycle adds to the level, for detectors that judge a series without it."""
        out = np.zeros(len(ids), dtype=np.float64)
        known = np.flatnonzero(ids < min(self.state.capacity, self.profile.cells.shape[1]))
        if len(known):
            k = ids[known]
            out[known] = self._season(k, k, ts[known])[0] - self.state["mean"][k]
        return out

    def deviation(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        """Robust |z| of each value against its series' level and season, where its profile explains
        it (NaN elsewhere): no state moves."""
        out = np.full(len(ids), np.nan)
        idx = np.flatnonzero(self.explains(ids))
        if len(idx):
            k = ids[idx]
            resid, _, sigma, *_ = self._expect(k, k, ts[idx], x[idx])
            with np.errstate(invalid="ignore"):
                out[idx] = np.abs(resid) / sigma
        return out

    def _cells(self, at: Index, ids: Ids, cell: NDArray[np.intp]) -> Floats:
        """Each series' value of one cell: a strided column read when a scrape's series are a contiguous
        range at one time of day (the usual case), else a gather."""
        if isinstance(at, slice) and len(cell) and (cell == cell[0]).all():
            return self.profile.cells[int(cell[0]), at].astype(np.float64)
        return self.profile.cells[cell, ids].astype(np.float64)

    def _season(self, at: Index, ids: Ids, ts: Floats) -> tuple[Floats, NDArray[np.intp]]:
        """The profile read at each sample's time of day, and its nearest cell. A cell not learned reads as
        0 in the series' first period, and as its neighbour after it: a series sampled hourly learns every
        other half-hour cell, and read as 0 half its cycle was lost between them."""
        pos = np.mod(ts, self.period_s) * (self.bins / self.period_s) - 0.5  # cell centres at k + 0.5
        lo = np.floor(pos)
        frac = pos - lo
        b0 = np.mod(lo, self.bins).astype(np.intp)
        b1 = np.mod(b0 + 1, self.bins)
        c0, c1 = self._cells(at, ids, b0), self._cells(at, ids, b1)
        with np.errstate(invalid="ignore"):
            seen_period = ts - self.state["first_ts"][at] >= self.period_s  # never learned: NaN, False
        if seen_period.any():  # a gap left in the profile after a whole period is the cadence's
            gap0, gap1 = np.isnan(c0) & seen_period, np.isnan(c1) & seen_period
            c0, c1 = np.where(gap0, c1, c0), np.where(gap1, c0, c1)
        s0, s1 = np.nan_to_num(c0), np.nan_to_num(c1)
        nearest = np.where(frac < 0.5, b0, b1)
        return (1.0 - frac) * s0 + frac * s1, nearest

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        """Judge the samples of series the profile explains; learn from one sample every `learn_s`."""
        st, at = self.state, rows(ids)
        seen, last, explained = st["seen_ts"][at], st["last_ts"][at], self._explained(at)
        ok = np.isfinite(x) & (ts > seen)
        p = np.ones(len(ids), dtype=np.float64)
        judge = np.flatnonzero(ok & explained)  # none, on a fleet seen for less than two days
        if len(judge):
            p[judge] = self._judge(subset(at, judge), ts[judge], x[judge])
        learn = ok & (ts - last >= self.learn_s)
        if learn.all():
            self._learn(at, ids, ts, x)
        elif learn.any():
            idx = np.flatnonzero(learn)
            self._learn(ids[idx], ids[idx], ts[idx], x[idx])
        st.put(at, ok, seen_ts=ts)
        return p

    def _expect(self, at: Index, ids: Ids, ts: Floats, x: Floats) -> tuple[Floats, ...]:
        """Residual against level + season, the value less the level, the robust spread, the drift's
        weight since the last learned sample and its prospective value, and the nearest cell."""
        st = self.state
        level, mean, drift, mad, n, last = (
            st[k][at] for k in ("level", "mean", "drift", "mad", "n", "last_ts")
        )
        season, cell = self._season(at, ids, ts)
        season = season - mean  # the profile less its mean: the level is the cycle's mean
        base = pick(n == 0, x - season, level)
        with np.errstate(invalid="ignore"):
            resid = x - base - season
        sigma = floored_sigma(MAD_TO_SIGMA * mad, base, self.rel_floor, self.abs_floor)
        limit = pick(n >= 2, self.clip_sigmas * sigma, np.inf)  # nothing to clip against at first
        step = np.clip(resid, -limit, limit)
        dt = pick(np.isfinite(last), ts - last, 0.0)
        a_drift = half_life_weight(np.minimum(dt, self.max_weight_s), self.drift_half_life_s)
        new_drift = drift + a_drift * (step - drift)
        return resid, base, sigma, limit, step, dt, a_drift, new_drift, cell.astype(np.float64)

    def _judge(self, at: Ids, ts: Floats, x: Floats) -> Floats:
        resid, _, sigma, _, _, _, a_drift, new_drift, _ = self._expect(at, at, ts, x)
        with np.errstate(invalid="ignore", divide="ignore"):
            dsigma = np.maximum(
                ABS_TO_SIGMA * self.state["dabs"][at], sigma * np.sqrt(a_drift / (2.0 - a_drift))
            )
            drift = self.calibrator.tail(at, np.abs(new_drift) / dsigma)
        return np.minimum(self.calibrator.score(at, np.abs(resid) / sigma), drift)

    def _learn(self, at: Index, ids: Ids, ts: Floats, x: Floats) -> None:
        st = self.state
        resid, base, sigma, limit, step, dt, a_drift, new_drift, where = self._expect(at, ids, ts, x)
        cell = where.astype(np.intp)
        mean, dabs, mad, plain, n, first = (
            st[k][at] for k in ("mean", "dabs", "mad", "plain", "n", "first_ts")
        )
        start = n == 0
        dev = x - base
        first = pick(start, ts, first)
        count_alpha = 1.0 / (n + 1.0)
        weighed = np.minimum(dt, self.max_weight_s)  # an hourly point is not twelve 5-minute ones
        a_level = np.maximum(half_life_weight(weighed, self.level_half_life_s), count_alpha)
        a_spread = np.maximum(half_life_weight(weighed, self.spread_half_life_s), count_alpha)
        # a young profile averages the periods it has seen (a short half-life), an old one forgets slowly
        periods = np.clip((ts - first) / self.period_s, 0.25, self.cell_half_life_periods)
        a_cell = np.asarray(1.0 - np.exp2(-dt / (periods * self.cell_visit_s)))
        old = self._cells(at, ids, cell)
        goal = dev + mean
        target = np.clip(goal, old - limit, old + limit)  # a spike moves its cell by at most `limit`
        new_cell = np.where(np.isnan(old), goal, old + a_cell * (target - old)).astype(np.float32)
        if isinstance(at, slice) and (cell == cell[0]).all():
            self.profile.cells[int(cell[0]), at] = new_cell
        else:
            self.profile.cells[cell, ids] = new_cell
        dsigma = np.maximum(ABS_TO_SIGMA * dabs, sigma * np.sqrt(a_drift / (2.0 - a_drift)))
        new_mad = pick(start, 0.0, mad + a_spread * (np.minimum(np.abs(resid), limit) - mad))
        new_plain = pick(start, 0.0, plain + a_spread * (np.minimum(np.abs(dev), 4.0 * limit) - plain))
        st["level"][at] = pick(start, base, base + a_level * step)
        st["mean"][at] = mean + (new_cell - np.nan_to_num(old)) / self.bins
        st["drift"][at] = new_drift
        st["dabs"][at] = dabs + a_spread * (np.minimum(np.abs(new_drift), 2.0 * dsigma) - dabs)
        st["mad"][at] = new_mad
        st["plain"][at] = new_plain
        st["n"][at] = n + 1.0
        st["first_ts"][at] = first
        st["last_ts"][at] = ts
