"""`prexid bench probes`: how long a `prexid run` replica takes to answer `/healthz` and `/metrics` while it
reads a backlog, as a ratio to the same replica idle, in one bounded run on a real broker.

Kubernetes kills a pod whose liveness probe (`/healthz`, helm: 3 s timeout) fails 4 times in a row, and
Prometheus gives up a scrape after its timeout: a replica catching up after a restart must go on
answering both. So:

1. demo traffic for 128 clusters x `--nodes` (8) nodes x 8 GPUs over 8 scrapes of 15 s, ~600k records,
   is produced to 4 partitions (the first scrapes create every series: the heaviest batches);
2. in rounds, a replica is started on a fresh group and reads that backlog from the start, while this
   process asks `/healthz` every 0.1 s and `/metrics` every 0.25 s (each one request at a time, as a
   probe and a scraper do), and keeps asking for `IDLE_S` once it has read everything;
3. "busy" requests are those sent while the replica read the backlog (its own `prexid_messages_total`,
   from the `/metrics` answers: from the request whose answer first showed a record read to the one
   that showed them all); "idle" those sent from 1 s after it had read all of it. Per round and path:
   p50, p99 and the longest answer, busy over idle (the ratio), and how many `/healthz` answers took
   longer than the helm liveness timeout. The replica's rate is taken from 5% to 95% of the backlog.

`--feed remote-write`: the same for a replica in `remote_write = "local"` mode (no broker), sent the
same traffic as Prometheus's remote_write queue sends it (`remote_write_load.py`: `SENDERS` shards by
node, each posting its requests of at most 2000 samples in order, one at a time, waiting `Retry-After`
on a 429); "records" are then requests (each one `prexid_messages_total`).
The figures are printed; nothing here asserts them. Each round is bounded (`RUN_LIMIT_S`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import orjson
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from prexid.service.offline.bench import e2e_load as load
from prexid.service.offline.bench import remote_write_load as rw

PARTITIONS = 4
CLUSTERS = 128
NODES = 8
TICKS = 8
REPEATS = 2
IDLE_S = 5.0
RUN_LIMIT_S = 300.0
LIVENESS_TIMEOUT_S = 3.0  # helm/prexid/templates/deployment.yaml
PATHS = {"/healthz": 0.1, "/metrics": 0.25}  # path -> pause after each answer
SENDERS = 4  # remote-write feed: Prometheus's queue adds shards (senders) as it falls behind
REQUEST_TIMEOUT_S = 120.0  # far past any probe's: the bench measures how long, it does not give up


def topics_for(run: str) -> dict[str, str]:
    return {k: f"bench-probes-{k}-{run}" for k in ("metrics", "logs", "alerts", "dead")}


@dataclass
class Samples:
    """Each request of one path: when it was sent (monotonic) and how long until answered (inf: failed)."""

    sent: list[float] = field(default_factory=list)
    took: list[float] = field(default_factory=list)


@dataclass
class Progressed:
    """The replica's records read, as its `/metrics` answers said: when each was asked and answered."""

    sent: list[float] = field(default_factory=list)
    at: list[float] = field(default_factory=list)
    read: list[float] = field(default_factory=list)


async def ask(
    client: httpx.AsyncClient, url: str, pause_s: float, out: Samples, progressed: Progressed | None
) -> None:
    """GET `url` one request at a time until cancelled; `/metrics` answers also say records read."""
    while True:
        sent = time.monotonic()
        try:
            resp = await client.get(url)
            took = time.monotonic() - sent if resp.status_code == 200 else np.inf
        except httpx.HTTPError:
            took = np.inf
            resp = None
        out.sent.append(sent)
        out.took.append(took)
        if progressed is not None and resp is not None and resp.status_code == 200:
            progressed.sent.append(sent)
            progressed.at.append(time.monotonic())
            progressed.read.append(load.messages_total(resp.text))
        await asyncio.sleep(pause_s)


def first(p: Progressed, at_least: float) -> int | None:
    """The first `/metrics` answer saying at least `at_least` records were read."""
    return next((i for i, n in enumerate(p.read) if n >= at_least), None)


Feed = Callable[
    [httpx.AsyncClient, str], Coroutine[Any, Any, None]
]  # sends the replica its records (client, base URL)


