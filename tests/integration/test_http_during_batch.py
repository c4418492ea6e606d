"""`prexid run` answers its probes and scrapes while it processes a batch (a backlog's batches take
seconds), and what reads the pipelines waits for the batch instead of seeing it half applied: batches
read from Kafka, and those of remote_write requests (`remote_write = "local"`).

A test hook holds the first batch with records inside its processing until released (a `threading`
event: it stands for a batch of many seconds). Meanwhile a client in a thread of its own asks the
replica's HTTP server on 127.0.0.1, and releases the batch only once it has its answers (or has given
up on them). With processing on the event loop, nothing is answered until the batch is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass

import httpx
import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build, remote_write_feed
from prexid.service.decode import remote_write
from prexid.service.http.server import serve
from prexid.service.offline.bench.remote_write_load import bodies
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.kafka_broker import free_ports
from tests.integration.traffic import eventually, produce, samples_held, settings_for
from tests.unit.test_remote_write_receiver import HEADERS, Hold

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=1)]

CLUSTER = DemoCluster(nodes=2, gpus=8, duration_s=900.0, fault=DemoFault(node=0, gpu=0, xid_at_s=600.0))
ANSWER_S = 10.0  # how long the client waits for an answer before it gives up (and releases the batch)
HOLD_LIMIT_S = 60.0  # the hook lets a batch go after this however the client fares: never a hung run
PROBES = ("/healthz", "/readyz", "/metrics")
WRITE = "/api/v1/write"


@dataclass
class Answer:
    status: int | None  # None: no answer within ANSWER_S
    while_held: bool  # answered before the batch was released


def get(base: str, path: str, hold: Hold) -> Answer:
    try:
        status = httpx.get(base + path, timeout=ANSWER_S).status_code
    except httpx.TimeoutException:
        return Answer(None, False)
    return Answer(status, not hold.release.is_set())


def post(base: str, payload: bytes, hold: Hold) -> Answer:
    try:
        status = httpx.post(base + WRITE, content=payload, headers=HEADERS, timeout=ANSWER_S).status_code
    except httpx.TimeoutException:
        return Answer(None, False)
    return Answer(status, not hold.release.is_set())


def client(base: str, hold: Hold, answers: dict[str, Answer], writes: list[bytes] | None = None) -> None:
    """Once the batch is held: a reader of the pipelines (`/api/v1/alerts`) in a thread of its own,
    then the probes and a scrape one by one; the batch is released after those, and a second for the
    reader (time enough for a server that would not make it wait to answer it). With `writes`: the
    first is sent to start the batch, the second while it is held."""
    if writes:
        answers["first write"] = post(base, writes[0], hold)
    if not hold.entered.wait(HOLD_LIMIT_S):
        return
    reader_done = threading.Event()

    def reader() -> None:
        answers["/api/v1/alerts"] = get(base, "/api/v1/alerts", hold)
        reader_done.set()

    threading.Thread(target=reader, daemon=True).start()
    try:
        for path in PROBES:
            answers[path] = get(base, path, hold)
        if writes:
            answers[WRITE] = post(base, writes[1], hold)
        reader_done.wait(1.0)
    finally:
        hold.release.set()
    reader_done.wait(ANSWER_S)


async def test_probes_and_scrapes_are_answered_while_a_batch_is_processed(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    ticks = list(simulate(CLUSTER))
    total = await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks)
    [port] = free_ports(1)
    settings = settings_for(kafka_bootstrap, topics, kafka_group, http_port=port)
    state, _ = build(settings)
    hold = Hold(limit_s=HOLD_LIMIT_S)
    runner = KafkaRunner(settings, state, lambda: hold.around(build(settings, state)[1]))
    sinks_ran_on: list[threading.Thread] = []  # an alert listener (Alertmanager's outbox is a loop object)
    state.alert_listeners.append(lambda alerts: sinks_ran_on.append(threading.current_thread()))
    answers: dict[str, Answer] = {}
    base = f"http://127.0.0.1:{port}"
    server = asyncio.create_task(serve(state, runner.run(), "127.0.0.1", port, duration=None))
    asking = threading.Thread(target=client, args=(base, hold, answers), daemon=True)
    asking.start()
    try:
        await eventually(
            lambda: not asking.is_alive(), limit_s=HOLD_LIMIT_S + 30, what="the client's answers"
        )
        await eventually(lambda: samples_held(runner) == total, limit_s=60, what="the backlog read")
        await eventually(lambda: bool(sinks_ran_on), limit_s=30, what="the Xid's alert")
        loop_thread = threading.current_thread()  # the test's event loop, which the replica runs on
    finally:
        hold.release.set()
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server

    assert hold.entered.is_set()
    for path in PROBES:
        assert answers[path].status == 200, f"{path} not answered while a batch was being processed"
        assert answers[path].while_held, f"{path} answered only once the batch was released"
    # a reader of the pipelines is answered, and only after the batch: it never sees one half applied
    assert answers["/api/v1/alerts"].status == 200
    assert not answers["/api/v1/alerts"].while_held
    # alerts raised in a batch reach the sinks on the event loop, never from the batch's thread
    assert set(sinks_ran_on) == {loop_thread}


async def test_remote_write_local_answers_probes_while_a_request_is_scored() -> None:
    """`remote_write = "local"`: the demo cluster's scrapes as Prometheus would send them (snappy
    protobuf, at most 2000 samples a request) to the real server; the first request's batch is held
    in its processing while the probes, a scrape, a reader and a second request are sent."""
    [writes] = bodies(tick.metrics for tick in simulate(CLUSTER))
    [port] = free_ports(1)
    settings = Settings(remote_write="local", http_host="127.0.0.1", http_port=port)
    state, intake, processor = remote_write_feed(settings)
    state.ready = True  # as `prexid run` has it: requests are the feed
    hold = Hold(limit_s=HOLD_LIMIT_S)
    hold.around(processor)
    answers: dict[str, Answer] = {}
    base = f"http://127.0.0.1:{port}"
    server = asyncio.create_task(serve(state, intake.run(processor), "127.0.0.1", port, duration=None))
    await until_up(base)
    asking = threading.Thread(target=client, args=(base, hold, answers, writes[:2]), daemon=True)
    asking.start()
    try:
        await eventually(
            lambda: not asking.is_alive(), limit_s=HOLD_LIMIT_S + 30, what="the client's answers"
        )
        loop_thread = threading.current_thread()
    finally:
        hold.release.set()
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server

    assert hold.entered.is_set() and answers["first write"].status == 204
    for path in PROBES:
        assert answers[path].status == 200, f"{path} not answered while a request was being scored"
        assert answers[path].while_held, f"{path} answered only once the batch was released"
    assert (answers[WRITE].status, answers[WRITE].while_held) == (204, True)  # queued meanwhile
    assert answers["/api/v1/alerts"].status == 200
    assert not answers["/api/v1/alerts"].while_held
    # both requests scored (the second drained on stop at the latest), in the thread
    samples = state.telemetry.registry.get_sample_value("prexid_samples_total")
    assert samples == sum(len(remote_write.decode(w, 0.0)) for w in writes[:2])
    assert hold.ran_on and loop_thread not in hold.ran_on


async def until_up(base: str) -> None:
    async with httpx.AsyncClient(timeout=1.0) as http:
        for _ in range(300):
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(base + "/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError("the server did not come up")
