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
before. Time of day is event time modulo `period_s`: irregular scrapes and replays agree.

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
    ArrayDetector,
    Floats,
    Ids,
    Index,
    Packed,
    SeriesState,
    Stored,
    array_pieces,
    by_rounds,
    half_life_weight,
    load_array,
    pack_blobs,
    pick,
    rows,
    unpack_blobs,
)
from prexid.detectors.calibration import TailCalibrator

_MAD_TO_SIGMA = 1.4826
_ABS_TO_SIGMA = 1.2533  # E|x| = sigma * sqrt(2 / pi) for Gaussian x


class Profiles:
    """Per-series time-of-day cells, float32 (NaN: a cell not visited yet), grown by doubling."""

    def __init__(self, bins: int, capacity: int = 64) -> None:
        self.bins = bins
        self.cells: NDArray[np.float32] = np.full((capacity, bins), np.nan, dtype=np.float32)

    def ensure(self, max_id: int) -> None:
        cap = len(self.cells)
        if max_id < cap:
            return
        grown = np.full((max(2 * cap, max_id + 1), self.bins), np.nan, dtype=np.float32)
        grown[:cap] = self.cells
        self.cells = grown

    def bytes_per_series(self) -> int:
        return self.bins * self.cells.itemsize

    def snapshot(self) -> Packed:
        return pack_blobs(array_pieces(self.cells))

    def restore(self, data: Stored) -> None:
        (blob,) = unpack_blobs(data)
        cells = load_array(blob)
        if cells.ndim != 2 or cells.shape[1] != self.bins or cells.dtype != np.float32:
            raise ValueError(f"profiles of shape {cells.shape} {cells.dtype}, not (n, {self.bins}) float32")
        self.cells = cells.astype(np.float32, copy=False)

    def forget(self, ids: Ids) -> None:
        self.cells[ids[ids < len(self.cells)]] = np.nan


