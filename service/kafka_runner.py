"""`prexid run`: consume metric and kernel-log topics, publish alerts and dead letters, then commit.

At-least-once: a batch's offsets are committed only after every alert and dead letter it caused has
been acknowledged by the broker (acks=all, idempotent producer). A crash between publish and commit
re-sends those alerts on restart; consumers dedup by `fingerprint` + `status`.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from service.models import Alert
from service.processor import DeadLetter, Message, Output, Processor
from service.settings import Settings
from service.state import ServiceState

log = logging.getLogger(__name__)


def alert_key(alert: Alert) -> bytes:
    """Alerts are keyed by entity, so one GPU's alerts stay in order in one partition."""
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


def to_message(rec: ConsumerRecord) -> Message:
    value = rec.value if rec.value is not None else b""
    headers = tuple((k, v or b"") for k, v in (rec.headers or ()))
    return Message(value, rec.timestamp / 1000.0, rec.topic, rec.partition, rec.offset, rec.key, headers)


class KafkaRunner:
    def __init__(self, settings: Settings, state: ServiceState, processor: Processor) -> None:
        self.settings = settings
        self.state = state
        self.processor = processor
        self.metrics_topics = set(settings.metrics_topics)
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        s = self.settings
        consumer = AIOKafkaConsumer(
            *s.metrics_topics,
            *s.logs_topics,
            bootstrap_servers=s.kafka_bootstrap,
            group_id=s.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=s.kafka_bootstrap, acks="all", enable_idempotence=True, linger_ms=5
        )
        self.state.not_ready_reason = f"connecting to Kafka at {s.kafka_bootstrap}"
        await producer.start()
        try:
            await consumer.start()
            try:
                self.state.ready = True
                while not self.stopping.is_set():
                    batch = await consumer.getmany(
                        timeout_ms=s.batch_timeout_ms, max_records=s.batch_max_records
                    )
                    if batch:
                        await self._handle(consumer, producer, batch)
            finally:
                self.state.ready = False
                await consumer.stop()
        finally:
            await producer.stop()

    async def _handle(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        batch: dict[TopicPartition, list[ConsumerRecord]],
    ) -> None:
        metrics: list[Message] = []
        logs: list[Message] = []
        for tp, records in batch.items():
            (metrics if tp.topic in self.metrics_topics else logs).extend(map(to_message, records))
        backlogged = await self._backlogged_metric_sources(consumer)
        with self.state.telemetry.batch_seconds.time():
            out = self.processor.process(metrics, logs, backlogged)
        await self._publish(producer, out)
        offsets = {
            tp: OffsetAndMetadata(records[-1].offset + 1, "") for tp, records in batch.items() if records
        }
        if offsets:
            await consumer.commit(offsets)

    async def _backlogged_metric_sources(self, consumer: AIOKafkaConsumer) -> set[str]:
        """Assigned metric partitions not yet read to their high watermark (unknown counts as behind)."""
        behind = set()
        for tp in consumer.assignment():
            if tp.topic in self.metrics_topics:
                highwater = consumer.highwater(tp)
                if highwater is None or await consumer.position(tp) < highwater:
                    behind.add(f"{tp.topic}:{tp.partition}")
        return behind

    async def _publish(self, producer: AIOKafkaProducer, out: Output) -> None:
        """Send everything the batch caused and wait for the broker to acknowledge all of it."""
        s = self.settings
        futures = [
            await producer.send(s.alerts_topic, orjson.dumps(a.model_dump(mode="json")), key=alert_key(a))
            for a in out.alerts
        ]
        futures += [
            await producer.send(s.dead_letter_topic, dl.message.payload, headers=dead_letter_headers(dl))
            for dl in out.dead_letters
        ]
        await asyncio.gather(*futures)
        for a in out.alerts:
            log.info("alert %s %s %s/%s %s", a.status, a.kind, a.node, a.gpu, a.summary)

    def stop(self) -> None:
        self.stopping.set()
