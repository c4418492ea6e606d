"""The node reliability ranking `GET /api/v1/nodes` serves: which nodes fail again and again.

Merged over the partitions this replica owns (each node's ledger lives with its partition), worst
first, with the share of this month's failures the three worst caused: "these 3 nodes caused N%".
"""

from __future__ import annotations

from pydantic import BaseModel

from prexid.service.pipeline.ledger import LedgerKind, gini, top_share, worst_first
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.schemas import rfc3339


class LedgerEntry(BaseModel):
    at: str
    kind: LedgerKind
    gpu: int | None
    detail: str


class NodeReliability(BaseModel):
    node: str
    repeat_offender_score: float  # 1 or more: a repeat offender (RMA or burn-in)
    failures_30d: int
    counts: dict[str, int]
    last_failure: str | None
    recent: list[LedgerEntry]


class NodeRanking(BaseModel):
    nodes: list[NodeReliability]
    top3_share_30d: float | None  # of this month's failures, the share of the 3 worst nodes
    gini_30d: float  # 0: failures spread evenly over the ranked nodes; towards 1: on a few
    scope: str  # whose nodes these are: this replica's partitions


def node_ranking(pipelines: list[Pipeline], limit: int) -> NodeRanking:
    standings = sorted((s for p in pipelines for s in p.ledger.ranking()), key=worst_first)
    nodes = [
        NodeReliability(
            node=s.node,
            repeat_offender_score=s.score,
            failures_30d=s.failures_30d,
            counts=s.counts,
            last_failure=None if s.last_failure is None else rfc3339(s.last_failure),
            recent=[LedgerEntry(at=rfc3339(e.ts), kind=e.kind, gpu=e.gpu, detail=e.detail) for e in s.recent],
        )
        for s in standings[:limit]
    ]
    return NodeRanking(
        nodes=nodes,
        top3_share_30d=top_share(s.failures_30d for s in standings),
        gini_30d=round(gini(s.failures_30d for s in standings), 4),
        scope=f"the nodes of the {len(pipelines)} pipeline(s) this replica runs",
    )
