"""`prexid bench e2e`: prexid against a real broker, beside a bare consumer, in one bounded run.

1. a backlog of demo traffic (many small clusters, one GPU fault each, 90 minutes) is produced to
   4 partitions;
2. a bare aiokafka consumer reads it (the baseline), then one `prexid run` replica, then two
   (each a process, as deployed): records/s between 10% and 90% of the backlog committed, once the
   group holds every replica (`pipeline_rate`);
3. fresh topics get its first half hour at half of one replica's maximum rate: sample-to-alert latency
   (alert's Kafka timestamp minus the send time of the scrape that completed its evidence), the
   group's lag, and the replica's peak RSS;
4. a child process holds 1M series (default) in one pipeline: its peak RSS and snapshot size.
Targets (from issue #7) are printed beside the figures; nothing here asserts them.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import uuid
from typing import Any

import numpy as np
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from service.bench import e2e_load as load
from service.cli import build
from service.processor import Message
from service.settings import Settings

PARTITIONS = 4
CLUSTERS = 16  # x 2 nodes x 8 GPUs: 2,368 records per 15 s scrape
MEMORY_SERIES = 1_000_000
# Throughput is read from commits, one per replica per 0.5 s checkpoint: an hour and a half of traffic
# (~820k records) spans many of them even at two replicas' rate. Latency replays the first half hour.
THROUGHPUT_S = 5400.0
LATENCY_S = 1800.0


def topics_for(run: str) -> dict[str, str]:
    return {k: f"bench-{k}-{run}" for k in ("metrics", "logs", "alerts", "dead")}


async def bare_rate(bootstrap: str, topics: dict[str, str], total: int) -> float:
    """Records/s of a plain consumer reading the backlog and doing nothing with it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topics[t], p) for t in ("metrics", "logs") for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen, counted, first = 0, 0, 0.0
        while seen < total:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            got = sum(len(r) for r in batch.values())
            seen += got
            if first:  # the clock starts once the first batch is in: it does not count that batch
                counted += got
            elif got:
                first = time.perf_counter()
        return counted / (time.perf_counter() - first)
    finally:
        await consumer.stop()


async def pipeline_rate(bootstrap: str, topics: dict[str, str], total: int, replicas: int) -> dict[str, Any]:
    """Records/s of `replicas` prexid processes while all of them consume: committed records between
    the first commit past 10% of the backlog (and past the group holding every replica) and the first
    commit reaching 90%, divided by the time between those two commits.

    Counting the records actually committed in between, not 80% of the backlog, matters: replicas
    commit every checkpoint (0.5 s here), so the commits that cross 10% and 90% can be far past them.
    Waiting for the whole group keeps a replica that joins late (and the rebalance that moves
    partitions to it) out of the figure, which is the group's throughput, not its start-up.
    """
    group = f"bench-{replicas}x-{uuid.uuid4().hex[:6]}"
    procs = await load.start_replicas(load.replica_env(bootstrap, topics, group), replicas)
    tps = [TopicPartition(topics[t], p) for t in ("metrics", "logs") for p in range(PARTITIONS)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    start: tuple[float, int] | None = None
    end: tuple[float, int] | None = None
    try:
        async with asyncio.timeout(300):
            grouped, last = False, -1
            while end is None:
                was_grouped = grouped
                grouped = grouped or await load.group_size(admin, group) == replicas
                done = await load.committed_total(admin, group, tps)
                now, fresh, last = time.perf_counter(), done != last, done
                if start is None and was_grouped and fresh and done >= 0.1 * total:
                    start = (now, done)  # just after a commit, as `end` is: whole commit intervals
                elif start is not None and done >= 0.9 * total and done > start[1]:
                    end = (now, done)
                await asyncio.sleep(0.1)
    finally:
        await admin.close()
        peaks = await load.stop_replicas(procs)
    if start is None or end is None:
        raise RuntimeError("no throughput window")
    return {"rate": (end[1] - start[1]) / (end[0] - start[0]), "peak_rss_mib": max(peaks)}


def emission_ticks(ticks: list[load.Tick]) -> dict[tuple[str, str], int]:
    """Replayed offline, scrape by scrape: the scrape after which each alert is raised."""
    _, processor = build(Settings())
    when: dict[tuple[str, str], int] = {}
    for i, tick in enumerate(ticks):
        metrics = [Message(p, tick.ts, "m", 0) for _, p in tick.metrics]
        out = processor.process(metrics, [Message(x, tick.ts, "l", 0) for _, x in tick.logs], set())
        for a in out.alerts:
            when.setdefault((a.fingerprint, a.status), i)
    return when


async def latency_run(bootstrap: str, ticks: list[load.Tick], rate: float) -> dict[str, Any]:
    topics = topics_for(uuid.uuid4().hex[:8])
    await load.create_topics(bootstrap, list(topics.values()), PARTITIONS)
    group = f"bench-latency-{uuid.uuid4().hex[:6]}"
    [proc] = await load.start_replicas(load.replica_env(bootstrap, topics, group), 1)
    alerts: list[tuple[dict[str, Any], float]] = []
    lags: list[int] = []
    try:
        await asyncio.sleep(8.0)  # process start and group join, before the clock starts
        watchers = [
            asyncio.create_task(_collect_alerts(bootstrap, topics["alerts"], alerts)),
            asyncio.create_task(_sample_lag(bootstrap, topics, group, lags)),
        ]
        sent = await load.produce(bootstrap, topics["metrics"], topics["logs"], ticks, rate)
        await asyncio.sleep(3.0)  # the last alerts
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    finally:
        [peak] = await load.stop_replicas([proc])
    when = emission_ticks(ticks)
    latency = [ts - sent[when[k]] for doc, ts in alerts if (k := (doc["fingerprint"], doc["status"])) in when]
    return {"latency_s": latency, "alerts": len(alerts), "lag": lags, "peak_rss_mib": peak, "rate": rate}


async def _collect_alerts(bootstrap: str, topic: str, out: list[tuple[dict[str, Any], float]]) -> None:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=200)
            out += [(orjson.loads(r.value), r.timestamp / 1000) for rs in batch.values() for r in rs]
    finally:
        await consumer.stop()


