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

With `runs` (the bank's level detector), a run of exceedances is evidence too (`runs.RunCalibrator`):
in heavy-tailed noise a shift of ten sigmas is, point by point, one of the outliers the calibrator has
learned, and the baseline has followed it within an hour; what no heavy tail gives is such points in
a row.

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

from prexid.detectors.base import (
    MAD_TO_SIGMA,
    Floats,
    Ids,
    ewma_weight,
    floored_sigma,
    pick,
    rows,
)
from prexid.detectors.calibration import Calibrated, TailCalibrator
from prexid.detectors.runs import RunCalibrator


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
    ) -> None:
        self.spread_samples = spread_samples
        self.half_life_s = half_life_s
        self.warmup = warmup
        self.clip_sigmas = clip_sigmas
        self.rel_floor = rel_floor
        self.abs_floor = abs_floor
        fields = {"center": np.nan, "mad": 0.0, "n": 0.0, "last_ts": -np.inf}
        calibrator = RunCalibrator(young_xi=young_xi) if runs else TailCalibrator(young_xi=young_xi)
        super().__init__(fields, calibrator=calibrator)

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
        p = self.calibrator.score(at, z)

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
