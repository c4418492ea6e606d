"""Scrape imperfections: stale samples, missing samples, and node-exporters a scrape behind DCGM.

All on the finished value vector, from the variant's own generator. A stale sample repeats what the
series showed at the last scrape (an exporter's cache not refreshed in time); a missing one is NaN;
a lagging node's node-exporter series show the previous scrape's state (its scrape offset is about one
interval from the GPU exporter's, so in a 15 s grid its readings land one tick late).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.physics import Scrape


class ScrapeNoise:
    def __init__(self, sc: Scrape, node_of_col: NDArray[np.int64], rng: np.random.Generator) -> None:
        """`node_of_col`: each column's node for node-exporter columns, -1 for GPU columns."""
        self.sc, self.rng = sc, rng
        lagging = rng.random(int(node_of_col.max(initial=-1)) + 1) < sc.node_lag_share
        self.lag_cols = np.flatnonzero((node_of_col >= 0) & lagging[np.maximum(node_of_col, 0)])
        self.prev_raw: NDArray[np.float64] | None = None
        self.prev_out: NDArray[np.float64] | None = None

    @property
    def active(self) -> bool:
        return self.sc.stale_p > 0 or self.sc.miss_p > 0 or len(self.lag_cols) > 0

    def apply(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        raw = values.copy()
        out = values
        if self.prev_raw is not None and len(self.lag_cols):
            out[self.lag_cols] = self.prev_raw[self.lag_cols]
        if self.prev_out is not None and self.sc.stale_p > 0:
            stale = np.flatnonzero(self.rng.random(len(out)) < self.sc.stale_p)
            out[stale] = self.prev_out[stale]
        if self.sc.miss_p > 0:
            out[self.rng.random(len(out)) < self.sc.miss_p] = np.nan
        self.prev_raw, self.prev_out = raw, out.copy()
        return out
