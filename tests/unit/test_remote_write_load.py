"""The bench's remote_write traffic is what Prometheus would send: every sample once, each node's
series with one sender, in scrape order, at most `max_samples` a request."""

from __future__ import annotations

import orjson

from prexid.service.decode import remote_write
from prexid.service.offline.bench.remote_write_load import bodies
from prexid.service.pipeline.series_registry import node_of
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate


def test_every_sample_is_sent_once_by_its_nodes_sender_in_scrape_order() -> None:
    ticks = list(simulate(DemoCluster(nodes=8, gpus=2, duration_s=60.0, fault=DemoFault(node=0, gpu=0))))
    shards = bodies((t.metrics for t in ticks), senders=2, max_samples=7)
    sent = [[remote_write.decode(b, 0.0) for b in shard] for shard in shards]
    assert all(len(s) <= 7 for shard in sent for s in shard)
    nodes_of = [{node_of(lab) for s in shard for lab in s.labels} for shard in sent]
    assert all(nodes_of) and not nodes_of[0] & nodes_of[1]  # a node's series go with one sender only
    for shard in sent:
        stamps = [t for s in shard for t in s.ts]
        assert stamps == sorted(stamps)  # in scrape order
    expected = sorted(
        (d["name"], sorted(d["labels"].items()), float(d["value"]))
        for t in ticks
        for d in map(orjson.loads, t.metrics)
    )
    got = sorted(
        (name, sorted(labels.items()), value)
        for shard in sent
        for s in shard
        for name, labels, value in zip(s.names, s.labels, s.values, strict=True)
    )
    assert got == expected
