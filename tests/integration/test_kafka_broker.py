"""Real-broker checks of the Kafka semantics prexid relies on: keyed partitions, group commits, isolation."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.kafka_broker import KafkaEndpoint, TopicFactory

pytestmark = pytest.mark.integration

N_MESSAGES = 60
N_KEYS = 6
_seen_topics: set[str] = set()


async def _produce(bootstrap: str, topic: str, count: int, start: int = 0) -> dict[str, int]:
    """Send `count` keyed messages; returns value -> partition as acknowledged by the broker."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, key=f"gpu-{i % N_KEYS}".encode(), value=f"m{i}".encode())
            for i in range(start, start + count)
        ]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return {f"m{i}": md.partition for i, md in zip(range(start, start + count), metadata, strict=True)}


async def _consume(consumer: Any, count: int, timeout_s: float = 30.0) -> list[Any]:
    """Read exactly `count` records (bounded), so a missing message fails fast and loudly."""
    records: list[Any] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(records) < count and loop.time() < deadline:
        batches = await consumer.getmany(timeout_ms=500)
        for batch in batches.values():
            records.extend(batch)
    assert len(records) == count, f"consumed {len(records)} of {count} records"
    return records


def _group_consumer(bootstrap: str, topic: str, group: str) -> Any:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )


async def test_keyed_produce_consume_and_commit(
    kafka_bootstrap: str, kafka_topics: TopicFactory, kafka_group: str
) -> None:
    (topic,) = await kafka_topics("metrics", partitions=3)
    sent = await _produce(kafka_bootstrap, topic, N_MESSAGES)

    consumer = _group_consumer(kafka_bootstrap, topic, kafka_group)
    await consumer.start()
    try:
        records = await _consume(consumer, N_MESSAGES)
        await consumer.commit()
        partitions = sorted(consumer.assignment(), key=lambda tp: tp.partition)
        committed = {tp.partition: await consumer.committed(tp) for tp in partitions}
    finally:
        await consumer.stop()

    assert {r.value.decode(): r.partition for r in records} == sent
    key_partitions: dict[bytes, set[int]] = {}
    for r in records:
        key_partitions.setdefault(r.key, set()).add(r.partition)
    assert len(key_partitions) == N_KEYS
    assert all(len(p) == 1 for p in key_partitions.values()), "a key was spread over partitions"
    for partition in range(3):  # per-partition order is the produce order
        values = [int(r.value[1:]) for r in records if r.partition == partition]
        assert values == sorted(values)

    expected = dict(Counter(sent.values()))
    assert len(partitions) == 3
    assert {p: c for p, c in committed.items() if c} == expected
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(kafka_group)
    finally:
        await admin.close()
    assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic and om.offset} == (
        expected
    )


async def test_group_resumes_after_committed_offset(
    kafka_bootstrap: str, kafka_topics: TopicFactory, kafka_group: str
) -> None:
    (topic,) = await kafka_topics("logs")
    await _produce(kafka_bootstrap, topic, 10)
    first = _group_consumer(kafka_bootstrap, topic, kafka_group)
    await first.start()
    try:
        await _consume(first, 10)
        await first.commit()
    finally:
        await first.stop()

    await _produce(kafka_bootstrap, topic, 5, start=10)
    second = _group_consumer(kafka_bootstrap, topic, kafka_group)
    await second.start()
    try:
        records = await _consume(second, 5)
        assert await second.getmany(timeout_ms=500) == {}
        assert await second.committed(TopicPartition(topic, 0)) == 10
    finally:
        await second.stop()
    assert [r.value for r in records] == [f"m{i}".encode() for i in range(10, 15)]


@pytest.mark.parametrize("run", [1, 2])
async def test_topics_are_isolated_per_test(
    run: int, kafka_bootstrap: str, kafka_topics: TopicFactory, kafka_group: str
) -> None:
    metrics, logs = await kafka_topics("metrics", "logs", partitions=2)
    assert metrics != logs
    assert not {metrics, logs} & _seen_topics, "topic names reused across tests"
    _seen_topics.update({metrics, logs})

    await _produce(kafka_bootstrap, metrics, 4)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=kafka_group)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in (metrics, logs) for p in range(2)]
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    assert sum(o for tp, o in ends.items() if tp.topic == metrics) == 4
    assert sum(o for tp, o in ends.items() if tp.topic == logs) == 0


async def test_broker_is_single_local_node(kafka_endpoint: KafkaEndpoint) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_endpoint.bootstrap)
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()
    assert cluster["brokers"], cluster
    if kafka_endpoint.version is not None:  # our own broker: KRaft single node on loopback
        assert kafka_endpoint.version.split(".")[0].isdigit()
        assert [(b["host"], b["node_id"]) for b in cluster["brokers"]] == [("127.0.0.1", 1)]
