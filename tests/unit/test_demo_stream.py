"""`prexid demo` scores its simulated cluster in the batch gate's worker thread: the HTTP side answers
while a tick is scored, and its remote_write intake's batches take turns with the cluster's."""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from typing import Any

import httpx
from rich.console import Console

from prexid.service.app.demo import stream_demo
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build, remote_write_feed
from prexid.service.http.api import create_app
from prexid.service.pipeline.processor import Output, Processor
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault
from tests.unit.test_decode_remote_write import GPU, body, series
from tests.unit.test_remote_write_receiver import HEADERS, Hold, now_ms

CLUSTER = DemoCluster(nodes=2, gpus=2, duration_s=300.0, fault=DemoFault(node=1, gpu=1, xid_at_s=200.0))


def in_thread(processor: Processor, seen: list[tuple[str, bool]], name: str) -> None:
    """Record, per call, which feed and whether it ran off the loop's thread."""
    real = processor.process_isolating

    def process_isolating(*args: Any, **kwargs: Any) -> Output:
        seen.append((name, threading.current_thread() is not threading.main_thread()))
        return real(*args, **kwargs)

    processor.process_isolating = process_isolating  # type: ignore[method-assign]


async def test_the_demo_answers_http_while_a_tick_is_scored_and_its_feeds_take_turns() -> None:
    settings = Settings()
    state, processor = build(settings)
    _, intake, received = remote_write_feed(settings, state)
    seen: list[tuple[str, bool]] = []
    hold = Hold()
    hold.around(processor)  # the cluster's first tick is held in the thread
    in_thread(processor, seen, "cluster")
    in_thread(received, seen, "remote_write")
    console = Console(file=io.StringIO())
    feed = asyncio.create_task(stream_demo(CLUSTER, processor, state, console, speed=1e6))
    intake_run = asyncio.create_task(intake.run(received))
    app = create_app(state)
    async with (
        app.router.lifespan_context(app),  # then ended, as uvicorn does: the decode thread stops
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://demo") as http,
    ):
        await hold.entered_batch()
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/metrics")).status_code == 200
        post = await http.post("/api/v1/write", content=body(series(GPU, (60.0, now_ms()))), headers=HEADERS)
        assert post.status_code == 204
        await asyncio.sleep(0.05)
        assert not hold.release.is_set(), "answered only once the tick was released"
        assert [name for name, _ in seen] == ["cluster"]  # the request waits for the cluster's batch
        hold.release.set()
        await asyncio.wait_for(feed, 30)
        assert (await http.get("/api/v1/entities/node-3")).status_code == 200  # the request's series
    intake_run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await intake_run
    assert ("remote_write", True) in seen
    assert all(off_loop for _, off_loop in seen)
    assert any(a.kind == "xid" for a in state.pipeline.alert_book.active.values())
