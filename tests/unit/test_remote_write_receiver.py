"""POST /api/v1/write: the status codes Prometheus acts on, the local intake, and the Kafka records."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import cramjam
import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build, remote_write_feed
from prexid.service.decode import prom_kafka_adapter, remote_write
from prexid.service.decode.prompb.remote_pb2 import WriteRequest
from prexid.service.decode.prompb.types_pb2 import MetricMetadata
from prexid.service.decode.types import Samples
from prexid.service.http.api import create_app
from prexid.service.http.server import serve
from prexid.service.offline.bench.remote_write_load import bodies
from prexid.service.pipeline.processor import Message, Output, Processor, runs
from prexid.service.schemas import Alert
from prexid.service.sinks.kafka_republish import adapter_records
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.sources.remote_write import (
    TOPIC,
    IntakeFull,
    IntakeUnavailable,
    LocalIntake,
    record_time,
)
from tests.unit.test_decode_remote_write import GPU, STALE, body, series

TOKEN = "remote-write-token-0123"
HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Receiver:
    state: ServiceState
    intake: LocalIntake
    processor: Processor
    http: httpx.AsyncClient

    def count(self, name: str, **labels: str) -> float:
        return self.state.telemetry.registry.get_sample_value(name, labels) or 0.0

    async def post(self, payload: bytes, **headers: str) -> httpx.Response:
        return await self.http.post("/api/v1/write", content=payload, headers={**HEADERS, **headers})

    async def process_queued(self) -> None:
        """Run the intake until it has processed what is queued, then stop it (it drains on stop)."""
        run = asyncio.create_task(self.intake.run(self.processor))
        await asyncio.sleep(0)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run


_apps: list[FastAPI] = []  # the apps `receiver` built in this test, shut down after it


@pytest.fixture(autouse=True)
async def _shut_down_apps() -> AsyncIterator[None]:
    """The end of each app's lifespan after the test, as uvicorn has it: its decode thread stops."""
    yield
    while _apps:
        app = _apps.pop()
        async with app.router.lifespan_context(app):
            pass


def receiver(settings: Settings | None = None) -> Receiver:
    state, intake, processor = remote_write_feed(settings or Settings(remote_write="local"))
    app = create_app(state)
    _apps.append(app)
    transport = httpx.ASGITransport(app=app)
    return Receiver(state, intake, processor, httpx.AsyncClient(transport=transport, base_url="http://p"))


@dataclass
class Decodes:
    """`remote_write.decode` counted, each call held until `release` while `hold` is set, and the
    threads it ran on."""

    calls: int = 0
    hold: bool = False
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> Decodes:
        real = remote_write.decode

        def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
            self.calls += 1
            self.threads.append(threading.current_thread())
            if self.hold:
                self.entered.set()
                self.release.wait(5.0)
            return real(payload, ref_ts, host=host)

        monkeypatch.setattr(remote_write, "decode", decode)
        return self

    async def held(self, request: Coroutine[Any, Any, httpx.Response]) -> asyncio.Task[httpx.Response]:
        """`request` sent, and returned (as a task) once its body is being decoded (held)."""
        self.hold = True
        task = asyncio.create_task(request)
        assert await asyncio.to_thread(self.entered.wait, 5.0), "the request was not decoded"
        return task


async def test_a_request_is_answered_204_and_its_samples_reach_the_pipeline() -> None:
    rx = receiver()
    t = now_ms()
    payload = body(series(GPU, (71.5, t), (72.0, t + 1000)), series({**GPU, "gpu": "2"}, (60.0, t)))
    response = await rx.post(payload)
    assert response.status_code == 204, response.text
    assert rx.count("prexid_remote_write_samples_total") == 3
    assert rx.count("prexid_remote_write_requests_total", outcome="ok") == 1
    await rx.process_queued()
    assert rx.count("prexid_samples_total") == 3  # through the processor's decode path, every one
    assert rx.count("prexid_messages_decoded_total", stream="metrics") == 1
    assert {(e.node, e.gpu) for e in rx.state.pipeline.registry.entities} >= {("node-3", 1), ("node-3", 2)}


