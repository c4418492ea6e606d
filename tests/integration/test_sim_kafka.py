"""`prexid simulate --format kafka` on a real broker: every sample arrives, partitioned by its node key."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner

from prexid.service.app import cli
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


def simulate_args(bootstrap: str, metrics: str, logs: str, *more: str) -> argparse.Namespace:
    """`prexid simulate --format kafka ...` as the CLI parses it."""
    topics = ["--bootstrap", bootstrap, "--metrics-topic", metrics, "--logs-topic", logs]
    size = ["--nodes", str(CFG.nodes), "--gpus", str(CFG.gpus), "--days", str(CFG.days)]
    return cli.parser().parse_args(
        [
            "simulate",
            "--format",
            "kafka",
            *topics,
            *size,
            "--seed",
            str(CFG.seed),
            "--failures-per-day",
            "0",
            *more,
        ]
    )


async def test_simulator_produces_every_sample_to_kafka_keyed_by_node(
    kafka_bootstrap: str, kafka_topics: TopicFactory, tmp_path: Path
) -> None:
    metrics, logs = await kafka_topics("sim-metrics", "sim-logs", partitions=3)
    args = simulate_args(kafka_bootstrap, metrics, logs, "--out", str(tmp_path))
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


async def test_a_realtime_simulation_starts_now_and_is_paced_to_the_wall_clock(
    kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    """What the compose stack runs: no --out, event time from now, 1728 simulated s at 600x."""
    metrics, logs = await kafka_topics("rt-metrics", "rt-logs", partitions=1)
    args = simulate_args(kafka_bootstrap, metrics, logs, "--realtime", "--speed", "600")
    started_wall, started = time.time(), time.monotonic()
    assert await asyncio.to_thread(cmd_simulate, args, warmup_s=CFG.warmup_s) == 0
    took = time.monotonic() - started
    assert took >= 0.9 * CFG.days * 86400 / 600  # paced, not produced as fast as it can
    expected = sum(int((~np.isnan(f.values)).sum()) for f in ClusterSim(CFG).frames())
    records = await _drain(kafka_bootstrap, metrics, expected)
    assert len(records) == expected
    first = min(r.timestamp for r in records) / 1000.0  # type: ignore[attr-defined]
    assert abs(first - started_wall) < 60.0  # event time starts now, not on the simulator's fixed date
