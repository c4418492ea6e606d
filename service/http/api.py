"""The HTTP side: health, readiness, Prometheus exposition and the alerts API (FastAPI)."""

from __future__ import annotations

from typing import Literal

from fastapi import FastAPI, HTTPException, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from prexid.service.app.service_state import ServiceState
from prexid.service.http.admin import admin_router
from prexid.service.http.dashboard import dashboard_router, static_files
from prexid.service.http.evidence import EntityEvidence, node_evidence
from prexid.service.schemas import Alert


def create_app(state: ServiceState) -> FastAPI:
    app = FastAPI(title="prexid", summary="Pre-XID anomaly detection for GPU clusters")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process and its event loop answer."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(response: Response) -> dict[str, str]:
        """Readiness: the input feed is connected and consuming."""
        if not state.ready:
            response.status_code = 503
            return {"status": "not ready", "reason": state.not_ready_reason}
        return {"status": "ready"}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.telemetry.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/alerts", response_model=list[Alert])
    async def alerts(kind: Literal["pre_xid", "xid", "node", "cluster"] | None = None) -> list[Alert]:
        """Alerts firing now, newest first."""
        active = [a for a in state.active_alerts().values() if kind is None or a.kind == kind]
        return sorted(active, key=lambda a: a.starts_at, reverse=True)

    @app.get("/api/v1/alerts/{fingerprint}", response_model=Alert)
    async def alert(fingerprint: str) -> Alert:
        found = state.active_alerts().get(fingerprint)
        if found is None:
            raise HTTPException(404, f"no active alert {fingerprint}")
        return found

    @app.get("/api/v1/entities/{node}", response_model=list[EntityEvidence])
    async def entities(node: str) -> list[EntityEvidence]:
        """Current evidence for a node and each of its GPUs: why its score is what it is."""
        found = node_evidence(state.pipeline_of(node), node)
        if not found:
            raise HTTPException(404, f"no series seen for node {node}")
        return found

    @app.get("/api/v1/entities/{node}/gpus/{gpu}", response_model=EntityEvidence)
    async def gpu_entity(node: str, gpu: int) -> EntityEvidence:
        for ev in node_evidence(state.pipeline_of(node), node):
            if ev.gpu == gpu:
                return ev
        raise HTTPException(404, f"no series seen for GPU {gpu} on {node}")

    app.include_router(dashboard_router(state))
    app.mount("/static", static_files(), name="static")
    app.include_router(admin_router(state))
    return app
