"""`prexid simulate --format kafka` on a real broker: every sample arrives, partitioned by its node key."""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner

from prexid.service.decode.prom_kafka_adapter import decode
from prexid.service.offline.sim.command import cmd_simulate
from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.engine import ClusterSim
from tests.integration.kafka_broker import TopicFactory

pytestmark = pytest.mark.integration

CFG = SimConfig(nodes=2, gpus=2, days=0.02, failures_per_day=0.0, warmup_s=0.0, seed=5)


async def _drain(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> list[object]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    records: list[object] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(records) < count and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for recs in batch.values():
                records.extend(recs)
    finally:
        await consumer.stop()
    return records


async def test_simulator_produces_every_sample_to_kafka_keyed_by_node(
    kafka_bootstrap: str, kafka_topics: TopicFactory, tmp_path: Path
) -> None:
    metrics, logs = await kafka_topics("sim-metrics", "sim-logs", partitions=3)
    args = argparse.Namespace(
        out=tmp_path, nodes=CFG.nodes, gpus=CFG.gpus, days=CFG.days, seed=CFG.seed,
        failures_per_day=CFG.failures_per_day, format="kafka", bootstrap=kafka_bootstrap,
        metrics_topic=metrics, logs_topic=logs,
    )  # fmt: skip
    await asyncio.to_thread(cmd_simulate, args, warmup_s=CFG.warmup_s)
    expected = sum(int((~np.isnan(f.values)).sum()) for f in ClusterSim(CFG).frames())
    records = await _drain(kafka_bootstrap, metrics, expected)
    assert len(records) == expected
    keys = Counter(r.key for r in records)  # type: ignore[attr-defined]
    assert set(keys) == {b"node-00", b"node-01"}
    placed = {(r.key, r.partition) for r in records}  # type: ignore[attr-defined]
    assert len(placed) == 2, "each node's samples stay in one partition, in order"
    partitioner = DefaultPartitioner()
    assert all(p == partitioner(k, [0, 1, 2], [0, 1, 2]) for k, p in placed)
    first = records[0]
    (sample,) = list(decode(first.value, first.timestamp / 1000).rows())  # type: ignore[attr-defined]
    assert sample.ts == pytest.approx(first.timestamp / 1000)  # type: ignore[attr-defined]
    assert sample.labels.get("Hostname", sample.labels.get("instance", "")).startswith(first.key.decode())  # type: ignore[attr-defined]
