"""The aggregator role: held by whichever replica Kafka assigns the summaries topic's one partition.

Every replica runs this consumer in its own group (`<group_id>.aggregator`), so Kafka's group protocol
elects exactly one live member to aggregate, and a dead one's role moves with the rebalance, after
`session_timeout_ms`. The holder reads the summaries in order, judges them (`pipeline/aggregator.py`),
sends the cluster alerts it raises where every alert goes (the alerts topic, acks=all, and the alert
listeners: Alertmanager), and then publishes a verdict to the verdicts topic carrying its state and
the summaries offset to resume from. A new holder restores the last verdict and reads on from there, so
its transitions, and the alert's fingerprint, are its predecessor's: an alert raised before a failover
is at most re-sent with the same fingerprint (at-least-once, as every alert of prexid).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

from prexid.service.app.settings import Settings
from prexid.service.pipeline.aggregator import Aggregator, Judged
from prexid.service.pipeline.fleet_summary import PartitionSummary, SummaryError
from prexid.service.pipeline.processor import Output
from prexid.service.schemas import Alert
from prexid.service.sinks.kafka import KafkaSink
from prexid.service.sinks.prometheus import Telemetry
from prexid.service.sources.kafka_security import client_options

log = logging.getLogger(__name__)


def verdict_record(aggregator: Aggregator, judged: Judged, resume: int) -> bytes:
    """The verdicts topic's record: the last tick judged, and the state a successor resumes from."""
    return orjson.dumps(
        {
            "tick": judged.tick,
            "cluster_score": judged.score,
            "shared": judged.shared,
            "rising_share": judged.rising_share,
            "partitions": judged.partitions,
            "missing": judged.missing,
            "resume_offset": resume,
            "state": aggregator.snapshot(),
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )


class AggregatorRole(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        settings: Settings,
        new_aggregator: Callable[[], Aggregator],
        sink: KafkaSink,
        telemetry: Telemetry,
        listeners: list[Callable[[list[Alert]], None]],
        forgetters: list[Callable[[list[str]], None]] | None = None,
    ) -> None:
        """`listeners` take the alerts the role raises (Alertmanager); `forgetters` are told, when the
        role moves away, which firing alerts the next holder re-sends from now on."""
        self.settings = settings
        self.new_aggregator = new_aggregator
        self.sink = sink
        self.telemetry = telemetry
        self.listeners = listeners
        self.forgetters = forgetters or []
        self.aggregator: Aggregator | None = None  # set while this replica holds the role
        self.last_verdict: dict[str, object] | None = None
        self.tp = TopicPartition(settings.summaries(), 0)
        self.consumer: AIOKafkaConsumer

    async def run(self) -> None:
        s = self.settings
        self.consumer = AIOKafkaConsumer(
            **client_options(s),
            group_id=s.aggregator_group(),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=max(s.session_timeout_ms // 5, 300),
        )
        self.consumer.subscribe([s.summaries()], listener=self)
        await self.consumer.start()
        try:
            while True:
                batch = await self.consumer.getmany(timeout_ms=s.batch_timeout_ms)
                if self.aggregator is not None and batch:
                    await self._handle([r for records in batch.values() for r in records])
        finally:
            self._lose_role()
            await self.consumer.stop()

    async def _handle(self, records: list[ConsumerRecord]) -> None:
        agg = self.aggregator
        assert agg is not None
        next_offset = -1
        for r in records:
            try:
                summary = PartitionSummary.from_bytes(r.value or b"")
            except SummaryError as err:
                log.warning("aggregator: %s", err)
                continue
            agg.observe(summary, r.offset)
            next_offset = r.offset + 1
        late = agg.late
        alerts, judged = agg.advance()
        self.telemetry.fleet_late_summaries.inc(max(agg.late - late, 0))
        if alerts:
            await self.sink.publish(Output(alerts=alerts))
            self.telemetry.observe_alerts(alerts)
            for listener in self.listeners:
                listener(alerts)
        if judged and next_offset >= 0:
            last = judged[-1]
            body = verdict_record(agg, last, agg.resume_offset(next_offset))
            await (await self.sink.producer.send(self.settings.verdicts(), body, key=b"verdict"))
            self.last_verdict = orjson.loads(body)
            self.telemetry.fleet_aggregated_tick.set(last.tick)

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.tp in revoked:
            self._lose_role()

    def _lose_role(self) -> None:
        if self.aggregator is not None:
            log.info("aggregator role handed off")
            firing = list(self.aggregator.book.active)
            for forget in self.forgetters:
                forget(firing)
        self.aggregator = None
        self.telemetry.fleet_aggregator.set(0)
        self.telemetry.fleet_aggregated_tick.set(0)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if self.tp not in assigned:
            return
        try:
            agg, resume = await self._restore()
        except Exception:  # aiokafka swallows a callback's exception: say it, and start afresh
            log.exception("aggregator: restoring the last verdict failed; judging from the summaries on")
            agg, resume = self.new_aggregator(), None
        if resume is not None:
            self.consumer.seek(self.tp, resume)
        self.aggregator = agg
        self.telemetry.fleet_aggregator.set(1)
        log.info("aggregator role taken (%s)", "from the last verdict" if resume is not None else "afresh")
        if active := list(agg.book.active.values()):
            for listener in self.listeners:  # e.g. Alertmanager re-sends the cluster alert it fires
                listener(active)

    async def _restore(self) -> tuple[Aggregator, int | None]:
        """The aggregator as the last verdict left it, and the summaries offset to read on from."""
        agg = self.new_aggregator()
        doc = await last_record(self.settings, self.settings.verdicts())
        if doc is None:
            return agg, None
        verdict = orjson.loads(doc)
        agg.restore(verdict["state"])
        end = (await self.consumer.end_offsets([self.tp]))[self.tp]
        agg.replaying_to = end
        return agg, int(verdict["resume_offset"])


async def last_record(settings: Settings, topic: str) -> bytes | None:
    """The newest record of a one-partition topic, if it has one."""
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        if end <= (await consumer.beginning_offsets([tp]))[tp]:  # none, or all past retention
            return None
        consumer.seek(tp, end - 1)
        async with asyncio.timeout(30):
            while True:
                batch = await consumer.getmany(tp, timeout_ms=500)
                if batch.get(tp):
                    value: bytes | None = batch[tp][-1].value
                    return value
    finally:
        await consumer.stop()
