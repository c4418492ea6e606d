"""The live dashboard at `/`: a fused-score heatmap (nodes x GPUs), active alerts and a per-entity
drill-down, served as static HTML/JS from the package (no build step, no CDN) over a small JSON API."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from prexid.detectors.fusion import score01
from prexid.detectors.signals import Family
from prexid.service.app.service_state import ServiceState
from prexid.service.http.read_view import FIRING_SCORE, ReadView
from prexid.service.pipeline.series_registry import Entity
from prexid.service.schemas import rfc3339

STATIC_DIR = Path(__file__).resolve().parent / "static"  # resolved: an editable install links each file


class GpuScore(BaseModel):
    gpu: int
    score: float | None


class NodeScores(BaseModel):
    node: str
    score: float | None  # the node's own (host-level) signals
    gpus: list[GpuScore]


class Scores(BaseModel):
    """The body of `/api/v1/scores` (written by `read_view.scores_json`, not through this model: it
    documents the schema)."""

    cluster: str
    tick: str | None
    threshold: float = FIRING_SCORE
    nodes: list[NodeScores]


class ViewInfo(BaseModel):
    """Which view an address serves: this replica's partitions, or the whole fleet's
    (`fleet_view.py`); the dashboard shows it in its header."""

    view: Literal["replica", "fleet"]
    partitions: list[int]  # the partitions shown (none: a process that is not `prexid run`)
    missing: list[int] = []  # fleet: partitions whose summary is more than fleet_lateness_s behind
    aggregated_tick: str | None = None  # fleet: the aggregator's last judged tick


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


def entity_history(state: ServiceState, node: str, gpu: int | None) -> EntityHistoryOut:
    p = state.pipeline_of(node)  # under `prexid run`, the shard that owns the node's partition
    eid = p.registry.entity_ids.get(Entity(node, gpu))
    if eid is None:
        raise HTTPException(404, f"no entity node={node} gpu={gpu}")
    hist = state.history_of(p).of(eid)
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


def dashboard_router(state: ServiceState, view: ReadView) -> APIRouter:
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    @router.get("/api/v1/scores", response_model=Scores)
    async def scores() -> Response:
        """Fused scores (0..1, 0.5 = firing threshold) of every node and GPU at the last tick (at most
        a second older than the newest tick: `read_view.py`)."""
        return Response((await view.current()).scores, media_type="application/json")

    @router.get("/api/v1/view", response_model=ViewInfo)
    async def view_info() -> ViewInfo:
        """This replica's own view: the partitions it owns (`fleet_http_port` serves the fleet's)."""
        return ViewInfo(view="replica", partitions=sorted(state.shards))

    @router.get("/api/v1/history/{node}", response_model=EntityHistoryOut)
    async def history(node: str, gpu: int | None = None) -> EntityHistoryOut:
        """Recent fused scores of a node (or one of its GPUs) and the signal families behind them."""
        await state.gate.quiet()  # then no await while reading the pipelines (`batch_gate.py`)
        return entity_history(state, node, gpu)

    return router


def static_files() -> StaticFiles:
    return StaticFiles(directory=STATIC_DIR)
