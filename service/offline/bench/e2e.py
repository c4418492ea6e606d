"""`prexid bench e2e`: prexid against a real broker, beside a bare consumer, in one bounded run.

1. a backlog of demo traffic (16 clusters of 8 nodes by default, one GPU fault each, ~1.1M records)
   is produced to 4 partitions, keyed by node: 32 nodes to a shard (`--nodes 2`: 8, the worst case
   for the per-tick cost a shard pays whatever its size);
2. in three rounds: a bare aiokafka consumer reads it (the baseline; as it comes, then with prexid's
   process tuning), then one `prexid run` replica, then two (each a process, as deployed): records/s
   between 10% and 80% of the backlog read, once the group holds every replica (`pipeline_rate`);
3. fresh topics get its first half hour at half of one replica's maximum rate: sample-to-alert latency
   (alert's Kafka timestamp minus the time the scrape that completed its evidence began to be sent),
   the replica's lag (records written, not yet read) and its peak RSS;
4. a child process holds 1M series (default) in one pipeline and checkpoints it, and another takes that
   snapshot over as a replica does: the peak RSS of each and the snapshot's size.
Targets (from issue #7) are printed beside the figures; nothing here asserts them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import httpx
import numpy as np
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.offline.bench import e2e_load as load
from prexid.service.pipeline.processor import Message

PARTITIONS = 4
CLUSTERS = 16
NODES = 8  # per cluster, x 8 GPUs: 32 nodes, ~2,400 records, per shard per 15 s scrape
MEMORY_SERIES = 1_000_000
REPEATS = 3
# A replica renders /metrics for each poll (~4 ms): at 20 a second that was 9% of its time. The
# window's ends are the polls' own counts and times, so a coarse poll costs no accuracy.
POLL_S = 0.5
# An hour and a half of 2-node clusters (~820k records; denser ones fill it sooner) keeps two replicas
# busy for a few seconds. Latency replays the first half hour.
THROUGHPUT_S = 5400.0
LATENCY_S = 1800.0


def topics_for(run: str) -> dict[str, str]:
    return {k: f"bench-{k}-{run}" for k in ("metrics", "logs", "alerts", "dead")}


async def bare_rate(
    bootstrap: str, topics: dict[str, str], total: int, tuned: bool = False
) -> dict[str, Any]:
    """Records/s of the baseline, a plain aiokafka consumer in a process of its own (`tuned`: with
    prexid's process tuning)."""
    names = orjson.dumps([topics["metrics"], topics["logs"]]).decode()
    args = [bootstrap, names, str(PARTITIONS), str(total), *(["tuned"] if tuned else [])]
    return await asyncio.to_thread(
        load.child_result, "prexid.service.offline.bench.bare_consumer", *args, timeout_s=300
    )


async def pipeline_rate(bootstrap: str, topics: dict[str, str], total: int, replicas: int) -> dict[str, Any]:
    """Records/s of `replicas` prexid processes while all of them consume: records read (their
    `prexid_messages_total`, summed) from the first poll past 10% of the backlog, once the group holds
    every replica, to the first poll past 80%, over the time between those polls.

    The replicas run as deployed, checkpointing every 30 s: none falls in a window of a few seconds,
    and at that interval their cost (tens of ms a shard) is well under 1% of a replica's time.
    Waiting for the whole group keeps a replica that joins late (and the rebalance that moves
    partitions to it) out of the figure, which is the group's throughput, not its start-up. `cores`:
    the CPU each replica used in the window, to tell a replica that waited from one that worked.
    """
    group = f"bench-{replicas}x-{uuid.uuid4().hex[:6]}"
    procs = await load.start_replicas(load.replica_env(bootstrap, topics, group), replicas)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    start: tuple[float, float] | None = None
    end: tuple[float, float] | None = None
    cpu: list[list[float]] = []
    try:
        async with asyncio.timeout(300), httpx.AsyncClient(timeout=5.0) as client:
            grouped = False
            while end is None:
                grouped = grouped or await load.group_size(admin, group) == replicas
                done = sum(await asyncio.gather(*(r.consumed(client) for r in procs)))
                now = time.perf_counter()
                if start is None and grouped and done >= 0.1 * total:
                    start = (now, done)
                    cpu.append([load.cpu_seconds(r.proc.pid) for r in procs])
                elif start is not None and done >= 0.8 * total:
                    end = (now, done)
                    cpu.append([load.cpu_seconds(r.proc.pid) for r in procs])
                await asyncio.sleep(POLL_S)
    finally:
        await admin.close()
        peaks = await load.stop_replicas(procs)
    if start is None or end is None or end[1] <= start[1]:
        raise RuntimeError("no throughput window")
    wall = end[0] - start[0]
    cores = [(b - a) / wall for a, b in zip(*cpu, strict=True)]
    return {"rate": (end[1] - start[1]) / wall, "peak_rss_mib": max(peaks), "cores": cores}


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
    replica = await load.start_replicas(load.replica_env(bootstrap, topics, group), 1)
    alerts: list[tuple[dict[str, Any], float]] = []
    lags: list[float] = []
    try:
        await asyncio.sleep(8.0)  # process start and group join, before the clock starts
        watchers = [
            asyncio.create_task(_collect_alerts(bootstrap, topics["alerts"], alerts)),
            asyncio.create_task(_sample_lag(bootstrap, topics, replica[0], lags)),
        ]
        sent = await load.produce(bootstrap, topics["metrics"], topics["logs"], ticks, PARTITIONS, rate)
        await asyncio.sleep(3.0)  # the last alerts
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    finally:
        [peak] = await load.stop_replicas(replica)
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


async def _sample_lag(
    bootstrap: str, topics: dict[str, str], replica: load.Replica, out: list[float]
) -> None:
    """Records written but not yet read by the replica (its own count: commits come every 30 s)."""
    tps = [TopicPartition(topics[t], p) for t in ("metrics", "logs") for p in range(PARTITIONS)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                read = await replica.consumed(client)  # first: the end offsets asked after it are no smaller
                out.append(sum((await consumer.end_offsets(tps)).values()) - read)
                await asyncio.sleep(POLL_S)
    finally:
        await consumer.stop()


async def run(
    bootstrap: str | None, clusters: int, series: int, progress: Progress, nodes: int = NODES
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
        await load.produce(bootstrap, topics["metrics"], topics["logs"], backlog, PARTITIONS)
        results["records"], results["nodes"] = total, nodes
        results |= {"bare": [], "bare_tuned": [], "one": [], "two": []}
        # Rounds, each measuring all four in turn: a run of a few seconds on a shared machine varies by
        # a fifth and drifts over minutes, so ratios compare neighbours and the medians are reported.
        for i in range(REPEATS):
            progress.update(step, description=f"throughput, round {i + 1} of {REPEATS}")
            results["bare"].append(await bare_rate(bootstrap, topics, total))
            results["bare_tuned"].append(await bare_rate(bootstrap, topics, total, tuned=True))
            results["one"].append(await pipeline_rate(bootstrap, topics, total, 1))
            results["two"].append(await pipeline_rate(bootstrap, topics, total, 2))
        progress.update(step, advance=3)
        progress.update(step, advance=1, description="latency at half of one replica's maximum")
        one = statistics.median(r["rate"] for r in results["one"])
        results["latency"] = await latency_run(bootstrap, ticks, 0.5 * one)
        progress.update(step, advance=1, description=f"{series:,} series in one pipeline")
        memory = ("prexid.service.offline.bench.series_memory", str(series))
        results["memory"] = await asyncio.to_thread(load.child_result, *memory)
        progress.update(step, advance=1, description="done")
    finally:
        broker.stop()
    return results


def rates(runs: list[dict[str, Any]]) -> tuple[float, str]:
    """The median of repeated runs' records/s, and the runs themselves for the table."""
    values = [float(r["rate"]) for r in runs]
    return statistics.median(values), " / ".join(f"{v / 1000:,.0f}k" for v in values)


def ratio(runs: list[dict[str, Any]], base: list[dict[str, Any]]) -> tuple[float, str]:
    """`runs` over `base` round by round (neighbours in time, as the machine drifts by a fifth over
    minutes), the median of those, and the rounds' own for the table."""
    each = [float(a["rate"]) / float(b["rate"]) for a, b in zip(runs, base, strict=True)]
    return statistics.median(each), " / ".join(f"{x:.2f}" for x in each)


def busy(runs: list[dict[str, Any]]) -> str:
    """Each run's replicas' cores, e.g. `0.93 / 0.85+0.88`."""
    return " / ".join("+".join(f"{c:.2f}" for c in run["cores"]) for run in runs)


def report(r: dict[str, Any], console: Console) -> None:
    lat = np.array(r["latency"]["latency_s"]) if r["latency"]["latency_s"] else np.array([np.nan])
    lags = r["latency"]["lag"] or [0]
    (bare, bare_runs), (tuned, tuned_runs) = rates(r["bare"]), rates(r["bare_tuned"])
    (one, one_runs), (two, two_runs) = rates(r["one"]), rates(r["two"])
    mem = r["memory"]
    table = Table(
        title=f"prexid bench e2e ({r['records']:,} records, {PARTITIONS} partitions, "
        f"{r['nodes']} nodes per cluster; medians of {REPEATS} rounds, ratios round by round)"
    )
    for col in ("measure", "value", "target"):
        table.add_column(col)
    table.add_row("bare aiokafka consumer", f"{bare:,.0f} rec/s ({bare_runs})", "baseline")
    table.add_row("the same, prexid's GC setting", f"{tuned:,.0f} rec/s ({tuned_runs})", "")
    (of_bare, of_bare_runs), (of_tuned, _) = ratio(r["one"], r["bare"]), ratio(r["one"], r["bare_tuned"])
    of_one, of_one_runs = ratio(r["two"], r["one"])
    table.add_row(
        "prexid, 1 replica",
        f"{one:,.0f} rec/s ({one_runs}) = {of_bare:.2f}x bare (rounds {of_bare_runs}; "
        f"{of_tuned:.2f}x with its GC setting)",
        ">= 0.50x",
    )
    table.add_row(
        "prexid, 2 replicas",
        f"{two:,.0f} rec/s ({two_runs}) = {of_one:.2f}x one (rounds {of_one_runs})",
        ">= 1.70x",
    )
    table.add_row("CPU a replica used (cores)", f"one: {busy(r['one'])}; two: {busy(r['two'])}", "")
    table.add_row(
        f"latency at {r['latency']['rate']:,.0f} rec/s",
        f"p50 {np.percentile(lat, 50):.3f} s, p99 {np.percentile(lat, 99):.3f} s "
        f"({len(r['latency']['latency_s'])} of {r['latency']['alerts']} alerts)",
        "p99 < 1 s",
    )
    table.add_row("consumer lag there", f"max {max(lags):,.0f}, mean {np.mean(lags):,.0f} records", "bounded")
    table.add_row("peak RSS of a replica", f"{r['latency']['peak_rss_mib']:,.0f} MiB", "")
    table.add_row(
        f"{mem['series']:,.0f} series, one pipeline",
        f"RSS {mem['rss_mib'] / 1024:.2f} GiB, peak {mem['peak_rss_mib'] / 1024:.2f} GiB "
        f"(checkpointing {mem['snapshot_mib']:,.0f} MiB, {mem['compressed_mib']:,.0f} MiB compressed)",
        "<= 1.5 GiB",
    )
    table.add_row(
        "the same, taken over by a replica",
        f"RSS {mem['restore_rss_mib'] / 1024:.2f} GiB, peak {mem['restore_peak_rss_mib'] / 1024:.2f} GiB "
        f"(restored in {mem['restore_seconds']:.1f} s)",
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
                getattr(args, "nodes", NODES),
            )
        )
    report(results, console)
    console.print_json(orjson.dumps({k: v for k, v in results.items() if k != "latency"}).decode())
    return 0