async def test_undecodable_bodies_get_400_with_the_reason_and_count_as_dead_letters() -> None:
    rx = receiver()
    response = await rx.post(b"\xff\xff\xff\xff\xff not snappy")
    assert response.status_code == 400
    assert response.text.startswith("invalid_snappy")
    response = await rx.post(bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff")))
    assert response.status_code == 400 and response.text.startswith("invalid_protobuf")
    assert rx.count("prexid_remote_write_requests_total", outcome="invalid") == 2
    assert rx.count("prexid_dead_letters_total", reason="invalid_snappy") == 1
    assert rx.count("prexid_dead_letters_total", reason="invalid_protobuf") == 1
    assert rx.intake.queue.empty()


async def test_the_bearer_token_is_required_when_set() -> None:
    rx = receiver(Settings(remote_write="local", remote_write_token=SecretStr(TOKEN)))
    payload = body(series(GPU, (71.5, now_ms())))
    assert (await rx.post(payload)).status_code == 401
    assert (await rx.post(payload, Authorization="Bearer wrong-token-0123456")).status_code == 401
    assert (await rx.post(payload, Authorization=f"Basic {TOKEN}")).status_code == 401
    assert (await rx.post(payload, Authorization=f"Bearer {TOKEN}")).status_code == 204
    assert rx.count("prexid_remote_write_requests_total", outcome="unauthorized") == 3
    assert rx.intake.queue.qsize() == 1


async def test_a_body_over_the_limit_gets_413_before_it_is_decoded() -> None:
    rx = receiver(Settings(remote_write="local", remote_write_max_body_bytes=1024))
    big = body(*(series({**GPU, "gpu": str(g)}, (1.0, now_ms())) for g in range(200)))
    assert len(big) > 1024
    response = await rx.post(big)
    assert response.status_code == 413
    assert rx.count("prexid_remote_write_requests_total", outcome="too_large") == 1
    assert rx.intake.queue.empty()


async def test_a_full_intake_gets_429_with_retry_after_and_takes_requests_again_once_drained() -> None:
    rx = receiver(Settings(remote_write="local", remote_write_queue_requests=2))
    payload = body(series(GPU, (71.5, now_ms())))
    assert [(await rx.post(payload)).status_code for _ in range(2)] == [204, 204]
    full = await rx.post(payload)
    assert full.status_code == 429 and full.headers["retry-after"] == "1"
    assert rx.count("prexid_remote_write_requests_total", outcome="throttled") == 1
    run = asyncio.create_task(rx.intake.run(rx.processor))
    await asyncio.sleep(0)
    assert rx.intake.queue.empty()
    assert (await rx.post(payload)).status_code == 204
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run


async def test_a_full_intake_answers_429_without_decoding_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under back-pressure a request to be refused costs no decoding; a bad body is refused 429 too
    (Prometheus sends it again), and 400 with its dead letter once there is room."""
    rx = receiver(Settings(remote_write="local", remote_write_queue_requests=1))
    decodes = Decodes().patch(monkeypatch)
    assert (await rx.post(body(series(GPU, (71.5, now_ms()))))).status_code == 204
    assert decodes.calls == 1
    full = await rx.post(body(series(GPU, (72.0, now_ms()))))
    assert (full.status_code, full.headers["retry-after"]) == (429, "1")
    assert (await rx.post(b"\xff\xff not snappy")).status_code == 429
    assert decodes.calls == 1
    assert rx.count("prexid_dead_letters_total", reason="invalid_snappy") == 0
    run = asyncio.create_task(rx.intake.run(rx.processor))
    await asyncio.sleep(0)
    assert rx.intake.queue.empty()  # room again
    bad = await rx.post(b"\xff\xff not snappy")
    assert bad.status_code == 400 and bad.text.startswith("invalid_snappy")
    assert rx.count("prexid_dead_letters_total", reason="invalid_snappy") == 1
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run


async def test_requests_being_decoded_count_against_the_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two places, one taken: while the second request is decoded, a third is refused undecoded (it
    would find no room once the second is queued); the second is then queued."""
    rx = receiver(Settings(remote_write="local", remote_write_queue_requests=2))
    decodes = Decodes().patch(monkeypatch)
    t = now_ms()
    assert (await rx.post(body(series(GPU, (71.0, t))))).status_code == 204
    second = await decodes.held(rx.post(body(series(GPU, (72.0, t + 1000)))))
    assert (await rx.post(body(series(GPU, (73.0, t + 2000))))).status_code == 429
    assert decodes.calls == 2
    decodes.release.set()
    assert (await second).status_code == 204
    assert rx.intake.queue.qsize() == 2


async def test_a_request_let_in_gets_429_if_the_room_went_while_it_was_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The room check is advice: the intake decides. A request that found room, then none once
    decoded, is refused 429 (Prometheus sends it again), not answered 204 and dropped."""
    rx = receiver(Settings(remote_write="local", remote_write_queue_requests=1))
    decodes = Decodes().patch(monkeypatch)
    request = await decodes.held(rx.post(body(series(GPU, (71.0, now_ms())))))
    rx.intake.queue.put_nowait(Message(b"", 0.0, TOPIC, 0, 99))  # the room goes meanwhile
    decodes.release.set()
    refused = await request
    assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
    assert rx.intake.queue.get_nowait().offset == 99 and rx.intake.queue.empty()
    assert rx.count("prexid_remote_write_requests_total", outcome="throttled") == 1
    assert rx.count("prexid_remote_write_samples_total") == 0


async def test_the_decode_thread_stops_when_the_apps_lifespan_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    state, _, _ = remote_write_feed(Settings(remote_write="local"))
    app = create_app(state)
    decodes = Decodes().patch(monkeypatch)
    transport = httpx.ASGITransport(app=app)
    for _ in range(2):  # a lifespan run again starts the thread again
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://p") as http,
        ):
            payload = body(series(GPU, (71.0, now_ms())))
            assert (await http.post("/api/v1/write", content=payload, headers=HEADERS)).status_code == 204
            assert decodes.threads[-1].is_alive()
        assert not decodes.threads[-1].is_alive()
    assert decodes.threads[0] is not decodes.threads[1]


async def test_serve_stops_the_decode_thread_once_the_server_has_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`serve` runs the app's lifespan (uvicorn ends it after the requests in flight are answered)."""
    decodes = Decodes().patch(monkeypatch)
    state, intake, processor = remote_write_feed(Settings(remote_write="local"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = asyncio.create_task(serve(state, intake.run(processor), "127.0.0.1", port, duration=None))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(500):
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.01)
            payload = body(series(GPU, (71.0, now_ms())))
            assert (await http.post("/api/v1/write", content=payload, headers=HEADERS)).status_code == 204
        [thread] = decodes.threads
        assert thread.is_alive()
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    assert not thread.is_alive()


async def test_a_stopped_intake_processes_what_it_accepted_and_refuses_more_with_503() -> None:
    rx = receiver()
    t = now_ms()
    for k in range(3):
        assert (await rx.post(body(series(GPU, (70.0 + k, t + 1000 * k))))).status_code == 204
    await rx.process_queued()
    assert rx.count("prexid_samples_total") == 3  # the three accepted requests, processed on stop
    response = await rx.post(body(series(GPU, (75.0, t + 5000))))
    assert response.status_code == 503  # Prometheus retries it against the next process
    assert rx.count("prexid_remote_write_requests_total", outcome="unavailable") == 1


async def test_metadata_only_requests_are_accepted_and_go_nowhere() -> None:
    rx = receiver()
    meta = WriteRequest(metadata=[MetricMetadata(metric_family_name="DCGM_FI_DEV_GPU_TEMP", help="t")])
    payload = bytes(cramjam.snappy.compress_raw(meta.SerializeToString()))
    assert (await rx.post(payload)).status_code == 204
    assert rx.intake.queue.empty()


async def test_stale_markers_are_accepted_and_counted_as_skipped_points() -> None:
    rx = receiver()
    t = now_ms()
    assert (await rx.post(body(series(GPU, (71.0, t), (STALE, t + 1000))))).status_code == 204
    await rx.process_queued()
    assert rx.count("prexid_points_skipped_total", reason="stale_marker") == 1
    assert rx.count("prexid_samples_total") == 1
    assert rx.count("prexid_dead_letters_total", reason="empty") == 0


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"Content-Encoding": "gzip"}, "Content-Encoding"),
        ({"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}, "2.0"),
        ({"X-Prometheus-Remote-Write-Version": "2.0.0"}, "2.0"),
        ({"Content-Type": "application/json"}, "Content-Type"),
    ],
)
async def test_what_is_not_remote_write_1_0_gets_415(headers: dict[str, str], why: str) -> None:
    rx = receiver()
    response = await rx.post(body(series(GPU, (71.0, now_ms()))), **headers)
    assert response.status_code == 415 and why in response.text


