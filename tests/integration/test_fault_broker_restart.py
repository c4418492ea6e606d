"""The broker stops and restarts mid-stream: prexid reconnects, continues, and loses no sample."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.integration.kafka_broker import KafkaBroker, KafkaBrokerError, start_broker
from tests.integration.traffic import (
    Replica,
    alert_docs,
    create_service_topics,
    eventually,
    has_xid,
    produce,
    read_until,
    samples_held,
    settings_for,
)

pytestmark = pytest.mark.integration

INCIDENT = DemoCluster(nodes=3, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))


@pytest.fixture
def broker() -> Iterator[list[KafkaBroker]]:
    """A broker of this test's own (the session's must not go down); a list so restarts replace it."""
    try:
        brokers = [start_broker()]
    except KafkaBrokerError as exc:
        pytest.fail(f"could not start the Kafka broker:\n{exc}", pytrace=False)
    yield brokers
    brokers[-1].stop()


async def test_a_broker_restart_mid_stream_loses_no_sample_and_no_alert(broker: list[KafkaBroker]) -> None:
    first = broker[0]
    bootstrap = first.bootstrap
    topics = await create_service_topics(bootstrap, partitions=2)
    ticks = list(simulate(INCIDENT))
    settings = settings_for(bootstrap, topics, "restart")
    replica = Replica(settings)
    try:
        await replica.assigned()
        before = await produce(bootstrap, topics["metrics"], topics["logs"], ticks[:80])
        await eventually(lambda: samples_held(replica.runner) == before, what="the first part consumed")

        await asyncio.to_thread(first.stop, keep_state=True)  # mid-stream: state in memory, offsets open
        await asyncio.sleep(3.0)  # the runner sees the broker gone (and keeps trying)
        assert not replica.task.done()
        broker.append(await asyncio.to_thread(start_broker, first.state_dir, 120.0, first.ports))

        after = await produce(bootstrap, topics["metrics"], topics["logs"], ticks[80:])
        await eventually(
            lambda: samples_held(replica.runner) == before + after, limit_s=45, what="every sample"
        )
        records = await read_until(bootstrap, topics["alerts"], has_xid)
    finally:
        await replica.stop()

    assert samples_held(replica.runner) == before + after  # none lost, none counted twice
    firing = [(d["kind"], d["node"], d["gpu"]) for d in alert_docs(records) if d["status"] == "firing"]
    assert firing == [("pre_xid", "node-01", 2), ("xid", "node-01", 2)]