class SeasonalDeviation(ArrayDetector):
    """Robust |z| of each sample against level + time-of-day profile, where the profile explains the
    series; a tail probability."""

    name = "seasonal_deviation"
    baseline_of = "level"
    nested = ("calibrator", "profile")

    def __init__(
        self,
        period_s: float = 86400.0,
        bins: int = 48,
        level_half_life_s: float = 3 * 3600.0,
        cell_half_life_periods: float = 2.0,
        spread_half_life_s: float = 12 * 3600.0,
        drift_half_life_s: float = 3600.0,
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
        self.min_periods = min_periods
        self.gate = gate
        self.clip_sigmas = clip_sigmas
        self.rel_floor = rel_floor
        self.abs_floor = abs_floor
        self.state = SeriesState(
            {
                "level": np.nan,
                "mean": 0.0,  # the profile's mean: the level is the cycle's mean
                "drift": 0.0,  # short EWMA of the residual, and its usual size
                "dabs": 0.0,
                "mad": 0.0,
                "plain": 0.0,  # EWMA of |value - level|: the spread the profile is judged against
                "n": 0.0,
                "first_ts": np.nan,
                "last_ts": -np.inf,
            },
            capacity=64,  # grown on demand: a bank's fixed size stays small (profiles are wide)
        )
        self.calibrator = TailCalibrator()
        self.profile = Profiles(bins)

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        if len(ids) == 0:
            return np.ones(0, dtype=np.float64)
        self.state.ensure(int(ids.max()))
        self.calibrator.ensure(int(ids.max()))
        self.profile.ensure(int(ids.max()))
        return by_rounds(self._update_round, ids, ts, values)

    def explains(self, ids: Ids) -> NDArray[np.bool_]:
        """Whether each series' profile is old enough and halves its spread: where it does, this
        detector judges the series against its cycle, and a baseline without the cycle judges the cycle."""
        st = self.state
        span = st.read("last_ts", ids) - st.read("first_ts", ids)
        with np.errstate(invalid="ignore"):
            old = span >= self.min_periods * self.period_s
            return np.asarray(old & (st.read("mad", ids) <= self.gate * st.read("plain", ids)))

    def _cells(self, at: Index, ids: Ids, cell: NDArray[np.intp]) -> Floats:
        """Each series' value of one cell: a strided column read when a scrape's series are a contiguous
        range at one time of day (the usual case), else a gather."""
        if isinstance(at, slice) and len(cell) and (cell == cell[0]).all():
            return self.profile.cells[at, int(cell[0])].astype(np.float64)
        return self.profile.cells[ids, cell].astype(np.float64)

    def _season(self, at: Index, ids: Ids, ts: Floats) -> tuple[Floats, NDArray[np.intp]]:
        """The profile read at each sample's time of day (NaN cells read as 0), and its nearest cell."""
        pos = np.mod(ts, self.period_s) * (self.bins / self.period_s) - 0.5  # cell centres at k + 0.5
        lo = np.floor(pos)
        frac = pos - lo
        b0 = np.mod(lo, self.bins).astype(np.intp)
        b1 = np.mod(b0 + 1, self.bins)
        s0 = np.nan_to_num(self._cells(at, ids, b0))
        s1 = np.nan_to_num(self._cells(at, ids, b1))
        nearest = np.where(frac < 0.5, b0, b1)
        return (1.0 - frac) * s0 + frac * s1, nearest

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st, at = self.state, rows(ids)
        level, mean, drift, dabs, mad, plain, n, first, last = (
            st[k][at] for k in ("level", "mean", "drift", "dabs", "mad", "plain", "n", "first_ts", "last_ts")
        )
        ok = np.isfinite(x) & (ts > last)
        start = ok & (n == 0)
        season, cell = self._season(at, ids, ts)
        season = season - mean  # the profile less its mean: the level is the cycle's mean
        base = pick(start, x - season, level)
        with np.errstate(invalid="ignore"):
            resid = x - base - season
            dev = x - base
        sigma = np.maximum(_MAD_TO_SIGMA * mad, np.maximum(self.rel_floor * np.abs(base), self.abs_floor))
        span = ts - pick(np.isnan(first), ts, first)
        warm = ok & (span >= self.min_periods * self.period_s)
        explains = mad <= self.gate * plain
        dt = pick(np.isfinite(last), ts - last, 0.0)
        limit = pick(n >= 2, self.clip_sigmas * sigma, np.inf)  # nothing to clip against at first
        step = np.clip(resid, -limit, limit)
        a_drift = half_life_weight(dt, self.drift_half_life_s)
        new_drift = drift + a_drift * (pick(ok, step, 0.0) - drift)
        with np.errstate(invalid="ignore", divide="ignore"):
            dsigma = np.maximum(_ABS_TO_SIGMA * dabs, sigma * np.sqrt(a_drift / (2.0 - a_drift)))
            z = np.maximum(np.abs(resid) / sigma, np.abs(new_drift) / dsigma)
        p = self.calibrator.score(at, pick(warm, z, np.nan))
        p = pick(explains, p, 1.0)

        count_alpha = 1.0 / (n + 1.0)
        a_level = np.maximum(half_life_weight(dt, self.level_half_life_s), count_alpha)
        a_spread = np.maximum(half_life_weight(dt, self.spread_half_life_s), count_alpha)
        # a young profile averages the periods it has seen (a short half-life), an old one forgets slowly
        periods = np.clip(span / self.period_s, 0.25, self.cell_half_life_periods)
        a_cell = np.asarray(1.0 - np.exp2(-dt / (periods * self.cell_visit_s)))
        new_level = pick(start, base, base + a_level * step)
        cells = self.profile.cells
        old = self._cells(at, ids, cell)
        goal = dev + mean
        target = np.clip(goal, old - limit, old + limit)  # a spike moves its cell by at most `limit`
        new_cell = np.where(np.isnan(old), goal, old + a_cell * (target - old)).astype(np.float32)
        if isinstance(at, slice) and ok.all() and (cell == cell[0]).all():
            cells[at, int(cell[0])] = new_cell
        else:
            upd = np.flatnonzero(ok)
            cells[ids[upd], cell[upd]] = new_cell[upd]
        new_mean = mean + (new_cell - np.nan_to_num(old)) / self.bins
        st.put(
            at,
            ok,
            level=new_level,
            mean=new_mean,
            drift=new_drift,
            dabs=dabs + a_spread * (np.minimum(np.abs(new_drift), 2.0 * dsigma) - dabs),
            mad=pick(start, 0.0, mad + a_spread * (np.minimum(np.abs(resid), limit) - mad)),
            plain=pick(start, 0.0, plain + a_spread * (np.minimum(np.abs(dev), 4.0 * limit) - plain)),
            n=n + 1.0,
            first_ts=pick(start, ts, first),
            last_ts=ts,
        )
        return p