async def measure(replica: load.Replica, total: float, feed: Feed | None = None) -> dict[str, Any]:
    """Both paths asked while `replica` reads `total` records (`feed`, if given, sends them once it is
    up), then while it idles; the busy window, its rate, and each path's busy and idle answers."""
    samples = {path: Samples() for path in PATHS}
    progressed = Progressed()
    tasks: list[asyncio.Task[None]] = []
    async with asyncio.timeout(RUN_LIMIT_S), httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as client:
        try:
            await replica.answering(client, "/healthz", 0.1)
            base = f"http://127.0.0.1:{replica.port}"
            tasks = [
                asyncio.create_task(
                    ask(client, base + path, pause, samples[path], progressed if path == "/metrics" else None)
                )
                for path, pause in PATHS.items()
            ]
            if feed is not None:
                tasks.append(asyncio.create_task(feed(client, base)))
            while first(progressed, total) is None:  # noqa: ASYNC110 - the replica's state
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0 + IDLE_S)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    began, done = first(progressed, 1), first(progressed, total)
    low, high = first(progressed, 0.05 * total), first(progressed, 0.95 * total)
    if began is None or done is None or low is None or high is None or high <= low:
        raise RuntimeError("no busy window")
    # busy: asked from the request whose answer first showed records read (asked, maybe, while the
    # first batch ran) until the one that showed them all; idle: from 1 s after that one was answered
    start, end, idle_from = progressed.sent[began], progressed.sent[done], progressed.at[done] + 1.0
    p = progressed
    result: dict[str, Any] = {
        "busy_s": end - start,
        "rate": (p.read[high] - p.read[low]) / (p.at[high] - p.at[low]),
    }
    for path, s in samples.items():
        busy = [t for at, t in zip(s.sent, s.took, strict=True) if start <= at < end]
        idle = [t for at, t in zip(s.sent, s.took, strict=True) if at >= idle_from]
        result[path] = {"busy": busy, "idle": idle}
    return result


async def one_round(bootstrap: str, topics: dict[str, str], total: int) -> dict[str, Any]:
    """A fresh replica reads the backlog from the start while both paths are asked; then idles."""
    group = f"bench-probes-{uuid.uuid4().hex[:6]}"
    [replica] = await load.start_replicas(load.replica_env(bootstrap, topics, group), 1)
    try:
        return await measure(replica, total)
    finally:
        await load.stop_replicas([replica])


async def run(bootstrap: str | None, nodes: int, repeats: int, progress: Progress) -> dict[str, Any]:
    step = progress.add_task("starting Kafka", total=2 + repeats)
    broker = load.Broker(bootstrap)
    results: dict[str, Any] = {"rounds": []}
    try:
        bootstrap = broker.start()
        topics = topics_for(uuid.uuid4().hex[:8])
        shape = (CLUSTERS, nodes, TICKS, PARTITIONS)
        _, figures = await load.produce_backlog(bootstrap, topics, shape, progress, step)
        results |= figures
        total = figures["records"]
        results["setup"] = (
            f"{total:,} records; {figures['gpus']:,} GPUs on {figures['nodes']:,} nodes; "
            f"{PARTITIONS} partitions, one replica reading them from the start"
        )
        for i in range(repeats):
            progress.update(step, advance=1, description=f"round {i + 1} of {repeats}")
            results["rounds"].append(await one_round(bootstrap, topics, total))
    finally:
        broker.stop()
    return results


def local_replica_env() -> dict[str, str]:
    """A replica in `remote_write = "local"` mode: its feed is its own HTTP intake, no broker."""
    return {**os.environ, "PREXID_REMOTE_WRITE": "local", "PREXID_KAFKA_BOOTSTRAP": "127.0.0.1:9"}


async def one_round_remote_write(shards: list[list[bytes]]) -> dict[str, Any]:
    """A fresh local-mode replica is sent every request (`SENDERS` at once) while both paths are
    asked; then idles."""
    [replica] = await load.start_replicas(local_replica_env(), 1)
    throttled: list[int] = []

    async def feed(client: httpx.AsyncClient, base: str) -> None:
        await asyncio.gather(*(rw.send(client, base + "/api/v1/write", s, throttled) for s in shards))

    try:
        result = await measure(replica, sum(map(len, shards)), feed)
    finally:
        await load.stop_replicas([replica])
    return result | {"throttled": len(throttled)}


