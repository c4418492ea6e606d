"""A cap on how often one entity may page: a flapping GPU must not become an alert storm.

Counts firings per entity in a sliding event-time window; an entity over its cap is muted for that
episode (its firing and the matching resolve are both withheld, and counted).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


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

    def allow_resolve(self, entity: int) -> bool:
        """A resolve is emitted only if its firing was."""
        if entity in self.muted:
            self.muted.discard(entity)
            return False
        return True
