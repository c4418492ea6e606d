"""`prexid run` end to end on the real broker: a recorded incident in, the right alerts out, offsets committed."""

from __future__ import annotations

import asyncio
from unittest import mock

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import Processor
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.traffic import produce, read_until

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=2)]

INCIDENT = DemoCluster(nodes=2, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))
BAD_METRIC = b'{"timestamp":"2026-12-02T10:00:00Z","value":"hot","name":"DCGM_FI_DEV_GPU_TEMP","labels":{}}'


async def produce_incident(bootstrap: str, metrics_topic: str, logs_topic: str) -> int:
    """The recorded incident (see `traffic.produce`), then one bad metric; returns the metric records."""
    count = await produce(bootstrap, metrics_topic, logs_topic, simulate(INCIDENT))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(metrics_topic, BAD_METRIC, key=b"node-00")
    finally:
        await producer.stop()
    return count + 1


def settings_for(bootstrap: str, topics: dict[str, str], group: str) -> Settings:
    return Settings(
        kafka_bootstrap=bootstrap,
        group_id=group,
        metrics_topics=[topics["metrics"]],
        logs_topics=[topics["logs"]],
        alerts_topic=topics["alerts"],
        dead_letter_topic=topics["dead"],
        batch_max_records=2000,
    )


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        await consumer.stop()


async def test_run_publishes_pre_xid_before_xid_and_commits_what_it_consumed(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    produced = await produce_incident(kafka_bootstrap, topics["metrics"], topics["logs"])
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    task = asyncio.create_task(runner.run())
    try:
        alerts = await read_until(
            kafka_bootstrap, topics["alerts"], until=lambda rs: any(b'"kind":"xid"' in r.value for r in rs)
        )
        dead = await read_until(kafka_bootstrap, topics["dead"], until=lambda rs: len(rs) >= 1)
        await asyncio.sleep(1.0)  # let the runner finish and commit its last batch
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)

    docs = [orjson.loads(r.value) for r in alerts]
    firing = [(d["kind"], d["node"], d["gpu"]) for d in docs if d["status"] == "firing"]
    assert firing == [("pre_xid", "node-01", 2), ("xid", "node-01", 2)]
    xid = next(d for d in docs if d["kind"] == "xid")
    assert xid["xid_code"] == 79 and xid["lead_time_seconds"] >= 300
    assert {r.key for r in alerts} == {b"default/node-01/2"}  # keyed by entity: one partition, in order

    [dl] = dead
    headers = dict(dl.headers)
    assert dl.value == BAD_METRIC
    assert headers["prexid.reason"] == b"bad_value"
    assert headers["prexid.source.topic"] == topics["metrics"].encode()

    for name in ("metrics", "logs"):
        ends = await end_offsets(kafka_bootstrap, topics[name], 2)
        expected = {p: end or None for p, end in ends.items()}  # an empty partition has nothing to commit
        assert await committed(kafka_bootstrap, kafka_group, topics[name], 2) == expected
    assert sum((await end_offsets(kafka_bootstrap, topics["metrics"], 2)).values()) == produced
    assert state.telemetry.samples._value.get() == produced - 1


async def test_offsets_are_not_committed_when_processing_a_batch_fails(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    await produce_incident(kafka_bootstrap, topics["metrics"], topics["logs"])
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    # every processor fails on its first batch (`process_runs` is what the runner calls): nothing it
    # consumed may be committed
    failing = mock.patch.object(Processor, "process_runs", side_effect=RuntimeError("sink failure"))
    with failing, pytest.raises(RuntimeError, match="sink failure"):
        await asyncio.wait_for(runner.run(), 60)
    assert await committed(kafka_bootstrap, kafka_group, topics["metrics"], 2) == {0: None, 1: None}
