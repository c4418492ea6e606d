"""The node reliability ledger: what each node and GPU went through, and which nodes fail again and again.

A few nodes cause most failures (in the study, 3 of 63 nodes caused more than half of all node
exclusions), and the fix for those is RMA or burn-in, not another reboot. So each pipeline keeps, for
every node it watches, the count of its Xid failures, pages (`pre_xid`, `node`), reboots and drains,
with its recent events (drains are booked by the quarantine action, `service/actions/quarantine`),
and a repeat-offender score: failures decayed with a half-life in event time,
divided by the threshold, so a score of 1 means "crossed it". The ledger travels in the pipeline's
snapshot, which the state topic keeps compacted per partition: it survives restarts and rebalances
with the rest of the partition's state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from prexid.service.decode.common import parse_rfc3339
from prexid.service.schemas import Alert

LedgerKind = Literal["xid", "pre_xid", "node", "reboot", "drain"]
KINDS: tuple[LedgerKind, ...] = get_args(LedgerKind)
FAILURES: frozenset[LedgerKind] = frozenset({"xid", "drain"})  # what counts against a node
AFTER_XID = "after Xid"  # a drain's detail starting so follows an Xid already booked: one failure, not two
MONTH_S = 30 * 86400.0
REBOOT_DEDUP_S = 1800.0  # two signs of one reboot arrive within this


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    ts: float
    kind: LedgerKind
    gpu: int | None = None
    detail: str = ""  # the Xid code, the page's families, who drained it


@dataclass(slots=True)
class NodeRecord:
    counts: dict[str, int] = field(default_factory=dict)
    events: deque[LedgerEvent] = field(default_factory=deque)
    decayed: float = 0.0  # failures, each weighing 2^(-age / half-life), as of `at`
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Standing:
    """One node's place in the ranking, as `GET /api/v1/nodes` serves it."""

    node: str
    score: float  # repeat-offender score: decayed failures / threshold; 1 or more is a repeat offender
    failures_30d: int
    counts: dict[str, int]
    last_failure: float | None
    recent: list[LedgerEvent]


