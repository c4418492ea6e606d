"""Stuck values: a series that normally moves reports the exact same value scrape after scrape.

A frozen sensor, a hung DCGM field or an exporter serving a cached page all look like this. Each series
learns how often it repeats its previous value (a decayed Beta estimate q); a run of r repeats has
probability q**r if repeats were independent, which is the evidence. A series that is flat by nature
(link width, a pinned clock) learns q close to 1 and never scores, and a series is only judged once
it has moved for `warmup` samples before its current run; the repeats of a run are learned as
they happen, so a series that stays stuck for hours slowly becomes "flat by nature" too. Exact zeros
never count as repeats: an idle GPU's utilisation or an unused link's traffic rests at 0 by nature.

>>> import numpy as np
>>> det = Flatline()
>>> ids = np.zeros(1, dtype=np.int64)
>>> x = np.r_[np.linspace(60.0, 70.0, 100), np.full(10, 70.0)]
>>> ps = [det.update(ids, np.array([15.0 * t]), x[t : t + 1])[0] for t in range(110)]
>>> bool(min(ps[:100]) == 1.0), bool(ps[-1] < 1e-6)
(True, True)
"""

from __future__ import annotations

import numpy as np

from prexid.detectors.base import ArrayDetector, ByRounds, Floats, Ids, SeriesState, decayed_count, pick, rows

P_FLOOR = 1e-12


class Flatline(ByRounds, ArrayDetector):
    """Probability of the current run of identical values under the series' own repeat rate."""

    name = "flatline"
    baseline_of = "prev"  # a stuck series' explanation is the value it is stuck at

    def __init__(
        self,
        min_repeats: int = 3,
        warmup: int = 30,
        window: float = 2000.0,
        prior_repeats: float = 0.5,
        prior_samples: float = 10.0,
    ) -> None:
        self.min_repeats = min_repeats
        self.warmup = warmup
        self.keep = 1.0 - 1.0 / window
        self.prior_samples = prior_samples
        self.state = SeriesState(
            {
                "prev": np.nan,
                "run": 0.0,
                "hits": prior_repeats,  # repeats seen, decayed (steps seen: `_seen`, from `n`)
                "n": 0.0,
                "last_ts": -np.inf,
            }
        )

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st, at = self.state, rows(ids)
        prev, run, hits, n = (st[k][at] for k in ("prev", "run", "hits", "n"))
        last = st["last_ts"][at]
        ok = np.isfinite(x) & (ts > last)
        same = ok & (x == prev) & (x != 0.0)  # zero is a resting value (idle GPU, no traffic), not stuck
        run = pick(same, run + 1.0, pick(ok, 0.0, run))
        long_run = run >= self.min_repeats  # rare: then only are the other conditions asked
        judged = np.zeros(0, dtype=np.intp)
        if long_run.any():
            judged = np.flatnonzero(ok & (n - run >= self.warmup) & long_run)
        p = np.ones(len(ids), dtype=np.float64)
        if len(judged):  # a run long enough to judge is rare: the power is paid only there (moved before)
            q = hits[judged] / self._seen(n[judged])
            p[judged] = np.maximum(q ** run[judged], P_FLOOR)

        seen_step = ok & np.isfinite(prev)
        st["hits"][at] = pick(seen_step, self.keep * hits + same, hits)
        st["run"][at] = run
        st["prev"][at] = pick(ok, x, prev)
        st["n"][at] = pick(ok, n + 1.0, n)
        st["last_ts"][at] = pick(ok, ts, last)
        return p

    def _seen(self, n: Floats) -> Floats:
        """Steps seen (a sample after a sample), decayed as `hits` is, from the `n` samples before this
        one: every sample but the first is a step, so the decayed count has a closed form and costs
        no state."""
        return decayed_count(self.prior_samples, self.keep ** np.maximum(n - 1.0, 0.0), self.keep)
