"""A cap on how often one entity may page: a flapping GPU must not become an alert storm.

Counts firings per entity in a sliding event-time window; an entity over its cap is muted for that
episode (its firing and the matching resolve are both withheld, and counted).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RateLimiter:
    max_firings: int = 4
    window_s: float = 3600.0
    history: dict[int, deque[float]] = field(default_factory=dict)
    muted: set[int] = field(default_factory=set)
    withheld: int = 0

    def allow_firing(self, entity: int, at: float) -> bool:
        times = self.history.setdefault(entity, deque())
        while times and times[0] <= at - self.window_s:
            times.popleft()
        if len(times) >= self.max_firings:
            self.muted.add(entity)
            self.withheld += 1
            return False
        times.append(at)
        return True

    def mute(self, entity: int) -> None:
        """Withhold this entity's current episode for another reason than its cap (not counted)."""
        self.muted.add(entity)

    def allow_resolve(self, entity: int) -> bool:
        """A resolve is emitted only if its firing was."""
        if entity in self.muted:
            self.muted.discard(entity)
            return False
        return True

    def snapshot_meta(self) -> dict[str, Any]:
        history = [[e, list(times)] for e, times in self.history.items()]
        return {"history": history, "muted": sorted(self.muted), "withheld": self.withheld}

    def restore_meta(self, meta: dict[str, Any]) -> None:
        self.history = {int(e): deque(float(t) for t in times) for e, times in meta["history"]}
        self.muted = {int(e) for e in meta["muted"]}
        self.withheld = int(meta["withheld"])
