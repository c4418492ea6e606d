"""Demo-cluster traffic on a real broker, and what scale/fault tests read back, shared by those tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import murmur2

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.series_registry import node_of
from prexid.service.sources.demo_cluster import Tick
from prexid.service.sources.fleet_runner import runner_class
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.kafka_broker import create_topics

SERVICE_TOPICS = ("metrics", "logs", "alerts", "dead")  # the topics `prexid run` needs to exist


def service_topics(names: Sequence[str]) -> dict[str, str]:
    """Topic names by role, from the names of `SERVICE_TOPICS` in that order. The state topic is named
    after the metrics topic and left to the runner, which creates it compacted."""
    topics = dict(zip(SERVICE_TOPICS, names, strict=True))
    return {**topics, "state": f"{topics['metrics']}.state"}


async def create_service_topics(bootstrap: str, partitions: int) -> dict[str, str]:
    """`service_topics` on a broker of a test's own (the `topics` fixture makes them on the session's)."""
    run = uuid.uuid4().hex[:8]
    names = [f"{role}-{run}" for role in SERVICE_TOPICS]
    await create_topics(bootstrap, names, partitions)
    return service_topics(names)


def settings_for(bootstrap: str, topics: dict[str, str], group: str, **extra: Any) -> Settings:
    """Test settings: fast checkpoints and failure detection; `extra` overrides any of them."""
    base: dict[str, Any] = {
        "kafka_bootstrap": bootstrap,
        "group_id": group,
        "metrics_topics": [topics["metrics"]],
        "logs_topics": [topics["logs"]],
        "alerts_topic": topics["alerts"],
        "dead_letter_topic": topics["dead"],
        "state_topic": topics["state"],
        "batch_max_records": 5000,
        "checkpoint_interval_s": 1.0,
        "session_timeout_ms": 6000,
        "snapshot_chunk_bytes": 64 * 1024,  # several chunks per snapshot: the chunked path is tested
    }
    return Settings(**(base | extra))


def env_for(settings: Settings) -> dict[str, str]:
    """The same settings as PREXID_* environment variables, for `python -m prexid.service.app.cli run`."""
    return {
        "PREXID_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "PREXID_GROUP_ID": settings.group_id,
        "PREXID_METRICS_TOPICS": orjson.dumps(settings.metrics_topics).decode(),
        "PREXID_LOGS_TOPICS": orjson.dumps(settings.logs_topics).decode(),
        "PREXID_ALERTS_TOPIC": settings.alerts_topic,
        "PREXID_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
        "PREXID_STATE_TOPIC": settings.state_topic or "",
        "PREXID_BATCH_MAX_RECORDS": str(settings.batch_max_records),
        "PREXID_CHECKPOINT_INTERVAL_S": str(settings.checkpoint_interval_s),
        "PREXID_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "PREXID_SNAPSHOT_CHUNK_BYTES": str(settings.snapshot_chunk_bytes),
    }


async def produce(
    bootstrap: str, metrics: str, logs: str, ticks: Iterable[Tick], ticks_per_s: float | None = None
) -> int:
    """Produce ticks keyed by node (metrics and kernel lines alike), record time = event time.

    Returns the number of metric records. `ticks_per_s` paces the stream, so faults land mid-stream.
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    count = 0
    try:
        for tick in ticks:
            ms = int(tick.ts * 1000)
            for payload in tick.metrics:
                key = node_of(orjson.loads(payload)["labels"]).encode()
                await producer.send(metrics, payload, key=key, timestamp_ms=ms)
            if tick.logs:  # a kernel line is written after the scrapes that precede it, as live
                await producer.flush()
            for line in tick.logs:
                await producer.send(logs, line, key=line.split()[3], timestamp_ms=ms)
            count += len(tick.metrics)
            if ticks_per_s:
                await producer.flush()
                await asyncio.sleep(1.0 / ticks_per_s)
        await producer.flush()
    finally:
        await producer.stop()
    return count


