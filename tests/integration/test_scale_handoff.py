"""Replicas in one consumer group share the partitions; a partition handed over keeps its state."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.integration.traffic import (
    Replica,
    alert_docs,
    eventually,
    has_xid,
    produce,
    read_until,
    running,
    samples_held,
    settings_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=4)]

# Eight nodes: every partition holds a few, as fusion's common-mode test needs (docs/operations.md).
INCIDENT = DemoCluster(nodes=8, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))
HANDOFF_AT = 100  # scrapes: after the pre_xid (scrape ~87-94), before the Xid (scrape 120)


async def test_partitions_handed_between_replicas_resume_from_their_snapshots_without_duplicates(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    ticks = list(simulate(INCIDENT))
    first_half = await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[:HANDOFF_AT])
    a, b = Replica(settings), None
    try:
        assert sorted((await a.assigned()).shards) == [0, 1, 2, 3]  # alone, A owns every partition
        await eventually(lambda: samples_held(a.runner) == first_half, what="the first half consumed by A")
        b = Replica(settings)
        told: list[tuple[str, str]] = []  # what B's alert sinks (Alertmanager) hear
        b.state.alert_listeners.append(lambda alerts: told.extend((a.kind, a.status) for a in alerts))
        await b.assigned()
        split = (a.runner, b.runner)
        await eventually(lambda: [len(r.shards) for r in split] == [2, 2], what="a 2+2 split")
        assert set(a.runner.shards) | set(b.runner.shards) == {0, 1, 2, 3}
        assert samples_held(a.runner) + samples_held(b.runner) == first_half  # B resumed A's state
        await a.stop()  # A leaves cleanly: B takes every partition over, each from its snapshot
        await eventually(lambda: len(b.runner.shards) == 4, what="B owning every partition")
        assert samples_held(b.runner) == first_half  # nothing lost, nothing counted twice
        series = b.state.telemetry.registry.get_sample_value("prexid_series")
        assert series == sum(len(p.registry) for p in b.state.shards.values()) > 0  # /metrics sees all
        assert ("pre_xid", "firing") in told  # A paged; B's sinks learnt it is firing, to re-send it

        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[HANDOFF_AT:])
        records = await read_until(kafka_bootstrap, topics["alerts"], has_xid)
    finally:
        for replica in (a, b):
            if replica is not None and not replica.task.done():
                await replica.stop()

    firing = [(d["kind"], d["node"], d["gpu"]) for d in alert_docs(records) if d["status"] == "firing"]
    assert firing == [("pre_xid", "node-01", 2), ("xid", "node-01", 2)]  # once each: a clean handoff
    xid = next(d for d in alert_docs(records) if d["kind"] == "xid")
    assert xid["lead_time_seconds"] >= 300  # the pre_xid it links to was raised before a handoff


async def test_the_runner_creates_a_compacted_state_topic(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    async with running(settings) as runner:
        assert sorted(runner.shards) == [0, 1, 2, 3]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topics["state"])]
        )
        configs = {c[0]: c[1] for c in described.resources[0][4]}
        [topic] = await admin.describe_topics([topics["state"]])
    finally:
        await admin.close()
    assert configs["cleanup.policy"] == "compact"
    assert len(topic["partitions"]) == 4
