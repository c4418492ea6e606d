"""A restart resumes from the snapshot: the first hour of replayed normal traffic raises no alert."""

from __future__ import annotations

import pytest
from kafka_broker import TopicFactory
from traffic import Replica, eventually, produce, read_all, samples_held, settings_for

from service.demo_sim import DemoCluster, DemoFault, simulate

pytestmark = pytest.mark.integration

HOUR_TICKS = 240  # 15 s scrapes
HEALTHY = DemoCluster(
    nodes=4, gpus=4, duration_s=7200.0, seed=11, fault=DemoFault(node=0, gpu=0, xid_at_s=10**9)
)


@pytest.fixture
async def topics(kafka_topics: TopicFactory) -> dict[str, str]:
    metrics, logs, alerts, dead = await kafka_topics("metrics", "logs", "alerts", "dead", partitions=2)
    return {"metrics": metrics, "logs": logs, "alerts": alerts, "dead": dead, "state": f"{metrics}.state"}


async def test_a_restarted_replica_resumes_from_its_snapshot_without_false_alerts(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    ticks = list(simulate(HEALTHY))
    first_hour = await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[:HOUR_TICKS])
    before = Replica(settings)
    try:
        await before.assigned()
        await eventually(lambda: samples_held(before.runner) == first_hour, what="the first hour")
    finally:
        await before.stop()  # a restart (deploy, crash-loop): the final checkpoint is the snapshot

    second_hour = await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[HOUR_TICKS:])
    after = Replica(settings)
    try:
        await after.assigned()
        # The count carries on from the snapshot: the new process resumed at the committed offsets
        # with the first hour's state, instead of starting from nothing (a cold start counts 1 hour).
        await eventually(lambda: samples_held(after.runner) == first_hour + second_hour, what="hour two")
    finally:
        await after.stop()

    assert await read_all(kafka_bootstrap, topics["alerts"], 2) == []  # no false alert, no warm-up storm