async def test_the_endpoint_is_not_served_unless_asked_for() -> None:
    state, _ = build(Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(state)), base_url="http://p"
    ) as c:
        assert (await c.post("/api/v1/write", content=b"", headers=HEADERS)).status_code in (404, 405)


async def test_the_demo_feeds_received_samples_to_a_pipeline_of_their_own() -> None:
    state, demo = build(Settings())
    _, intake, received = remote_write_feed(Settings(), state)
    assert received.pipeline is not demo.pipeline
    assert state.pipelines() == [demo.pipeline, received.pipeline]
    assert received.listeners is demo.listeners  # alerts go to the same sinks
    assert state.remote_write is not None and state.remote_write.intake is intake


def test_kafka_mode_refuses_a_target_topic_read_in_another_format() -> None:
    with pytest.raises(ValueError, match="republishes prometheus-kafka-adapter JSON"):
        Settings(remote_write="kafka", metrics_format="vector")
    with pytest.raises(ValueError, match="republishes"):
        Settings(remote_write="kafka", remote_write_topic="rw", topic_formats={"rw": "prom_text"})
    Settings(
        remote_write="kafka", remote_write_topic="rw", topic_formats={"rw": "auto"}, metrics_format="vector"
    )


def test_a_short_remote_write_token_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        Settings(remote_write_token=SecretStr("short"))


