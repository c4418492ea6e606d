"""What one partition's pipeline tells the fleet each tick, as a compact record of the summaries topic.

The counts the shared-cause and cluster votes are judged on (`detectors/fleet_vote.Summary`: four
small tables whatever the partition's size), and, for the fleet view, the nodes that show anything:
each one's score and its GPUs' (quantised to a byte: the dashboard draws 256 shades at most), the
families voting on it and whether its pages are held for a shared cause. A quiet node costs nothing
but its name and GPU indexes, sent every `NAMES_EVERY` ticks so the fleet view knows every node. The
shard's firing alerts ride along only when they changed. The node values per node peer group
(`detectors/fleet_peers.PeerSketch`, base64 of float32: 4 bytes a node and group, plus 9 a group)
make node-vs-node peers the fleet's; after each refit of the error counters' prior (every 10 minutes of
event time), its sufficient statistics (`detectors/fleet_prior.PriorStats`: nine sums per error-counter
field and at most 16 typical sizes, base64 of float64) make that prior the fleet's; every 10 minutes of
event time, the false-alert budget's and the family calibration's null sums
(`detectors/fleet_null_stats.NullStats`: at most 7 + 26 x 9 numbers, the nonzero ones as float64 behind
a bit mask) make their thresholds and shifts the fleet's. JSON (orjson) with
short keys: readable with kcat; ~340 bytes per partition-tick for the counts, ~20 more per node that moves
(tests/unit/test_fleet_summary_size.py measures it against the metric bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from prexid.detectors.fleet_null_stats import NullStats
from prexid.detectors.fleet_peers import PeerSketch
from prexid.detectors.fleet_prior import PriorStats
from prexid.detectors.fleet_vote import Counts, Summary
from prexid.detectors.signals import N_FAMILIES

VERSION = 1


class SummaryError(ValueError):
    """A record of the summaries topic that is not a summary this version reads."""


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A node that shows something: scores are 0..255 (score01 x 255), families a bit per family."""

    node: str
    score: int
    families: int  # voting families of the node and its GPUs, bit f for family f
    held: bool  # a voting family is shared: its pages are held back
    gpus: tuple[tuple[int, int], ...] = ()  # (gpu index, score) of its GPUs that score above 0

    def wire(self) -> list[Any]:
        return [self.node, self.score, self.families, int(self.held), [list(g) for g in self.gpus]]


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """One partition's record at one tick."""

    partition: int
    counts: Summary
    nodes: tuple[NodeRow, ...] = ()
    names: tuple[tuple[str, tuple[int, ...]], ...] | None = None  # every node and its GPUs, every few ticks
    alerts: tuple[dict[str, Any], ...] | None = None  # its firing alerts (JSON), when they changed
    peers: PeerSketch | None = None  # its node values per node peer group (`detectors/fleet_peers`)
    prior: PriorStats | None = None  # its error counters' prior statistics, after a refit (`fleet_prior`)
    null: NullStats | None = None  # its budget's and calibration's null sums (`fleet_null_stats`)

    @property
    def tick(self) -> float:
        return self.counts.tick

    def to_bytes(self) -> bytes:
        c = self.counts
        doc: dict[str, Any] = {
            "v": VERSION,
            "p": self.partition,
            "t": c.tick,
            "c": [c.votes, c.rising, c.carriers, *([c.stalled] if c.stalled else [])],
            "n": [row.wire() for row in self.nodes],
        }
        if self.names is not None:
            doc["names"] = [[node, list(gpus)] for node, gpus in self.names]
        if self.alerts is not None:
            doc["alerts"] = list(self.alerts)
        if self.peers is not None:
            doc["pp"] = self.peers.to_wire()
        if self.prior is not None:
            doc["ec"] = self.prior.to_wire()
        if self.null is not None:
            doc["fn"] = self.null.to_wire()
        return orjson.dumps(doc)

    @classmethod
    def from_bytes(cls, raw: bytes) -> PartitionSummary:
        try:
            doc = orjson.loads(raw)
            if doc.get("v") != VERSION:
                raise SummaryError(f"summary version {doc.get('v')!r}, this prexid reads {VERSION}")
            votes, rising, carriers, *stalled = (_counts(t) for t in doc["c"])
            if any(len(row) != N_FAMILIES for t in (votes, rising, carriers, *stalled) for row in t):
                raise SummaryError(f"summary counts not of {N_FAMILIES} families (another prexid build)")
            counts = Summary(float(doc["t"]), votes, rising, carriers, stalled=stalled[0] if stalled else ())
            rows = tuple(
                NodeRow(str(n), int(s), int(f), bool(h), tuple((int(g), int(q)) for g, q in gpus))
                for n, s, f, h, gpus in doc["n"]
            )
            names = (
                tuple((str(n), tuple(int(g) for g in gpus)) for n, gpus in doc["names"])
                if "names" in doc
                else None
            )
            alerts = tuple(doc["alerts"]) if "alerts" in doc else None
            peers = PeerSketch.from_wire(counts.tick, str(doc["pp"])) if "pp" in doc else None
            prior = PriorStats.from_wire(str(doc["ec"])) if "ec" in doc else None
            null = NullStats.from_wire(str(doc["fn"])) if "fn" in doc else None
            return cls(int(doc["p"]), counts, rows, names, alerts, peers, prior, null)
        except SummaryError:
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
            raise SummaryError(f"unreadable summary: {err!r}"[:200]) from err


def _counts(table: Any) -> Counts:
    return tuple(tuple(int(c) for c in row) for row in table)
