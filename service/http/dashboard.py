"""The live dashboard at `/`: a fused-score heatmap (nodes x GPUs), active alerts and a per-entity
drill-down, served as static HTML/JS from the package (no build step, no CDN) over a small JSON API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from prexid.detectors.fusion import score01
from prexid.detectors.signals import Family
from prexid.service.app.service_state import ServiceState
from prexid.service.pipeline.series_registry import Entity
from prexid.service.schemas import rfc3339

STATIC_DIR = Path(__file__).resolve().parent / "static"  # resolved: an editable install links each file
FIRING_SCORE = 0.5  # score01 maps the fire threshold to exactly 0.5


class GpuScore(BaseModel):
    gpu: int
    score: float | None


class NodeScores(BaseModel):
    node: str
    score: float | None  # the node's own (host-level) signals
    gpus: list[GpuScore]


class Scores(BaseModel):
    cluster: str
    tick: str | None
    threshold: float = FIRING_SCORE
    nodes: list[NodeScores]


class FamilyHistory(BaseModel):
    family: str
    surprise: list[float | None]


class EntityHistoryOut(BaseModel):
    node: str
    gpu: int | None
    ticks: list[str]
    scores: list[float | None]
    families: list[FamilyHistory]  # only families that voted at some point in the window


def _floats(values: np.ndarray) -> list[float | None]:
    return [round(float(v), 4) if np.isfinite(v) else None for v in values]


def current_scores(state: ServiceState) -> Scores:
    """Scores at the last fusion tick of every owned partition; entities not yet scored are None."""
    nodes: dict[str, NodeScores] = {}
    last_tick = -np.inf
    for p in state.pipelines():
        scores = _floats(score01(p.fused_scores, p.config.lifecycle.fire))
        for eid, ent in enumerate(p.registry.entities):
            row = nodes.setdefault(ent.node, NodeScores(node=ent.node, score=None, gpus=[]))
            score = scores[eid] if eid < len(scores) else None
            if ent.gpu is None:
                row.score = score
            else:
                row.gpus.append(GpuScore(gpu=ent.gpu, score=score))
        last_tick = max(last_tick, p.fusion.last_tick)
    for row in nodes.values():
        row.gpus.sort(key=lambda g: g.gpu)
    return Scores(
        cluster=state.pipeline.config.cluster,
        tick=rfc3339(last_tick) if np.isfinite(last_tick) else None,
        nodes=sorted(nodes.values(), key=lambda n: n.node),
    )


def entity_history(state: ServiceState, node: str, gpu: int | None) -> EntityHistoryOut:
    p = state.pipeline
    eid = p.registry.entity_ids.get(Entity(node, gpu))
    if eid is None:
        raise HTTPException(404, f"no entity node={node} gpu={gpu}")
    hist = state.history.of(eid)
    families = [
        FamilyHistory(family=Family(f).label, surprise=_floats(hist.families[:, f]))
        for f in range(hist.families.shape[1])
        if np.nan_to_num(hist.families[:, f]).max(initial=0.0) > 0.0
    ]
    return EntityHistoryOut(
        node=node,
        gpu=gpu,
        ticks=[rfc3339(t) for t in hist.ticks],
        scores=_floats(score01(hist.fused.astype(np.float64), p.config.lifecycle.fire)),
        families=families,
    )


def dashboard_router(state: ServiceState) -> APIRouter:
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    @router.get("/api/v1/scores", response_model=Scores)
    async def scores() -> Scores:
        """Fused scores (0..1, 0.5 = firing threshold) of every node and GPU at the last tick."""
        return current_scores(state)

    @router.get("/api/v1/history/{node}", response_model=EntityHistoryOut)
    async def history(node: str, gpu: int | None = None) -> EntityHistoryOut:
        """Recent fused scores of a node (or one of its GPUs) and the signal families behind them."""
        return entity_history(state, node, gpu)

    return router


def static_files() -> StaticFiles:
    return StaticFiles(directory=STATIC_DIR)