def test_republished_records_are_adapter_json_keyed_by_node_that_the_fast_path_reads() -> None:
    from prexid.service.decode import remote_write

    t = 1_796_205_600_250
    node = {"__name__": "node_load1", "instance": "node-7.cluster.local:9100", "job": "node"}
    samples = remote_write.decode(
        body(
            series(GPU, (71.5, t), (math.inf, t + 15_000)),
            series(node, (math.nan, t), (2.5, t + 15_250)),
        ),
        0.0,
    )
    records = adapter_records(samples)
    assert [k for k, _, _ in records] == [b"node-3", b"node-3", b"node-7", b"node-7"]
    assert [ms for _, _, ms in records] == [t, t + 15_000, t, t + 15_250]  # the record times
    decoded = [r for _, v, _ in records for r in prom_kafka_adapter.decode(v, 0.0).rows()]
    assert [(r.name, r.labels, r.ts) for r in decoded] == [
        (n, lab, ts) for n, lab, ts in zip(samples.names, samples.labels, samples.ts, strict=True)
    ]
    assert decoded[1].value == math.inf and math.isnan(decoded[2].value) and decoded[3].value == 2.5
    assert decoded[0].ts == 1_796_205_600.25  # milliseconds survive
    for _, value, _ in records:  # the consumers' fast path reads them without parsing JSON
        assert prom_kafka_adapter.split(value) is not None


async def test_kafka_mode_answers_503_while_the_broker_is_away_and_keeps_trying() -> None:
    import socket

    from prexid.service.app.wiring import remote_write_republisher

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(remote_write="kafka", kafka_bootstrap=f"127.0.0.1:{port}")
    state, _ = build(settings)
    republisher = remote_write_republisher(settings, state)
    producing = asyncio.create_task(state.background[-1]())
    transport = httpx.ASGITransport(app=create_app(state))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://p") as http:
            await asyncio.sleep(1.0)  # a failed bootstrap or two
            response = await http.post(
                "/api/v1/write", content=body(series(GPU, (71.0, now_ms()))), headers=HEADERS
            )
        assert response.status_code == 503  # Prometheus keeps the samples and retries
        assert not producing.done()  # the producer keeps trying: no crash of the server
        assert republisher.producer is None
    finally:
        producing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await producing


def test_kafka_mode_has_room_for_max_requests_awaiting_the_broker_counting_those_let_in() -> None:
    from prexid.service.sinks.kafka_republish import KafkaRepublisher

    settings = Settings(remote_write="kafka", remote_write_queue_requests=2)
    republisher = KafkaRepublisher(settings, build(settings)[0].telemetry)
    with pytest.raises(IntakeUnavailable):
        republisher.room(0)  # no producer yet: 503 before any decoding
    republisher.producer = object()  # type: ignore[assignment]  # connected (never sent to here)
    republisher.in_flight = 1
    republisher.room(0)
    with pytest.raises(IntakeFull):
        republisher.room(1)
    republisher.in_flight = 2  # `offer` refuses on the same count, before it sends anything
    with pytest.raises(IntakeFull):
        asyncio.run(republisher.offer(b"", Samples()))