async def run_remote_write(nodes: int, repeats: int, progress: Progress) -> dict[str, Any]:
    step = progress.add_task("making traffic", total=1 + repeats)
    ticks = load.traffic(CLUSTERS, TICKS * 15.0, nodes)
    shards = rw.bodies(([payload for _, payload in t.metrics] for t in ticks), SENDERS)
    requests = sum(map(len, shards))
    samples = sum(len(t.metrics) for t in ticks)
    results: dict[str, Any] = {
        "records": requests,
        "samples": samples,
        "setup": f"{requests:,} remote_write requests of {samples:,} samples from {SENDERS} senders; "
        f"{CLUSTERS * nodes * 8:,} GPUs on {CLUSTERS * nodes:,} nodes; one replica, "
        'remote_write = "local"',
        "rounds": [],
    }
    for i in range(repeats):
        progress.update(step, advance=1, description=f"round {i + 1} of {repeats}")
        results["rounds"].append(await one_round_remote_write(shards))
    return results


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def summary(times: list[float]) -> str:
    failed = sum(1 for t in times if not np.isfinite(t))
    ok = [t for t in times if np.isfinite(t)]
    top = max(ok) if ok else float("nan")
    text = f"p50 {pct(ok, 50) * 1000:,.1f} ms, p99 {pct(ok, 99) * 1000:,.1f} ms, max {top * 1000:,.1f} ms"
    return text + (f", {failed} failed" if failed else "") + f" ({len(times)})"


def ratios(rounds: list[dict[str, Any]], path: str, q: float | None) -> tuple[float, str]:
    """Busy over idle, round by round (p`q`, or the longest with `q` None), and their median."""

    def stat(values: list[float]) -> float:
        ok = [t for t in values if np.isfinite(t)] or [np.nan]
        return max(ok) if q is None else pct(ok, q)

    each = [stat(r[path]["busy"]) / stat(r[path]["idle"]) for r in rounds]
    return statistics.median(each), " / ".join(f"{x:,.0f}" for x in each)


def figures(r: dict[str, Any]) -> dict[str, Any]:
    """The results with each path's answers as p50, p99, longest and failures (seconds), not listed."""

    def stats(times: list[float]) -> dict[str, float]:
        ok = [t for t in times if np.isfinite(t)]
        top = max(ok) if ok else float("nan")
        return {
            "n": len(times),
            "p50": pct(ok, 50),
            "p99": pct(ok, 99),
            "max": top,
            "failed": len(times) - len(ok),
        }

    rounds = [
        {k: ({m: stats(v[m]) for m in ("busy", "idle")} if k in PATHS else v) for k, v in x.items()}
        for x in r["rounds"]
    ]
    return r | {"rounds": rounds}


def report(r: dict[str, Any], console: Console) -> None:
    rounds = r["rounds"]
    table = Table(title=f"prexid bench probes ({r['setup']}; {len(rounds)} rounds)")
    for col in ("measure", "value", "target"):
        table.add_column(col)
    busy_s = " / ".join(f"{x['busy_s']:.1f} s at {x['rate']:,.0f} rec/s" for x in rounds)
    table.add_row("busy window (reading the backlog; rate: 5% to 95% of it)", busy_s, "")
    for path in PATHS:
        for i, x in enumerate(rounds):
            table.add_row(f"{path} idle, round {i + 1}", summary(x[path]["idle"]), "baseline")
            table.add_row(f"{path} busy, round {i + 1}", summary(x[path]["busy"]), "")
        p99, p99_runs = ratios(rounds, path, 99)
        top, top_runs = ratios(rounds, path, None)
        table.add_row(
            f"{path} busy / idle",
            f"p99 {p99:,.1f}x (rounds {p99_runs}); longest {top:,.1f}x (rounds {top_runs})",
            "<= 10x",
        )
    slow = [sum(1 for t in x["/healthz"]["busy"] if t > LIVENESS_TIMEOUT_S) for x in rounds]
    table.add_row(
        f"/healthz answers over the liveness timeout ({LIVENESS_TIMEOUT_S:.0f} s), busy",
        " / ".join(f"{n} of {len(x['/healthz']['busy'])}" for n, x in zip(slow, rounds, strict=True)),
        "0",
    )
    if "throttled" in rounds[0]:  # remote_write: requests answered 429 (queue full), then sent again
        table.add_row(
            "requests answered 429, sent again", " / ".join(f"{x['throttled']:,}" for x in rounds), ""
        )
    console.print(table)


def cmd_bench_probes(args: argparse.Namespace) -> int:
    console = Console()
    nodes = getattr(args, "nodes", NODES)
    with Progress(console=console, transient=True) as progress:
        if getattr(args, "feed", "kafka") == "remote-write":
            results = asyncio.run(run_remote_write(nodes, REPEATS, progress))
        else:
            results = asyncio.run(run(getattr(args, "bootstrap", None), nodes, REPEATS, progress))
    report(results, console)
    console.print_json(orjson.dumps(figures(results)).decode())
    return 0
