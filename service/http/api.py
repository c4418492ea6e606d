"""The HTTP side: health, readiness, Prometheus exposition and the alerts API (FastAPI).

Nothing is loaded from outside the service: FastAPI's `/docs` and `/redoc` pages fetch Swagger UI and
ReDoc from a CDN, so they are off; the schema stays at `/openapi.json` (admin routes left out of it).
Every response carries the headers of `SECURITY_HEADERS`.
"""

from __future__ import annotations

from typing import Literal

from fastapi import FastAPI, HTTPException, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from prexid.service.app.service_state import ServiceState
from prexid.service.http.admin import admin_router
from prexid.service.http.dashboard import dashboard_router, static_files
from prexid.service.http.evidence import EntityEvidence, node_evidence
from prexid.service.http.nodes import NodeRanking, node_ranking
from prexid.service.http.read_view import ReadView
from prexid.service.http.remote_write import remote_write_router
from prexid.service.schemas import Alert
from prexid.service.sinks.prometheus import entity_scores_apart

# The dashboard needs scripts, styles and fetches from this origin only (no inline code: dashboard.js sets
# colours through the CSSOM, which style-src does not govern); nothing may frame it.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",  # runbook links open other sites: don't tell them where from
}


class SecurityHeaders:
    """ASGI middleware adding `SECURITY_HEADERS` to every HTTP response (a plain ASGI wrapper, not
    BaseHTTPMiddleware: no extra task per request, responses pass through unbuffered)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.headers = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in self.headers if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(state: ServiceState, view: ReadView | None = None) -> FastAPI:
    """The HTTP app over `state`; `view` (default: a `ReadView` of it) serves the fused scores."""
    view = ReadView(state) if view is None else view
    app = FastAPI(
        title="prexid",
        summary="Pre-XID anomaly detection for GPU clusters",
        docs_url=None,  # Swagger UI and ReDoc load from a CDN; the schema stays at /openapi.json
        redoc_url=None,
    )
    app.add_middleware(SecurityHeaders)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process and its event loop answer (batches run off the loop: `batch_gate.py`)."""
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
        """Waits for no batch but the one running at the process's first scrape (`ReadView.first_read`):
        what is read of the pipelines is as of the last time none ran (`batch_gate`)."""
        await view.first_read()  # then the pipeline collectors below read before the next await
        with entity_scores_apart():
            rest = generate_latest(state.telemetry.registry)  # counters and histograms: fresh, cheap
        entity_scores = (await view.current()).metrics  # rendered off the loop, once per tick at most
        return Response(rest + entity_scores, media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/alerts", response_model=list[Alert])
    async def alerts(kind: Literal["pre_xid", "xid", "node", "cluster"] | None = None) -> list[Alert]:
        """Alerts firing now, newest first."""
        await state.gate.quiet()  # then no await while reading the pipelines (`batch_gate.py`)
        active = [a for a in state.active_alerts().values() if kind is None or a.kind == kind]
        return sorted(active, key=lambda a: a.starts_at, reverse=True)

    @app.get("/api/v1/alerts/{fingerprint}", response_model=Alert)
    async def alert(fingerprint: str) -> Alert:
        await state.gate.quiet()
        found = state.active_alerts().get(fingerprint)
        if found is None:
            raise HTTPException(404, f"no active alert {fingerprint}")
        return found

    @app.get("/api/v1/entities/{node}", response_model=list[EntityEvidence])
    async def entities(node: str) -> list[EntityEvidence]:
        """Current evidence for a node and each of its GPUs: why its score is what it is."""
        await state.gate.quiet()
        found = node_evidence(state.pipeline_of(node), node)
        if not found:
            raise HTTPException(404, f"no series seen for node {node}")
        return found

    @app.get("/api/v1/entities/{node}/gpus/{gpu}", response_model=EntityEvidence)
    async def gpu_entity(node: str, gpu: int) -> EntityEvidence:
        await state.gate.quiet()
        for ev in node_evidence(state.pipeline_of(node), node):
            if ev.gpu == gpu:
                return ev
        raise HTTPException(404, f"no series seen for GPU {gpu} on {node}")

    @app.get("/api/v1/nodes", response_model=NodeRanking)
    async def nodes(limit: int = 100) -> NodeRanking:
        """The node reliability ledger, worst first: repeat offenders are for RMA or burn-in."""
        await state.gate.quiet()
        return node_ranking(state.pipelines(), max(1, min(limit, 10_000)))

    if state.remote_write is not None:
        app.include_router(remote_write_router(state.remote_write, state.telemetry))
    app.include_router(dashboard_router(state, view))
    app.mount("/static", static_files(), name="static")
    app.include_router(admin_router(state), include_in_schema=False)  # not advertised to the world
    return app