async def test_a_retried_backlog_an_hour_old_is_read_not_dropped_as_late() -> None:
    rx = receiver()
    hour_ago = now_ms() - 3_600_000
    for k in range(3):  # what Prometheus resends after an outage: old, in order
        payload = body(series(GPU, (70.0 + k, hour_ago + 15_000 * k)))
        assert (await rx.post(payload)).status_code == 204
    await rx.process_queued()
    assert rx.count("prexid_samples_total") == 3
    assert rx.count("prexid_late_samples_total", source="prometheus.remote_write:0") == 0


async def test_a_request_dated_a_day_ahead_of_the_clock_is_a_future_timestamp_dead_letter() -> None:
    rx = receiver()
    assert (await rx.post(body(series(GPU, (70.0, now_ms()))))).status_code == 204
    assert (await rx.post(body(series(GPU, (71.0, now_ms() + 86_400_000))))).status_code == 204
    await rx.process_queued()
    assert rx.count("prexid_dead_letters_total", reason="future_timestamp") == 1
    assert rx.count("prexid_future_samples_total", source="prometheus.remote_write:0") == 1


@dataclass
class Hold:
    """Holds the first batch with records inside its processing until `release` (a batch of seconds);
    let go after `limit_s` whatever happens, so a loop the batch blocks is not blocked for ever."""

    limit_s: float = 5.0
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    ran_on: list[threading.Thread] = field(default_factory=list)

    def around(self, processor: Processor) -> Processor:
        real = processor.process_isolating

        def process_isolating(metrics: Any, logs: Any, *args: Any, **kwargs: Any) -> Output:
            self.ran_on.append(threading.current_thread())
            if (metrics or logs) and not self.entered.is_set():
                self.entered.set()
                self.release.wait(self.limit_s)
                self.release.set()  # released, by the test or by the limit
            return real(metrics, logs, *args, **kwargs)

        processor.process_isolating = process_isolating  # type: ignore[method-assign]
        return processor

    async def entered_batch(self) -> None:
        for _ in range(int(self.limit_s / 0.01)):
            if self.entered.is_set():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no batch was processed")


async def held_first_batch(rx: Receiver) -> tuple[Hold, int, asyncio.Task[None]]:
    """One request taken (204) and the intake running, its batch held in the worker thread: the hold,
    the request's time (ms) and the intake's task."""
    hold = Hold()
    hold.around(rx.processor)
    t = now_ms()
    assert (await rx.post(body(series(GPU, (71.0, t))))).status_code == 204
    run = asyncio.create_task(rx.intake.run(rx.processor))
    await hold.entered_batch()
    return hold, t, run


async def test_requests_are_scored_off_the_loop_which_answers_probes_and_queues_meanwhile() -> None:
    """A batch of requests in the worker thread: the loop answers the probes and `/metrics`, queues
    the next request and answers the one after 429 (the queue is full); a reader of the pipelines
    waits for the batch. Scored on the loop, nothing is answered until the batch ends."""
    rx = receiver(Settings(remote_write="local", remote_write_queue_requests=1))
    rx.state.ready = True  # as `prexid run` has it: requests are the feed
    hold, t, run = await held_first_batch(rx)

    async def answered(request: Coroutine[Any, Any, httpx.Response]) -> tuple[int, bool]:
        status = (await request).status_code
        return status, not hold.release.is_set()  # answered while the batch was held

    reader = asyncio.create_task(answered(rx.http.get("/api/v1/entities/node-3")))
    assert await answered(rx.http.get("/healthz")) == (200, True)
    assert await answered(rx.http.get("/readyz")) == (200, True)
    assert await answered(rx.http.get("/metrics")) == (200, True)
    assert await answered(rx.post(body(series(GPU, (72.0, t + 1000))))) == (204, True)  # queued
    full = await rx.post(body(series(GPU, (73.0, t + 2000))))
    assert (full.status_code, full.headers["retry-after"], hold.release.is_set()) == (429, "1", False)
    await asyncio.sleep(0.05)
    assert not reader.done()  # it reads the pipeline: not while the batch is half applied
    hold.release.set()
    assert await reader == (200, False)
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert rx.count("prexid_samples_total") == 2  # the held request and the queued one
    assert threading.main_thread() not in hold.ran_on


