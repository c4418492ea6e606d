"""Request-driven load for inference nodes: a per-node multiplier on utilisation, power and traffic.

Training moves in lockstep with its job; inference follows requests: a low base level that wanders,
with bursts of near-full load that start at random and last minutes. `mixed` puts the nodes outside
the big training job on inference. `training` and `idle` have no such load (None: the hot path skips it).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.physics import Workload


class LoadProcess:
    def __init__(
        self, wl: Workload, slot_of: NDArray[np.int64], step_s: float, rng: np.random.Generator
    ) -> None:
        n = len(slot_of)
        if wl.mix == "inference":
            self.on = np.ones(n, dtype=bool)
        elif wl.mix == "mixed":
            self.on = slot_of != 0
        else:
            self.on = np.zeros(n, dtype=bool)
        self.rng, self.n = rng, n
        self.base = rng.uniform(0.1, 0.4, n)
        self.level = self.base.copy()
        self.burst = np.zeros(n)  # remaining ticks of the current burst
        self.height = np.zeros(n)
        self.p_start = step_s / 1800.0  # a burst every ~30 min per node
        self.mean_len = max(1.0, 300.0 / step_s)  # ~5 min long

    @property
    def active(self) -> bool:
        return bool(self.on.any())

    def step(self) -> NDArray[np.float64] | None:
        """This tick's multiplier per node (1 where the node is not on inference), or None."""
        if not self.active:
            return None
        rng, n = self.rng, self.n
        self.level = np.clip(self.level + 0.05 * (self.base - self.level) + rng.normal(0, 0.03, n), 0.02, 1.0)
        start = (self.burst <= 0) & (rng.random(n) < self.p_start)
        self.burst = np.where(start, rng.geometric(1.0 / self.mean_len, n), self.burst - 1)
        self.height = np.where(start, rng.uniform(0.6, 1.0, n), self.height)
        load = np.where(self.burst > 0, np.maximum(self.level, self.height), self.level)
        return np.where(self.on, load, 1.0)
