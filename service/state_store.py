"""Partition snapshots in a compacted Kafka changelog topic, one topic partition per input partition.

Why Kafka and not a disk or an object store: every replica already reaches the broker, the snapshot
is written with the same durability (acks=all) as the alerts, and log compaction keeps exactly the
newest snapshot per partition. Snapshot of input partition `n` goes to changelog partition `n`
(key `shard-n`), so restoring one partition reads one record: the last one of its partition.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from service.kafka_security import client_options
from service.settings import Settings

log = logging.getLogger(__name__)


def state_topic(settings: Settings) -> str:
    return settings.state_topic or f"{settings.group_id}.state"


class ChangelogStore:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = state_topic(settings)
        self.producer = AIOKafkaProducer(
            **client_options(settings),
            acks="all",
            enable_idempotence=True,
            compression_type="gzip",
            max_request_size=settings.snapshot_max_bytes,
        )

    async def start(self, partitions: int) -> None:
        """Create the compacted topic if it is missing (it must have >= `partitions` partitions)."""
        await self._ensure_topic(partitions)
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def save(self, shard: int, blob: bytes) -> None:
        """Write one partition's snapshot and wait until the broker has it (acks=all)."""
        await self.producer.send_and_wait(self.topic, blob, key=f"shard-{shard}".encode(), partition=shard)

    async def load(self, shard: int) -> bytes | None:
        """The newest snapshot of partition `shard`, or None if it never had one."""
        tp = TopicPartition(self.topic, shard)
        size = self.settings.snapshot_max_bytes
        consumer = AIOKafkaConsumer(
            **client_options(self.settings),
            enable_auto_commit=False,
            max_partition_fetch_bytes=size,
            fetch_max_bytes=size,
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            if end == 0:
                return None
            consumer.seek(tp, end - 1)
            while True:  # the last offset may be a compaction gap; read until the final record
                batch = await consumer.getmany(tp, timeout_ms=1000)
                records = batch.get(tp, [])
                if records and records[-1].offset >= end - 1:
                    value: bytes | None = records[-1].value
                    return value
                if not records and await consumer.position(tp) >= end:
                    return None
        finally:
            await consumer.stop()

    async def _ensure_topic(self, partitions: int) -> None:
        admin = AIOKafkaAdminClient(**client_options(self.settings))
        await admin.start()
        try:
            configs = {
                "cleanup.policy": "compact",
                "max.message.bytes": str(self.settings.snapshot_max_bytes),
                "min.compaction.lag.ms": "60000",
            }
            response = await admin.create_topics(
                [
                    NewTopic(
                        self.topic, partitions, self.settings.state_replication_factor, topic_configs=configs
                    )
                ]
            )
            for name, code, *rest in response.topic_errors:
                if code and code != TopicAlreadyExistsError.errno:
                    raise for_code(code)(f"create state topic {name}: {rest[0] if rest else ''}")
            have = await _partition_count(admin, self.topic)
            if have < partitions:
                raise RuntimeError(f"state topic {self.topic} has {have} partitions; need {partitions}")
        finally:
            await admin.close()


async def _partition_count(admin: Any, topic: str, wait_s: float = 15.0) -> int:
    """Partitions of `topic`, waiting out the moment a just-created topic has no metadata yet."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        [desc] = await admin.describe_topics([topic])
        if desc["partitions"] or asyncio.get_running_loop().time() > deadline:
            return len(desc["partitions"])
        await asyncio.sleep(0.1)
