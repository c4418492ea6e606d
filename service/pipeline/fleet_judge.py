"""`prexid run`'s shared-cause vote over the whole fleet: each partition's counts and the others' latest.

Every replica reads the summaries topic into a `FleetBoard`: the newest summary of every partition.
At each tick a partition's pipeline judges its own counts of that tick merged with the other
partitions' on the board (`fleet_vote.merge`, `Fusion.judge`), so it clears shared families and holds
its node pages as one process holding the whole cluster does. Judging at the pipeline, not waiting for
a verdict to come back, costs no round trip and keeps pages held while the aggregator fails over.

A partition whose latest summary is more than `lateness_s` of event time away from this tick (its
replica is dead or far behind, a takeover is replaying) is left out and counted: with every other
partition out, this is exactly the partition-local judgement of before, so a missing summary can
only degrade the vote to that, never hold pages on stale counts. A partition not heard of for
`forget_s` is forgotten (its nodes left the cluster).

Node peer groups are judged the same way: before a tick's samples are scored, the pipeline sketches
its node values (`Pipeline.peer_sketch`) and `peers` answers with the other partitions' latest fresh
sketches from the board (none fresh: its own nodes alone, the partition-local groups of before).

So is the error counters' fleet prior: when this partition's error counters refit it, `prior` answers
with the other partitions' latest sufficient statistics from the board (`detectors/fleet_prior`),
and the next record carries this partition's own.

So are the false-alert budget's thresholds and the family calibration's shifts: at each tick `null`
adds this partition's null sums to the other partitions' latest from the board, each faded to now
(`detectors/fleet_null_stats`), and a record every `NULL_EVERY_S` of event time carries this
partition's own (the sums move over hours: a few minutes' lag costs nothing, the bytes are kept low).

The judge also writes this partition's own record for the topic (`outbox`), every `every_ticks`
ticks, from what the tick left: the counts, and the nodes that score or vote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prexid.detectors import fleet_prior
from prexid.detectors.fleet_null_stats import NullStats
from prexid.detectors.fleet_peers import Outside, PeerSketch, outside
from prexid.detectors.fleet_prior import PriorStats
from prexid.detectors.fleet_vote import Summary, Verdict, merge
from prexid.detectors.fusion import score01
from prexid.service.pipeline.fleet_summary import NodeRow, PartitionSummary
from prexid.service.pipeline.pipeline import Pipeline

NAMES_EVERY = 40  # ticks between two records naming every node of the partition (10 min at 15 s)
NULL_EVERY_S = 600.0  # event time between two records carrying the partition's null sums


@dataclass
class FleetBoard:
    """The newest summary of every partition, as read from the summaries topic."""

    forget_s: float = 3600.0
    latest: dict[int, PartitionSummary] = field(default_factory=dict)
    names: dict[int, tuple[tuple[str, tuple[int, ...]], ...]] = field(default_factory=dict)  # nodes, GPUs
    alerts: dict[int, tuple[dict[str, object], ...]] = field(default_factory=dict)  # firing, by partition
    priors: dict[int, PriorStats] = field(default_factory=dict)  # error-counter prior stats, latest
    nulls: dict[int, NullStats] = field(default_factory=dict)  # budget and calibration null sums, latest
    verdict: dict[str, Any] | None = None  # the aggregator's last, from the verdicts topic
    unreadable: int = 0

    def cluster_alerts(self) -> list[dict[str, Any]]:
        """The cluster alerts firing as of the aggregator's last verdict."""
        if self.verdict is None:
            return []
        return list(self.verdict.get("state", {}).get("active", []))

    def observe(self, s: PartitionSummary) -> None:
        """Take a record; the last one read of a partition is its state (a takeover replaying from a
        snapshot re-states older ticks, and those are what its pipeline holds now)."""
        self.latest[s.partition] = s
        if s.names is not None:
            self.names[s.partition] = s.names
        if s.alerts is not None:
            self.alerts[s.partition] = s.alerts
        if s.prior is not None:
            self.priors[s.partition] = s.prior
        if s.null is not None:
            self.nulls[s.partition] = s.null
        newest = max(x.tick for x in self.latest.values())
        for p in [p for p, x in self.latest.items() if x.tick < newest - self.forget_s]:
            del self.latest[p]
            self.names.pop(p, None)
            self.alerts.pop(p, None)
            self.priors.pop(p, None)
            self.nulls.pop(p, None)

    def peers(self, partition: int, tick: float, fresh_s: float) -> list[PeerSketch]:
        """The other partitions' node peer values no older than `fresh_s` at `tick` (the peer
        detector's own freshness: a value older than that would not count at N=1 either)."""
        return [
            s.peers
            for p, s in sorted(self.latest.items())
            if p != partition and s.peers is not None and tick - fresh_s <= s.tick <= tick + fresh_s
        ]

    def others(self, partition: int, tick: float, lateness_s: float) -> tuple[list[Summary], list[int]]:
        """The other partitions' counts near `tick`, and the partitions left out as too far from it."""
        near, missing = [], []
        for p, s in sorted(self.latest.items()):
            if p == partition:
                continue
            if abs(s.tick - tick) <= lateness_s:
                near.append(s.counts)
            else:
                missing.append(p)
        return near, missing


