"""`prexid bench scrape`: one `prexid run` replica consuming with a scrape loop against its read API, as
a ratio to the same replica without, in one bounded run on a real broker.

1. demo traffic for 128 clusters x `--nodes` (8) nodes x 8 GPUs (8,192 GPUs, 9,216 entities: a read
   view of ~0.6 MB of `/metrics` scores) over 10 scrapes of 15 s, ~760k records, is produced to
   4 partitions;
2. in rounds, a replica reads that backlog without a scrape loop, with one at 1/s (one client asking
   `/metrics` and `/api/v1/scores` in turn, 0.5 s apart: each path every second, 15 times a
   Prometheus at its default interval) and with one flat out (2 clients, each asking again as soon as
   answered); the loop (`scrape_loop`) is a process of its own: records/s from the first poll past 10%
   of the backlog, once the replica holds every partition, to the first past 80% (as `prexid bench
   e2e`), the CPU the replica used there (the loop's clients share the machine: records per CPU second
   of the replica tells what serving costs it from what the clients take from it), and the scrapes
   answered in that window;
3. fresh topics get the first 2 scrapes (every entity's series created: the first one takes a replica
   seconds) and, once the replica has read them, the rest at half its rate without the loop (or as
   fast as this process sends, if slower), once without and once with the flat-out loop: the
   replica's lag (records written, not yet read) while they are sent, and the time until it is back to
   0 after the last record.
The figures are printed; nothing here asserts them. Each replica run is bounded (5 min), and so is each
scrape loop (its run, and 200,000 requests).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
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

from prexid.service.offline.bench import e2e_load as load
from prexid.service.offline.bench.scrape_loop import Count

PARTITIONS = 4
CLUSTERS = 128
NODES = 8
TICKS = 10
WARM_TICKS = 2
REPEATS = 3
POLL_S = 0.5
RUN_LIMIT_S = 300.0
MAX_SCRAPES = 200_000
# mode -> (clients, pause after each answer); None: no scrape loop
MODES: dict[str, tuple[int, float] | None] = {"without": None, "1/s": (1, 0.5), "flat out": (2, 0.0)}


def topics_for(run: str) -> dict[str, str]:
    return {k: f"bench-scrape-{k}-{run}" for k in ("metrics", "logs", "alerts", "dead")}


class LoopProcess:
    """`scrape_loop` in a child process: its clients share the machine with the replica, as a
    Prometheus would, but take no GIL from this process's producer and polls."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, replica: load.Replica, mode: str) -> LoopProcess | None:
        spec = MODES[mode]
        if spec is None:
            return None
        clients, interval_s = spec
        args = [str(replica.port), str(clients), str(interval_s), str(RUN_LIMIT_S), str(MAX_SCRAPES)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "prexid.service.offline.bench.scrape_loop",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def stop(self) -> Count:
        """Close its stdin: it stops its clients and says what they were answered."""
        out, _ = await asyncio.wait_for(self.proc.communicate(b""), 60)  # b"": closes stdin
        return Count(**orjson.loads(out.strip().splitlines()[-1]))


def _window(count: Count, start: float, end: float) -> int:
    return sum(1 for t in count.answered_at if start <= t <= end)


async def throughput(bootstrap: str, topics: dict[str, str], total: int, mode: str) -> dict[str, Any]:
    """Records/s of one replica reading the backlog, with the scrape loop of `mode` beside it."""
    group = f"bench-scrape-{uuid.uuid4().hex[:6]}"
    [replica] = await load.start_replicas(load.replica_env(bootstrap, topics, group), 1)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    loop: LoopProcess | None = None
    start: tuple[float, float] | None = None
    end: tuple[float, float] | None = None
    cpu: list[float] = []
    try:
        async with asyncio.timeout(RUN_LIMIT_S), httpx.AsyncClient(timeout=10.0) as client:
            await replica.answering(client, "/metrics", 0.2)  # the loop may start
            loop = await LoopProcess.start(replica, mode)
            grouped = False
            while end is None:
                grouped = grouped or await load.group_size(admin, group) == 1
                done = await replica.consumed(client)
                now = time.monotonic()
                if start is None and grouped and done >= 0.1 * total:
                    start = (now, done)
                    cpu.append(load.cpu_seconds(replica.proc.pid))
                elif start is not None and done >= 0.8 * total:
                    end = (now, done)
                    cpu.append(load.cpu_seconds(replica.proc.pid))
                await asyncio.sleep(POLL_S)
    finally:
        count = await loop.stop() if loop is not None else Count()
        await admin.close()
        await load.stop_replicas([replica])
    if start is None or end is None or end[1] <= start[1]:
        raise RuntimeError("no throughput window")
    wall = end[0] - start[0]
    records = end[1] - start[1]
    return {
        "rate": records / wall,
        "cores": (cpu[1] - cpu[0]) / wall,
        "per_cpu_s": records / (cpu[1] - cpu[0]),
        "scrapes_per_s": _window(count, start[0], end[0]) / wall,
        "scrapes": count.answered,
        "failed": count.failed,
        "errors": count.errors,
    }


class Lag:
    """Records on the input topics minus the records the replica says it has read."""

    def __init__(self, consumer: AIOKafkaConsumer, topics: dict[str, str], replica: load.Replica) -> None:
        self.consumer, self.replica = consumer, replica
        self.tps = [TopicPartition(topics[t], p) for t in ("metrics", "logs") for p in range(PARTITIONS)]

    async def now(self, client: httpx.AsyncClient) -> float:
        read = await self.replica.consumed(client)  # first: the ends asked after are no smaller
        return float(sum((await self.consumer.end_offsets(self.tps)).values()) - read)

    async def zero(self, client: httpx.AsyncClient) -> None:
        while await self.now(client) > 0:  # noqa: ASYNC110 - the broker's and the replica's state
            await asyncio.sleep(0.2)


async def paced_lag(bootstrap: str, ticks: list[load.Tick], rate: float, mode: str) -> dict[str, Any]:
    """The replica's lag while `ticks` past the first `WARM_TICKS` are sent at `rate` records/s to fresh
    topics, and the seconds from the last record sent until the lag is 0 again."""
    topics = topics_for(uuid.uuid4().hex[:8])
    await load.create_topics(bootstrap, list(topics.values()), PARTITIONS)
    group = f"bench-scrape-lag-{uuid.uuid4().hex[:6]}"
    [replica] = await load.start_replicas(load.replica_env(bootstrap, topics, group), 1)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    lag = Lag(consumer, topics, replica)
    loop: LoopProcess | None = None
    lags: list[float] = []
    try:
        async with asyncio.timeout(RUN_LIMIT_S), httpx.AsyncClient(timeout=10.0) as client:
            await replica.answering(client, "/metrics", 0.2)  # the loop may start
            while await load.group_size(admin, group) != 1:  # noqa: ASYNC110 - the broker's state
                await asyncio.sleep(POLL_S)
            warm, paced = ticks[:WARM_TICKS], ticks[WARM_TICKS:]
            await load.produce(bootstrap, topics["metrics"], topics["logs"], warm, PARTITIONS)
            await lag.zero(client)
            loop = await LoopProcess.start(replica, mode)
            began = time.monotonic()
            sending = asyncio.create_task(
                load.produce(bootstrap, topics["metrics"], topics["logs"], paced, PARTITIONS, rate)
            )
            while not sending.done():
                lags.append(await lag.now(client))
                await asyncio.sleep(0.2)
            await sending
            sent_at = time.monotonic()
            await lag.zero(client)
            drain_s = time.monotonic() - sent_at
    finally:
        count = await loop.stop() if loop is not None else Count()
        await consumer.stop()
        await admin.close()
        await load.stop_replicas([replica])
    records = sum(len(t.metrics) + len(t.logs) for t in paced)
    return {
        "sent_rate": records / (sent_at - began),
        "max": max(lags or [0.0]),
        "mean": float(np.mean(lags or [0.0])),
        "samples": len(lags),
        "drain_s": drain_s,
        "scrapes": count.answered,
        "failed": count.failed,
    }


async def run(bootstrap: str | None, nodes: int, progress: Progress) -> dict[str, Any]:
    step = progress.add_task("starting Kafka", total=4 + len(MODES) * REPEATS)
    broker = load.Broker(bootstrap)
    results: dict[str, Any] = {mode: [] for mode in MODES}
    try:
        bootstrap = broker.start()
        topics = topics_for(uuid.uuid4().hex[:8])
        ticks, figures = await load.produce_backlog(
            bootstrap, topics, (CLUSTERS, nodes, TICKS, PARTITIONS), progress, step
        )
        results |= figures
        total = figures["records"]
        # neighbours in time: the machine drifts over minutes, so each round compares its own runs
        for i in range(REPEATS):
            for mode in MODES:
                progress.update(step, advance=1, description=f"round {i + 1} of {REPEATS}: {mode}")
                results[mode].append(await throughput(bootstrap, topics, total, mode))
        rate = 0.5 * statistics.median(r["rate"] for r in results["without"])
        results["paced_rate"] = rate
        results["lag"] = {}
        for mode in ("without", "flat out"):
            progress.update(step, advance=1, description=f"lag at {rate:,.0f} rec/s, {mode}")
            results["lag"][mode] = await paced_lag(bootstrap, ticks, rate, mode)
    finally:
        broker.stop()
    return results


def _ratios(runs: list[dict[str, Any]], base: list[dict[str, Any]], key: str) -> str:
    each = [a[key] / b[key] for a, b in zip(runs, base, strict=True)]
    return f"{statistics.median(each):.2f}x (rounds " + " / ".join(f"{x:.2f}" for x in each) + ")"


def report(r: dict[str, Any], console: Console) -> None:
    table = Table(
        title=f"prexid bench scrape ({r['records']:,} records; {r['gpus']:,} GPUs on {r['nodes']:,} nodes; "
        f"{PARTITIONS} partitions, one replica; medians of {REPEATS} rounds, ratios round by round)"
    )
    for col in ("measure", "value", "target"):
        table.add_column(col)
    base = r["without"]
    for mode in MODES:
        runs = r[mode]
        rate = statistics.median(x["rate"] for x in runs)
        cores = " / ".join(f"{x['cores']:.2f}" for x in runs)
        if mode == "without":
            table.add_row("replica, no scrape loop", f"{rate:,.0f} rec/s (cores {cores})", "baseline")
            continue
        scrapes = " / ".join(f"{x['scrapes_per_s']:,.1f}/s" for x in runs)
        table.add_row(
            f"replica, scrape loop {mode}",
            f"{rate:,.0f} rec/s = {_ratios(runs, base, 'rate')}; per CPU second of the replica "
            f"{_ratios(runs, base, 'per_cpu_s')}; cores {cores}; scrapes answered {scrapes}, "
            f"failed {sum(x['failed'] for x in runs)}",
            ">= 0.95x" if mode == "1/s" else "(printed)",
        )
    for mode, lag in r["lag"].items():
        table.add_row(
            f"lag, {'no scrape loop' if mode == 'without' else 'scrape loop ' + mode}",
            f"sent at {lag['sent_rate']:,.0f} rec/s (asked {r['paced_rate']:,.0f}): max {lag['max']:,.0f}, "
            f"mean {lag['mean']:,.0f} records ({lag['samples']} samples); 0 again {lag['drain_s']:.1f} s "
            "after the last record"
            + (f"; {lag['scrapes']:,} scrapes, {lag['failed']} failed" if lag["scrapes"] else ""),
            "as without",
        )
    console.print(table)


def cmd_bench_scrape(args: argparse.Namespace) -> int:
    console = Console()
    with Progress(console=console, transient=True) as progress:
        results = asyncio.run(run(getattr(args, "bootstrap", None), getattr(args, "nodes", NODES), progress))
    report(results, console)
    console.print_json(orjson.dumps(results).decode())
    return 0