async def read_until(
    bootstrap: str, topic: str, until: Callable[[list[Any]], bool], limit_s: float = 45.0
) -> list[Any]:
    """Records of `topic` from the start until `until(records)` holds (TimeoutError after `limit_s`)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    records: list[Any] = []
    try:
        async with asyncio.timeout(limit_s):
            while not until(records):
                batch = await consumer.getmany(timeout_ms=300)
                records += [r for recs in batch.values() for r in recs]
    finally:
        await consumer.stop()
    return records


def alert_docs(records: list[Any]) -> list[dict[str, Any]]:
    return [orjson.loads(r.value) for r in records]


def has_xid(records: list[Any]) -> bool:
    return any(b'"kind":"xid"' in r.value for r in records)


async def eventually(check: Callable[[], bool], limit_s: float = 30.0, what: str = "condition") -> None:
    try:
        async with asyncio.timeout(limit_s):
            while not check():  # noqa: ASYNC110 - polls state owned by other tasks and processes
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"no {what} within {limit_s:.0f} s") from None


class Replica:
    """An in-process `prexid run` replica (its own state, same code path as the CLI)."""

    def __init__(self, settings: Settings, runner_cls: type[KafkaRunner] | None = None) -> None:
        """`runner_cls`: default the one `prexid run` would use for `settings`."""
        self.state, _ = build(settings)
        runner_cls = runner_class(settings) if runner_cls is None else runner_cls
        self.runner = runner_cls(settings, self.state, lambda: build(settings, self.state)[1])
        self.task = asyncio.create_task(self.runner.run())

    async def assigned(self) -> KafkaRunner:
        await eventually(
            lambda: self.runner.assignments > 0 or self.task.done(), what="a partition assignment"
        )
        if self.task.done():
            self.task.result()
        return self.runner

    async def stop(self) -> None:
        """A clean stop: the final checkpoint is written and the group is left. A replica that has
        not stopped within 30 s fails the test, and is cancelled; one that ignores the cancellation
        too is left behind (`asyncio.wait_for` would wait for it for ever, hanging the run)."""
        self.runner.stop()
        done, _ = await asyncio.wait({self.task}, timeout=30)
        if not done:
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=10)
            raise TimeoutError("the replica did not stop within 30 s")
        self.task.result()


async def stop_all(*replicas: Replica | None) -> None:
    """Stop every replica, even after one fails to: a replica left running into the fixtures'
    teardown keeps the test session from ending."""
    errors = []
    for replica in replicas:
        if replica is not None and not replica.task.done():
            try:
                await replica.stop()
            except Exception as err:  # each replica gets its stop
                errors.append(err)
    if errors:
        raise errors[0]


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[KafkaRunner]:
    replica = Replica(settings)
    try:
        yield await replica.assigned()
    finally:
        await replica.stop()


def samples_held(runner: KafkaRunner) -> int:
    """Samples the replica's shards have taken in (scored or still in the reorder buffer)."""
    return sum(
        s.processor.pipeline.samples_seen + len(s.processor.pipeline.buffer) for s in runner.shards.values()
    )


def partition_of(node: str, partitions: int) -> int:
    """The partition Kafka's default partitioner puts a node's records in (murmur2 of the key)."""
    return (murmur2(node.encode()) & 0x7FFFFFFF) % partitions


class ProcessReplica:
    """`python -m prexid.service.app.cli run` as a child process, its log read to know which partitions it owns."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.owned: set[int] = set()
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, settings: Settings, **env_extra: str) -> ProcessReplica:
        """`env_extra`: more PREXID_* variables (they win over the settings')."""
        env = {**os.environ, **env_for(settings), "PREXID_HTTP_PORT": "0", **env_extra}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "prexid.service.app.cli",
            "run",
            "-v",
            env=env,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            if m := re.search(r"prexid.service.sources.kafka partition (\d+) (taken over|handed off)", line):
                (self.owned.add if m[2] == "taken over" else self.owned.discard)(int(m[1]))

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.lines[-n:])

    async def kill(self) -> int:
        """kill -9: no revocation, no final checkpoint, no goodbye to the group."""
        self.proc.send_signal(signal.SIGKILL)
        return await self.proc.wait()

    async def terminate(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 30)
        await self.reader
        return code


async def committed_everything(bootstrap: str, group: str, topics: list[str], partitions: int) -> bool:
    """Whether `group` has committed every partition of `topics` up to its end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        done = [end == 0 or await consumer.committed(tp) == end for tp, end in ends.items()]
        return all(done)
    finally:
        await consumer.stop()


async def read_all(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every record of `topic` that exists now."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    records: list[Any] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        async with asyncio.timeout(30):
            while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
                batch = await consumer.getmany(timeout_ms=300)
                records += [r for recs in batch.values() for r in recs]
    finally:
        await consumer.stop()
    return records
