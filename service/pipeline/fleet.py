"""Several partitions' pipelines judged as one cluster: one shared-cause verdict, one cluster alert.

Each partition's pipeline sees only its own nodes, so judged alone, a storage stall on the whole cluster
is a shared cause nowhere (no partition holds enough of its nodes) and its nodes page one by one, or a
cluster alert per partition. Here every pipeline scores up to a tick and counts its entities
(`Pipeline.summarise_tick`); the counts are merged into the fleet's (`fleet_vote.merge`) and judged
once, and every pipeline fuses under that verdict (`Pipeline.conclude_tick`). Only the first partition's
pipeline raises the cluster alert; all of them hold their node pages for a fleet-wide shared cause.
Node peer groups are the fleet's too: before a tick's samples are scored, each partition sketches its
nodes' values (`Pipeline.peer_sketch`) and judges them with the other partitions' (`detectors/fleet_peers`).
So is the error counters' fleet prior: when a partition's error counters refit it, they add the other
partitions' sufficient statistics as of that refit time (`detectors/fleet_prior`) to their own. And so
are the false-alert budget's thresholds and the family calibration's shifts: at each tick, before it is
folded in, every partition fits them from all partitions' null sums as of that tick
(`detectors/fleet_null_stats`), in partition order, so every shard pages at the same thresholds.
One pipeline is left alone (its groups and prior are already the fleet's), so N=1 is unchanged.

In process, for `prexid replay --partitions N`; `prexid run` does it across replicas with the same
counts on a Kafka topic (`fleet_judge`, `aggregator`, `sources/fleet_runner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from prexid.detectors import fleet_prior
from prexid.detectors.fleet_null_stats import NullStats
from prexid.detectors.fleet_peers import PeerSketch, outside
from prexid.detectors.fleet_prior import PriorStats
from prexid.detectors.fleet_vote import Summary, merge
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.schemas import Alert


class Fleet:
    """Pipelines stepped tick by tick in lock step under the verdict of all their counts merged."""

    def __init__(self, pipelines: Sequence[Pipeline]) -> None:
        if not pipelines:
            raise ValueError("a fleet needs at least one pipeline")
        self.pipelines = list(pipelines)
        for i, pipe in enumerate(self.pipelines):
            pipe.raises_cluster_alerts = i == 0
        # A partition with no data at a tick (a gap) still counts with its last summary: its entities
        # are still the cluster's, and dropping them would inflate every share.
        self.latest: list[Summary | None] = [None] * len(self.pipelines)
        self.shared = np.zeros_like(self.pipelines[0].fusion.shared_levels)  # last verdict: hysteresis
        self.sketches: list[PeerSketch | None] = [None] * len(self.pipelines)  # node values, by partition
        if len(self.pipelines) > 1:
            for i, pipe in enumerate(self.pipelines):
                pipe.fleet_prior = partial(self._prior, i)
                pipe.fleet_null = partial(self._null, i)

    def _prior(self, partition: int, at: float) -> PriorStats:
        """The other partitions' error-counter statistics as of refit `at`, merged: each partition's
        pipeline then fits the fleet's prior, as one process holding every node does."""
        return fleet_prior.merge(
            [p.bank.error_counter.stats_at(at) for j, p in enumerate(self.pipelines) if j != partition]
        )

    def _null(self, partition: int, at: float, own: NullStats) -> NullStats:
        """Every partition's null sums as of the refit at tick `at` (this one's: `own`), merged in
        partition order: every partition fits the same thresholds and shifts from the same sum."""
        return self.pipelines[partition].merge_nulls(
            [own if j == partition else p.null_stats_at(at) for j, p in enumerate(self.pipelines)]
        )

    def advance(self, drain: bool = False) -> list[list[Alert]]:
        """`Pipeline.advance` for every partition at once; alerts per partition, in its order."""
        for pipe in self.pipelines:
            pipe.release(drain)
        alerts: list[list[Alert]] = [[] for _ in self.pipelines]
        while due := [(t, i) for i, pipe in enumerate(self.pipelines) if (t := pipe.due()) is not None]:
            tick = min(t for t, _ in due)
            ticking = [i for t, i in due if t == tick]
            if len(self.pipelines) > 1:
                self._join_peers(ticking)
            for i in ticking:
                scored, self.latest[i] = self.pipelines[i].summarise_tick()
                alerts[i] += scored
            merged = merge([s for s in self.latest if s is not None])
            verdict = self.pipelines[0].fusion.judge(merged, self.shared)
            self.shared = verdict.shared_levels()
            for i in ticking:
                alerts[i] += self.pipelines[i].conclude_tick(verdict)
        settling = [i for i, pipe in enumerate(self.pipelines) if pipe.unsettled()]
        if len(self.pipelines) > 1 and settling:  # samples past the last tick (the first scrape's)
            self._join_peers(settling, settle=True)
        for pipe, mine in zip(self.pipelines, alerts, strict=True):
            mine += pipe.settle()
            pipe.ledger.observe(mine)
        return alerts

    def _join_peers(self, scoring: list[int], settle: bool = False) -> None:
        """Node peer groups over the fleet: every partition about to score sketches its node values as
        they will be once scored, before any scores, and each judges its nodes with the others' (a
        partition with no data now counts with its last sketch while that is fresh)."""
        for i in scoring:
            self.sketches[i] = self.pipelines[i].peer_sketch(settle)
        fresh_s = self.pipelines[0].bank.peer.fresh_s
        for i in scoring:
            mine = self.sketches[i]
            assert mine is not None
            others = [
                s for j, s in enumerate(self.sketches) if j != i and s and s.tick >= mine.tick - fresh_s
            ]
            self.pipelines[i].join_peers(outside(others))