def family_bits(cells: NDArray[np.bool_]) -> NDArray[np.int64]:
    """Each row of an (entity, family) table as an integer, bit f set for family f."""
    weights = np.left_shift(1, np.arange(cells.shape[1], dtype=np.int64))
    return np.asarray(cells.astype(np.int64) @ weights, dtype=np.int64)


class FleetJudge:
    """A partition pipeline's `judge`: its counts merged with the fleet's, and its record written."""

    def __init__(
        self,
        pipeline: Pipeline,
        partition: int,
        board: FleetBoard,
        lateness_s: float,
        every_ticks: int = 1,
    ) -> None:
        self.pipeline = pipeline
        self.partition = partition
        self.board = board
        self.lateness_s = lateness_s
        self.every_ticks = every_ticks
        self.outbox: list[PartitionSummary] = []
        self.missing: list[int] = []  # partitions left out at the last tick
        self.degraded_ticks = 0  # ticks judged with some partition left out
        self.ticks = 0
        self._summary: Summary | None = None
        self._sketch: PeerSketch | None = None
        self._prior_sent = -np.inf  # refit time of the last prior stats written
        self._null_sent = -np.inf  # the `NULL_EVERY_S` period of the last null sums written
        self._voting_bits = np.zeros(0, dtype=np.int64)  # per entity: its voting families, a bit each
        self._shared_bits = 0
        self._alerts_sent: frozenset[str] | None = None
        pipeline.raises_cluster_alerts = False  # the elected aggregator raises the fleet's
        pipeline.judge = self
        pipeline.fleet_peers = self.peers
        pipeline.fleet_prior = self.prior
        pipeline.fleet_null = self.null
        pipeline.tick_listeners.append(self.on_tick)

    def __call__(self, summary: Summary) -> Verdict:
        near, self.missing = self.board.others(self.partition, summary.tick, self.lateness_s)
        if self.missing:
            self.degraded_ticks += 1
        merged = merge([summary, *near])
        fusion = self.pipeline.fusion
        verdict = fusion.judge(merged)
        # what the node rows report: the families voting before the verdict clears the shared ones
        voting = fusion.held >= fusion.config.vote_min
        self._voting_bits = family_bits(voting)
        shared = np.asarray(verdict.shared_levels().any(axis=0), dtype=bool)
        self._shared_bits = int(family_bits(shared.reshape(1, -1))[0])
        self._summary = summary
        return verdict

    def peers(self, sketch: PeerSketch) -> Outside | None:
        """This partition's node values at a tick, kept for its record; the other partitions' latest
        fresh ones to judge its node peer groups with (None, none fresh: its own nodes alone)."""
        self._sketch = sketch
        fresh_s = self.pipeline.bank.peer.fresh_s
        return outside(self.board.peers(self.partition, sketch.tick, fresh_s))

    def prior(self, at: float) -> PriorStats | None:
        """The other partitions' latest error-counter prior statistics, merged, for a refit at `at`
        (None: none heard of, this partition's series alone). Each partition writes its own after a
        refit, so a partition not behind the others fits from theirs of the refit before at worst."""
        others = [s for p, s in sorted(self.board.priors.items()) if p != self.partition]
        return fleet_prior.merge(others) if others else None

    def _new_prior(self) -> PriorStats | None:
        """This partition's prior stats, if it refitted since the last record that carried them."""
        shared = self.pipeline.bank.error_counter.own_stats
        if shared is None or shared.at <= self._prior_sent:
            return None
        self._prior_sent = shared.at
        return shared

    def null(self, at: float, own: NullStats) -> NullStats:
        """The fleet's null sums for the refit at tick `at`: this partition's (`own`) and the other
        partitions' latest on the board, in partition order, each faded to the newest. A partition's of
        another shape (another build's families or levels) is left out."""
        others = {p: s for p, s in self.board.nulls.items() if p != self.partition and s.shape == own.shape}
        parts = sorted({**others, self.partition: own}.items())
        return self.pipeline.merge_nulls([s for _, s in parts])

    def _new_null(self) -> NullStats | None:
        """This partition's null sums, if a `NULL_EVERY_S` period began since the last record with them."""
        own = self.pipeline.null_stats
        if own is None or not np.isfinite(own[1].at):  # nothing folded in yet
            return None
        period = float(np.floor(own[0] / NULL_EVERY_S))
        if period <= self._null_sent:
            return None
        self._null_sent = period
        return own[1]

    def on_tick(self, tick: float, fused: NDArray[np.float64], _at_tick: NDArray[np.float64]) -> None:
        """After the tick: this partition's record, every `every_ticks` ticks."""
        self.ticks += 1
        if self._summary is None or self._summary.tick != tick or (self.ticks - 1) % self.every_ticks:
            return
        names = self._names() if (self.ticks - 1) % NAMES_EVERY == 0 else None
        self.outbox.append(
            PartitionSummary(
                self.partition,
                self._summary,
                self._rows(fused),
                names,
                self._changed_alerts(),
                self._sketch if self._sketch is not None and self._sketch.tick == tick else None,
                self._new_prior(),
                self._new_null(),
            )
        )

    def _rows(self, fused: NDArray[np.float64]) -> tuple[NodeRow, ...]:
        pipe = self.pipeline
        n = len(fused)
        q = np.rint(score01(fused, pipe.config.lifecycle.fire) * 255).astype(np.int64)
        bits = self._voting_bits[:n] if len(self._voting_bits) >= n else np.zeros(n, dtype=np.int64)
        hot = np.flatnonzero((q > 0) | (bits != 0))
        if not len(hot):
            return ()
        parent = pipe.fusion.parent[:n]
        entities = pipe.registry.entities
        by_node: dict[int, list[int]] = {}
        for e in hot.tolist():
            by_node.setdefault(int(parent[e]) if parent[e] >= 0 else e, []).append(e)
        rows = []
        for node_eid, members in by_node.items():
            fams = 0
            gpus = []
            for e in members:
                fams |= int(bits[e])
                if e != node_eid and q[e] > 0:
                    gpus.append((int(entities[e].gpu or 0), int(q[e])))
            rows.append(
                NodeRow(
                    entities[node_eid].node,
                    int(q[node_eid]) if node_eid < n else 0,
                    fams,
                    bool(fams & self._shared_bits),
                    tuple(sorted(gpus)),
                )
            )
        return tuple(rows)

    def _names(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        gpus: dict[str, set[int]] = {}
        for ent in self.pipeline.registry.entities:
            mine = gpus.setdefault(ent.node, set())
            if ent.gpu is not None:
                mine.add(ent.gpu)
        return tuple((node, tuple(sorted(g))) for node, g in sorted(gpus.items()))

    def _changed_alerts(self) -> tuple[dict[str, object], ...] | None:
        active = self.pipeline.alert_book.active
        if self._alerts_sent == frozenset(active):
            return None
        self._alerts_sent = frozenset(active)
        return tuple(a.model_dump(mode="json") for a in active.values())

    def take_outbox(self) -> list[PartitionSummary]:
        out, self.outbox = self.outbox, []
        return out
