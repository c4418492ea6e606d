"""Records that decode fine and then break something, on the real broker with two replicas: a sample
dated 2199 in the middle of the stream (it moved its partition's watermark there, and no tick was
evaluated again) and a forged user-space Xid (`logger -t kernel`). Both replicas survive, each poison
record is a dead letter or counted, and the real incident pages as it does without them."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from prexid.service.offline.sim.wire import adapter_json, gpu_labels
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.integration.traffic import (
    Replica,
    alert_docs,
    eventually,
    has_xid,
    produce,
    read_all,
    read_until,
    settings_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=2)]

INCIDENT = DemoCluster(nodes=6, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))
POISON_AT = 40  # scrapes: before the precursor is strong enough to page
YEAR_2199 = 7_226_582_400.0


async def test_poison_records_amid_a_stream_kill_no_replica_and_silence_no_alert(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    ticks = list(simulate(INCIDENT))
    a, b = Replica(settings), Replica(settings)
    try:
        await a.assigned()
        await b.assigned()
        await eventually(lambda: len(a.runner.shards) + len(b.runner.shards) == 2, what="a 1+1 split")
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[:POISON_AT])
        now = ticks[POISON_AT].ts
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:  # the faulty node's own partition gets the future sample: its detection must go on
            future = adapter_json("DCGM_FI_DEV_GPU_TEMP", gpu_labels(1, 0), YEAR_2199, 60.0)
            await producer.send_and_wait(
                topics["metrics"], future, key=b"node-01", timestamp_ms=int(now * 1000)
            )
            forged = b"<14>Dec  2 10:10:00 node-04 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
            await producer.send_and_wait(topics["logs"], forged, key=b"node-04", timestamp_ms=int(now * 1000))
        finally:
            await producer.stop()
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[POISON_AT:])
        records = await read_until(kafka_bootstrap, topics["alerts"], has_xid, limit_s=90.0)
        assert not a.task.done() and not b.task.done()  # both replicas survive
        dead = await read_all(kafka_bootstrap, topics["dead"], 2)
        untrusted = sum(
            r.state.telemetry.registry.get_sample_value("prexid_log_lines_total", {"outcome": "untrusted"})
            or 0.0
            for r in (a, b)
        )
    finally:
        for replica in (a, b):
            if not replica.task.done():
                await replica.stop()

    firing = [(d["kind"], d["node"], d["gpu"]) for d in alert_docs(records) if d["status"] == "firing"]
    assert firing == [("pre_xid", "node-01", 2), ("xid", "node-01", 2)]  # as without the poison
    reasons = [dict(r.headers)["prexid.reason"] for r in dead]
    assert reasons == [b"future_timestamp"]
    assert untrusted == 1.0  # the forged Xid: refused and counted, never paged
