"""The `prexid` command line: `demo`, `run`, and the offline tools."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence

from rich.console import Console

from service.pipeline import Pipeline
from service.processor import Processor
from service.settings import Settings
from service.state import ServiceState


def build(settings: Settings, state: ServiceState | None = None) -> tuple[ServiceState, Processor]:
    """A pipeline and its processor; with `state`, one more partition's, sharing its telemetry."""
    pipeline = Pipeline(settings.detection.pipeline_config(settings.cluster))
    if state is None:
        state = ServiceState.new(pipeline)
        state.admin_token = settings.admin_token
    processor = Processor(pipeline, state.telemetry, settings.metrics_format, settings.logs_format)
    return state, processor


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from service.demo import stream_demo
    from service.demo_sim import DemoCluster
    from service.serve import serve

    console = Console()
    state, processor = build(settings)
    cluster = DemoCluster(nodes=args.nodes, gpus=args.gpus, seed=args.seed)
    console.print(
        f"[bold]prexid demo[/bold]: {cluster.nodes} nodes x {cluster.gpus} GPUs, "
        f"{cluster.duration_s / 60:.0f} simulated minutes at {args.speed:g}x; "
        f"http://{settings.http_host}:{settings.http_port}/ (/metrics, /api/v1/alerts)"
    )
    feed = stream_demo(cluster, processor, state, console, args.speed)
    asyncio.run(serve(state, feed, settings.http_host, settings.http_port, args.duration))
    return 0


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from service.kafka_runner import KafkaRunner
    from service.serve import serve

    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    asyncio.run(serve(state, runner.run(), settings.http_host, settings.http_port, args.duration))
    return 0


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML settings file (also PREXID_CONFIG_FILE)")
    common.add_argument("--port", type=int, help="HTTP port (also PREXID_HTTP_PORT)")
    common.add_argument("-v", "--verbose", action="store_true")
    p = argparse.ArgumentParser(prog="prexid", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", parents=[common], help="simulated cluster through the real pipeline, no Kafka needed"
    )
    demo.add_argument("--duration", type=float, default=None, help="exit after this many wall seconds")
    demo.add_argument("--speed", type=float, default=100.0, help="event-time seconds per wall second")
    demo.add_argument("--nodes", type=int, default=8)
    demo.add_argument("--gpus", type=int, default=8)
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", parents=[common], help="consume Kafka topics, publish alerts (PREXID_*)")
    run.add_argument("--duration", type=float, default=None, help="exit after this many wall seconds")
    run.set_defaults(func=cmd_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    overrides: dict[str, object] = {}
    if args.config:
        overrides["config_file"] = args.config
    if args.port is not None:
        overrides["http_port"] = args.port
    settings = Settings(**overrides)  # type: ignore[arg-type]
    return int(args.func(args, settings))


if __name__ == "__main__":
    raise SystemExit(main())
