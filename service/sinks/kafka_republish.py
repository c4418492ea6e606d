"""`remote_write = "kafka"`: samples received over HTTP, republished to a metrics topic keyed by node.

Written as prometheus-kafka-adapter JSON, one sample a record (the format prexid's consumers read on
their fast path; the settings refuse a target topic read in another format), keyed by the node the
consumers will place the series on, with aiokafka's murmur2 partitioner: a node's samples land in
the partition its kernel lines are keyed to, so scale-out stays Kafka's consumer-group assignment.
Each record is dated by its sample (never after now): consumers judge lateness against record
times, and a backlog Prometheus retries after an outage is old, not late. A request is answered only
once the broker has acknowledged every record of it: a broker away is a 503 that Prometheus retries,
never a 204 for samples that were not written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from prometheus_client.utils import floatToGoString

from prexid.service.app.settings import Settings
from prexid.service.decode.types import Samples
from prexid.service.pipeline.series_registry import node_of
from prexid.service.sinks.kafka import MAX_REQUEST_BYTES
from prexid.service.sinks.prometheus import Telemetry
from prexid.service.sources.kafka_security import client_options
from prexid.service.sources.remote_write import IntakeFull, IntakeUnavailable

log = logging.getLogger(__name__)
_go_float: Callable[[float], str] = floatToGoString  # the adapter's value text: NaN, +Inf (untyped)


def rfc3339_ms(ts: float) -> str:
    """Millisecond RFC3339 in UTC: remote-write times are milliseconds, and two scrapes of a series
    less than a second apart must not collide."""
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def adapter_records(samples: Samples) -> list[tuple[bytes, bytes, int]]:
    """(key, value, ms) per sample: the node, the adapter JSON with timestamp and value first (the
    layout `prom_kafka_adapter.split` reads without parsing). Each series' tail is rendered once."""
    tails: dict[tuple[str, int], tuple[bytes, bytes]] = {}  # by name and id(labels): a series' samples
    stamps: dict[float, bytes] = {}
    out = []
    for name, labels, ts, value in zip(
        samples.names, samples.labels, samples.ts, samples.values, strict=True
    ):
        cached = tails.get((name, id(labels)))  # share one labels dict (alive here: ids are unique)
        if cached is None:
            tail = b'","name":' + orjson.dumps(name) + b',"labels":' + orjson.dumps(labels) + b"}"
            cached = tails[name, id(labels)] = (node_of(labels).encode(), tail)
        stamp = stamps.get(ts)
        if stamp is None:
            stamp = stamps[ts] = b'{"timestamp":"' + rfc3339_ms(ts).encode() + b'","value":"'
        out.append((cached[0], stamp + _go_float(value).encode() + cached[1], int(ts * 1000)))
    return out


class KafkaRepublisher:
    """The intake of `kafka` mode: one idempotent producer, at most `max_requests` requests awaiting
    the broker at once (more get 429)."""

    def __init__(self, settings: Settings, telemetry: Telemetry) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.topic = settings.republish_topic()
        self.max_requests = settings.remote_write_queue_requests
        self.in_flight = 0
        self.producer: AIOKafkaProducer | None = None  # started by `run`, in the serving loop

    async def run(self) -> None:
        """A background job (`ServiceState.background`): the producer lives while the server does. A
        broker away at start is retried with backoff (requests get 503 meanwhile), not fatal."""
        backoff = 0.5
        while True:
            producer = AIOKafkaProducer(
                **client_options(self.settings),
                acks="all",
                enable_idempotence=True,
                linger_ms=5,
                max_request_size=MAX_REQUEST_BYTES,
            )
            try:
                await producer.start()
                break
            except KafkaError as exc:
                await producer.stop()
                log.warning("remote_write: Kafka not reachable (%r); retrying in %g s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
        self.producer = producer
        try:
            await asyncio.Event().wait()
        finally:
            self.producer = None
            await producer.stop()

    def room(self, admitted: int) -> None:
        if self.producer is None:
            raise IntakeUnavailable("the Kafka producer is not connected")
        if self.in_flight + admitted >= self.max_requests:
            raise IntakeFull(1)

    async def offer(self, body: bytes, samples: Samples) -> None:
        self.room(0)  # no producer, or no place left: refused before it takes one
        producer = self.producer
        assert producer is not None  # `room` checked it
        self.in_flight += 1
        try:
            now_ms = int(time.time() * 1000)
            futures = [
                await producer.send(self.topic, value, key=key, timestamp_ms=min(ts_ms, now_ms))
                for key, value, ts_ms in adapter_records(samples)
            ]
            await asyncio.gather(*futures)
        except KafkaError as exc:
            log.warning("remote_write: republishing to %s failed: %r", self.topic, exc)
            raise IntakeUnavailable(f"Kafka: {type(exc).__name__}") from exc
        finally:
            self.in_flight -= 1
        for reason, n in samples.skipped.items():  # points the consumers never see are counted here
            self.telemetry.points_skipped.labels(reason).inc(n)
