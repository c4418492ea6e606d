"""What `prexid bench e2e` drives: a broker, demo traffic with many faults, replicas as processes.

Traffic is several small demo clusters side by side (hosts renamed `cK-node-NN`), each with its own
GPU fault at a different time, so one run has enough alerts for latency percentiles.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import GroupCoordinatorNotAvailableError
from prometheus_client.parser import text_string_to_metric_families
from rich.progress import Progress, TaskID

from prexid.service.pipeline.series_registry import node_of
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate

KAFKA_SH = Path(__file__).resolve().parents[3] / "deploy" / "kafka" / "kafka.sh"


@dataclass(frozen=True)
class Tick:
    ts: float
    metrics: list[tuple[bytes, bytes]]  # (key, payload)
    logs: list[tuple[bytes, bytes]]


def traffic(clusters: int, duration_s: float = 1800.0, nodes: int = 2) -> list[Tick]:
    """`clusters` demo clusters of `nodes` nodes x 8 GPUs, fault k's Xid at 1500 + 20k s."""
    sims = [
        simulate(
            DemoCluster(
                nodes=nodes, gpus=8, duration_s=duration_s, seed=k, fault=DemoFault(0, k % 8, 1500 + 20 * k)
            )
        )
        for k in range(clusters)
    ]
    ticks = []
    for parts in zip(*sims, strict=True):
        metrics, logs = [], []
        for k, part in enumerate(parts):
            rename = (b"node-", f"c{k}-node-".encode())
            for payload in part.metrics:
                payload = payload.replace(*rename)
                metrics.append((node_of(orjson.loads(payload)["labels"]).encode(), payload))
            logs += [(line.split()[3], line) for line in (raw.replace(*rename) for raw in part.logs)]
        ticks.append(Tick(parts[0].ts, metrics, logs))
    return ticks


def child_result(module: str, *args: str, timeout_s: float = 600) -> dict[str, Any]:
    """Run a bench child process (`python -m module args`) and read the JSON line it ends with."""
    out = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, check=True, timeout=timeout_s
    )
    return dict(orjson.loads(out.stdout.strip().splitlines()[-1]))


def free_port() -> int:
    """A loopback port nobody holds right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """The dev broker script on free ports and a throwaway state dir (or an existing bootstrap)."""

    def __init__(self, bootstrap: str | None) -> None:
        self.bootstrap = bootstrap or ""
        self.env: dict[str, str] | None = None

    def start(self) -> str:
        if self.bootstrap:
            return self.bootstrap
        ports = [free_port(), free_port()]
        state = tempfile.mkdtemp(prefix="prexid-bench-kafka-")
        self.env = {**os.environ, "KAFKA_PORT": str(ports[0]), "KAFKA_CONTROLLER_PORT": str(ports[1])}
        self.env["KAFKA_STATE_DIR"] = state
        out = subprocess.run(
            [str(KAFKA_SH), "start"], env=self.env, capture_output=True, text=True, check=False
        )
        found = re.search(r"ready: bootstrap=(\S+)", out.stdout)
        if out.returncode or not found:
            raise RuntimeError(f"could not start Kafka with {KAFKA_SH}:\n{out.stdout}{out.stderr}")
        self.bootstrap = found[1]
        return self.bootstrap

    def stop(self) -> None:
        if self.env is not None:
            subprocess.run([str(KAFKA_SH), "stop"], env=self.env, capture_output=True, check=False)


async def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
        while True:  # wait for leaders
            described = await admin.describe_topics(names)
            if all(d["partitions"] and all(p["leader"] >= 0 for p in d["partitions"]) for d in described):
                return
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    metrics: str,
    logs: str,
    ticks: list[Tick],
    partitions: int,
    records_per_s: float | None = None,
) -> list[float]:
    """Send ticks (paced to `records_per_s` if given); returns the epoch time each tick's sending
    began. A replica may score a tick before the broker has acknowledged all of it to the producer,
    so the latency counted from here includes the tick's own sending (tens of ms): an upper bound.

    Nodes are dealt to the `partitions` in turn, the same partition index in both topics (one node's
    records meet in one shard, as hashing the key does): the bench's 128 node names hashed into 4
    partitions split 55/73 between two replicas, and the two-replica figure measured that luck (at
    most 1.75x one), not prexid. At thousands of nodes a hash splits them evenly enough."""
    loop = asyncio.get_running_loop()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    placed: dict[bytes, int] = {}
    sent: list[float] = []
    start = loop.time()
    count = 0
    try:
        for tick in ticks:
            sent.append(time.time())
            ms = int(tick.ts * 1000)
            for key, payload in tick.metrics:
                at = placed.setdefault(key, len(placed) % partitions)
                await producer.send(metrics, payload, key=key, partition=at, timestamp_ms=ms)
            if tick.logs:  # a kernel line is written after the scrapes that precede it, as live
                await producer.flush()
            for key, line in tick.logs:
                at = placed.setdefault(key, len(placed) % partitions)
                await producer.send(logs, line, key=key, partition=at, timestamp_ms=ms)
            count += len(tick.metrics) + len(tick.logs)
            if records_per_s:
                await producer.flush()
                await asyncio.sleep(max(0.0, start + count / records_per_s - loop.time()))
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def replica_env(bootstrap: str, topics: dict[str, str], group: str) -> dict[str, str]:
    """A replica as deployed (the default checkpoint interval), on the bench's topics and group."""
    return {
        **os.environ,
        "PREXID_KAFKA_BOOTSTRAP": bootstrap,
        "PREXID_GROUP_ID": group,
        "PREXID_METRICS_TOPICS": orjson.dumps([topics["metrics"]]).decode(),
        "PREXID_LOGS_TOPICS": orjson.dumps([topics["logs"]]).decode(),
        "PREXID_ALERTS_TOPIC": topics["alerts"],
        "PREXID_DEAD_LETTER_TOPIC": topics["dead"],
        "PREXID_STATE_TOPIC": f"{topics['metrics']}.{group}.state",
        "PREXID_SESSION_TIMEOUT_MS": "6000",
    }