async def _sample_lag(bootstrap: str, topics: dict[str, str], group: str, out: list[int]) -> None:
    tps = [TopicPartition(topics[t], p) for t in ("metrics", "logs") for p in range(PARTITIONS)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        while True:
            ends = sum((await consumer.end_offsets(tps)).values())
            out.append(ends - await load.committed_total(admin, group, tps))
            await asyncio.sleep(0.5)
    finally:
        await consumer.stop()
        await admin.close()


def memory_child(series: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "service.bench.series_memory", str(series)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return dict(orjson.loads(out.stdout.strip().splitlines()[-1]))


async def run(
    bootstrap: str | None, clusters: int, series: int, progress: Progress, nodes: int = 2
) -> dict[str, Any]:
    step = progress.add_task("starting Kafka", total=7)
    broker = load.Broker(bootstrap)
    results: dict[str, Any] = {}
    try:
        bootstrap = broker.start()
        progress.update(step, advance=1, description="making traffic")
        # denser clusters fill the same backlog in less simulated time (never under the latency run's)
        backlog = load.traffic(clusters, max(LATENCY_S, THROUGHPUT_S * 2 / nodes), nodes)
        ticks = backlog[: int(LATENCY_S // 15)]  # the same traffic, its first half hour
        total = sum(len(t.metrics) + len(t.logs) for t in backlog)
        topics = topics_for(uuid.uuid4().hex[:8])
        await load.create_topics(bootstrap, list(topics.values()), PARTITIONS)
        progress.update(step, advance=1, description=f"producing a backlog of {total:,} records")
        await load.produce(bootstrap, topics["metrics"], topics["logs"], backlog)
        progress.update(step, advance=1, description="bare consumer")
        results["records"], results["nodes"] = total, nodes
        results["bare_rate"] = await bare_rate(bootstrap, topics, total)
        progress.update(step, advance=1, description="one prexid replica")
        results["one"] = await pipeline_rate(bootstrap, topics, total, 1)
        progress.update(step, advance=1, description="two prexid replicas")
        results["two"] = await pipeline_rate(bootstrap, topics, total, 2)
        progress.update(step, advance=1, description="latency at half of one replica's maximum")
        results["latency"] = await latency_run(bootstrap, ticks, 0.5 * results["one"]["rate"])
        progress.update(step, advance=1, description=f"{series:,} series in one pipeline")
        results["memory"] = await asyncio.to_thread(memory_child, series)
        progress.update(step, advance=1, description="done")
    finally:
        broker.stop()
    return results


def report(r: dict[str, Any], console: Console) -> None:
    lat = np.array(r["latency"]["latency_s"]) if r["latency"]["latency_s"] else np.array([np.nan])
    lags = r["latency"]["lag"] or [0]
    ratio, scale = r["one"]["rate"] / r["bare_rate"], r["two"]["rate"] / r["one"]["rate"]
    mem = r["memory"]
    table = Table(
        title=f"prexid bench e2e ({r['records']:,} records, {PARTITIONS} partitions, "
        f"{r['nodes']} nodes per cluster)"
    )
    for col in ("measure", "value", "target"):
        table.add_column(col)
    table.add_row("bare aiokafka consumer", f"{r['bare_rate']:,.0f} rec/s", "baseline")
    table.add_row("prexid, 1 replica", f"{r['one']['rate']:,.0f} rec/s = {ratio:.2f}x bare", ">= 0.50x")
    table.add_row("prexid, 2 replicas", f"{r['two']['rate']:,.0f} rec/s = {scale:.2f}x one", ">= 1.70x")
    table.add_row(
        f"latency at {r['latency']['rate']:,.0f} rec/s",
        f"p50 {np.percentile(lat, 50):.3f} s, p99 {np.percentile(lat, 99):.3f} s "
        f"({len(r['latency']['latency_s'])} of {r['latency']['alerts']} alerts)",
        "p99 < 1 s",
    )
    table.add_row("consumer lag there", f"max {max(lags):,}, mean {np.mean(lags):,.0f} records", "bounded")
    table.add_row("peak RSS of a replica", f"{r['latency']['peak_rss_mib']:,.0f} MiB", "")
    table.add_row(
        f"{mem['series']:,.0f} series, one pipeline",
        f"RSS {mem['rss_mib'] / 1024:.2f} GiB, peak {mem['peak_rss_mib'] / 1024:.2f} GiB "
        f"(while snapshotting {mem['snapshot_mib']:,.0f} MiB)",
        "<= 1.5 GiB",
    )
    console.print(table)


def cmd_bench_e2e(args: argparse.Namespace) -> int:
    console = Console()
    with Progress(console=console, transient=True) as progress:
        results = asyncio.run(
            run(
                getattr(args, "bootstrap", None),
                CLUSTERS,
                getattr(args, "series", MEMORY_SERIES),
                progress,
                getattr(args, "nodes", 2),
            )
        )
    report(results, console)
    console.print_json(orjson.dumps({k: v for k, v in results.items() if k != "latency"}).decode())
    return 0
