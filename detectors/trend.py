"""Trend changes: a slope appearing in a series that used to hold its level, judged against its own slopes.

The drift CUSUM re-baselines a series that has been off its reference for an hour (a GPU temperature
that follows its load to a new level is ordinary), so a slope of a few hundredths of the noise a
sample, which takes hours to add up to a noise sigma, is evidence for an hour at a time and never
enough. This detector estimates the slope itself: Brown's double exponential smoothing of
`batch_s` means (two EWMAs, S1 of the means and S2 of S1; the slope a/(1-a) (S1 - S2) is the
discounted least-squares slope over a window of about `half_life_s`), divided by its standard error
under the series' own noise (first differences of the means, as the drift CUSUM measures it; the
zero steps of a stuck reading left out), two-sided, over the spread of the slopes the series has had
(a series that wanders slowly has larger ones than white noise), and calibrated against its own
history (`TailCalibrator`). A slope beyond the usual for `max_run_s` becomes the usual: a series rising
for days is news for hours, not for days (the drift CUSUM's re-baselining, at a trend's pace).

With a `seasonal` detector (the bank passes its own), each mean has the series' daily profile
at the batch's middle taken out first: a daily cycle of one noise sigma has slopes as large as such a
trend.

A step is not a slope: a mean more than `jump_sigmas` off the smoother's forecast (a job restart, a
spike) is held back and read as the forecast. If the next mean is off the same way, it is a step, taken
out of the smoother's history (both EWMAs move by the two means' distance), so only a gradual change
builds up; if not, it was a spike, and is forgotten. (Shifting by every jump left a spike's return mean
in the smoother with weight 1, and the ordinary means after it read as a slope.) The detector
answers only after `warmup` means (two days of 5-minute means, the slope spread learned in the second,
when the profile has seen a day): every gauge of a GPU fleet in its first two days is judged exactly as
without it.

>>> import numpy as np
>>> det, rng, ids = TrendShift(), np.random.default_rng(0), np.zeros(1, dtype=np.int64)
>>> t = 300.0 * np.arange(288 * 4)
>>> x = 50 + rng.normal(0, 1, len(t)) + 0.05 * np.maximum(0, np.arange(len(t)) - 288 * 3)
>>> ps = np.array([det.update(ids, t[i : i + 1], x[i : i + 1])[0] for i in range(len(t))])
>>> bool(ps[: 288 * 3].min() > 1e-4), bool(ps[288 * 3 : 288 * 3 + 100].min() < 1e-7)
(True, True)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import erfc

from prexid.detectors.base import (
    DIFF_TO_SIGMA,
    ArrayDetector,
    Floats,
    Ids,
    Saved,
    SeriesState,
    floored_sigma,
    pick,
)
from prexid.detectors.calibration import P_FLOOR
from prexid.detectors.drift import DriftCusum
from prexid.detectors.seasonal import SeasonalDeviation


def _slope_spread(a: float) -> float:
    """Standard deviation of Brown's slope estimate under unit iid noise: the root sum of squares of
    its impulse response (the filter is linear in the means)."""
    k = int(40.0 / a)
    s1 = a * (1.0 - a) ** np.arange(k)  # S1's response to a unit mean k batches ago
    s2 = np.convolve(s1, s1)[:k]  # S2 is S1 smoothed by the same kernel
    slope = a / (1.0 - a) * (s1 - s2)
    return float(np.sqrt(np.sum(slope**2)))


def _settles_at(fall: float) -> float:
    """Where an EWMA of squared unit Gaussians settles when it falls `fall` times faster than it rises
    (its pulls up and down balance): the share of their mean square it reads, found by bisection."""
    v = np.random.default_rng(0).standard_normal(200_000) ** 2
    lo, hi = 0.0, 1.0
    for _ in range(40):
        m = 0.5 * (lo + hi)
        lo, hi = (m, hi) if np.maximum(v - m, 0).mean() > fall * np.maximum(m - v, 0).mean() else (lo, m)
    return 0.5 * (lo + hi)


class TrendShift(ArrayDetector):
    """Two-sided z of each series' smoothed slope against its noise, as a tail probability."""

    name = "trend_shift"
    baseline_of = "s1"

    def __init__(
        self,
        half_life_s: float = 4 * 3600.0,
        noise_half_life_s: float = 6 * 3600.0,
        spread_half_life_s: float = 12 * 3600.0,
        clip: float = 3.0,
        fall: float = 4.0,
        max_run_s: float = 6 * 3600.0,
        usual_spreads: float = 2.0,
        jump_sigmas: float = 8.0,
        warmup: int = 576,  # batches: two days of 5-minute means (its slope spread learned in the second)
        rel_floor: float = 0.002,
        abs_floor: float = 1e-6,
        batch_s: float = 300.0,
        seasonal: SeasonalDeviation | None = None,
        drift: DriftCusum | None = None,
    ) -> None:
        self.seasonal = seasonal
        self.batch_s = batch_s
        self.alpha = 1.0 - 0.5 ** (batch_s / half_life_s)
        self.noise_alpha = 1.0 - 0.5 ** (batch_s / noise_half_life_s)
        self.spread_alpha = 1.0 - 0.5 ** (batch_s / spread_half_life_s)
        self.spread_fall = 1.0 - 0.5 ** (batch_s / (spread_half_life_s / fall))
        self.spread_bias = _settles_at(fall)  # so that the spread reads 1 on white noise
        self.max_run = max_run_s / batch_s
        self.usual_spreads = usual_spreads
        self.clip = clip
        self.clip2 = clip**2
        self.spread = _slope_spread(self.alpha)
        self.jump_sigmas = jump_sigmas
        self.warmup = warmup
        self.rel_floor = rel_floor
        self.abs_floor = abs_floor
        self.state = SeriesState(
            {
                "s1": np.nan,  # Brown's two EWMAs of the means
                "s2": np.nan,
                "held": np.nan,  # the last mean's distance off its forecast, if it jumped (else NaN)
                "absdiff": 0.0,  # EWMA of |Δ| between consecutive means: the noise
                "spread2": 1.0,  # EWMA of the squared slope z: the slopes the series has had
                "run": 0.0,  # means in a row whose slope was beyond the usual
                "p": 1.0,  # the evidence of the last closed mean
            },
            capacity=64,
        )
        self.own_drift = drift is None  # alone (the catalog), over a drift CUSUM of its own
        self.drift = DriftCusum(batch_s=batch_s) if drift is None else drift
        self.drift.reader = self

    def _parts(self) -> list[Saved]:
        return [self.drift] if self.own_drift else []

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        """The evidence of each series' last closed mean: the drift CUSUM closes the means (in the bank
        it has seen these samples already; alone, it sees them here first). A batch holding a series
        twice gives both samples the evidence as of the later one (the drift CUSUM has folded both in):
        a mean's slope, seconds apart, inside one tick."""
        if len(ids) == 0:
            return np.ones(0, dtype=np.float64)
        self.state.ensure(int(ids.max()))
        if self.own_drift:
            self.drift.update(ids, ts, values)
        return self.state.read("p", ids)

    def read_means(self, at: Ids, mid: Floats, mean: Floats, prev: Floats, n: Floats) -> None:
        """One closed mean per series (the profile at the batch's middle taken out): judge its smoothed
        slope, then learn the mean."""
        self.state.ensure(int(at.max()))
        st = self.state
        x = mean if self.seasonal is None else mean - self.seasonal.season(at, mid)
        absdiff = st["absdiff"][at]
        first = n == 0
        level = pick(first, x, st["s1"][at])
        sigma = floored_sigma(DIFF_TO_SIGMA * absdiff, level, self.rel_floor, self.abs_floor)
        z = self._smooth(at, x, sigma, first)
        spread2 = st["spread2"][at]
        scale2 = np.maximum(spread2 / self.spread_bias, 1.0)
        judged = n >= self.warmup
        st["p"][at] = pick(judged, np.maximum(erfc(np.abs(z) / np.sqrt(2.0 * scale2)), P_FLOOR), 1.0)
        self._learn_spread(at, z, spread2, scale2, n, judged)
        step = np.abs(mean - prev)
        step = pick(n < 12, step, np.minimum(step, 4.0 * sigma))  # a jump is not noise
        moved = ~first & np.isfinite(step) & (step > 0.0)  # a stuck reading is no measure of the noise
        st["absdiff"][at] = pick(moved, absdiff + self.noise_alpha * (step - absdiff), absdiff)

    def _smooth(self, at: Ids, x: Floats, sigma: Floats, first: NDArray[np.bool_]) -> Floats:
        """Fold the means into Brown's two EWMAs (a jump taken out first); the slope's z over its noise."""
        st, a = self.state, self.alpha
        s1, s2 = st["s1"][at], st["s2"][at]
        forecast = 2.0 * s1 - s2 + a / (1.0 - a) * (s1 - s2)
        off, held = x - forecast, st["held"][at]
        jump = ~first & (np.abs(off) > self.jump_sigmas * sigma)
        step = jump & (off * held > 0.0)  # the second mean in a row off the same way: a step
        spike = jump & ~step  # a first one is held back: read as its forecast until the next confirms it
        shift = pick(step, 0.5 * (off + held), 0.0)  # a step leaves the smoother's history as it was
        s1, s2 = pick(first, x, s1 + shift), pick(first, x, s2 + shift)
        x = pick(spike, forecast, x)
        s1 = s1 + a * (x - s1)
        s2 = s2 + a * (s1 - s2)
        st["s1"][at], st["s2"][at], st["held"][at] = s1, s2, pick(spike, off, np.nan)
        return np.asarray(a / (1.0 - a) * (s1 - s2) / (sigma * self.spread))

    def _learn_spread(
        self, at: Ids, z: Floats, spread2: Floats, scale2: Floats, n: Floats, judged: NDArray[np.bool_]
    ) -> None:
        """The slopes the series has had: learned from the second half of the warm-up (the profile is
        young before), falling faster than rising (a settling cycle is forgotten in hours), and once
        judging only from usual slopes (a trend under way is not learned), until one has held for
        `max_run_s`: then it is the series' new normal."""
        st = self.state
        learned = n - self.warmup // 2
        rate = pick(z * z < spread2, self.spread_fall, self.spread_alpha)
        a_spread = pick(learned >= 0, np.maximum(rate, 1.0 / np.maximum(learned + 1.0, 1.0)), 0.0)
        usual = ~judged | (np.abs(z) < self.usual_spreads * np.sqrt(scale2))
        spread2 = spread2 + pick(usual, a_spread, 0.0) * (np.minimum(z * z, self.clip2 * scale2) - spread2)
        run = pick(usual, 0.0, st["run"][at] + 1.0)
        settled = run >= self.max_run
        spread2 = pick(settled, z * z * self.spread_bias, spread2)
        st.put(at, np.isfinite(spread2), spread2=spread2)
        st["run"][at] = pick(settled, 0.0, run)
