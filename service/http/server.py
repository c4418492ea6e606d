"""Runs a feed (Kafka consumer, demo stream) beside the HTTP server in one event loop; `prexid run`
processes its batches in a worker thread (`app/batch_gate.py`), so the loop answers HTTP meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Iterator
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from prexid.service.app.service_state import ServiceState
from prexid.service.http.api import create_app


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: it re-raises SIGTERM once it has shut down, which
    would kill the process before the feed's final checkpoint. `serve` handles the signals instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    state: ServiceState, feed: Coroutine[Any, Any, None], host: str, port: int, duration: float | None
) -> None:
    """Serve HTTP beside the feed and the state's background jobs (sinks) until the server stops
    (SIGINT/SIGTERM), `duration` passes, or a job fails. A feed that ends cleanly (the demo's
    timeline) leaves the server up for inspection."""
    # the app's lifespan ends once the requests in flight are answered: what it owns (the remote_write
    # decode thread) is closed then
    server = _Server(
        uvicorn.Config(create_app(state), host=host, port=port, log_level="warning", lifespan="on")
    )
    server_task = asyncio.create_task(server.serve())
    feed_task = asyncio.create_task(feed)
    helpers = [asyncio.create_task(job()) for job in state.background]
    signalled = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signalled.set)
    stop_on: set[asyncio.Task[Any]] = {server_task, asyncio.create_task(signalled.wait())}
    if duration is not None:
        stop_on.add(asyncio.create_task(asyncio.sleep(duration)))
    workers = {feed_task, *helpers}
    pending: set[asyncio.Task[Any]] = stop_on | workers
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if done & stop_on or any(t.exception() is not None for t in done & workers):
                break
    finally:
        server.should_exit = True
        for task in (feed_task, *helpers, *stop_on - {server_task}):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await server_task
    for task in (feed_task, *helpers):
        if not task.cancelled() and (err := task.exception()) is not None:
            raise err


async def serve_app(app: ASGIApp, host: str, port: int) -> None:
    """Another HTTP server in the same loop (the fleet view), until cancelled."""
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        await task
        raise
