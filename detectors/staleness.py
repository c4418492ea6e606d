"""Staleness: a series, or a whole exporter, stops reporting.

Silence produces no samples, so this detector cannot answer from `update` alone: `update` records
arrivals (each series' scrape interval and how often it misses scrapes), and `sweep(now)` — called by
the pipeline at every fusion tick, with event time — returns evidence for the series that are overdue.
A series that has missed r scrapes in a row scores q**r, where q is its own decayed miss rate (a Beta
estimate with a weak prior), so a flaky exporter must miss many more scrapes than a reliable one.
After `retire_after_s` of silence a series is presumed gone (a job ended, a pod moved) and stops
scoring; if it comes back it is simply fresh again. Silence is never stronger than p = `strongest`
(10^-3.5, a surprise below fusion's resolve threshold of 4): it votes next to other families, but on
its own it can neither page nor keep an alert firing (a GPU that fell off the bus after its Xid goes
quiet for good; Prometheus' own `up == 0` rule is the page for a dead exporter).

>>> import numpy as np
>>> det = Staleness()
>>> for t in range(20):
...     _ = det.update(np.array([0, 1]), np.full(2, 15.0 * t), np.ones(2))
>>> _ = det.update(np.array([0, 0]), np.array([300.0, 330.0]), np.ones(2))
>>> ids, p = det.sweep(360.0)
>>> ids.tolist(), p.round(5).tolist()
([1], [0.00032])
"""

from __future__ import annotations

import numpy as np

from prexid.detectors.base import ArrayDetector, Floats, Ids, SeriesState, pick, rows, unique_rounds

STRONGEST = 10**-3.5


class Staleness(ArrayDetector):
    """Learns each series' scrape interval and miss rate; `sweep` scores the silent ones."""

    name = "staleness"
    baseline_of = "interval"  # the expected scrape interval, in seconds

    def __init__(
        self,
        min_missed: int = 2,
        strongest: float = STRONGEST,
        warmup: int = 5,
        retire_after_s: float = 3600.0,
        window: float = 2000.0,
        prior_misses: float = 0.5,
        prior_scrapes: float = 20.0,
    ) -> None:
        self.min_missed = min_missed
        self.strongest = strongest
        self.warmup = warmup
        self.retire_after_s = retire_after_s
        self.keep = 1.0 - 1.0 / window
        self.state = SeriesState(
            {
                "last_ts": -np.inf,
                "interval": np.nan,
                "misses": prior_misses,
                "expected": prior_scrapes,
                "n": 0.0,
            }
        )

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        """Record arrivals (any value, even NaN: the exporter is alive); evidence comes from `sweep`."""
        if len(ids):
            self.state.ensure(int(ids.max()))
            for idx in unique_rounds(ids, ts):  # a batch of distinct series: one round, the ids themselves
                self._arrive(ids if isinstance(idx, slice) else ids[idx], ts[idx])
        return np.ones(len(ids), dtype=np.float64)

    def _arrive(self, ids: Ids, ts: Floats) -> None:
        st, at = self.state, rows(ids)
        last, interval, n = st["last_ts"][at], st["interval"][at], st["n"][at]
        ok = np.isfinite(ts) & (ts > last)
        dt = pick(ok & np.isfinite(last), ts - last, np.nan)
        known = np.isfinite(interval)
        missed = pick(known, np.maximum(np.round(dt / interval) - 1.0, 0.0), 0.0)
        per_scrape = dt / (missed + 1.0)
        new_interval = pick(known, interval + 0.05 * (per_scrape - interval), per_scrape)
        has_dt = np.isfinite(dt)
        misses, expected = st["misses"][at], st["expected"][at]
        st["interval"][at] = pick(has_dt, new_interval, interval)
        st["misses"][at] = pick(has_dt, self.keep * misses + missed, misses)
        st["expected"][at] = pick(has_dt, self.keep * expected + missed + 1.0, expected)
        st["last_ts"][at] = pick(ok, ts, last)
        st["n"][at] = pick(ok, n + 1.0, n)

    def sweep(self, now: float) -> tuple[Ids, Floats]:
        """Series overdue at event time `now` and the tail probability of their silence."""
        st = self.state
        age = now - st["last_ts"]
        with np.errstate(invalid="ignore"):
            missed = np.floor(age / st["interval"]) - 1.0
            due = (st["n"] >= self.warmup) & (missed >= self.min_missed) & (age <= self.retire_after_s)
        ids = np.flatnonzero(due).astype(np.int64)
        q = st["misses"][ids] / st["expected"][ids]
        return ids, np.maximum(q ** missed[ids], self.strongest)
