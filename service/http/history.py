"""A bounded ring buffer of recent fusion ticks, so the dashboard can show what drove a score.

Each tick keeps the fused score and the per-family surprise of every entity as float32 snapshots;
memory is at most `capacity x entities x (1 + families) x 4` bytes (120 ticks x 10k entities x 12
columns ≈ 58 MB). Entities added after a snapshot read as NaN in it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True, slots=True)
class EntityHistory:
    """One entity's recent ticks: times, fused scores (raw surprise) and per-family surprise."""

    ticks: NDArray[np.float64]  # (T,)
    fused: NDArray[np.float32]  # (T,)
    families: NDArray[np.float32]  # (T, families)


class ScoreHistory:
    def __init__(self, capacity: int) -> None:
        self._ticks: deque[float] = deque(maxlen=capacity)
        self._fused: deque[NDArray[np.float32]] = deque(maxlen=capacity)
        self._families: deque[NDArray[np.float32]] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._ticks)

    def record(self, tick: float, fused: NDArray[np.float64], families: NDArray[np.float64]) -> None:
        """A `Pipeline.tick_listeners` callback: copy this tick's scores (the pipeline reuses its arrays)."""
        self._ticks.append(tick)
        self._fused.append(np.asarray(fused, dtype=np.float32).copy())
        self._families.append(np.asarray(families, dtype=np.float32).copy())

    def of(self, entity: int) -> EntityHistory:
        n_fam = self._families[-1].shape[1] if self._families else 0
        fused = np.array([f[entity] if entity < len(f) else np.nan for f in self._fused], dtype=np.float32)
        fams = np.full((len(self._families), n_fam), np.nan, dtype=np.float32)
        for row, snap in enumerate(self._families):
            if entity < len(snap):
                fams[row, : snap.shape[1]] = snap[entity]
        return EntityHistory(np.array(self._ticks, dtype=np.float64), fused, fams)
