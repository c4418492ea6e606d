"""`prexid run` end to end on the real broker: a recorded incident in, the right alerts out, offsets committed."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest import mock

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import Output, Processor
from prexid.service.sinks.kafka import KafkaSink
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


async def test_offsets_are_not_committed_when_publishing_a_batch_fails(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    await produce_incident(kafka_bootstrap, topics["metrics"], topics["logs"])
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    # the first batch's alerts and dead letters cannot be sent: nothing it consumed may be committed
    failing = mock.patch.object(KafkaSink, "publish", side_effect=RuntimeError("sink failure"))
    with failing, pytest.raises(RuntimeError, match="sink failure"):
        await asyncio.wait_for(runner.run(), 60)
    assert await committed(kafka_bootstrap, kafka_group, topics["metrics"], 2) == {0: None, 1: None}


async def test_a_stage_that_fails_on_every_record_dead_letters_them_and_the_partitions_go_on(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    """A bug past the decoders (here: any batch holding kernel lines fails) costs the records it breaks,
    each a dead letter naming the stage; the metrics still page, and every offset is committed.
    Before, the batch failed, was never committed, and every replica taking the partition over died."""
    await produce_incident(kafka_bootstrap, topics["metrics"], topics["logs"])
    lines = sum((await end_offsets(kafka_bootstrap, topics["logs"], 2)).values())
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    real = Processor.process_runs

    def failing_on_logs(self: Processor, metrics: Any, logs: Any, *rest: Any, **kw: Any) -> Output:
        if logs:
            raise RuntimeError("a bug in the log stage")
        return real(self, metrics, logs, *rest, **kw)

    def broken(records: list[Any]) -> list[Any]:
        return [r for r in records if dict(r.headers)["prexid.reason"] == b"processing_error"]

    with mock.patch.object(Processor, "process_runs", failing_on_logs):
        task = asyncio.create_task(runner.run())
        try:
            dead = await read_until(kafka_bootstrap, topics["dead"], lambda rs: len(broken(rs)) >= lines)
            alerts = await read_until(kafka_bootstrap, topics["alerts"], lambda rs: bool(rs))
            ends = await end_offsets(kafka_bootstrap, topics["logs"], 2)
            expected = {p: end or None for p, end in ends.items()}
            for _ in range(100):
                if await committed(kafka_bootstrap, kafka_group, topics["logs"], 2) == expected:
                    break
                await asyncio.sleep(0.2)
            assert not task.done()  # the replica lives
        finally:
            runner.stop()
            await asyncio.wait_for(task, 30)
    assert lines > 0 and len(broken(dead)) == lines  # each kernel line once, nothing else
    assert all(dict(r.headers)["prexid.source.topic"] == topics["logs"].encode() for r in broken(dead))
    assert all(b"a bug in the log stage" in dict(r.headers)["prexid.detail"] for r in broken(dead))
    assert any(orjson.loads(r.value)["kind"] == "pre_xid" for r in alerts)  # the metrics still page
    assert await committed(kafka_bootstrap, kafka_group, topics["logs"], 2) == expected
