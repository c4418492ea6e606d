"""Single-metric z-score: every series against its own EWMA mean and variance, no fusion.

Gauges are judged by level, counters (names ending `_total`, energy, violations, RetransSegs) by their
per-scrape increase. An entity alerts when any one of its series has |z| > 4 for 3 scrapes running:
the rule a team writes first, and the one that shows why fusion is needed.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.baselines.episodes import Episodes, Layout

Z = 4.0
WARMUP = 40
ALPHA = 1 - 2 ** (-1 / 240)  # one-hour half-life at 15 s scrapes
COUNTER_HINTS = ("_total", "RetransSegs", "ENERGY", "VIOLATION", "COUNTER", "_COUNT_")
IGNORED = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")


class ZScore:
    name = "zscore"

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        n = len(layout.names)
        self.counter = np.array([any(h in m for h in COUNTER_HINTS) for m in layout.names])
        self.used = ~np.array([m in IGNORED for m in layout.names])
        self.last = np.full(n, np.nan)
        self.mean = np.zeros(n)
        self.var = np.zeros(n)
        self.count = np.zeros(n)
        self.episodes = Episodes(layout, "single-metric |z| > 4", 3)

    def observe(self, ts: float, row: NDArray[np.float64]) -> None:
        with np.errstate(invalid="ignore"):
            delta = np.where(row >= self.last, row - self.last, row)
        x = np.where(self.counter, delta, row)
        self.last = np.where(np.isnan(row), self.last, row)
        ok = np.isfinite(x) & self.used
        sd = np.sqrt(np.maximum(self.var, 1e-12)) + 1e-3 * np.abs(self.mean) + 1e-9
        z = np.where(ok & (self.count >= WARMUP), np.abs(x - self.mean) / sd, 0.0)
        hot = np.zeros(self.layout.n_entities, dtype=bool)
        hot[self.layout.entity[z > Z]] = True
        self.episodes.step(ts, hot)
        d = np.where(ok, x - self.mean, 0.0)
        self.mean += ALPHA * d
        self.var = np.where(ok, (1 - ALPHA) * (self.var + ALPHA * d * d), self.var)
        first = ok & (self.count == 0)
        self.mean = np.where(first, x, self.mean)
        self.count += ok

    def alerts(self) -> list[dict[str, object]]:
        return self.episodes.alerts
