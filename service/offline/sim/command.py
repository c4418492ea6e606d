"""`prexid simulate`: run the seeded cluster simulator into files or Kafka, with a progress bar."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.engine import ClusterSim
from prexid.service.offline.sim.writers import ColumnarSink, KafkaSink, Sink, WireSink, write_truth


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", type=Path, required=True, help="directory for data, labels.jsonl and events.jsonl"
    )
    p.add_argument("--nodes", type=int, default=63)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--days", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--failures-per-day", type=float, default=8.0)
    p.add_argument(
        "--format",
        choices=("columnar", "wire", "kafka"),
        default="columnar",
        help="columnar: npz matrices (fast replay); wire: adapter JSON lines; kafka: produce to topics",
    )
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--metrics-topic", default="prexid.metrics")
    p.add_argument("--logs-topic", default="prexid.kernel-logs")


def cmd_simulate(args: argparse.Namespace, **overrides: float) -> int:
    """Simulate into `args.out`; `overrides` set other SimConfig fields (tests shorten the warm-up)."""
    console = Console(stderr=True)
    cfg = SimConfig(
        nodes=args.nodes,
        gpus=args.gpus,
        days=args.days,
        seed=args.seed,
        failures_per_day=args.failures_per_day,
        **overrides,  # type: ignore[arg-type]
    )
    sim = ClusterSim(cfg)
    write_truth(sim, args.out)
    sink: Sink
    if args.format == "columnar":
        sink = ColumnarSink(sim, args.out)
    elif args.format == "wire":
        sink = WireSink(sim, args.out)
    else:
        sink = KafkaSink(sim, args.bootstrap, args.metrics_topic, args.logs_topic)
    started = time.perf_counter()
    with progress(console) as bar:
        task = bar.add_task(f"simulating {cfg.nodes}x{cfg.gpus} GPUs, {cfg.days:g} d", total=cfg.ticks)
        for frame in sim.frames():
            sink.write(frame)
            bar.advance(task)
    sink.close()
    wall = time.perf_counter() - started
    samples = cfg.ticks * len(sim.series)
    console.print(
        f"{cfg.ticks} scrapes x {len(sim.series)} series in {wall:.1f} s "
        f"({samples / wall / 1e6:.2f} M samples/s, {cfg.days * 86400 / wall:.0f}x real time); "
        f"{len(sim.failures)} labelled failures -> {args.out}"
    )
    return 0


def progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )
