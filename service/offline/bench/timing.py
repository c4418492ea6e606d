"""Best-of timing for benches that compare calls in one run."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def best_times(
    calls: Sequence[Callable[[], object]],
    seconds: float,
    clock: Callable[[], float] = time.perf_counter,
    min_rounds: int = 1,
) -> list[float]:
    """Best time of each call by `clock`, the calls alternated until `seconds` of wall time have passed
    (and at least `min_rounds` rounds): load from other processes reaches every call alike, and best-of
    keeps the least disturbed run."""
    best = [float("inf")] * len(calls)
    deadline = time.perf_counter() + seconds
    rounds = 0
    while rounds < min_rounds or time.perf_counter() < deadline:
        for i, call in enumerate(calls):
            start = clock()
            call()
            best[i] = min(best[i], clock() - start)
        rounds += 1
    return best
