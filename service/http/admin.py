"""Admin HTTP endpoints, behind a bearer token: what this replica owns, and a checkpoint on demand.

Disabled (404) unless `admin_token` is set (settings refuse an empty or short one at start); a wrong
or missing token gets 401. The token is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from prexid.service.app.service_state import ServiceState

_bearer = HTTPBearer(auto_error=False)


def admin_router(state: ServiceState) -> APIRouter:
    def authorised(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        expected = state.admin_token.get_secret_value() if state.admin_token is not None else ""
        if not expected:  # settings refuse an empty token; an empty one must never match an empty header
            raise HTTPException(404, "admin endpoints are disabled (set admin_token)")
        given = creds.credentials if creds else ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise HTTPException(401, "bearer token required", headers={"WWW-Authenticate": "Bearer"})

    router = APIRouter(prefix="/admin", dependencies=[Depends(authorised)])

    @router.get("/partitions")
    async def partitions() -> dict[str, Any]:
        """Partition indexes this replica owns, with each one's progress."""
        return {
            str(index): {
                "series": len(p.registry),
                "samples_seen": p.samples_seen,
                "watermark": p.watermark if p.watermark > -1e300 else None,
                "active_alerts": len(p.alert_book.active),
            }
            for index, p in sorted(state.shards.items())
        }

    @router.post("/checkpoint")
    async def checkpoint() -> dict[str, int]:
        """Snapshot every owned partition now (before planned maintenance, say)."""
        if state.checkpoint is None:
            raise HTTPException(409, "this feed does not checkpoint")
        return {"checkpointed": await state.checkpoint()}

    return router