async def test_a_batch_stopped_half_way_runs_to_its_end_and_the_queue_behind_it_is_drained() -> None:
    """SIGTERM while a batch is in the thread: it runs to its end, and the request queued behind it
    (answered 204) is processed before the intake stops; later ones get 503."""
    rx = receiver()
    hold, t, run = await held_first_batch(rx)
    assert (await rx.post(body(series(GPU, (72.0, t + 1000))))).status_code == 204
    run.cancel()
    await asyncio.sleep(0.05)
    assert not run.done() and rx.count("prexid_samples_total") == 0  # the thread has the batch
    hold.release.set()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert run.cancelled()
    assert rx.count("prexid_samples_total") == 2
    assert (await rx.post(body(series(GPU, (73.0, t + 2000))))).status_code == 503


async def test_the_same_requests_raise_the_same_alerts_as_scored_on_the_loop() -> None:
    """Requests posted while batches run in the thread are scored in the order they were taken: the
    alerts are those of the same batches scored one after the other on the loop, as before."""
    settings = Settings(remote_write="local", detection={"error_counter_warmup_s": 0})  # type: ignore[arg-type]
    cluster = DemoCluster(nodes=2, gpus=8, duration_s=1800.0, fault=DemoFault(node=1, gpu=5))
    [requests] = bodies(tick.metrics for tick in simulate(cluster))
    rx = receiver(settings)
    got: list[tuple[str, str, str, int | None, str]] = []
    rx.state.alert_listeners.append(lambda alerts: got.extend(key(a) for a in alerts))
    sizes: list[int] = []  # each batch's requests, as the intake took them
    real = rx.processor.process_isolating

    def process_isolating(metrics: Any, logs: Any, *args: Any, **kwargs: Any) -> Output:
        sizes.append(sum(len(r.payloads) for r in metrics))
        return real(metrics, logs, *args, **kwargs)

    rx.processor.process_isolating = process_isolating  # type: ignore[method-assign]
    run = asyncio.create_task(rx.intake.run(rx.processor))
    for payload in requests:
        while (response := await rx.post(payload)).status_code == 429:  # noqa: ASYNC110 - as Prometheus
            await asyncio.sleep(0.01)
        assert response.status_code == 204
    while not rx.intake.queue.empty() or rx.state.gate.busy:  # noqa: ASYNC110 - the intake's
        await asyncio.sleep(0.01)
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run

    _, _, processor = remote_write_feed(settings)
    messages = [
        Message(b, record_time(remote_write.decode(b, 0.0)), TOPIC, 0, k) for k, b in enumerate(requests)
    ]
    expected: list[tuple[str, str, str, int | None, str]] = []
    assert sum(sizes) == len(requests)
    start = 0
    for n in sizes:
        out = processor.process_isolating(
            runs(messages[start : start + n]), [], backlogged=(), now=time.time()
        )
        expected += [key(a) for a in out.alerts]
        start += n
    assert expected  # the fault's pre_xid at least
    assert got == expected


def key(a: Alert) -> tuple[str, str, str, int | None, str]:
    return (a.status, a.kind, a.node, a.gpu, a.starts_at)


async def test_a_request_that_breaks_scoring_is_a_dead_letter_and_the_intake_goes_on() -> None:
    """An exception past the decoder, in the worker thread, costs that request only: it is a dead
    letter with the stage and the exception, the requests around it are scored, the intake runs on."""
    rx = receiver()
    real = rx.processor.pipeline.add_series

    def add_series(ids: Any, ts: Any, values: Any, *args: Any) -> Any:
        if 666.0 in list(values):
            raise ValueError("a bug that this value trips")
        return real(ids, ts, values, *args)

    rx.processor.pipeline.add_series = add_series  # type: ignore[method-assign]
    run = asyncio.create_task(rx.intake.run(rx.processor))
    t = now_ms()
    for k, value in enumerate((71.0, 666.0, 72.0)):
        assert (await rx.post(body(series(GPU, (value, t + 1000 * k))))).status_code == 204
    while not rx.intake.queue.empty() or rx.state.gate.busy:  # noqa: ASYNC110 - the intake's
        await asyncio.sleep(0.01)
    assert not run.done()  # still taking requests
    assert (await rx.post(body(series(GPU, (73.0, t + 3000))))).status_code == 204
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert rx.count("prexid_dead_letters_total", reason="processing_error") == 1
    assert rx.count("prexid_samples_total") == 3
