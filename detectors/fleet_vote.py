"""The shared-cause and cluster votes over a whole fleet, from counts that add across partitions.

A partition's pipeline sees only its own nodes, but whether a family moves on much of the cluster at
once is a question about all of them. Every input of that judgement is a count per level (GPUs, nodes)
and family: the entities voting, those voting with their strongest series rising, those carrying the
family at all, and those voting rising with the family's own error counters surprising too (a
stall). Counts add, so the fleet's are the sum of its partitions' (`merge`), and one pipeline alone is
a fleet of one partition. `judge` turns them into the `Verdict` every pipeline applies in
place of a partition-local one: which families are shared (their evidence cleared, no node pages), and
the shares the cluster vote reads. Both are plain frozen values of ints, floats and bools, so they can
travel as JSON (pydantic) on a summaries topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.signals import N_FAMILIES, PER_DEVICE_FAMILIES

Counts = tuple[tuple[int, ...], ...]  # rows: level (GPUs, nodes); columns: family
LEVELS = 2  # GPUs, nodes


@dataclass(frozen=True, slots=True)
class Summary:
    """One partition's (or the merged fleet's) entity counts at one evaluation tick."""

    tick: float
    votes: Counts  # entities whose held evidence votes
    rising: Counts  # ... with their family's strongest series above its baseline
    carriers: Counts  # entities that have series of the family
    partitions: int = 1  # how many partitions' summaries were summed into this one
    # ... voting rising with the family's own error counters surprising too (NFS major timeouts: a stall,
    # whatever the load did); empty: none (a summary from before this count)
    stalled: Counts = ()

    @classmethod
    def of(
        cls,
        tick: float,
        voting: NDArray[np.bool_],
        rising: NDArray[np.bool_],
        present: NDArray[np.bool_],
        is_gpu: NDArray[np.bool_],
        stalled: NDArray[np.bool_] | None = None,
    ) -> Summary:
        """Counts from (entity, family) tables; `is_gpu` picks the GPU rows, the rest are nodes."""

        def count(cells: NDArray[np.bool_]) -> Counts:
            return _counts(np.stack([cells[is_gpu].sum(axis=0), cells[~is_gpu].sum(axis=0)]))

        stall = count(voting & rising & stalled) if stalled is not None else ()
        return cls(tick, count(voting), count(voting & rising), count(present), stalled=stall)

    def arrays(
        self,
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        """Votes, rising votes, carriers and stalled votes as (level, family) integer tables."""
        shape = (LEVELS, N_FAMILIES)
        votes, rising, carriers = (
            np.asarray(c, dtype=np.int64).reshape(shape) for c in (self.votes, self.rising, self.carriers)
        )
        stalled = (
            np.asarray(self.stalled, dtype=np.int64).reshape(shape)
            if self.stalled
            else np.zeros(shape, np.int64)
        )
        return votes, rising, carriers, stalled


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the fleet's counts say at one tick: families shared by level, and the cluster-wide shares."""

    tick: float
    shared: tuple[tuple[bool, ...], ...]  # (level, family): a shared cause, cleared everywhere
    common_share: tuple[float, ...]  # per family: share of its carriers voting
    rising_share: tuple[float, ...]  # ... voting with their strongest series rising
    partitions: int = 1  # partitions whose summaries it was judged from
    stalled: tuple[int, ...] = ()  # per family: entities voting rising with its error counters too

    def shared_levels(self) -> NDArray[np.bool_]:
        return np.asarray(self.shared, dtype=bool).reshape(LEVELS, N_FAMILIES)


def merge(summaries: Sequence[Summary]) -> Summary:
    """The fleet's counts: every partition's added up (at the latest tick among them)."""
    if not summaries:
        raise ValueError("merge needs at least one partition's summary")
    tables = np.stack([np.stack(s.arrays()) for s in summaries]).sum(axis=0)
    votes, rising, carriers, stalled = (_counts(t) for t in tables)
    tick, partitions = max(s.tick for s in summaries), sum(s.partitions for s in summaries)
    stalled = stalled if any(s.stalled for s in summaries) else ()  # none counted: none to add
    return Summary(tick, votes, rising, carriers, partitions, stalled)


def _counts(table: NDArray[np.int64]) -> Counts:
    return tuple(tuple(int(c) for c in row) for row in table.tolist())


def judge(
    summary: Summary,
    previous: NDArray[np.bool_],
    min_gpu_votes: int,
    min_node_votes: int,
    share: float,
) -> Verdict:
    """Shared-cause families per level, and the shares, from (merged) counts.

    A family is shared at a level when at least `min_*_votes` of that level vote and `share` of those
    carrying it. Hysteresis: one `previous`ly shared stays so until its votes fall below half of that.
    Per-device families (ECC, Xid) are each device's own, never shared.
    """
    votes, rising, carriers, stalled = summary.arrays()
    total = carriers.sum(axis=0)
    common_share = np.where(total > 0, votes.sum(axis=0) / np.maximum(total, 1), 0.0)
    rising_share = rising.sum(axis=0) / np.maximum(total, 1)
    floor = np.array([[min_gpu_votes], [min_node_votes]])
    enter = np.maximum(floor, share * carriers)
    shared = votes >= np.where(previous, enter / 2, enter)
    shared[:, [int(f) for f in PER_DEVICE_FAMILIES]] = False
    return Verdict(
        summary.tick,
        tuple(tuple(bool(b) for b in row) for row in shared.tolist()),
        tuple(float(x) for x in common_share.tolist()),
        tuple(float(x) for x in rising_share.tolist()),
        summary.partitions,
        tuple(int(x) for x in stalled.sum(axis=0).tolist()),
    )
