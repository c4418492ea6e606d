"""`prexid simulate`: run the seeded cluster simulator into files or Kafka, with a progress bar."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
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
from prexid.service.offline.sim.variants import NAMES, resolve
from prexid.service.offline.sim.writers import ColumnarSink, KafkaSink, Sink, WireSink, write_truth


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        type=Path,
        help="directory for data, labels.jsonl and events.jsonl (required but with --format kafka, "
        "where it only receives the labels and events)",
    )
    p.add_argument("--nodes", type=int, default=63)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--days", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--failures-per-day", type=float, default=8.0)
    p.add_argument(
        "--variant",
        default="default",
        metavar="NAME",
        help=f"physics variant ({', '.join(NAMES)}); random and wide draw every knob from its range "
        "per --seed (docs/simulator.md)",
    )
    p.add_argument(
        "--format",
        choices=("columnar", "wire", "kafka"),
        default="columnar",
        help="columnar: npz matrices (fast replay); wire: adapter JSON lines; kafka: produce to topics",
    )
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--metrics-topic", default="prexid.metrics")
    p.add_argument("--logs-topic", default="prexid.kernel-logs")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="pace event time to wall time (with --speed), starting now: a live cluster for the dashboard",
    )
    p.add_argument("--speed", type=float, default=1.0, help="with --realtime: simulated seconds per second")


class Pacer:
    """Holds each frame back until wall time has caught up with its event time, `speed` times faster."""

    def __init__(
        self,
        start_ts: float,
        speed: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.start_ts, self.speed, self.clock, self.sleep = start_ts, speed, clock, sleep
        self.started = clock()

    def wait_for(self, ts: float) -> None:
        due = self.started + (ts - self.start_ts) / self.speed
        if (ahead := due - self.clock()) > 0:
            self.sleep(ahead)


def cmd_simulate(args: argparse.Namespace, **overrides: float) -> int:
    """Simulate into `args.out`; `overrides` set other SimConfig fields (tests shorten the warm-up)."""
    console = Console(stderr=True)
    if args.out is None and args.format != "kafka":
        console.print(f"[red]--out is required with --format {args.format}[/red]")
        return 2
    if args.speed <= 0:
        console.print("[red]--speed must be above 0[/red]")
        return 2
    if args.realtime:  # a live cluster: its event time starts now, on a scrape boundary
        overrides = {"start": float(int(time.time()) // 15 * 15), **overrides}
    cfg = SimConfig(
        nodes=args.nodes,
        gpus=args.gpus,
        days=args.days,
        seed=args.seed,
        failures_per_day=args.failures_per_day,
        **overrides,  # type: ignore[arg-type]
    )
    sim = ClusterSim(cfg, resolve(getattr(args, "variant", "default"), args.seed))
    if args.out is not None:
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
        what = f"simulating {cfg.nodes}x{cfg.gpus} GPUs, {cfg.days:g} d"
        if sim.variant:
            what += f", variant {sim.physics.name}"
        task = bar.add_task(what, total=cfg.ticks)
        pacer = Pacer(cfg.start, args.speed) if args.realtime else None
        for frame in sim.frames():
            if pacer is not None:
                pacer.wait_for(frame.ts)
            sink.write(frame)
            bar.advance(task)
    sink.close()
    wall = time.perf_counter() - started
    samples = cfg.ticks * len(sim.series)
    console.print(
        f"{cfg.ticks} scrapes x {len(sim.series)} series in {wall:.1f} s "
        f"({samples / wall / 1e6:.2f} M samples/s, {cfg.days * 86400 / wall:.0f}x real time); "
        f"{len(sim.failures)} labelled failures -> {args.out or args.bootstrap}"
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
