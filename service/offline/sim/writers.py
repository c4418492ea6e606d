"""Where simulated data goes: a columnar directory (fast replay), wire-format files, or Kafka topics.

Every output also gets `kernel.log` (RFC3164 lines), `labels.jsonl` (ground truth), `events.jsonl`
(benign events) and `meta.json`. The columnar form stores each hour as one float64 matrix
(`metrics-NNNNN.npz`: `ts[T]`, `values[T, S]`, NaN = not scraped) with `series.jsonl` naming the columns.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import IO, Protocol

import numpy as np
import orjson

from prexid.service.offline.sim.engine import ClusterSim, Frame
from prexid.service.offline.sim.wire import AdapterEncoder

CHUNK_TICKS = 240


class Sink(Protocol):
    def write(self, frame: Frame) -> None: ...

    def close(self) -> None: ...


def write_truth(sim: ClusterSim, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "labels.jsonl").write_bytes(b"".join(orjson.dumps(lab) + b"\n" for lab in sim.labels()))
    events = [dataclasses.asdict(e) for e in sim.schedule.events]
    (out / "events.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    meta: dict[str, object] = {"config": dataclasses.asdict(sim.cfg), "series": len(sim.series)}
    if sim.variant:  # today's physics keeps today's meta.json, byte for byte
        meta["variant"] = sim.physics.name
        meta["physics"] = sim.physics.knobs()
    (out / "meta.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))


class ColumnarSink:
    def __init__(self, sim: ClusterSim, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        rows = (orjson.dumps({"name": n, "labels": lab}) + b"\n" for n, lab in sim.series)
        (out / "series.jsonl").write_bytes(b"".join(rows))
        self.logs: IO[bytes] = (out / "kernel.log").open("wb")
        self.ts: list[float] = []
        self.values: list[np.ndarray] = []
        self.chunk = 0

    def write(self, frame: Frame) -> None:
        self.ts.append(frame.ts)
        self.values.append(frame.values)
        self.logs.writelines(line + b"\n" for _, line in frame.logs)
        if len(self.ts) >= CHUNK_TICKS:
            self._flush()

    def _flush(self) -> None:
        if not self.ts:
            return
        np.savez(
            self.out / f"metrics-{self.chunk:05d}.npz", ts=np.array(self.ts), values=np.vstack(self.values)
        )
        self.chunk += 1
        self.ts, self.values = [], []

    def close(self) -> None:
        self._flush()
        self.logs.close()


class WireSink:
    """prometheus-kafka-adapter JSON lines (`metrics.jsonl`), one sample per line, as on the Kafka topic."""

    def __init__(self, sim: ClusterSim, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.encoder = AdapterEncoder(sim.series)
        self.metrics: IO[bytes] = (out / "metrics.jsonl").open("wb")
        self.logs: IO[bytes] = (out / "kernel.log").open("wb")

    def write(self, frame: Frame) -> None:
        self.metrics.write(self.encoder.encode(frame.ts, frame.values))
        self.logs.writelines(line + b"\n" for _, line in frame.logs)

    def close(self) -> None:
        self.metrics.close()
        self.logs.close()


class KafkaSink:
    """Produces each sample to the metrics topic and each line to the logs topic, keyed by node."""

    def __init__(self, sim: ClusterSim, bootstrap: str, metrics_topic: str, logs_topic: str) -> None:
        from aiokafka import AIOKafkaProducer
        from aiokafka.partitioner import DefaultPartitioner

        self.encoder = AdapterEncoder(sim.series)
        self.keys = [(lab.get("Hostname") or lab["instance"].split(":")[0]).encode() for _, lab in sim.series]
        self.topics = (metrics_topic, logs_topic)
        self.partitioner = DefaultPartitioner()
        self.partitions: dict[str, list[int]] = {}
        self.partition_of: dict[bytes, int] = {}  # keyed as Kafka's default partitioner would
        self.loop = asyncio.new_event_loop()  # its own loop: the simulator's tick loop is synchronous

        async def start() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
            await producer.start()
            return producer

        self.producer = self.loop.run_until_complete(start())

    def write(self, frame: Frame) -> None:
        self.loop.run_until_complete(self._send(frame))

    async def _send(self, frame: Frame) -> None:
        present = np.flatnonzero(~np.isnan(frame.values)).tolist()
        lines = self.encoder.encode(frame.ts, frame.values).splitlines()
        await self._send_batches(
            self.topics[0], [(self.keys[i], line) for i, line in zip(present, lines, strict=True)], frame.ts
        )
        for ts, line in frame.logs:
            host = line.split()[3]  # RFC3164: Mmm dd hh:mm:ss HOST ...
            await self.producer.send(self.topics[1], line, key=host, timestamp_ms=int(ts * 1000))

    async def _send_batches(self, topic: str, records: list[tuple[bytes, bytes]], ts: float) -> None:
        """One producer batch per partition and scrape: far cheaper than one send() per sample."""
        if topic not in self.partitions:
            self.partitions[topic] = sorted(await self.producer.partitions_for(topic))
        parts = self.partitions[topic]
        by_part: dict[int, list[tuple[bytes, bytes]]] = {}
        for key, value in records:
            p = self.partition_of.get(key)
            if p is None:
                p = self.partition_of[key] = int(self.partitioner(key, parts, parts))
            by_part.setdefault(p, []).append((key, value))
        stamp = int(ts * 1000)
        for p, recs in by_part.items():
            batch = self.producer.create_batch()
            for key, value in recs:
                if batch.append(key=key, value=value, timestamp=stamp) is None:
                    await self.producer.send_batch(batch, topic, partition=p)
                    batch = self.producer.create_batch()
                    batch.append(key=key, value=value, timestamp=stamp)
            await self.producer.send_batch(batch, topic, partition=p)

    def close(self) -> None:
        self.loop.run_until_complete(self.producer.flush())
        self.loop.run_until_complete(self.producer.stop())
        self.loop.close()
