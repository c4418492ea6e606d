"""A restart resumes from the snapshot: the first hour of replayed normal traffic raises no alert."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from prexid.service.app.settings import DetectionSettings, Settings
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.state.changelog_store import CHUNKS_HEADER, SIZE_HEADER
from tests.integration.traffic import Replica, eventually, produce, read_all, samples_held, settings_for

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=2)]

HOUR_TICKS = 240  # 15 s scrapes
HEALTHY = DemoCluster(
    nodes=4, gpus=4, duration_s=7200.0, seed=11, fault=DemoFault(node=0, gpu=0, xid_at_s=10**9)
)


async def test_a_restarted_replica_resumes_from_its_snapshot_without_false_alerts(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    ticks = list(simulate(HEALTHY))
    first_hour = await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[:HOUR_TICKS])
    before = Replica(settings)
    try:
        await before.assigned()
        assert takeovers(before) == {"snapshot": 0, "no_snapshot": 2, "refused": 0}  # a first start
        await eventually(lambda: samples_held(before.runner) == first_hour, what="the first hour")
    finally:
        await before.stop()  # a restart (deploy, crash-loop): the final checkpoint is the snapshot
    assert sample(before, "prexid_checkpoints_total", outcome="ok") >= 1
    assert sample(before, "prexid_checkpoints_total", outcome="failed") == 0

    second_hour = await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[HOUR_TICKS:])
    after = Replica(settings)
    try:
        await after.assigned()
        assert takeovers(after) == {"snapshot": 2, "no_snapshot": 0, "refused": 0}
        assert sample(after, "prexid_restore_duration_seconds_count") == 2
        assert sample(after, "prexid_partitions_owned") == 2
        # The count carries on from the snapshot: the new process resumed at the committed offsets
        # with the first hour's state, instead of starting from nothing (a cold start counts 1 hour).
        await eventually(lambda: samples_held(after.runner) == first_hour + second_hour, what="hour two")
    finally:
        await after.stop()

    assert await read_all(kafka_bootstrap, topics["alerts"], 2) == []  # no false alert, no warm-up storm


async def test_a_snapshot_under_other_detection_settings_is_refused_counted_and_the_partition_runs_cold(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    """What `PrexidPartitionsStartedCold` reads: the partition is not lost, it relearns from nothing."""
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    await checkpoint_ten_minutes(settings, topics)
    other = settings_for(
        kafka_bootstrap, topics, kafka_group, detection=DetectionSettings(fire_threshold=10.0)
    )
    second = Replica(other)
    try:
        await second.assigned()
        assert takeovers(second) == {"snapshot": 0, "no_snapshot": 0, "refused": 2}
        assert sorted(second.runner.shards) == [0, 1] and samples_held(second.runner) == 0
        assert sample(second, "prexid_restore_duration_seconds_count") == 2  # read, then refused
    finally:
        await second.stop()


async def test_a_snapshot_damaged_in_the_state_topic_is_refused_and_only_its_partition_starts_cold(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    """The newest record of partition 0's snapshot is not zlib (a bad write, a bit flip on disk): the
    takeover refuses it with its reason and runs that partition cold; partition 1 resumes as usual."""
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    await checkpoint_ten_minutes(settings, topics)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        headers = [(CHUNKS_HEADER, b"1"), (SIZE_HEADER, b"5000")]
        await producer.send_and_wait(
            topics["state"], b"not a zlib stream", key=b"shard-0/0", partition=0, headers=headers
        )
    finally:
        await producer.stop()
    second = Replica(settings)
    try:
        await second.assigned()
        assert takeovers(second) == {"snapshot": 1, "no_snapshot": 0, "refused": 1}
        assert sorted(second.runner.shards) == [0, 1]
        cold, restored = (second.runner.shards[i].processor.pipeline for i in (0, 1))
        assert len(cold.registry) == cold.samples_seen == 0 and restored.samples_seen > 0
    finally:
        await second.stop()


async def checkpoint_ten_minutes(settings: Settings, topics: dict[str, str]) -> None:
    """Ten minutes of traffic read by a replica that then stops: its final checkpoint is the snapshot."""
    bootstrap = settings.kafka_bootstrap
    sent = await produce(bootstrap, topics["metrics"], topics["logs"], list(simulate(HEALTHY))[:40])
    first = Replica(settings)
    try:
        await first.assigned()
        await eventually(lambda: samples_held(first.runner) == sent, what="the first ten minutes")
    finally:
        await first.stop()


def sample(replica: Replica, name: str, **labels: str) -> float | None:
    return replica.state.telemetry.registry.get_sample_value(name, labels)


def takeovers(replica: Replica) -> dict[str, float | None]:
    return {
        how: sample(replica, "prexid_takeovers_total", how=how)
        for how in ("snapshot", "no_snapshot", "refused")
    }
