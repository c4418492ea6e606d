"""Admin HTTP endpoints, behind a bearer token: what this replica owns, a checkpoint on demand, and the
quarantine action's held nodes and their undo.

Disabled (404) unless `admin_token` is set (settings refuse an empty or short one at start); a wrong
or missing token gets 401. The token is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from prexid.service.actions.quarantine import ActionError, InProgress, QuarantineAction
from prexid.service.app.service_state import ServiceState

_bearer = HTTPBearer(auto_error=False)


class Undo(BaseModel):
    """Who undoes a quarantine (the token is shared: the name is recorded on the node), and why."""

    by: str = Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")
    reason: str = Field("", max_length=512)


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
        await state.gate.quiet()  # then no await while reading the pipelines (`batch_gate.py`)
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

    def action() -> QuarantineAction:
        if state.quarantine is None:
            raise HTTPException(404, "the quarantine action is not enabled (quarantine.enabled)")
        return state.quarantine

    @router.get("/quarantine")
    async def quarantine() -> dict[str, Any]:
        """Nodes the quarantine action holds (or, in a dry run, would), and the breaker."""
        await state.gate.quiet()  # its limit counts the pipelines' nodes
        return action().status()

    @router.post("/quarantine/{node}/undo")
    async def undo(node: str, body: Undo) -> dict[str, Any]:
        """Undo a node's quarantine; `by` is recorded on the node (annotation and Event)."""
        who = f"{body.by} ({body.reason})" if body.reason else body.by
        try:
            return await action().undo(node, who)
        except KeyError:
            raise HTTPException(404, f"prexid holds no quarantine of {node!r}") from None
        except InProgress:
            raise HTTPException(409, f"{node}'s quarantine is being carried out: try again") from None
        except ActionError as err:
            raise HTTPException(502, f"undo of {node} failed: {err}") from None

    return router