@dataclass(frozen=True)
class Replica:
    """A `prexid run` process and the port of its HTTP side."""

    proc: asyncio.subprocess.Process
    port: int

    async def consumed(self, client: httpx.AsyncClient) -> float:
        """Records it has read (`prexid_messages_total`, both streams); 0 until it serves /metrics."""
        try:
            text = (await client.get(f"http://127.0.0.1:{self.port}/metrics")).text
        except httpx.TransportError:
            return 0.0
        return messages_total(text)

    async def answering(self, client: httpx.AsyncClient, path: str, every_s: float) -> None:
        """Until it answers `path` with 200 (its HTTP side is up), asked every `every_s` seconds."""
        while True:
            try:
                if (await client.get(f"http://127.0.0.1:{self.port}{path}")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(every_s)


async def start_replicas(env: dict[str, str], n: int) -> list[Replica]:
    replicas = []
    for _ in range(n):
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "prexid.service.app.cli",
            "run",
            env={**env, "PREXID_HTTP_PORT": str(port)},
            stderr=asyncio.subprocess.DEVNULL,
        )
        replicas.append(Replica(proc, port))
    return replicas


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the most resident memory the process ever had."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(found[1]) / 1024 if found else float("nan")


async def stop_replicas(replicas: list[Replica]) -> list[float]:
    """Peak RSS of each replica, then a clean stop (SIGTERM: final checkpoint)."""
    peaks = [peak_rss_mib(r.proc.pid) for r in replicas]
    for r in replicas:
        r.proc.terminate()
    for r in replicas:
        await asyncio.wait_for(r.proc.wait(), 30)
    return peaks


async def group_size(admin: AIOKafkaAdminClient, group: str) -> int:
    """Members of `group` once it is stable (partitions assigned), else 0."""
    try:
        [response] = await admin.describe_consumer_groups([group])
    except GroupCoordinatorNotAvailableError:
        return 0
    _, _, state, _, _, members, *_ = response.groups[0]
    return len(members) if state == "Stable" else 0


def messages_total(text: str) -> float:
    """Records a replica has read (`prexid_messages_total`, both streams) in its `/metrics` text."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        if family.name == "prexid_messages"
        for s in family.samples
        if s.name == "prexid_messages_total"
    )


async def produce_backlog(
    bootstrap: str,
    topics: dict[str, str],
    shape: tuple[int, int, int, int],
    progress: Progress,
    step: TaskID,
) -> tuple[list[Tick], dict[str, Any]]:
    """A backlog on fresh `topics` for the Kafka benches: `shape` is (clusters, nodes each, ticks,
    partitions). Returns the traffic and the figures a report names (records, GPUs, nodes)."""
    clusters, nodes, ticks, partitions = shape
    progress.update(step, advance=1, description="making traffic")
    sent = traffic(clusters, ticks * 15.0, nodes)
    total = sum(len(t.metrics) + len(t.logs) for t in sent)
    await create_topics(bootstrap, list(topics.values()), partitions)
    progress.update(step, advance=1, description=f"producing a backlog of {total:,} records")
    await produce(bootstrap, topics["metrics"], topics["logs"], sent, partitions)
    return sent, {"records": total, "gpus": clusters * nodes * 8, "nodes": clusters * nodes}
