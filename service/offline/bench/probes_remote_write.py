"""`prexid bench probes --feed remote-write`: the probes' answers while a `prexid run` replica in
`remote_write = "local"` mode scores what Prometheus sends it, as a ratio to the same replica idle.

The same measure as the Kafka feed's (`probes.py`: `/healthz` every 0.1 s, `/metrics` every 0.25 s,
busy while the replica's `prexid_messages_total` goes from its first request to the last, idle from
1 s after), on the same traffic (128 clusters x `--nodes` nodes x 8 GPUs over 8 scrapes of 15 s), sent
as Prometheus's remote_write queue sends it (`remote_write_load.py`: `SENDERS` shards, by node, each
posting its requests of at most 2000 samples in order, one at a time, waiting `Retry-After` on a 429
as Prometheus does with `retry_on_http_429`). No broker: the replica's feed is its own HTTP intake.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from rich.progress import Progress

from prexid.service.offline.bench import e2e_load as load
from prexid.service.offline.bench import probes
from prexid.service.offline.bench.remote_write_load import bodies

SENDERS = 4  # Prometheus's queue starts with one shard and adds them as it falls behind: a backlog
RETRY_S = 0.1  # after a 5xx or a refused connection (Prometheus: min_backoff 30 ms, doubling)
HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


async def send(client: httpx.AsyncClient, url: str, requests: list[bytes], throttled: list[int]) -> None:
    """Post `requests` in order, each until answered 204 (a 429 waits `Retry-After`)."""
    for payload in requests:
        while True:
            try:
                resp = await client.post(url, content=payload, headers=HEADERS)
            except httpx.TransportError:
                await asyncio.sleep(RETRY_S)
                continue
            if resp.status_code == 204:
                break
            if resp.status_code == 429:
                throttled.append(1)
                await asyncio.sleep(float(resp.headers.get("retry-after", "1")))
            elif resp.status_code >= 500:
                await asyncio.sleep(RETRY_S)
            else:
                raise RuntimeError(f"remote_write answered {resp.status_code}: {resp.text[:200]}")


def replica_env() -> dict[str, str]:
    return {
        **load.replica_env("127.0.0.1:9", {k: "unused" for k in ("metrics", "logs", "alerts", "dead")}, "-"),
        "PREXID_REMOTE_WRITE": "local",  # Kafka is never asked (nothing listens at :9)
    }


async def one_round(shards: list[list[bytes]]) -> dict[str, Any]:
    """A fresh replica is sent every request while both paths are asked; then idles."""
    [replica] = await load.start_replicas(replica_env(), 1)
    throttled: list[int] = []

    async def feed(client: httpx.AsyncClient, base: str) -> None:
        await asyncio.gather(*(send(client, base + "/api/v1/write", s, throttled) for s in shards))

    try:
        result = await probes.measure(replica, sum(map(len, shards)), feed)
    finally:
        await load.stop_replicas([replica])
    return result | {"throttled": len(throttled)}


async def run(nodes: int, repeats: int, progress: Progress) -> dict[str, Any]:
    step = progress.add_task("making traffic", total=1 + repeats)
    ticks = load.traffic(probes.CLUSTERS, probes.TICKS * 15.0, nodes)
    shards = bodies(([payload for _, payload in t.metrics] for t in ticks), SENDERS)
    requests = sum(map(len, shards))
    samples = sum(len(t.metrics) for t in ticks)
    results: dict[str, Any] = {
        "records": requests,
        "samples": samples,
        "setup": f"{requests:,} remote_write requests of {samples:,} samples from {SENDERS} senders; "
        f"{probes.CLUSTERS * nodes * 8:,} GPUs on {probes.CLUSTERS * nodes:,} nodes; one replica, "
        'remote_write = "local"',
        "rounds": [],
    }
    for i in range(repeats):
        progress.update(step, advance=1, description=f"round {i + 1} of {repeats}")
        results["rounds"].append(await one_round(shards))
    return results
