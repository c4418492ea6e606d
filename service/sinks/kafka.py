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


class KafkaSink:
    def __init__(self, settings: Settings) -> None:
        """Call from a running loop: aiokafka binds its clients to it."""
        self.alerts_topic = settings.alerts_topic
        self.dead_letter_topic = settings.dead_letter_topic
        self.producer = AIOKafkaProducer(
            **client_options(settings), acks="all", enable_idempotence=True, linger_ms=5
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
        futures = [
            await self.producer.send(
                self.alerts_topic, orjson.dumps(a.model_dump(mode="json")), key=alert_key(a)
            )
            for a in out.alerts
        ]
        futures += [
            await self.producer.send(
                self.dead_letter_topic, dl.message.payload, headers=dead_letter_headers(dl)
            )
            for dl in out.dead_letters
        ]
        await asyncio.gather(*futures)
        for a in out.alerts:
            log.info("alert %s %s %s/%s %s", a.status, a.kind, a.node, a.gpu, a.summary)
