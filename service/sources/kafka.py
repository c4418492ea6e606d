"""`prexid run`: consume metric and kernel-log topics, publish alerts and dead letters, checkpoint.

Scale-out: producers key every record by node, so one node's series (and its kernel lines) land in
one partition index of the co-partitioned metric and log topics. The range assignor hands a replica
the same partition indexes of every topic, and each index is a *shard* with its own pipeline.

Delivery is at-least-once with fingerprint dedup (docs/operations.md says why). A shard's snapshot
and its offsets are checkpointed together: the snapshot goes to the changelog topic first, then the
offsets are committed. A replica that takes a shard over (rebalance, or a killed owner) restores the
snapshot and seeks to the offsets stored in it, so it resumes without warm-up and re-emits, with the
same fingerprints, only the alerts of records read since that checkpoint.

A shard's part of a batch is processed in a worker thread (`BatchGate.run`, one shard at a time), the
rest (fetching, publishing, checkpointing, rebalances, HTTP) on the event loop, which so stays free to
answer Kubernetes' probes and Prometheus' scrapes during a backlog's batches of seconds. The ordering
above does not change: the runner awaits each shard's processing under its lock as it did the call,
publishes, and only then moves the offsets; `batch_gate.py` says how the loop keeps off the
pipelines meanwhile, and why not uvicorn in a thread of its own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import CommitFailedError, KafkaConnectionError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import Settings
from prexid.service.pipeline.processor import Message, Output, Processor, Run, stream_name
from prexid.service.sinks.kafka import KafkaSink
from prexid.service.sources.kafka_security import client_options
from prexid.service.sources.key_placement import KeyPlacement
from prexid.service.state import snapshot
from prexid.service.state.changelog_store import ChangelogStore
from prexid.service.state.handoff import Handoff

log = logging.getLogger(__name__)


def to_message(rec: ConsumerRecord) -> Message:
    value = rec.value if rec.value is not None else b""
    return Message(value, rec.timestamp / 1000.0, rec.topic, rec.partition, rec.offset, rec.key, rec.headers)


def to_run(tp: TopicPartition, records: list[ConsumerRecord]) -> Run:
    """A partition's metric records as the processor's run: payloads, and a Message on demand."""
    first, last = (records[0].timestamp, records[-1].timestamp) if records else (np.nan, np.nan)
    newest, oldest = max(first, last) / 1000.0, min(first, last) / 1000.0  # in offset order: near enough
    return Run(
        tp.topic,
        tp.partition,
        [r.value or b"" for r in records],
        lambda i: to_message(records[i]),
        newest,
        oldest,
    )


def source(tp: TopicPartition) -> str:
    return stream_name(tp.topic, tp.partition)


@dataclass
class Shard:
    """One partition index: its processor and the next offset of each of its topic partitions."""

    processor: Processor
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # Processed records whose alerts are not published yet: the processor's state is ahead of
    # `offsets`, and a snapshot of it would make the next owner replay them as already alerted.
    unpublished: bool = False

    def unseen(self, tp: TopicPartition, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """Records past what this shard has already processed.

        A batch fetched while a takeover was restoring can arrive before the restore's seek and
        again after it; the shard's own offsets say which copy is new.
        """
        done = self.offsets.get(tp)
        if done is None or not records or records[0].offset >= done:
            return records
        return [r for r in records if r.offset >= done]


class KafkaRunner:
    def __init__(
        self, settings: Settings, state: ServiceState, new_processor: Callable[[], Processor]
    ) -> None:
        self.settings = settings
        self.state = state
        self.new_processor = new_processor
        self.metrics_topics = set(settings.metrics_topics)
        self.shards: dict[int, Shard] = {}
        self.lock = asyncio.Lock()  # a batch and a rebalance never interleave
        self.stopping = asyncio.Event()
        self.store: ChangelogStore  # clients are made in run(): aiokafka needs the running loop
        self.consumer: AIOKafkaConsumer
        self.sink: KafkaSink
        self.last_checkpoint = time.monotonic()
        self.in_batch = False
        self.assignments = 0  # completed handoffs, so callers can wait for one to finish
        self.placement = KeyPlacement(n_partitions=0)  # sized once the partition count is known

    def _make_clients(self) -> None:
        settings = self.settings
        self.store = ChangelogStore(settings)
        self.consumer = AIOKafkaConsumer(
            **client_options(settings),
            group_id=settings.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=max(settings.session_timeout_ms // 5, 300),
        )
        self.sink = KafkaSink(settings)

    async def run(self) -> None:
        s = self.settings
        self._make_clients()
        self.state.checkpoint = self.checkpoint_now
        self.state.not_ready_reason = f"connecting to Kafka at {s.kafka_bootstrap}"
        try:
            await self.sink.start()
        except KafkaConnectionError as err:
            sec = s.kafka_security
            who = f" as {sec.sasl_username} ({sec.sasl_mechanism})" if sec.protocol.startswith("SASL") else ""
            raise ConnectionError(
                f"cannot connect to Kafka at {s.kafka_bootstrap} over {sec.protocol}{who}: {err}; "
                "the broker's reason (e.g. authentication failed) is logged just above"
            ) from err
        try:
            n_partitions = await self._partition_count()
            self.placement = KeyPlacement(n_partitions)
            await self.store.start(n_partitions)
            try:
                self.consumer.subscribe([*s.metrics_topics, *s.logs_topics], listener=Handoff(self))
                await self.consumer.start()
                try:
                    await self._loop()
                finally:
                    self.state.ready = False
                    await self.consumer.stop()
            finally:
                await self.store.stop()
        finally:
            await self.sink.stop()

    async def _loop(self) -> None:
        s = self.settings
        self.state.ready = True
        try:
            while not self.stopping.is_set():
                batch = await self.consumer.getmany(
                    timeout_ms=s.batch_timeout_ms, max_records=s.batch_max_records
                )
                async with self.lock:
                    self.in_batch = True
                    await self._handle(batch)  # an empty poll still lets held Xids go (`_handle`)
                    self.in_batch = False
                    if time.monotonic() - self.last_checkpoint >= s.checkpoint_interval_s:
                        await self._periodic_checkpoint()
        finally:
            # A stop between batches hands over fresh state, so the next owner replays nothing. A
            # batch cut short (error, cancellation) is not checkpointed: its alerts may be unsent.
            if not self.in_batch:
                async with self.lock:
                    await self.checkpoint(list(self.shards))
                log.info("stopped cleanly: %d partitions checkpointed", len(self.shards))

    async def _periodic_checkpoint(self) -> None:
        """A checkpoint that fails (broker away) is retried next interval; older ones still hold."""
        try:
            await self.checkpoint(list(self.shards))
        except KafkaError as err:
            self.last_checkpoint = time.monotonic()
            log.warning("checkpoint failed, retrying in %.0f s: %r", self.settings.checkpoint_interval_s, err)

    async def _partition_count(self) -> int:
        """Partitions per input topic; co-partitioning needs every topic to have the same count."""
        s = self.settings
        admin = AIOKafkaAdminClient(**client_options(s))
        await admin.start()
        try:
            described = await admin.describe_topics([*s.metrics_topics, *s.logs_topics])
        finally:
            await admin.close()
        counts = {d["topic"]: len(d["partitions"]) if d["error_code"] == 0 else 0 for d in described}
        if len(set(counts.values())) != 1 or 0 in counts.values():
            raise RuntimeError(f"metric and log topics must exist with equal partition counts: {counts}")
        return next(iter(counts.values()))

    async def _handle(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Process a batch, publish what it caused, and only then advance the shards' offsets. A batch
        cut short (SIGTERM in a rolling deploy cancels it while publishing) leaves its shards
        `unpublished`, and no checkpoint writes those: a revoke callback waiting for the lock would
        commit past unsent alerts, or snapshot a state that has seen them, which the next owner
        replaying the batch would take for alerts already sent. Each shard's records are processed in
        the worker thread (`BatchGate.run`), one shard after the other, still under `lock`."""
        self._refetch_unowned(batch)
        self._check_key_placement(batch)
        out = Output()
        done: list[tuple[Shard, dict[TopicPartition, int]]] = []
        for index, shard in self.shards.items():
            metrics: list[Run] = []
            logs: list[Message] = []
            read = {
                tp: fresh
                for tp, records in batch.items()
                if tp.partition == index and (fresh := shard.unseen(tp, records))
            }
            for tp, records in read.items():
                if tp.topic in self.metrics_topics:
                    metrics.append(to_run(tp, records))
                else:
                    logs.extend(map(to_message, records))
            if not read and not shard.processor.held_xids:  # Xids held past their wall-time bound page
                continue
            backlogged = await self._backlogged_metric_sources(index)
            shard.unpublished = True
            work = functools.partial(self._process, shard, metrics, logs, backlogged, time.monotonic())
            part = await self.state.gate.process(shard.processor, work)  # off the loop: HTTP answered
            done.append((shard, {tp: records[-1].offset + 1 for tp, records in read.items()}))
            out.alerts += part.alerts
            out.dead_letters += part.dead_letters
        await self._publish(out)
        for shard, offsets in done:
            shard.offsets |= offsets
            shard.unpublished = False

    def _process(
        self, shard: Shard, metrics: list[Run], logs: list[Message], backlogged: set[str], now: float
    ) -> Output:
        """In the worker thread (`BatchGate.process`): the shard's records through its processor."""
        with self.state.telemetry.batch_seconds.time():
            return shard.processor.process_isolating(metrics, logs, backlogged, now=now)

    def _check_key_placement(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Count (and log) keys that one topic places on another partition index than another topic
        does: that node's Xids and metrics meet in no shard (`key_placement`)."""
        for tp, records in batch.items():
            for key in self.placement.observe(tp.topic, tp.partition, (r.key for r in records)):
                self.state.telemetry.key_placement_mismatches.labels(tp.topic).inc()
                log.warning(
                    "key %r is on partition %d of %s but elsewhere on another topic: its Xids and metrics "
                    "never meet; producers hash keys differently (%s: %s). Configure every shipper with "
                    "the murmur2 partitioner (docs/deploy.md, deploy/shippers/)",
                    key[:64],
                    tp.partition,
                    tp.topic,
                    tp.topic,
                    self.placement.partitioner(tp.topic),
                )

    def _refetch_unowned(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Seek back to what was fetched for an assigned partition whose shard is not restored yet.

        aiokafka starts fetching a new assignment before the rebalance listener has run, so a batch
        can hold records no shard takes; the consumer's position is past them all the same, and
        without this a takeover from no snapshot (nothing to seek to) would never see them.
        """
        assigned = self.consumer.assignment()
        for tp, records in batch.items():
            if records and tp.partition not in self.shards and tp in assigned:
                log.info("%s fetched before its takeover: read again from %d", source(tp), records[0].offset)
                self.consumer.seek(tp, records[0].offset)

    async def _backlogged_metric_sources(self, index: int) -> set[str]:
        """The shard's metric partitions that may still hold unread records.

        Behind its high watermark, or with a high watermark older than the newest fetch of the
        shard's log partitions: aiokafka refetches a partition only once its buffered records are
        read, so a kernel line can arrive while the metric partition's high watermark is stale, and
        the scrapes written before that line are not counted yet. Unknown counts as behind.
        """
        c = self.consumer
        mine = [tp for tp in c.assignment() if tp.partition == index]
        logs_seen = max(
            (c.last_poll_timestamp(tp) or 0 for tp in mine if tp.topic not in self.metrics_topics), default=0
        )
        behind = set()
        for tp in mine:
            if tp.topic in self.metrics_topics:
                highwater = c.highwater(tp)
                stale = (c.last_poll_timestamp(tp) or 0) < logs_seen
                if highwater is None or stale or await c.position(tp) < highwater:
                    behind.add(source(tp))
        return behind

    async def _publish(self, out: Output) -> None:
        await self.sink.publish(out)

    async def checkpoint_now(self) -> int:
        """Checkpoint every owned partition (the admin endpoint); returns how many."""
        async with self.lock:
            await self.checkpoint(list(self.shards))
            return len(self.shards)

    async def checkpoint(self, indexes: Iterable[int]) -> None:
        """Snapshot each shard to the changelog, then commit the offsets that snapshot covers.

        Callers hold `lock`: a snapshot's pieces are views of the shard's live arrays, written while
        no batch can change them."""
        t = self.state.telemetry
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        try:
            with t.checkpoint_seconds.time():
                for index in indexes:
                    shard = self.shards[index]
                    if shard.unpublished:  # a batch cut short: the next owner replays it from the last one
                        log.warning("partition %d not checkpointed: its last batch was not published", index)
                        continue
                    stored = {source(tp): off for tp, off in shard.offsets.items()}
                    await self.store.save(index, snapshot.frames(shard.processor, stored))
                    offsets |= {tp: OffsetAndMetadata(off, "") for tp, off in shard.offsets.items()}
                self.last_checkpoint = time.monotonic()
                if offsets:
                    await self._commit(offsets)
        except KafkaError:
            t.checkpoints.labels("failed").inc()
            raise
        t.checkpoints.labels("ok").inc()
        t.last_checkpoint.set(time.time())

    async def _commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        try:
            await self.consumer.commit(offsets)
        except CommitFailedError:  # harmless: the new owner seeks to the offsets in the snapshot
            log.warning("offset commit lost to a rebalance; the snapshots carry the offsets")

    async def hand_off(self, indexes: set[int]) -> None:
        """Checkpoint the shards of revoked partition indexes, then drop them (`ShardOwner`)."""
        async with self.lock:
            gone = sorted(indexes & set(self.shards))
            try:
                await self.checkpoint(gone)
            except Exception:  # aiokafka swallows a callback's exception: say it, and let go all the same
                log.exception("checkpoint on revoke failed: the next owner resumes from the last one")
            finally:  # a shard kept after its revoke would go on snapshotting another owner's partition
                for index in gone:
                    self._forget_alerts_of(self.shards[index])
                    del self.shards[index]
                    log.info("partition %d handed off", index)
                self._publish_shards()

    def _forget_alerts_of(self, shard: Shard) -> None:
        """Stop re-sending a handed-off shard's firing alerts (Alertmanager): its new owner restored them
        and re-sends them itself; re-sent from here too, they would re-open in Alertmanager every minute
        after that owner resolved them, a page that never clears."""
        fingerprints = list(shard.processor.pipeline.alert_book.active)
        for forget in self.state.alert_forgetters:
            forget(fingerprints)

    async def take_over(self, assigned: dict[int, list[TopicPartition]]) -> None:
        """Restore the shards of newly assigned partition indexes (`ShardOwner`)."""
        async with self.lock:
            for index, tps in sorted(assigned.items()):
                if index not in self.shards:
                    await self._restore(index, tps)
            self._publish_shards()
            self.assignments += 1

    def _publish_shards(self) -> None:
        """What the HTTP side reads: the pipeline of every shard this replica owns now."""
        self.state.shards = {i: s.processor.pipeline for i, s in self.shards.items()}

    async def _restore(self, index: int, tps: list[TopicPartition]) -> None:
        """Take shard `index` over: restore its snapshot and seek to the offsets stored with it."""
        t = self.state.telemetry
        shard = Shard(self.new_processor())
        how, why = "no_snapshot", "cold: no snapshot"
        try:
            found = await self.store.load(index)
            if found is not None:  # in a thread: seconds at a million series, the loop heartbeats
                with t.restore_seconds.time():
                    stored = await asyncio.to_thread(snapshot.read, found.stream, found.size, shard.processor)
        except snapshot.SnapshotError as err:
            how, why = "refused", f"cold: {err}"
            shard = Shard(self.new_processor())
        except Exception as err:  # aiokafka swallows a callback's exception: never an unowned partition
            log.exception("restoring partition %d failed", index)
            how, why = "refused", f"cold: {err!r}"
            shard = Shard(self.new_processor())
        else:
            if found is not None:
                how, why = "snapshot", "from its snapshot"
                for tp in tps:
                    if source(tp) in stored:
                        shard.offsets[tp] = stored[source(tp)]
                        self.consumer.seek(tp, stored[source(tp)])
        self.shards[index] = shard
        t.takeovers.labels(how).inc()
        log.info("partition %d taken over %s", index, why)
        if active := list(shard.processor.pipeline.alert_book.active.values()):
            for listener in shard.processor.listeners:  # e.g. Alertmanager re-sends what fires here
                listener(active)

    def stop(self) -> None:
        self.stopping.set()
