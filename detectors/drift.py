"""Slow creep: a two-sided CUSUM of each series against a slow reference level.

The level detector's baseline follows a creep (that is what a 30-minute half-life does), so a
temperature rising 1 °C an hour, SBE growth or a clock sagging over hours never looks like a jump.
CUSUM accumulates small, persistent deviations from a reference that moves ~12x slower instead.

The CUSUM runs on `batch_s` means of the samples, not on the samples: gauges are autocorrelated
(a temperature wanders for minutes and dcgm-exporter prints whole degrees), and a CUSUM of raw scrapes
reads every run of 84s among 83s as drift (it voted on nearly half the samples of simulated GPU
temperatures; on 5-minute means, a few percent). A creep over hours loses nothing to 5-minute means.
Between batch ends each sample carries the last batch's evidence, so fusion sees it held, not blinking.

Noise is measured from first differences of the means (EWMA of |Δx| over hours), which a creep barely
changes; deviations are winsorised at `clip_sigmas` before they are summed, and a mean more than
`jump_sigmas` away is a jump (a job restart to idle), the level detector's business: it leaves the sums
and the reference as they were. Only a sustained, gradual departure builds up. The CUSUM height is
calibrated against the series' own history. A level that has held for `max_run_s` (a job phase
change, a new steady temperature, a jump that stayed) becomes the new reference: the sums restart
there, so one change is evidence for an hour, not until the slow reference has caught up. Held means
the last two means agree (within `agree_sigmas` of their usual step): the reference restarts at their
average, not on a passing spike. A node's CPU temperature that rose 5 °C with its own job and held had
its reference restarted an hour on, on the 5 minutes its job's checkpoint ran 0.8 °C hotter, and its
ordinary readings then summed below it for an hour: p 1e-9, a `node` page with the job's traffic (wide
tuning cells 1329 and 1353). A creep that never holds still restarts after `2 * max_run_s`.

>>> import numpy as np
>>> det = DriftCusum()
>>> ids, rng = np.zeros(1, dtype=np.int64), np.random.default_rng(0)
>>> ps = [det.update(ids, np.array([15.0 * t]), 60 + rng.normal(0, 0.5, 1) + max(0, t - 500) / 240)
...       for t in range(1200)]  # +1 a hour from the 500th scrape on
>>> float(min(ps[:500])[0]) > 1e-4, float(min(ps[500:])[0]) < 1e-6
(True, True)
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    DIFF_TO_SIGMA,
    Floats,
    Ids,
    Index,
    floored_sigma,
    half_life_weight,
    pick,
    rows,
    subset,
)
from prexid.detectors.calibration import Calibrated, TailCalibrator

Mask = NDArray[np.bool_]


class MeanReader(Protocol):
    def read_means(self, ids: Ids, mid: Floats, means: Floats, prev: Floats, n: Floats) -> None:
        """Closed means of these series: at the batches' middle times, after `prev` (NaN at first),
        with `n` means before them."""


class DriftCusum(Calibrated):
    """Two-sided CUSUM height of each series against its slow reference, as a tail probability."""

    name = "drift_cusum"
    baseline_of = "ref"

    def __init__(
        self,
        ref_half_life_s: float = 6 * 3600.0,
        noise_half_life_s: float = 6 * 3600.0,
        slack: float = 0.5,
        clip_sigmas: float = 3.0,
        jump_sigmas: float = 8.0,
        warmup: int = 12,  # batches: an hour of 5-minute means
        max_run_s: float = 3600.0,
        agree_sigmas: float = 3.0,
        rel_floor: float = 0.002,
        abs_floor: float = 1e-6,
        batch_s: float = 300.0,
    ) -> None:
        self.batch_s = batch_s
        self.ref_half_life_s = ref_half_life_s
        self.noise_half_life_s = noise_half_life_s
        self.slack = slack
        self.clip_sigmas = clip_sigmas
        self.jump_sigmas = jump_sigmas
        self.warmup = warmup
        self.max_run_s = max_run_s
        self.agree_sigmas = agree_sigmas
        self.rel_floor = rel_floor
        self.abs_floor = abs_floor
        super().__init__(
            {
                "ref": np.nan,
                "absdiff": 0.0,
                "prev": np.nan,
                "hi": 0.0,
                "lo": 0.0,
                "n": 0.0,
                "refs": 0.0,  # means the reference has averaged since it was (re)set
                "since": np.nan,
                "bsum": 0.0,  # the open batch: sum, count, first and last sample times
                "bn": 0.0,
                "bstart": np.nan,
                "bseen": -np.inf,
                "p": 1.0,  # the evidence of the last closed batch
            },
            calibrator=TailCalibrator(threshold=3.0, prior_rate=0.065, prior_mean_excess=1.05),
        )
        self.reader: MeanReader | None = None  # who else reads each closed mean (the trend detector)

    def rising(self, ids: Ids) -> NDArray[np.bool_]:
        """Whether each series' creep is upward (its upper sum leads): a slow climb read on quantised
        values sits below its level detector's baseline as often as above it, so only the CUSUM knows
        which way it drifts."""
        st = self.state
        if len(ids) and int(ids.max()) < st.capacity:  # every series known: views, no copies
            at = rows(ids)
            return np.asarray(st["hi"][at] >= st["lo"][at])
        return np.asarray(st.read("hi", ids) >= st.read("lo", ids))

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        """Fold each sample into its series' open batch; a batch `batch_s` old closes into the CUSUM."""
        st, at = self.state, rows(ids)
        seen, opened = st["bseen"][at], st["bstart"][at]
        ok = np.isfinite(x) & (ts > seen)  # out-of-order and repeated samples are not folded in
        start = pick(np.isnan(opened), ts, opened)
        bsum = st["bsum"][at] + pick(ok, x, 0.0)
        bn = st["bn"][at] + ok
        interval = np.minimum(pick(np.isfinite(seen), ts - seen, 0.0), self.batch_s)
        close = ok & (ts - start + interval >= self.batch_s)  # the batch covers `batch_s` of scrapes
        st.put(at, ok & ~close, bsum=bsum, bn=bn, bstart=start, bseen=ts)
        shut = np.flatnonzero(close)
        if len(shut):
            c, mean = subset(at, shut), bsum[shut] / bn[shut]
            if self.reader is not None:
                self.reader.read_means(c, 0.5 * (start[shut] + ts[shut]), mean, st["prev"][c], st["n"][c])
            span = ts[shut] - start[shut] + interval[shut]  # event time since the last batch closed
            st["p"][c] = self._cusum(c, ts[shut], span, mean)
            st["bsum"][c], st["bn"][c], st["bstart"][c], st["bseen"][c] = 0.0, 0.0, np.nan, ts[shut]
        return st.read("p", ids)

    def _cusum(self, ids: Ids, ts: Floats, dt: Floats, x: Floats) -> Floats:
        """Fold closed batch means, each `dt` after the last, into the CUSUM; each one's calibrated p."""
        st, at = self.state, rows(ids)
        ref, absdiff, prev, n, refs = (st[k][at] for k in ("ref", "absdiff", "prev", "n", "refs"))
        ok = np.isfinite(x)
        first = ok & (n == 0)
        sigma = floored_sigma(DIFF_TO_SIGMA * absdiff, ref, self.rel_floor, self.abs_floor)
        with np.errstate(invalid="ignore"):
            z_raw = (x - ref) / sigma
        z = np.clip(z_raw, -self.clip_sigmas, self.clip_sigmas)
        hi = np.maximum(0.0, st["hi"][at] + z - self.slack)
        lo = np.maximum(0.0, st["lo"][at] - z - self.slack)
        warmed = ok & (n >= self.warmup)
        jump = warmed & (np.abs(z_raw) > self.jump_sigmas)
        anchoring = warmed & (refs < self.warmup)  # a new level learned after a jump: not judged yet
        judged = warmed & ~jump & ~anchoring
        height = pick(judged, np.maximum(hi, lo), np.nan)
        p = self.calibrator.score(at, height)

        # a young reference is the mean of the means since it was set (a restarted one's too), then slow
        a_ref = np.maximum(half_life_weight(dt, self.ref_half_life_s), 1.0 / (refs + 1.0))
        a_noise = np.maximum(half_life_weight(dt, self.noise_half_life_s), 1.0 / (n + 1.0))
        with np.errstate(invalid="ignore"):  # ±Inf samples are not learned, below
            step = np.abs(x - prev)
            held = step <= self.agree_sigmas * np.sqrt(2.0) * sigma  # this mean agrees with the last
        warm = n < self.warmup  # noise is learned unclipped until then, so a first dip cannot pin it near 0
        step = pick(warm, step, np.minimum(step, 4.0 * sigma))
        new_absdiff = pick(np.isfinite(step), absdiff + a_noise * (step - absdiff), absdiff)
        upd = ok & ~first & ~jump
        move = pick(anchoring, z_raw, z) * sigma  # an anchoring reference is the plain mean of its means
        st.put(at, first | upd, ref=pick(first, x, ref + a_ref * move), refs=refs + 1.0)
        st.put(at, judged, hi=hi, lo=lo)
        st.put(at, upd, absdiff=new_absdiff)
        off = jump | (judged & (height > self.calibrator.threshold))
        self._restart_long_runs(at, ts, x, warmed, off, held, prev, jump)
        st.put(at, ok, prev=x, n=n + 1.0)
        return p

    def _restart_long_runs(
        self, at: Index, ts: Floats, x: Floats, seen: Mask, off: Mask, held: Mask, prev: Floats, jump: Mask
    ) -> None:
        """Re-baseline series off their reference (high CUSUM or jumped) for `max_run_s`, at the level
        held by their last two means (after `2 * max_run_s`, wherever they are). A series that jumped
        to a new level learns it afresh, unjudged, as the mean of its next `warmup` means; a creep's
        reference stays slow, so the creep goes on building evidence."""
        st = self.state
        since = st["since"][at]
        busy = np.flatnonzero(off | ~np.isnan(since))  # only series in or leaving a run: a few, usually
        if len(busy) == 0:
            return
        ids, ts, x, seen, off, since = subset(at, busy), ts[busy], x[busy], seen[busy], off[busy], since[busy]
        held, prev, jump = held[busy], prev[busy], jump[busy]
        since = np.where(off, np.where(np.isnan(since), ts, since), np.where(seen, np.nan, since))
        run = ts - since
        restart = off & (run >= self.max_run_s) & (held | (run >= 2.0 * self.max_run_s))
        st["since"][ids] = np.where(restart, np.nan, since)
        if restart.any():
            gone = ids[restart]
            level = np.where(held, 0.5 * (x + prev), x)[restart]
            refs = np.where(jump[restart], np.where(held, 2.0, 1.0)[restart], st["refs"][gone])
            st["ref"][gone], st["refs"][gone], st["hi"][gone], st["lo"][gone] = level, refs, 0.0, 0.0
