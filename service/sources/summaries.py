"""The summaries topic: created with its verdicts topic, written by every shard, read by every replica.

Both topics have one partition: the summaries must be read in one order by everyone, and the
aggregator role is the one partition's consumer-group assignment (`aggregator_role.py`). Records are
keyed by partition index; time retention (`summaries_retention_ms`), not compaction: a summary is
worth something for minutes, and a replica starting reads only the last `LOOKBACK_S` of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from prexid.service.app.batch_gate import BatchGate
from prexid.service.app.settings import Settings
from prexid.service.pipeline.fleet_judge import FleetBoard
from prexid.service.pipeline.fleet_summary import PartitionSummary, SummaryError
from prexid.service.sinks.prometheus import Telemetry
from prexid.service.sources.kafka_security import client_options
from prexid.service.state.changelog_store import partition_count

log = logging.getLogger(__name__)
LOOKBACK_S = 600.0  # wall seconds of summaries a starting replica reads back


async def ensure_topics(settings: Settings) -> None:
    """Create the summaries and verdicts topics (one partition each) unless they exist."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        config = {"retention.ms": str(settings.summaries_retention_ms), "cleanup.policy": "delete"}
        for name in (settings.summaries(), settings.verdicts()):
            topic = NewTopic(name, 1, settings.state_replication_factor, topic_configs=config)
            response = await admin.create_topics([topic])
            for created, code, *rest in response.topic_errors:
                if code and code != TopicAlreadyExistsError.errno:
                    raise for_code(code)(f"create topic {created}: {rest[0] if rest else ''}")
            if (have := await partition_count(admin, name)) != 1:  # one order for all, one aggregator
                raise RuntimeError(f"topic {name} must have exactly 1 partition, it has {have}")
    finally:
        await admin.close()


async def publish(
    producer: AIOKafkaProducer, topic: str, records: Sequence[PartitionSummary], telemetry: Telemetry
) -> list[asyncio.Future[object]]:
    """Send a batch's summaries; the futures the caller awaits with the batch's other outputs."""
    futures = []
    for record in records:
        body = record.to_bytes()
        futures.append(await producer.send(topic, body, key=str(record.partition).encode()))
        telemetry.fleet_summary_bytes.inc(len(body))
    telemetry.fleet_summaries.labels("published").inc(len(records))
    return futures


class SummaryFeed:
    """Reads the summaries topic into a `FleetBoard` as they come, and the aggregator's last verdict
    (no consumer group: every replica reads all of both)."""

    def __init__(
        self, settings: Settings, board: FleetBoard, telemetry: Telemetry, gate: BatchGate | None = None
    ) -> None:
        self.settings = settings
        self.board = board
        self.telemetry = telemetry
        self.gate = gate  # the board is written only while no batch runs in the worker thread
        self.read = 0

    async def run(self) -> None:
        s = self.settings
        consumer = AIOKafkaConsumer(**client_options(s), enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(s.summaries(), 0), TopicPartition(s.verdicts(), 0)]
            consumer.assign(tps)
            since = int((time.time() - LOOKBACK_S) * 1000)
            found = await consumer.offsets_for_times(dict.fromkeys(tps, since))
            for tp in tps:
                if (at := found.get(tp)) is None:
                    await consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, at.offset)
            while True:
                batch = await consumer.getmany(timeout_ms=s.batch_timeout_ms)
                if batch and self.gate is not None:  # shards' fleet judges read the board in batches
                    await self.gate.quiet()
                for tp, records in batch.items():
                    for r in records:
                        if tp.topic == s.summaries():
                            self.observe(r.value or b"")
                        elif records:
                            self.board.verdict = orjson.loads(records[-1].value or b"null")
                            break
        finally:
            await consumer.stop()

    def observe(self, raw: bytes) -> None:
        try:
            record = PartitionSummary.from_bytes(raw)
        except SummaryError as err:
            self.board.unreadable += 1
            self.telemetry.fleet_summaries.labels("unreadable").inc()
            log.warning("summaries topic: %s", err)
            return
        self.board.observe(record)
        self.read += 1
        self.telemetry.fleet_summaries.labels("read").inc()
