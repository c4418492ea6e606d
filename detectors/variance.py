"""Variance increase: a series that keeps its level but starts to swing more (an unstable controller, a
flapping link, a noisy sensor).

The level and drift detectors follow a series' centre; a change of spread alone barely moves it and
raises their own noise estimate, so it hides there. This detector compares the recent mean square of
first differences (a short EWMA) with the long-run one (a long EWMA): differences ignore the level, a
slow drift and most of a daily cycle. Under a stationary Gaussian series the short EWMA (weight a) is
about a scaled chi-square of (2-a)/a degrees of freedom, so the ratio becomes a z-score by the
Wilson-Hilferty cube root (one-sided: only more spread is evidence; less is the flatline detector's
business), calibrated against the series' own
history as the other gauge detectors are (`TailCalibrator`). Squared differences are clipped at
`clip_sigmas` of the long-run spread before either EWMA learns them, so one spike can neither swamp
the short mean nor inflate the reference. A point weighs at most `max_weight_s` (five minutes) of event
time: at an hour a point, the half-lives would be one point and twelve, and a variance change would
hardly show.

>>> import numpy as np
>>> det, rng, ids = VarianceShift(), np.random.default_rng(0), np.zeros(1, dtype=np.int64)
>>> x = np.r_[rng.normal(0, 1, 600), rng.normal(0, 5, 60)]
>>> ps = [det.update(ids, np.array([300.0 * t]), x[t : t + 1])[0] for t in range(660)]
>>> bool(min(ps[200:600]) > 1e-4), bool(min(ps[600:]) < 1e-6)
(True, True)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Floats, Ids, ewma_weight, pick, rows
from prexid.detectors.calibration import Calibrated

Weight = Floats | float  # an EWMA's weight per series, or the scrape's one weight (`ewma_weight`)


class VarianceShift(Calibrated):
    """One-sided z of the short over the long mean square of first differences, as a tail probability."""

    name = "variance_shift"
    baseline_of = "prev"

    def __init__(
        self,
        short_half_life_s: float = 3600.0,
        long_half_life_s: float = 12 * 3600.0,
        warmup: int = 30,
        ref_memory: float = 3.0,
        clip_sigmas: float = 6.0,
        abs_floor: float = 1e-12,
        max_weight_s: float = 300.0,
    ) -> None:
        self.short_half_life_s = short_half_life_s
        self.long_half_life_s = long_half_life_s
        self.warmup = warmup
        self.ref_memory = ref_memory
        self.clip2 = clip_sigmas**2
        self.abs_floor = abs_floor
        self.max_weight_s = max_weight_s
        super().__init__(
            {"prev": np.nan, "short": 0.0, "long": 0.0, "n": 0.0, "last_ts": -np.inf}, capacity=64
        )

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st, at = self.state, rows(ids)
        prev, short, long, n, last = (st[k][at] for k in ("prev", "short", "long", "n", "last_ts"))
        ok = np.isfinite(x) & (ts > last)
        paired = ok & np.isfinite(prev)  # a difference exists: the series' second sample on
        with np.errstate(invalid="ignore"):
            d2 = pick(paired, (x - prev) ** 2, 0.0)
        least = float(n.min())  # usually every series is past the warm-up and the count's pace: no masks
        warm = None if least >= self.warmup else n >= self.warmup
        ref = np.maximum(long, self.abs_floor)
        d2 = (
            np.minimum(d2, self.clip2 * ref)
            if warm is None
            else pick(warm, np.minimum(d2, self.clip2 * ref), d2)
        )
        dt = pick(np.isfinite(last), np.minimum(ts - last, self.max_weight_s), 0.0)  # at most 5 min a point
        # n - 1 differences seen before this one; numbers, not arrays, once every series is past its first
        # hours (a scrape's one dt): then so are h and its root below
        a_short = ewma_weight(dt, self.short_half_life_s, n, least=least)
        a_long = ewma_weight(dt, self.long_half_life_s, n, least=least)
        new_short = short + a_short * (d2 - short)
        # judged once the reference remembers `ref_memory` times more than the short mean: before, the
        # long EWMA is still the running mean of the few samples seen, as quick as the short one (with one
        # weight for the scrape, fl(n * a) grows with n: the fewest samples decide for all)
        judged = paired & (long > self.abs_floor)
        if warm is not None:
            judged &= warm
        if not (isinstance(a_short, float) and least * a_short >= self.ref_memory):
            judged &= n * a_short >= self.ref_memory
        if judged.any():
            p = self.calibrator.score(at, self._z(judged, a_short, a_long, new_short, ref))
        else:  # nothing to judge (a fleet's first hours): the calibrator would learn nothing either
            p = np.ones(len(ids), dtype=np.float64)
        st.put(at, paired, short=new_short, long=long + a_long * (d2 - long))
        st.put(at, ok, prev=x, n=n + 1.0, last_ts=ts)
        return p

    def _z(
        self, judged: NDArray[np.bool_], a_short: Weight, a_long: Weight, short: Floats, ref: Floats
    ) -> Floats:
        """The one-sided Wilson-Hilferty z of the judged series (NaN elsewhere), computed for them alone:
        a series younger than a few hours is not judged, and its cube root is not paid for."""
        if judged.all():
            return np.maximum(self._wilson_hilferty(a_short, a_long, short, ref), 0.0)
        z = np.full(len(judged), np.nan)
        at = np.flatnonzero(judged)
        part = [a if isinstance(a, float) else a[at] for a in (a_short, a_long)]
        z[at] = np.maximum(self._wilson_hilferty(part[0], part[1], short[at], ref[at]), 0.0)
        return z

    @staticmethod
    def _wilson_hilferty(a_short: Weight, a_long: Weight, short: Floats, ref: Floats) -> Floats:
        # 2 / (9 dof) of the ratio read as a chi-square: the short EWMA's dof, fewer for the reference's own
        # noise and for consecutive differences sharing a point (their squares correlate by 1/4)
        h = (3.0 / 9.0) * (a_short / (2.0 - a_short) + a_long / (2.0 - a_long))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray((np.cbrt(short / ref) - 1.0 + h) / np.sqrt(h))  # Wilson-Hilferty: right tail
