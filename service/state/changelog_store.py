"""Partition snapshots in a compacted Kafka changelog topic, one topic partition per input partition.

Why Kafka and not a disk or an object store: every replica already reaches the broker, the snapshot
is written with the same durability (acks=all) as the alerts, and log compaction keeps exactly the
newest snapshot per partition. Input partition `n` snapshots into changelog partition `n`, in chunks
a broker accepts (keys `shard-n/i`); the header of every chunk says how many there are. Chunks of one
snapshot are consecutive (one idempotent producer), so the newest snapshot is always the partition's
last `chunks` records, and restoring one partition reads only those.

Snapshots are zlib-compressed (level 1) in a worker thread, not by the producer: aiokafka's gzip runs
at level 9 on the event loop, ~3 s per 100 MB, stalling consumption and heartbeats at every checkpoint.
A restore reads the stream as it decompresses it (`Inflate`), so the snapshot is never whole in memory
beside the state it becomes.

Every chunk names its writer (`prexid.writer`: host, process and store), so the state topic shows which
replica wrote each snapshot: one that goes on writing a partition another replica owns (a zombie shard)
is seen there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from prexid.service.app.settings import Settings
from prexid.service.sources.kafka_security import client_options
from prexid.service.state.snapshot import SnapshotError

log = logging.getLogger(__name__)
CHUNKS_HEADER = "prexid.chunks"
SIZE_HEADER = "prexid.size"  # the snapshot's bytes before compression
WRITER_HEADER = "prexid.writer"  # who wrote it: `host:pid:store`
MAX_DEFLATE_RATIO = 1032  # deflate's largest expansion: a stored size beyond it is a lie


SMALL_PIECE = 64 << 10  # pieces below this (series keys) are coalesced before zlib sees them
COALESCED = 1 << 20


def compressed_chunks(pieces: Iterable[bytes | memoryview], size: int) -> list[bytes]:
    """The pieces' concatenation zlib-compressed (level 1) and cut into chunks of `size` bytes (at
    least one), compressed a piece at a time: neither the whole snapshot nor the whole compressed
    stream is ever one more copy in memory. Small pieces (series keys) are fed in 1 MiB runs."""
    z = zlib.compressobj(1)
    chunks: list[bytes] = []
    pending, small = bytearray(), bytearray()

    def cut(compressed: bytes) -> None:
        pending.extend(compressed)
        while len(pending) >= size:
            chunks.append(bytes(pending[:size]))
            del pending[:size]

    for piece in pieces:
        if len(piece) < SMALL_PIECE:
            small += piece
            if len(small) >= COALESCED:
                cut(z.compress(small))
                small.clear()
        else:
            cut(z.compress(small))
            small.clear()
            cut(z.compress(piece))
    cut(z.compress(small))
    cut(z.flush())
    return [*chunks, bytes(pending)] if pending or not chunks else chunks


class Inflate:
    """The decompressed stream of zlib chunks, inflated a few MiB at a time as it is read."""

    STEP = 4 << 20

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._z = zlib.decompressobj()

    def readinto(self, buffer: memoryview, /) -> int:
        """Fill the start of `buffer`; the byte count, 0 at the end of the stream."""
        want = min(len(buffer), self.STEP)
        while want:
            data = self._z.unconsumed_tail or next(self._chunks, b"")
            try:
                out = self._z.decompress(data, want)
            except zlib.error as err:
                raise ValueError(f"corrupt compressed snapshot: {err}") from err
            if out:
                buffer[: len(out)] = out
                return len(out)
            if not data:
                if self._z.eof:
                    return 0
                raise ValueError("compressed snapshot ends early")
        return 0


class Found(NamedTuple):
    """A stored snapshot: its stream, read as it decompresses, and the bytes the stream holds."""

    stream: Inflate
    size: int


def state_topic(settings: Settings) -> str:
    return settings.state_topic or f"{settings.group_id}.state"


class ChangelogStore:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = state_topic(settings)
        self.chunk = settings.snapshot_chunk_bytes
        self.writer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.producer = AIOKafkaProducer(
            **client_options(settings),
            acks="all",
            enable_idempotence=True,
            max_request_size=2 * self.chunk,
        )

    async def start(self, partitions: int) -> None:
        """Create the compacted topic if it is missing (it must have >= `partitions` partitions)."""
        await self._ensure_topic(partitions)
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def save(self, shard: int, pieces: Sequence[bytes | memoryview]) -> None:
        """Write one partition's snapshot, given in pieces (joined, they are the snapshot), and wait
        until the broker has all of it (acks=all)."""
        chunks = await asyncio.to_thread(compressed_chunks, pieces, self.chunk)  # zlib lets go of the GIL
        size = sum(len(piece) for piece in pieces)
        header = [
            (CHUNKS_HEADER, str(len(chunks)).encode()),
            (SIZE_HEADER, str(size).encode()),
            (WRITER_HEADER, self.writer.encode()),
        ]
        futures = [
            await self.producer.send(
                self.topic, part, key=f"shard-{shard}/{i}".encode(), partition=shard, headers=header
            )
            for i, part in enumerate(chunks)
        ]
        await asyncio.gather(*futures)

    async def load(self, shard: int) -> Found | None:
        """The newest snapshot of partition `shard`, or None if it never had a whole one."""
        tp = TopicPartition(self.topic, shard)
        consumer = AIOKafkaConsumer(
            **client_options(self.settings),
            enable_auto_commit=False,
            max_partition_fetch_bytes=2 * self.chunk,
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            if end == 0:
                return None
            [last] = await _read(consumer, tp, end - 1, end)
            headers = dict(last.headers)
            if SIZE_HEADER not in headers:
                log.warning(
                    "the newest snapshot of partition %d is from an older build; starting it cold", shard
                )
                return None
            count = int(headers[CHUNKS_HEADER])
            records = await _read(consumer, tp, end - count, end)
            if [r.key for r in records] != [f"shard-{shard}/{i}".encode() for i in range(count)]:
                log.warning("the newest snapshot of partition %d is incomplete; starting it cold", shard)
                return None
            return Found(Inflate(r.value or b"" for r in records), claimed_size(headers, records))
        finally:
            await consumer.stop()

    async def _ensure_topic(self, partitions: int) -> None:
        admin = AIOKafkaAdminClient(**client_options(self.settings))
        await admin.start()
        try:
            configs = {
                "cleanup.policy": "compact",
                "max.message.bytes": str(2 * self.chunk),
                "min.compaction.lag.ms": "60000",
            }
            topic = NewTopic(
                self.topic, partitions, self.settings.state_replication_factor, topic_configs=configs
            )
            response = await admin.create_topics([topic])
            for name, code, *rest in response.topic_errors:
                if code and code != TopicAlreadyExistsError.errno:
                    raise for_code(code)(f"create state topic {name}: {rest[0] if rest else ''}")
            have = await partition_count(admin, self.topic)
            if have < partitions:
                raise RuntimeError(f"state topic {self.topic} has {have} partitions; need {partitions}")
        finally:
            await admin.close()


async def _read(consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int) -> list[ConsumerRecord]:
    """Records of `tp` with offsets in [start, end)."""
    consumer.seek(tp, start)
    records: list[ConsumerRecord] = []
    while await consumer.position(tp) < end:
        batch = await consumer.getmany(tp, timeout_ms=1000)
        records += [r for r in batch.get(tp, []) if start <= r.offset < end]
    return records


async def partition_count(admin: Any, topic: str, wait_s: float = 15.0) -> int:
    """Partitions of `topic`, waiting out the moment a just-created topic has no metadata yet."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        [desc] = await admin.describe_topics([topic])
        if desc["partitions"] or asyncio.get_running_loop().time() > deadline:
            return len(desc["partitions"])
        await asyncio.sleep(0.1)


def claimed_size(headers: dict[str, bytes], records: list[ConsumerRecord]) -> int:
    """The snapshot's size as its header states it, if deflate could have made it from these chunks:
    restore allocates from it, so a forged record claiming gigabytes must be refused, not obeyed."""
    try:
        size = int(headers[SIZE_HEADER])
    except ValueError:
        raise SnapshotError(f"unreadable {SIZE_HEADER} header {headers[SIZE_HEADER][:32]!r}") from None
    compressed = sum(len(r.value or b"") for r in records)
    if not 0 <= size <= MAX_DEFLATE_RATIO * compressed + 64:
        raise SnapshotError(f"claims {size} bytes from {compressed} compressed: more than deflate can hold")
    return size
