"""`prexid bench scrape`: one `prexid run` replica consuming with a scrape loop against its read API, as
a ratio to the same replica without, in one bounded run on a real broker.

1. demo traffic for 128 clusters x `--nodes` (8) nodes x 8 GPUs (8,192 GPUs, 9,216 entities: a read
   view of ~0.6 MB of `/metrics` scores) over 10 scrapes of 15 s, ~760k records, is produced to
   4 partitions;
2. in rounds, a replica reads that backlog without, then with, a scrape loop (`scrape_loop.ScrapeLoop`:
   2 clients asking `/metrics` and `/api/v1/scores` in turn as fast as they are answered): records/s
   from the first poll past 10% of the backlog, once the replica holds every partition, to the first
   past 80% (as `prexid bench e2e`), and the scrapes answered in that window;
3. fresh topics get the same traffic at half the replica's rate without the loop, once without and
   once with it: the replica's lag (records written, not yet read) while it is sent, and the time
   until it is back to 0 after the last record.
The figures are printed; nothing here asserts them. Each replica run is bounded (5 min), and so is each
scrape loop (its run, and 200,000 requests).
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

from prexid.service.offline.bench import e2e_load as load
from prexid.service.offline.bench.scrape_loop import Count, ScrapeLoop

PARTITIONS = 4
CLUSTERS = 128
NODES = 8
TICKS = 10
REPEATS = 3
POLL_S = 0.5
RUN_LIMIT_S = 300.0
MAX_SCRAPES = 200_000
CLIENTS = 2


def topics_for(run: str) -> dict[str, str]:
    return {k: f"bench-scrape-{k}-{run}" for k in ("metrics", "logs", "alerts", "dead")}


async def serving(client: httpx.AsyncClient, replica: load.Replica) -> None:
    """Until the replica answers `/metrics` (its HTTP side is up; the loop may start)."""
    while True:
        try:
            if (await client.get(f"http://127.0.0.1:{replica.port}/metrics")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2)


def _window(count: Count, start: float, end: float) -> int:
    return sum(1 for t in count.answered_at if start <= t <= end)


async def throughput(bootstrap: str, topics: dict[str, str], total: int, scrape: bool) -> dict[str, Any]:
    """Records/s of one replica reading the backlog (with a scrape loop beside it if `scrape`)."""
    group = f"bench-scrape-{uuid.uuid4().hex[:6]}"
    [replica] = await load.start_replicas(load.replica_env(bootstrap, topics, group), 1)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    loop: ScrapeLoop | None = None
    start: tuple[float, float] | None = None
    end: tuple[float, float] | None = None
    cpu: list[float] = []
    try:
        async with asyncio.timeout(RUN_LIMIT_S), httpx.AsyncClient(timeout=10.0) as client:
            await serving(client, replica)
            if scrape:
                loop = ScrapeLoop(replica.port, CLIENTS, RUN_LIMIT_S, MAX_SCRAPES).start()
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
        count = await asyncio.to_thread(loop.stop) if loop is not None else Count()
        await admin.close()
        await load.stop_replicas([replica])
    if start is None or end is None or end[1] <= start[1]:
        raise RuntimeError("no throughput window")
    wall = end[0] - start[0]
    return {
        "rate": (end[1] - start[1]) / wall,
        "cores": (cpu[1] - cpu[0]) / wall,
        "scrapes_per_s": _window(count, start[0], end[0]) / wall,
        "scrapes": count.answered,
        "failed": count.failed,
        "errors": count.errors,
    }


async def paced_lag(bootstrap: str, ticks: list[load.Tick], rate: float, scrape: bool) -> dict[str, Any]:
    """The replica's lag while `ticks` are sent at `rate` records/s to fresh topics, and the seconds from
    the last record sent until the lag is 0 again."""
    topics = topics_for(uuid.uuid4().hex[:8])
    await load.create_topics(bootstrap, list(topics.values()), PARTITIONS)
    group = f"bench-scrape-lag-{uuid.uuid4().hex[:6]}"
    [replica] = await load.start_replicas(load.replica_env(bootstrap, topics, group), 1)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    tps = [TopicPartition(topics[t], p) for t in ("metrics", "logs") for p in range(PARTITIONS)]
    loop: ScrapeLoop | None = None
    lags: list[float] = []
    sent_at: float | None = None
    drain_s = float("nan")
    try:
        async with asyncio.timeout(RUN_LIMIT_S), httpx.AsyncClient(timeout=10.0) as client:
            await serving(client, replica)
            while await load.group_size(admin, group) != 1:  # noqa: ASYNC110 - the broker's state
                await asyncio.sleep(POLL_S)
            if scrape:
                loop = ScrapeLoop(replica.port, CLIENTS, RUN_LIMIT_S, MAX_SCRAPES).start()
            sending = asyncio.create_task(
                load.produce(bootstrap, topics["metrics"], topics["logs"], ticks, PARTITIONS, rate)
            )
            while True:
                read = await replica.consumed(client)  # first: the ends asked after are no smaller
                lag = sum((await consumer.end_offsets(tps)).values()) - read
                if not sending.done():
                    lags.append(lag)
                else:
                    sent_at = sent_at or time.monotonic()
                    if lag == 0:
                        break
                await asyncio.sleep(0.2)
            await sending
            drain_s = time.monotonic() - (sent_at or time.monotonic())
    finally:
        count = await asyncio.to_thread(loop.stop) if loop is not None else Count()
        await consumer.stop()
        await admin.close()
        await load.stop_replicas([replica])
    return {"lag": lags, "drain_s": drain_s, "scrapes": count.answered, "failed": count.failed}


async def run(bootstrap: str | None, nodes: int, progress: Progress) -> dict[str, Any]:
    step = progress.add_task("starting Kafka", total=4 + 2 * REPEATS)
    broker = load.Broker(bootstrap)
    results: dict[str, Any] = {"without": [], "with": []}
    try:
        bootstrap = broker.start()
        progress.update(step, advance=1, description="making traffic")
        ticks = load.traffic(CLUSTERS, TICKS * 15.0, nodes)
        total = sum(len(t.metrics) + len(t.logs) for t in ticks)
        results |= {"records": total, "gpus": CLUSTERS * nodes * 8, "nodes": CLUSTERS * nodes}
        topics = topics_for(uuid.uuid4().hex[:8])
        await load.create_topics(bootstrap, list(topics.values()), PARTITIONS)
        progress.update(step, advance=1, description=f"producing a backlog of {total:,} records")
        await load.produce(bootstrap, topics["metrics"], topics["logs"], ticks, PARTITIONS)
        # neighbours in time: the machine drifts over minutes, so each round compares its own pair
        for i in range(REPEATS):
            for scrape, key in ((False, "without"), (True, "with")):
                progress.update(step, advance=1, description=f"round {i + 1} of {REPEATS}, {key} scrapes")
                results[key].append(await throughput(bootstrap, topics, total, scrape))
        rate = 0.5 * statistics.median(r["rate"] for r in results["without"])
        results["paced_rate"] = rate
        progress.update(step, advance=1, description=f"lag at {rate:,.0f} rec/s, without scrapes")
        results["lag_without"] = await paced_lag(bootstrap, ticks, rate, scrape=False)
        progress.update(step, advance=1, description=f"lag at {rate:,.0f} rec/s, with scrapes")
        results["lag_with"] = await paced_lag(bootstrap, ticks, rate, scrape=True)
    finally:
        broker.stop()
    return results


def report(r: dict[str, Any], console: Console) -> None:
    each = [w["rate"] / wo["rate"] for w, wo in zip(r["with"], r["without"], strict=True)]
    table = Table(
        title=f"prexid bench scrape ({r['records']:,} records; {r['gpus']:,} GPUs on {r['nodes']:,} nodes; "
        f"{PARTITIONS} partitions, one replica; medians of {REPEATS} rounds)"
    )
    for col in ("measure", "value", "target"):
        table.add_column(col)
    without = statistics.median(x["rate"] for x in r["without"])
    with_ = statistics.median(x["rate"] for x in r["with"])
    table.add_row("replica, no scrape loop", f"{without:,.0f} rec/s", "baseline")
    table.add_row(
        f"replica, scrape loop ({CLIENTS} clients)",
        f"{with_:,.0f} rec/s = {statistics.median(each):.2f}x (rounds "
        + " / ".join(f"{x:.2f}" for x in each)
        + ")",
        ">= 0.90x",
    )
    table.add_row(
        "scrapes answered in the window",
        " / ".join(f"{x['scrapes_per_s']:,.0f}/s" for x in r["with"])
        + f"; failed {sum(x['failed'] for x in r['with'])}",
        "all answered",
    )
    table.add_row(
        "CPU of the replica (cores)",
        "without "
        + " / ".join(f"{x['cores']:.2f}" for x in r["without"])
        + "; with "
        + " / ".join(f"{x['cores']:.2f}" for x in r["with"]),
        "",
    )
    for key, label in (("lag_without", "no scrape loop"), ("lag_with", "scrape loop")):
        lag = r[key]
        lags = lag["lag"] or [0]
        table.add_row(
            f"lag at {r['paced_rate']:,.0f} rec/s, {label}",
            f"max {max(lags):,.0f}, mean {np.mean(lags):,.0f} records; 0 again {lag['drain_s']:.1f} s "
            f"after the last record"
            + (f"; {lag['scrapes']:,} scrapes, {lag['failed']} failed" if lag["scrapes"] else ""),
            "as without",
        )
    console.print(table)


def cmd_bench_scrape(args: argparse.Namespace) -> int:
    console = Console()
    with Progress(console=console, transient=True) as progress:
        results = asyncio.run(run(getattr(args, "bootstrap", None), getattr(args, "nodes", NODES), progress))
    report(results, console)
    summary = {k: v for k, v in results.items() if not k.startswith("lag_")}
    summary |= {k: {**v, "lag": max(v["lag"] or [0])} for k, v in results.items() if k.startswith("lag_")}
    console.print_json(orjson.dumps(summary).decode())
    return 0
