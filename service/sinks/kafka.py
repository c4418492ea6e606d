"""Alerts and dead letters to Kafka: one idempotent producer, and a publish that waits for the broker.

Alerts are keyed by entity, so one GPU's alerts stay in order in one partition; a dead letter carries
the original bytes and, in headers, why it was refused and where it came from.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiokafka import AIOKafkaProducer

from prexid.service.app.settings import Settings
from prexid.service.pipeline.processor import DeadLetter, Output
from prexid.service.schemas import Alert
from prexid.service.sources.kafka_security import client_options

log = logging.getLogger("prexid.service.sources.kafka")  # one logger for the runner's story


def alert_key(alert: Alert) -> bytes:
    return f"{alert.cluster}/{alert.node}/{alert.gpu if alert.gpu is not None else '-'}".encode()


def dead_letter_headers(dl: DeadLetter) -> list[tuple[str, bytes]]:
    m = dl.message
    return [
        ("prexid.reason", dl.reason.encode()),
        ("prexid.detail", dl.detail.encode()),
        ("prexid.source.topic", m.topic.encode()),
        ("prexid.source.partition", str(m.partition).encode()),
        ("prexid.source.offset", str(m.offset).encode()),
    ]


MAX_REQUEST_BYTES = 1 << 20  # aiokafka's default max_request_size, which a record must fit with its headers
ROOM_FOR_HEADERS = 16 << 10


def fitted_dead_letter(
    dl: DeadLetter, limit: int = MAX_REQUEST_BYTES
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The dead letter's payload and headers, its payload cut to fit one record (a message consumed from a
    topic that allows larger ones would otherwise fail the producer, and the batch with it)."""
    headers = dead_letter_headers(dl)
    payload = dl.message.payload
    room = limit - ROOM_FOR_HEADERS
    if len(payload) > room:
        headers.append(("prexid.truncated", str(len(payload)).encode()))
        payload = payload[:room]
    return payload, headers


def fitted_alert(alert: Alert, limit: int = MAX_REQUEST_BYTES) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The alert as JSON that fits one record: label values come from producers, and one of a megabyte
    must not make the alert unpublishable. Too large, its signals lose their labels, then the signals,
    with its summary and node name cut; a `prexid.truncated` header gives the size it had."""
    body = orjson.dumps(alert.model_dump(mode="json"))
    room = limit - ROOM_FOR_HEADERS
    if len(body) <= room:
        return body, []
    header = [("prexid.truncated", str(len(body)).encode())]
    cut = {"summary": alert.summary[:1000], "node": alert.node[:256]}
    for signals in ([s.model_copy(update={"labels": {}}) for s in alert.signals], []):
        body = orjson.dumps(alert.model_copy(update={**cut, "signals": signals}).model_dump(mode="json"))
        if len(body) <= room:
            break
    return body, header


class KafkaSink:
    def __init__(self, settings: Settings) -> None:
        """Call from a running loop: aiokafka binds its clients to it."""
        self.alerts_topic = settings.alerts_topic
        self.dead_letter_topic = settings.dead_letter_topic
        self.producer = AIOKafkaProducer(
            **client_options(settings),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            max_request_size=MAX_REQUEST_BYTES,
        )

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def publish(self, out: Output) -> None:
        """Send everything a batch caused and wait for the broker to acknowledge all of it.

        Waiting here is the backpressure: a slow sink stalls the loop, so nothing more is fetched
        and memory stays bounded by one batch; the backlog waits in Kafka, visible as consumer lag.
        """
        futures = []
        for a in out.alerts:
            body, headers = fitted_alert(a)
            futures.append(
                await self.producer.send(self.alerts_topic, body, key=alert_key(a), headers=headers)
            )
        for dl in out.dead_letters:
            payload, headers = fitted_dead_letter(dl)
            futures.append(await self.producer.send(self.dead_letter_topic, payload, headers=headers))
        await asyncio.gather(*futures)
        for a in out.alerts:
            log.info("alert %s %s %s/%s %s", a.status, a.kind, a.node, a.gpu, a.summary)
