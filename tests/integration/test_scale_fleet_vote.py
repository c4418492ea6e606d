"""One cluster across partitions on a real broker: two `prexid run` replicas, four partitions, one stall.

Every node's NFS backlog and TCP retransmits jump at once (`tests/unit/stall_traffic.py`). Judged
partition by partition, the partitions holding one node page it and the others raise cluster alerts of
their own. With the fleet vote each shard judges its counts with the other partitions' (the summaries
topic), no node pages, and the replica elected aggregator raises one cluster alert, which the other
replica's fleet view shows too; killing the aggregator mid-stall moves the role to the survivor,
which resolves the same alert.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import pytest

from prexid.service.offline.sim.wire import adapter_json
from prexid.service.sources.demo_cluster import Tick
from tests.integration.kafka_broker import TopicFactory, free_ports
from tests.integration.traffic import (
    ProcessReplica,
    Replica,
    alert_docs,
    eventually,
    produce,
    read_until,
    settings_for,
)
from tests.unit.stall_traffic import stall_scrapes

PARTITIONS = 4
pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=PARTITIONS)]
NODES, TICKS = 8, 230
STALL = range(60, 170)  # the cluster alert fires ~45 scrapes in; it resolves ~5 after the stall
KILL_AT = 130  # scrapes: the alert is out, the stall goes on
# The test streams ~150x faster than real time, so a failover of a few wall seconds is many minutes of
# event time: partitions whose replica died count in the vote for that long (real time: 120 s).
LATENESS = {"PREXID_FLEET_LATENESS_S": "3600"}


def ticks() -> list[Tick]:
    return [
        Tick(s[0].ts, [adapter_json(x.name, x.labels, x.ts, x.value) for x in s], [])
        for s in stall_scrapes(NODES, TICKS, STALL)
    ]


def firing(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and d["status"] == "firing"]


def pages(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(d["kind"], d["node"]) for d in docs if d["kind"] != "cluster" and d["status"] == "firing"]


def resolved_cluster(records: list[Any]) -> bool:
    return any(d["kind"] == "cluster" and d["status"] == "resolved" for d in alert_docs(records))


async def fleet_view(port: int) -> dict[str, Any]:
    """What a replica's fleet view serves: which view, the heatmap, the alerts (once it has read the
    last verdict: the aggregator publishes one per batch)."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        out: dict[str, Any] = {}
        for _ in range(50):
            out = {k: (await http.get(f"/api/v1/{k}")).json() for k in ("view", "scores", "alerts")}
            if out["alerts"]:
                break
            await asyncio.sleep(0.2)
        return out


def aggregator(replicas: list[ProcessReplica]) -> ProcessReplica | None:
    """The replica whose log last says it took the aggregator role (and has not handed it off)."""
    for r in replicas:
        said = [line for line in r.lines if "aggregator role" in line]
        if said and "taken" in said[-1] and r.proc.returncode is None:
            return r
    return None


async def test_a_cluster_wide_stall_over_four_partitions_is_one_cluster_alert_even_across_a_failover(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    stream = ticks()
    fleet_ports = free_ports(2)
    replicas = [
        await ProcessReplica.start(settings, **LATENESS, PREXID_FLEET_HTTP_PORT=str(port))
        for port in fleet_ports
    ]
    try:
        await eventually(
            lambda: sorted(len(r.owned) for r in replicas) == [2, 2], limit_s=60, what="a 2+2 split"
        )
        await eventually(lambda: aggregator(replicas) is not None, limit_s=30, what="an elected aggregator")
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], stream[:KILL_AT], ticks_per_s=10)
        before = alert_docs(await read_until(kafka_bootstrap, topics["alerts"], lambda rs: bool(rs), 60))
        assert [d["kind"] for d in before] == ["cluster"]  # the cluster alert, and nothing else, is out
        victim = aggregator(replicas)
        assert victim is not None
        survivor = next(r for r in replicas if r is not victim)
        # the other replica's fleet view already shows every partition, and the alert it did not raise
        view = await fleet_view(fleet_ports[replicas.index(survivor)])
        assert view["view"]["view"] == "fleet" and view["view"]["partitions"] == [0, 1, 2, 3]
        assert len(view["scores"]["nodes"]) == NODES
        assert [(a["kind"], a["status"]) for a in view["alerts"]] == [("cluster", "firing")]
        assert await victim.kill() == -signal.SIGKILL
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], stream[KILL_AT:], ticks_per_s=10)
        await eventually(lambda: len(survivor.owned) == PARTITIONS, limit_s=40, what="the takeover")
        await eventually(lambda: aggregator([survivor]) is survivor, limit_s=40, what="the role moving")
        records = await read_until(kafka_bootstrap, topics["alerts"], resolved_cluster, 90)
        assert await survivor.terminate() == 0
    finally:
        for r in replicas:
            print(r.log_tail(60))  # shown when the test fails
            if r.proc.returncode is None:
                await r.kill()
    docs = alert_docs(records)
    assert pages(docs) == []  # no node page from any partition, before or after the failover
    fired = firing(docs, "cluster")
    assert len({d["fingerprint"] for d in fired}) == 1, docs  # one alert; a re-send has its fingerprint
    [resolved] = [d for d in docs if d["kind"] == "cluster" and d["status"] == "resolved"]
    assert resolved["fingerprint"] == fired[0]["fingerprint"]
    assert {s["family"] for s in fired[0]["signals"]} == {"network", "storage-io"}
    assert any("aggregator role taken (from the last verdict)" in line for line in survivor.lines)


async def test_judged_partition_by_partition_the_same_stall_pages_nodes_and_alerts_per_partition(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    """The same stream with `fleet_vote = false`: what the fleet vote is for."""
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    replicas = [await ProcessReplica.start(settings, PREXID_FLEET_VOTE="false") for _ in range(2)]
    try:
        await eventually(
            lambda: sorted(len(r.owned) for r in replicas) == [2, 2], limit_s=60, what="a 2+2 split"
        )
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks(), ticks_per_s=50)

        def two_resolved(records: list[Any]) -> bool:
            return (
                sum(bool(d["kind"] == "cluster" and d["status"] == "resolved") for d in alert_docs(records))
                >= 2
            )

        docs = alert_docs(await read_until(kafka_bootstrap, topics["alerts"], two_resolved, 90))
    finally:
        for r in replicas:
            await r.terminate()
    # partitions 0 and 3 (3 nodes each) raise one each; judged from the same tick, the two carry the same
    # fingerprint (a cluster event is named by its start), so the alerts are counted, not fingerprints
    assert len(firing(docs, "cluster")) == 2
    assert sorted(pages(docs)) == [("node", "node-01"), ("node", "node-06")]  # alone in partitions 1, 2


async def test_a_summaries_topic_of_more_than_one_partition_is_refused_at_start(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str, kafka_topics: TopicFactory
) -> None:
    """Two partitions would split the summaries' one order and elect two aggregators: refused, named."""
    [summaries] = await kafka_topics("summaries", partitions=2)
    replica = Replica(settings_for(kafka_bootstrap, topics, kafka_group, summaries_topic=summaries))
    with pytest.raises(RuntimeError, match=f"topic {summaries} must have exactly 1 partition, it has 2"):
        await asyncio.wait_for(replica.task, 30)
