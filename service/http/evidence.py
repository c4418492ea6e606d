"""Current evidence for a node and its GPUs: what `/api/v1/entities/{node}` shows an SRE.

Per entity: the fused score, and per signal family the held surprise with the series that earned it
(its value and baseline) — the same numbers the fusion layer voted with at its last tick.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from prexid.detectors.fusion import score01
from prexid.detectors.signals import Family
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.series_registry import normalise_host
from prexid.service.schemas import Alert


class FamilyEvidence(BaseModel):
    family: str
    surprise: float  # -log10 p held at the last tick
    votes: bool
    common_mode: bool  # moving on much of the cluster at once: not counted against this entity
    metric: str | None
    labels: dict[str, str]
    value: float | None
    baseline: float | None


class EntityEvidence(BaseModel):
    node: str
    gpu: int | None
    score: float
    families: list[FamilyEvidence]
    alerts: list[Alert]


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def entity_evidence(p: Pipeline, eid: int) -> EntityEvidence:
    ent = p.registry.entities[eid]
    fused = float(p.fused_scores[eid]) if eid < len(p.fused_scores) else 0.0
    fams: list[FamilyEvidence] = []
    row = p.fusion.at_tick[eid] if eid < len(p.fusion.at_tick) else np.zeros(0)
    for f in np.flatnonzero(row > 0):
        sid = int(p.fusion.top_series[eid, f])
        known = sid >= 0
        metric, labels = p.registry.series(sid) if known else (None, {})
        fams.append(
            FamilyEvidence(
                family=Family(int(f)).label,
                surprise=round(float(row[f]), 3),
                votes=bool(row[f] >= p.fusion.config.vote_min),
                common_mode=bool(p.fusion.common[f]),
                metric=metric,
                labels=labels,
                value=_finite(float(p.fusion.top_value[eid, f])),
                baseline=_finite(float(p.bank.baseline(np.array([sid]))[0])) if known else None,
            )
        )
    fams.sort(key=lambda fe: -fe.surprise)
    alerts = [a for a in p.alert_book.active.values() if a.node == ent.node and a.gpu == ent.gpu]
    score = float(score01(np.array([fused]), p.config.lifecycle.fire)[0])
    return EntityEvidence(node=ent.node, gpu=ent.gpu, score=score, families=fams, alerts=alerts)


def node_evidence(p: Pipeline, node: str) -> list[EntityEvidence]:
    """The node's own entity and each of its GPUs, GPUs in index order; empty if the node is unknown."""
    short = normalise_host(node)
    ids = [eid for eid, ent in enumerate(p.registry.entities) if ent.node == short]
    ids.sort(key=lambda e: (p.registry.entities[e].gpu is not None, p.registry.entities[e].gpu or 0))
    return [entity_evidence(p, eid) for eid in ids]