class Ledger:
    def __init__(
        self, half_life_s: float = 7 * 86400.0, threshold: float = 2.5, keep_events: int = 64
    ) -> None:
        self.half_life_s = half_life_s
        self.threshold = threshold  # decayed failures at which a node is a repeat offender
        self.keep_events = keep_events  # per node: the history served is bounded, counts are not
        self.nodes: dict[str, NodeRecord] = {}
        self.counted: deque[str] = deque(maxlen=4096)  # fingerprints already booked (re-sent alerts)
        self.now = 0.0  # newest event time booked

    def record(
        self, node: str, kind: LedgerKind, ts: float, gpu: int | None = None, detail: str = ""
    ) -> None:
        rec = self.nodes.setdefault(node, NodeRecord(at=ts))
        rec.counts[kind] = rec.counts.get(kind, 0) + 1
        rec.events.append(LedgerEvent(ts, kind, gpu, detail))
        while len(rec.events) > self.keep_events:
            rec.events.popleft()
        if counts_against(kind, detail):
            rec.decayed = self._decayed(rec, ts) + 1.0
            rec.at = max(rec.at, ts)
        self.now = max(self.now, ts)

    def record_reboot(self, node: str, ts: float) -> None:
        """A reboot, seen from the boot time moving or the node's series coming back: once, whichever
        tells first."""
        rec = self.nodes.get(node)
        if rec is not None and any(
            e.kind == "reboot" and abs(ts - e.ts) < REBOOT_DEDUP_S for e in rec.events
        ):
            return
        self.record(node, "reboot", ts)

    def record_drain(self, node: str, ts: float, gpu: int | None, cause: str, xid_code: int | None) -> None:
        """A drain prexid's quarantine carried out (`cause`: the alert kind). One that follows an Xid is
        booked but is not a second failure: the Xid already counted against the node."""
        detail = f"{AFTER_XID} {xid_code} ({cause})" if xid_code is not None else cause
        self.record(node, "drain", ts, gpu, detail)

    def observe(self, alerts: Iterable[Alert]) -> None:
        """Book the firing alerts: each fingerprint once (a burst's later re-sends are the same one)."""
        for a in alerts:
            if a.status != "firing" or a.fingerprint in self.counted:
                continue
            if a.kind == "xid":
                self.record(a.node, "xid", parse_rfc3339(a.starts_at), a.gpu, str(a.xid_code))
            elif a.kind == "pre_xid" or a.kind == "node":
                families = ",".join(dict.fromkeys(s.family for s in a.signals))
                self.record(a.node, a.kind, parse_rfc3339(a.starts_at), a.gpu, families)
            else:  # cluster and quarantine alerts are no node's
                continue
            self.counted.append(a.fingerprint)

    def score(self, node: str, now: float | None = None) -> float:
        rec = self.nodes.get(node)
        return 0.0 if rec is None else self._decayed(rec, self.now if now is None else now) / self.threshold

    def ranking(self, now: float | None = None) -> list[Standing]:
        """Every node the ledger knows, worst first (by score, then by failures this month)."""
        now = self.now if now is None else now
        out = []
        for node, rec in self.nodes.items():
            fails = [e for e in rec.events if counts_against(e.kind, e.detail)]
            out.append(
                Standing(
                    node=node,
                    score=round(self._decayed(rec, now) / self.threshold, 4),
                    failures_30d=sum(1 for e in fails if now - e.ts <= MONTH_S),
                    counts=dict(rec.counts),
                    last_failure=max((e.ts for e in fails), default=None),
                    recent=list(rec.events)[-10:],
                )
            )
        return sorted(out, key=worst_first)

    def _decayed(self, rec: NodeRecord, now: float) -> float:
        return rec.decayed * float(np.exp2(-max(now - rec.at, 0.0) / self.half_life_s))

    # -- state ---------------------------------------------------------------------------------------
    def snapshot_meta(self) -> dict[str, Any]:
        return {
            "ledger": {
                "now": self.now,
                "counted": list(self.counted),
                "nodes": {
                    node: {
                        "counts": rec.counts,
                        "decayed": rec.decayed,
                        "at": rec.at,
                        "events": [[e.ts, e.kind, e.gpu, e.detail] for e in rec.events],
                    }
                    for node, rec in self.nodes.items()
                },
            }
        }

    def restore_meta(self, meta: dict[str, Any]) -> None:
        led = meta["ledger"]
        self.now = float(led["now"])
        self.counted = deque((str(fp) for fp in led["counted"]), maxlen=self.counted.maxlen)
        self.nodes = {}
        for node, r in led["nodes"].items():
            kinds = [k for _, k, _, _ in r["events"]]
            if any(k not in KINDS for k in kinds):
                raise ValueError(f"ledger event kind not one of {KINDS}")
            events = deque(
                LedgerEvent(float(ts), k, None if g is None else int(g), str(d))
                for ts, k, g, d in r["events"]
            )
            self.nodes[str(node)] = NodeRecord(
                counts={str(k): int(v) for k, v in r["counts"].items()},
                events=events,
                decayed=float(r["decayed"]),
                at=float(r["at"]),
            )


def counts_against(kind: LedgerKind, detail: str) -> bool:
    """Whether an event is a failure of the node: an Xid, or a drain not caused by a booked Xid."""
    return kind in FAILURES and not (kind == "drain" and detail.startswith(AFTER_XID))


def worst_first(s: Standing) -> tuple[float, int, str]:
    """The ranking's order: by score, then by failures this month, then by name."""
    return (-s.score, -s.failures_30d, s.node)


def top_share(failures: Iterable[int], top: int = 3) -> float | None:
    """The share of all `failures` (one count per node) on the `top` worst nodes (None: no failures)."""
    fails = sorted(failures, reverse=True)
    total = sum(fails)
    return None if total == 0 else sum(fails[:top]) / total


def gini(counts: Iterable[float]) -> float:
    """Gini coefficient of failures over nodes: 0 when all fail alike, towards 1 when one node fails."""
    x = np.sort(np.asarray(list(counts), dtype=np.float64))
    if len(x) == 0 or x.sum() == 0:
        return 0.0
    n = len(x)
    return float((2 * np.arange(1, n + 1) - n - 1) @ x / (n * x.sum()))
