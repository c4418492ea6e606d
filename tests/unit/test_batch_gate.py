"""The batch gate: work in a worker thread, loop readers kept off it, and `/metrics` never waiting."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import httpx
from prometheus_client import generate_latest

from prexid.service.app.batch_gate import BatchGate
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.http.api import create_app
from prexid.service.pipeline.processor import Output
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.unit.test_alertmanager_sink import alert
from tests.unit.wiring import scrape


async def started(entered: threading.Event) -> None:
    while not entered.is_set():  # noqa: ASYNC110 - set by a worker thread
        await asyncio.sleep(0.01)


async def test_readers_wait_for_the_batch_and_read_before_the_next_one() -> None:
    gate = BatchGate()
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def first() -> str:
        entered.set()
        release.wait(10)
        order.append("first batch")
        return "done"

    async def batches() -> str:  # as the runner does: the next batch as soon as the last returns
        result = await gate.run(first)
        await gate.run(lambda: order.append("second batch"))
        return result

    runner = asyncio.create_task(batches())
    await started(entered)
    assert gate.busy and threading.current_thread() is threading.main_thread()

    async def reader() -> None:
        await gate.quiet()
        order.append("reader")

    # readers whose wake-up takes a few more hops than the runner's (wait_for: a task of its own)
    readers = [asyncio.create_task(asyncio.wait_for(reader(), 10)) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert order == []  # the loop went on (this ran) while the batch was in its thread; readers wait
    release.set()
    assert await runner == "done"
    await asyncio.gather(*readers)
    assert order == ["first batch", "reader", "reader", "reader", "second batch"]
    assert not gate.busy


async def test_a_cancelled_batch_keeps_the_gate_closed_until_its_thread_returns() -> None:
    gate = BatchGate()
    entered, release = threading.Event(), threading.Event()
    batch = asyncio.create_task(gate.run(lambda: (entered.set(), release.wait(10))))
    await started(entered)
    batch.cancel()
    await asyncio.sleep(0.05)
    assert gate.busy and not batch.done()  # the thread still has the pipeline
    release.set()
    try:
        await batch
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancellation was swallowed")
    assert not gate.busy


def series(text: bytes) -> float:
    [value] = [float(x.split()[-1]) for x in text.decode().splitlines() if x.startswith("prexid_series ")]
    return value


async def test_metrics_serve_what_was_read_before_the_batch_while_one_runs() -> None:
    state, processor = build(Settings())
    quiet = DemoFault(node=0, gpu=0, xid_at_s=10**9)
    ticks = list(simulate(DemoCluster(nodes=2, gpus=2, duration_s=60.0, fault=quiet)))
    processor.process(*scrape(ticks[0]), set())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(state)), base_url="http://prexid"
    ) as http:
        before = (await http.get("/metrics")).content
        assert series(before) > 0 and b"prexid_family_series" in before
        entered, release = threading.Event(), threading.Event()
        wider = list(simulate(DemoCluster(nodes=3, gpus=2, duration_s=60.0, fault=quiet)))

        def batch() -> None:  # a batch of new series, stopped half way
            processor.process(*scrape(wider[1]), set())
            entered.set()
            release.wait(10)

        running = asyncio.create_task(state.gate.run(batch))
        await started(entered)
        during = await http.get("/metrics")
        assert during.status_code == 200 and series(during.content) == series(before)
        assert b"prexid_family_series" in during.content  # the pipeline families as read last
        release.set()
        await running
        after = (await http.get("/metrics")).content
        assert series(after) > series(before)
    assert series(generate_latest(state.telemetry.registry)) == series(after)


async def test_the_first_scrape_waits_for_the_batch_running_then_serves_its_scores() -> None:
    """CI caught it: `prexid demo`'s first scrape came while a batch ran and, with nothing read before,
    was served no entity scores and no pipeline families, though the pipelines had them."""
    from prexid.service.http.read_view import ReadView

    quiet = DemoFault(node=0, gpu=0, xid_at_s=10**9)
    ticks = list(simulate(DemoCluster(nodes=2, gpus=2, duration_s=60.0, fault=quiet)))
    for wait_s, served in ((5.0, True), (0.1, False)):  # a batch shorter, then longer, than the wait
        state, processor = build(Settings())  # a new process: nothing read yet
        for tick in ticks[:3]:  # the third ticks fusion: every entity has a score
            processor.process(*scrape(tick), set())
        assert state.pipeline.fused_scores.size == len(state.pipeline.registry.entities) > 0
        entered, release = threading.Event(), threading.Event()
        running = asyncio.create_task(state.gate.run(lambda e=entered, r=release: (e.set(), r.wait(10))))
        await started(entered)
        app = create_app(state, ReadView(state, first_wait_s=wait_s))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as http:
            scrape_ = asyncio.create_task(http.get("/metrics"))
            if served:  # waits for the batch: still waiting well within `wait_s`
                await asyncio.sleep(0.3)
                assert not scrape_.done()
            else:  # gives up after `wait_s` while the batch still runs (a deadline, not a timing: CI
                # under load once took over 0.3 s to answer)
                await asyncio.wait_for(asyncio.shield(scrape_), timeout=5.0)
                assert not running.done()
            release.set()
            await running
            body = (await scrape_).content
        assert (b"prexid_gpu_fused_score{" in body) is served
        assert (b"prexid_family_series{" in body) is served


async def test_a_second_feeds_batch_waits_for_the_first_to_leave_the_thread() -> None:
    """`prexid demo` has two feeds (its cluster, remote_write) on one gate: one batch in the thread
    at a time, and the gate closed until the last one ends."""
    gate = BatchGate()
    entered, release = threading.Event(), threading.Event()
    second_entered, second_release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        entered.set()
        release.wait(10)
        order.append("first")

    def second() -> None:  # held too: under load its thread may run before the test reads `order`
        second_entered.set()
        second_release.wait(10)
        order.append("second")

    one = asyncio.create_task(gate.run(first))
    await started(entered)
    two = asyncio.create_task(gate.run(second))
    await asyncio.sleep(0.05)
    assert order == [] and not second_entered.is_set()  # the second waits: two threads would tear it
    release.set()
    await one
    assert order == ["first"] and gate.busy  # the second's turn: still closed to readers
    second_release.set()
    await two
    assert order == ["first", "second"] and not gate.busy


async def test_alerts_raised_in_the_thread_reach_the_listeners_on_the_loop_even_when_cancelled() -> None:
    _, processor = build(Settings())
    heard: list[tuple[str, threading.Thread]] = []
    processor.listeners = [lambda alerts: heard.extend((a.kind, threading.current_thread()) for a in alerts)]
    entered, release = threading.Event(), threading.Event()

    def step() -> Output:
        for listener in processor.listeners:  # as the pipeline raises them
            listener([alert(kind="pre_xid")])
            listener([alert(kind="xid")])
        entered.set()
        release.wait(10)
        return Output()

    gate = BatchGate()
    batch = asyncio.create_task(gate.process(processor, step))
    await started(entered)
    batch.cancel()  # SIGTERM: the thread runs on, and what it raised is sent
    await asyncio.sleep(0.05)
    assert heard == []
    release.set()
    with contextlib.suppress(asyncio.CancelledError):
        await batch
    assert batch.cancelled()
    assert heard == [("pre_xid", threading.current_thread()), ("xid", threading.current_thread())]
    assert len(processor.listeners) == 1 and not gate.busy
