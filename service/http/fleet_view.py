"""The fleet view: every partition's scores and alerts, served by any replica from the summaries topic.

A replica's own API shows the partitions it owns (behind a load-balanced Service, a random slice of the
fleet). Every replica also reads every partition's summaries (`FleetBoard`), so each can serve the
whole fleet: on `fleet_http_port` (the chart's second Service), `/api/v1/scores` is the heatmap of
every node (a node not in its partition's latest record scores 0: it showed nothing), `/api/v1/alerts`
every partition's firing alerts and the aggregator's cluster alerts, and the dashboard the same page.
`/api/v1/view` says which view an address serves, and the dashboard shows it in its header.
Drill-down (an entity's evidence and history) lives in the owning replica, so the fleet view has none.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse

from prexid.service.app.service_state import ServiceState
from prexid.service.http.api import SecurityHeaders
from prexid.service.http.dashboard import STATIC_DIR, Scores, ViewInfo, static_files
from prexid.service.http.read_view import FIRING_SCORE
from prexid.service.pipeline.fleet_judge import FleetBoard
from prexid.service.schemas import Alert, rfc3339


def fleet_scores(board: FleetBoard, cluster: str) -> dict[str, Any]:
    """`Scores` of every node any partition named, from each partition's latest record."""
    nodes: dict[str, dict[str, Any]] = {}
    for names in board.names.values():
        for node, gpus in names:
            nodes[node] = {"node": node, "score": 0.0, "gpus": {g: 0.0 for g in gpus}}
    for record in board.latest.values():
        for row in record.nodes:
            entry = nodes.setdefault(row.node, {"node": row.node, "score": 0.0, "gpus": {}})
            entry["score"] = round(row.score / 255, 4)
            for gpu, q in row.gpus:
                entry["gpus"][gpu] = round(q / 255, 4)
    ticks = [r.tick for r in board.latest.values()]
    tick = max(ticks) if ticks else -np.inf
    return {
        "cluster": cluster,
        "tick": rfc3339(tick) if np.isfinite(tick) else None,
        "threshold": FIRING_SCORE,
        "nodes": [
            {**n, "gpus": [{"gpu": g, "score": s} for g, s in sorted(n["gpus"].items())]}
            for _, n in sorted(nodes.items())
        ],
    }


def fleet_alerts(board: FleetBoard) -> list[Alert]:
    """Every partition's firing alerts, and the cluster alerts the aggregator's last verdict holds."""
    docs = [a for alerts in board.alerts.values() for a in alerts] + board.cluster_alerts()
    found = {a.fingerprint: a for a in (Alert.model_validate(d) for d in docs)}
    return sorted(found.values(), key=lambda a: a.starts_at, reverse=True)


def create_fleet_app(state: ServiceState, board: FleetBoard, lateness_s: float) -> FastAPI:
    """The fleet view's app (`fleet_http_port`)."""
    app = FastAPI(title="prexid fleet view", docs_url=None, redoc_url=None)
    app.add_middleware(SecurityHeaders)
    cluster = state.pipeline.config.cluster

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/view", response_model=ViewInfo)
    async def view() -> ViewInfo:
        ticks = {p: r.tick for p, r in board.latest.items()}
        newest = max(ticks.values(), default=-np.inf)
        verdict = board.verdict or {}
        judged = verdict.get("tick")
        return ViewInfo(
            view="fleet",
            partitions=sorted(ticks),
            missing=sorted(p for p, t in ticks.items() if t < newest - lateness_s),
            aggregated_tick=rfc3339(float(judged)) if judged is not None else None,
        )

    @app.get("/api/v1/scores", response_model=Scores)
    async def scores() -> dict[str, Any]:
        return fleet_scores(board, cluster)

    @app.get("/api/v1/alerts", response_model=list[Alert])
    async def alerts(kind: Literal["pre_xid", "xid", "node", "cluster"] | None = None) -> list[Alert]:
        return [a for a in fleet_alerts(board) if kind is None or a.kind == kind]

    @app.get("/api/v1/entities/{node}")
    async def entities(node: str) -> None:
        raise HTTPException(
            404, f"the fleet view has no drill-down: ask the replica owning {node}'s partition"
        )

    app.mount("/static", static_files(), name="static")
    return app
