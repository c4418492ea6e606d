"""What the fleet's own nulls share: the false-alert budget (`alert_budget.py`) and the family
calibration (`family_calibration.py`) both learn from healthy entities' episodes, so both keep each
entity's level (GPU or node) and last Xid, grown as entities appear, and forget on event-time ticks.
One tick prologue here keeps the two from drifting apart in how they count time and entities.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Ids

DAY = 86400.0


class FleetNull:
    """Per-entity level and last Xid, and the event-time clock the null fades by (`half_life_s`)."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.level_of = np.zeros(0, dtype=np.int64)  # 0: GPU, 1: node, by entity
        self.failed_at = np.full(0, -np.inf)  # the last Xid on the entity's node
        self.last_tick = -np.inf

    def ensure(self, n: int) -> None:
        """Rows for entities 0..n-1: a new entity is a node until a tick says otherwise, never failed."""
        grow = n - len(self.level_of)
        if grow <= 0:
            return
        self.level_of = np.r_[self.level_of, np.ones(grow, dtype=np.int64)]
        self.failed_at = np.r_[self.failed_at, np.full(grow, -np.inf)]
        self._grow(grow)

    def _grow(self, grow: int) -> None:
        """`grow` more rows of the null's own per-entity arrays."""

    def failed(self, entities: Ids, at: float) -> None:
        """An Xid at `at` on these entities (a node and its GPUs): their episodes before it are a
        failure's, not the null's."""
        self.ensure(int(entities.max(initial=-1)) + 1)
        self.failed_at[entities] = np.maximum(self.failed_at[entities], at)

    def _tick(self, tick: float, is_gpu: NDArray[np.bool_]) -> tuple[float, float]:
        """Rows and levels for this tick's entities, and the clock moved to `tick`: the seconds since
        the last tick (0 at the first) and the factor the null fades by over them."""
        n = len(is_gpu)
        self.ensure(n)
        self.level_of[:n] = np.where(is_gpu, 0, 1)
        dt = tick - self.last_tick if np.isfinite(self.last_tick) else 0.0
        self.last_tick = tick
        return dt, float(np.exp2(-dt / self.half_life_s))
