"""Robust level shift / spike detector: each series against its own EWMA median and MAD.

A Huber-clipped EWMA follows the median and an EWMA of clipped absolute deviations follows the MAD, so a
single spike cannot drag the baseline and a sustained shift stays visible for several half-lives.
Half-lives are in event-time seconds, so irregular scrapes and replays give the same answer.
The robust |z| is then calibrated against the series' own |z| history (`TailCalibrator`), so a
heavy-tailed or seasonal series is not judged as if its noise were Gaussian.

The spread is learned over at least `spread_samples` samples whatever the cadence. A five-minute
series' half-hour half-life is six samples: its spread wandered ±20% from sample to sample, and after
an outage of hours its one sample back, weighted as hours of evidence, replaced the spread by its own
deviation. The calibrator learned the heavy tail of z-scores that noisy, and 10-sigma spikes came out
at p 1e-5 (the generic corpus' `gaps` and `spike` files). A 15-s scrape's half-life is 120 samples:
the floor does not bind there.

With `runs` (the bank's level detector), a run of exceedances is evidence too. In heavy-tailed noise a
shift of ten sigmas is, point by point, one of the outliers the calibrator has learned (p 1e-3), and
the baseline has followed it within an hour; what no heavy tail gives is such points in a row. The
calibrator's open episode is the run (k exceedances of its threshold in a row), and k in a row are as
rare as `rate * stick ** (k - 1)`: its exceedance rate, and `stick`, how often one of the series'
exceedances has followed another (a decayed share, learned at a running mean's pace while young). A
series whose exceedances come in runs by nature (a temperature wandering for minutes, stick 0.6) would
make that geometric model overconfident, so runs count only where stick is under `run_max_stick`:
where exceedances usually stand alone. The smaller of the two p is the sample's (at most twice too
small: two looks).

In its warm-up, a series that has not moved yet (a MAD of 0) learns its first move unclipped:
there is no spread yet to clip against. A counter whose first rate read 0 (the exporter's cached first
scrape, a stall by the rules of `counter_rate`) had its baseline at 0 and its MAD at 0, and clipped at
3 floor sigmas (1e-6) its MAD grew a few percent a scrape: its ordinary rate was p=1e-12 for hours
(wide tuning cell seed 81 paged a node 7 minutes in). Once it has moved, its warm-up is clipped as
before: unclipped throughout the warm-up, every series' early baseline moved, and with it the family
calibration (wide-s19 paged at the threshold). Its calibrator judges a young series' far tail heavy
(`TailCalibrator.young_xi`): minutes of history have not shown its rare spikes (a stale exporter's zero
rate) yet.

>>> import numpy as np
>>> det = RobustDeviation(warmup=5)
>>> ids = np.zeros(1, dtype=np.int64)
>>> for t in range(20):
...     _ = det.update(ids, np.array([15.0 * t]), np.array([60.0 + (t % 2) * 0.2]))
>>> float(det.update(ids, np.array([300.0]), np.array([75.0]))[0]) < 1e-5  # 15 samples old: a heavy tail
True
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    MAD_TO_SIGMA,
    Floats,
    Ids,
    Index,
    ewma_weight,
    floored_sigma,
    pick,
    rows,
    subset,
)
from prexid.detectors.calibration import P_FLOOR, Calibrated, TailCalibrator


class RobustDeviation(Calibrated):
    """Two-sided robust z-score of each sample against its series' own baseline, as a tail probability."""

    name = "robust_deviation"
    baseline_of = "center"

    def __init__(
        self,
        half_life_s: float = 1800.0,
        warmup: int = 20,
        clip_sigmas: float = 3.0,
        rel_floor: float = 0.01,
        abs_floor: float = 1e-6,
        young_xi: float = 0.45,
        spread_samples: float = 100.0,
        runs: bool = False,
        run_prior: float = 0.05,
        run_prior_weight: float = 5.0,
        run_window: float = 50.0,
        run_max_stick: float = 0.25,
    ) -> None:
        self.runs = runs
        self.run_prior_weight = run_prior_weight
        self.run_max_stick = run_max_stick
        self.run_rate = 1.0 / run_window
        self.spread_samples = spread_samples
        self.half_life_s = half_life_s
        self.warmup = warmup
        self.clip_sigmas = clip_sigmas
        self.rel_floor = rel_floor
        self.abs_floor = abs_floor
        fields = {"center": np.nan, "mad": 0.0, "n": 0.0, "last_ts": -np.inf}
        if runs:  # how often an exceedance is followed by another: learned, a decayed share
            fields["stick"] = run_prior
        super().__init__(fields, calibrator=TailCalibrator(young_xi=young_xi))

    def deviation(self, ids: Ids, x: Floats) -> Floats:
        """Robust |z| of each value against its series' baseline (NaN in the warm-up): no state moves."""
        center, mad, n = (self.state.read(k, ids) for k in ("center", "mad", "n"))
        sigma = floored_sigma(MAD_TO_SIGMA * mad, center, self.rel_floor, self.abs_floor)
        with np.errstate(invalid="ignore"):
            return pick(n >= self.warmup, np.abs(x - center) / sigma, np.nan)

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st, at = self.state, rows(ids)
        center, mad, n, last = st["center"][at], st["mad"][at], st["n"][at], st["last_ts"][at]
        ok = np.isfinite(x) & (ts >= last)  # non-finite and out-of-order samples are not folded in
        least = float(n.min())  # usually every series is past its first sample and warm-up: no masks
        first = None if least > 0.0 else ok & (n == 0)
        with np.errstate(invalid="ignore"):  # ±Inf samples: scored as nothing, below
            dev = x - center
            size = np.abs(dev)
        sigma = floored_sigma(MAD_TO_SIGMA * mad, center, self.rel_floor, self.abs_floor)
        judged = ok if least >= self.warmup else ok & (n >= self.warmup)
        with np.errstate(invalid="ignore"):
            z = pick(judged, size / sigma, np.nan)
        p = self._with_run(at, z, judged) if self.runs else self.calibrator.score(at, z)

        dt = pick(np.isfinite(last), ts - last, 0.0)
        alpha = ewma_weight(dt, self.half_life_s, n, plus=1.0, least=least)
        limit = self.clip_sigmas * sigma
        if least < self.warmup:  # a young series that has not moved yet has no spread to clip against
            limit = pick((n < self.warmup) & (mad == 0.0), np.inf, limit)
        step = np.clip(dev, -limit, limit)
        new_center = center + alpha * step
        np.minimum(size, limit, out=size)
        a_mad = alpha  # a scrape's one weight, usually below the floor's: then nothing to work out
        if not isinstance(alpha, float) or alpha > 1.0 / self.spread_samples:
            a_mad = np.maximum(np.minimum(alpha, 1.0 / self.spread_samples), 1.0 / (n + 1.0))
        new_mad = mad + a_mad * (size - mad)
        if first is not None:
            new_center, new_mad = pick(first, x, new_center), pick(first, 0.0, new_mad)

        st.put(at, ok, center=new_center, mad=new_mad, n=n + 1.0, last_ts=ts)
        return p

    def _with_run(self, at: Index, z: Floats, judged: NDArray[np.bool_]) -> Floats:
        """Each z's calibrated p, or its run's where that is smaller (see the module doc)."""
        cal, st = self.calibrator, self.state
        ran = np.flatnonzero(cal.state["ek"][at] > 0.0)  # series whose sample before this one exceeded
        p = cal.score(at, z)
        if not len(ran):  # the usual scrape: a few percent of series are in a run; their work alone
            return p
        rows_ = subset(at, ran)
        rate = cal.rate(rows_)  # its exceedance rate, read once for judging and for learning
        k = cal.state["ek"][rows_]  # exceedances in a row, this one included: the calibrator's episode
        stick = st["stick"][rows_]  # judged by what the run's steps before this one taught
        long = (k >= 2.0) & (stick < self.run_max_stick)  # where exceedances usually stand alone
        if long.any():
            run_p = rate[long] * stick[long] ** (k[long] - 1.0)
            p[ran[long]] = np.minimum(p[ran[long]], np.maximum(run_p, P_FLOOR))
        step = judged[ran]  # what follows an exceedance teaches how often another does
        if step.any():
            taught = rows_[step]
            seen = cal.state["count"][taught] * rate[step]  # about how many steps it has taught
            weight = np.maximum(self.run_rate, 1.0 / (seen + self.run_prior_weight))
            st["stick"][taught] = stick[step] + weight * ((k[step] > 0.0) - stick[step])
        return p
