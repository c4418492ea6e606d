"""The `prexid` command line: `demo`, `run`, and the offline tools."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from pydantic import ValidationError
from rich.console import Console

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.app.demo import print_output, stream_demo
    from prexid.service.app.wiring import remote_write_feed
    from prexid.service.http.server import serve
    from prexid.service.sources.demo_cluster import DemoCluster, DemoFault

    console = Console()
    state, processor = build(settings)
    if args.nodes < 1 or args.gpus < 1:
        console.print("[red]--nodes and --gpus must be at least 1[/red]")
        return 2
    fault = DemoFault(node=min(3, args.nodes - 1), gpu=min(5, args.gpus - 1))  # the faulty GPU exists
    cluster = DemoCluster(nodes=args.nodes, gpus=args.gpus, seed=args.seed, fault=fault)
    console.print(
        f"[bold]prexid demo[/bold]: {cluster.nodes} nodes x {cluster.gpus} GPUs, "
        f"{cluster.duration_s / 60:.0f} simulated minutes at {args.speed:g}x; "
        f"http://{settings.http_host}:{settings.http_port}/ (/metrics, /api/v1/alerts; "
        "Prometheus remote_write to /api/v1/write)"
    )
    _, intake, received = remote_write_feed(settings, state)  # its own pipeline: wall-clock samples
    state.background.append(lambda: intake.run(received, lambda out: print_output(console, out)))
    feed = stream_demo(cluster, processor, state, console, args.speed)
    asyncio.run(serve(state, feed, settings.http_host, settings.http_port, args.duration))
    return 0


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.http.server import serve

    if settings.remote_write == "local":
        from prexid.service.app.wiring import remote_write_feed

        state, intake, processor = remote_write_feed(settings)
        state.ready = True  # nothing to connect to: requests are the feed
        feed = intake.run(processor)
        asyncio.run(serve(state, feed, settings.http_host, settings.http_port, args.duration))
        return 0
    from prexid.service.sources.fleet_runner import runner_class

    state, _ = build(settings)
    if settings.remote_write == "kafka":
        from prexid.service.app.wiring import remote_write_republisher

        remote_write_republisher(settings, state)
    runner = runner_class(settings)(settings, state, lambda: build(settings, state)[1])
    if state.fleet_board is not None and settings.fleet_http_port is not None:
        from prexid.service.http.fleet_view import create_fleet_app
        from prexid.service.http.server import serve_app

        fleet = create_fleet_app(state, state.fleet_board, settings.fleet_lateness_s)
        state.background.append(lambda: serve_app(fleet, settings.http_host, settings.fleet_http_port or 0))
    asyncio.run(serve(state, runner.run(), settings.http_host, settings.http_port, args.duration))
    return 0


def cmd_simulate(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.offline.sim.command import cmd_simulate as run

    return run(args)


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.offline.replay import cmd_replay as run

    return run(args, settings)


def cmd_corpus(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.offline.corpus.command import cmd_corpus as run

    return run(args)


def cmd_evaluate(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.offline.evaluate.command import cmd_evaluate as run

    return run(args)


def cmd_matrix(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.offline.matrix.command import cmd_matrix as run

    return run(args)


def cmd_parse(args: argparse.Namespace, settings: Settings) -> int:
    from prexid.service.app.parse_cmd import cmd_parse as parse

    return parse(args)


# `prexid bench TARGET`: each target is "module:function" taking (args) and returning an exit code.
BENCH_TARGETS = {
    "decode": "prexid.service.offline.bench.decode:cmd_bench_decode",
    "detectors": "prexid.service.offline.bench.detectors:cmd_bench_detectors",
    "e2e": "prexid.service.offline.bench.e2e:cmd_bench_e2e",
    "kernel-lines": "prexid.service.offline.bench.kernel_lines:cmd_bench_kernel_lines",
    "probes": "prexid.service.offline.bench.probes:cmd_bench_probes",
    "scrape": "prexid.service.offline.bench.scrape:cmd_bench_scrape",
}


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    import importlib

    module, func = BENCH_TARGETS[args.target].split(":")
    return int(getattr(importlib.import_module(module), func)(args))


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML settings file (also PREXID_CONFIG_FILE)")
    common.add_argument("--port", type=int, help="HTTP port (also PREXID_HTTP_PORT)")
    common.add_argument("-v", "--verbose", action="store_true")
    common.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="json: one JSON object per line"
    )
    p = argparse.ArgumentParser(prog="prexid", description=__doc__)
    p.add_argument("--version", action="version", version=f"prexid {version()}")
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

    parse = sub.add_parser(
        "parse", parents=[common], help="decode stdin, print what prexid reads (JSON lines)"
    )
    parse.add_argument("stream", choices=["metrics", "logs"])
    parse.add_argument("--format", default="auto", help="format name (docs/ingest.md) or auto")
    parse.add_argument("--host", default=None, help="host for payloads naming none, as a Kafka key would")
    parse.add_argument("--ts", type=float, default=None, help="record time (epoch s); default now")
    parse.set_defaults(func=cmd_parse)

    bench = sub.add_parser("bench", parents=[common], help="measure throughput against a same-run baseline")
    bench.add_argument("target", choices=sorted(BENCH_TARGETS))
    bench.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    bench.add_argument(
        "--bootstrap", help="e2e, probes, scrape: an existing Kafka broker (default: start one)"
    )
    bench.add_argument("--series", type=int, default=1_000_000, help="e2e: series in the memory test")
    bench.add_argument(
        "--feed",
        choices=["kafka", "remote-write"],
        default="kafka",
        help='probes: a Kafka backlog, or Prometheus remote_write requests (remote_write = "local")',
    )
    bench.add_argument(
        "--nodes",
        type=int,
        default=8,
        help="e2e, probes, scrape: nodes per demo cluster (e2e 8: 32 to a shard; 2: 8, a sparse worst case)",
    )
    bench.set_defaults(func=cmd_bench)
    _offline_tools(sub, common)
    return p


def _offline_tools(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    from prexid.service.offline.corpus.command import add_arguments as corpus_args
    from prexid.service.offline.evaluate.command import add_arguments as evaluate_args
    from prexid.service.offline.matrix.command import add_arguments as matrix_args
    from prexid.service.offline.replay import add_arguments as replay_args
    from prexid.service.offline.sim.command import add_arguments as simulate_args

    simulate = sub.add_parser(
        "simulate", parents=[common], help="seeded GPU-cluster telemetry with ground truth"
    )
    simulate_args(simulate)
    simulate.set_defaults(func=cmd_simulate)
    replay = sub.add_parser("replay", parents=[common], help="run the pipeline over files in event time")
    replay_args(replay)
    replay.set_defaults(func=cmd_replay)
    evaluate = sub.add_parser("evaluate", parents=[common], help="score alerts against failure labels")
    evaluate_args(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)
    matrix = sub.add_parser(
        "matrix", parents=[common], help="variants x seeds through prexid and the baselines, worst case first"
    )
    matrix_args(matrix)
    matrix.set_defaults(func=cmd_matrix)
    corpus = sub.add_parser(
        "corpus",
        parents=[common],
        help="generic labelled univariate series, NAB-style scores of replay --csv",
    )
    corpus_args(corpus)
    corpus.set_defaults(func=cmd_corpus)


def main(argv: Sequence[str] | None = None) -> int:
    from prexid.service.app.gc_and_malloc import collect_garbage_less_often, keep_large_blocks_on_heap

    keep_large_blocks_on_heap()  # numpy's batch temporaries: reuse heap blocks, no page-fault churn
    collect_garbage_less_often()  # a batch's records are thousands of short-lived objects
    args = parser().parse_args(argv)
    configure_logging(logging.INFO if args.verbose else logging.WARNING, args.log_format)
    overrides: dict[str, object] = {}
    if args.config:
        overrides["config_file"] = args.config
    if args.port is not None:
        overrides["http_port"] = args.port
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as err:
        for line in settings_errors(err):
            print(f"prexid: {line}", file=sys.stderr)
        return 2
    return int(args.func(args, settings))


def version() -> str:
    """The installed distribution's version (pyproject.toml), as pip reports it."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("prexid")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


def configure_logging(level: int, log_format: str) -> None:
    """Text for a terminal; JSON lines for log shippers (Loki, Elasticsearch), parsed without regexes."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)


TEXT_LOG_FORMAT = "%(asctime)s %(name)s %(message)s"


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: time (RFC 3339, UTC), level, logger, message, and the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        import datetime

        import orjson

        out: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()


def settings_errors(err: ValidationError) -> list[str]:
    """One line per invalid setting, naming its environment variable; never the value (it may be a
    secret, which pydantic's own message would print)."""
    lines = []
    for e in err.errors():
        field = ".".join(str(part) for part in e["loc"])
        env = "PREXID_" + "__".join(str(part) for part in e["loc"]).upper()
        lines.append(f"invalid setting {env} ({field}): {e['msg'].removeprefix('Value error, ')}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
