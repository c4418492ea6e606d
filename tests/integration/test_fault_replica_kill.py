"""kill -9 of a replica mid-stream: the survivor takes its partitions over and no alert is lost.

Duplicates are allowed exactly as docs/operations.md promises: re-sends, with the same fingerprint
and status, of alerts the dead replica published after its last checkpoint.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from typing import Any

import orjson
import pytest

from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.integration.kafka_broker import TopicFactory
from tests.integration.traffic import (
    ProcessReplica,
    alert_docs,
    committed_everything,
    eventually,
    partition_of,
    produce,
    read_all,
    read_until,
    running,
    samples_held,
    settings_for,
)

PARTITIONS = 4
pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=PARTITIONS)]
# Eight nodes: every partition holds a few, as fusion's common-mode test needs (docs/operations.md).
INCIDENT = DemoCluster(nodes=8, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))


@pytest.fixture
async def ref_alerts(kafka_topics: TopicFactory) -> str:
    """Where the reference run (one replica that never dies) publishes."""
    [name] = await kafka_topics("ref-alerts", partitions=PARTITIONS)
    return name


@pytest.mark.parametrize("checkpoint_s", [1.0, 60.0], ids=["fresh-checkpoint", "stale-checkpoint"])
async def test_a_replica_killed_mid_stream_loses_no_alert_and_duplicates_only_resends(
    kafka_bootstrap: str, topics: dict[str, str], ref_alerts: str, kafka_group: str, checkpoint_s: float
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group, checkpoint_interval_s=checkpoint_s)
    faulty = partition_of(INCIDENT.host(INCIDENT.fault.node), PARTITIONS)
    ticks = list(simulate(INCIDENT))
    replicas = [await ProcessReplica.start(settings), await ProcessReplica.start(settings)]
    try:
        await eventually(
            lambda: sorted(len(r.owned) for r in replicas) == [2, 2], limit_s=40, what="a 2+2 split"
        )
        victim = next(r for r in replicas if faulty in r.owned)
        survivor = next(r for r in replicas if r is not victim)
        # mid-precursor: the victim has scored the faulty GPU for a while (and may have paged)
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[:100], ticks_per_s=20)
        await read_until(kafka_bootstrap, topics["alerts"], lambda rs: bool(rs))  # the pre_xid is out
        assert await victim.kill() == -signal.SIGKILL
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[100:], ticks_per_s=20)
        await eventually(lambda: len(survivor.owned) == PARTITIONS, limit_s=30, what="the takeover")
        total = sum(len(t.metrics) for t in ticks)
        reference = await uninterrupted_alerts(kafka_bootstrap, topics, ref_alerts, kafka_group, total)
        expected = {(d["fingerprint"], d["status"]) for d in reference}
        got_docs: list[dict[str, Any]] = []

        async def survivor_caught_up() -> bool:
            got_docs[:] = alert_docs(await read_all(kafka_bootstrap, topics["alerts"], PARTITIONS))
            return {(d["fingerprint"], d["status"]) for d in got_docs} >= expected

        for _ in range(100):  # no alert lost: the survivor eventually says all the reference says
            if await survivor_caught_up():
                break
            await asyncio.sleep(0.2)
        assert await survivor.terminate() == 0
        assert "stopped cleanly: 4 partitions checkpointed" in survivor.log_tail(), survivor.log_tail()
    finally:
        for r in replicas:
            if r.proc.returncode is None:
                await r.kill()
    assert any("taken over from its snapshot" in line for line in survivor.lines), survivor.log_tail()
    inputs = [topics["metrics"], topics["logs"]]
    assert await committed_everything(kafka_bootstrap, kafka_group, inputs, PARTITIONS)

    keys = Counter((d["fingerprint"], d["status"]) for d in got_docs)
    lost = expected - set(keys)
    assert lost == set()
    assert set(keys) == expected  # nothing that an uninterrupted run would not say
    by_key = {(d["fingerprint"], d["status"]): d for d in reference}
    assert all(by_key[(d["fingerprint"], d["status"])] == d for d in got_docs)  # resends are identical
    resends = len(got_docs) - len(keys)
    print(f"replica kill ({checkpoint_s:g} s checkpoints): {len(got_docs)} alerts, {resends} resends, 0 lost")
    if checkpoint_s > 30:  # the victim paged after its last checkpoint: the survivor says it again
        assert resends >= 1
    firing = [(d["kind"], d["node"], d["gpu"]) for d in reference if d["status"] == "firing"]
    assert firing == [("pre_xid", "node-01", 2), ("xid", "node-01", 2)]


async def uninterrupted_alerts(
    bootstrap: str, topics: dict[str, str], alerts: str, group: str, total: int
) -> list[dict[str, object]]:
    """What one replica that never died says about the same input (its own group, state and `alerts`)."""
    ref = {**topics, "alerts": alerts, "state": topics["state"] + ".ref"}
    async with running(settings_for(bootstrap, ref, group + "-ref")) as runner:
        await eventually(lambda: samples_held(runner) == total, what="the reference run")
    return [orjson.loads(r.value) for r in await read_all(bootstrap, ref["alerts"], PARTITIONS)]
