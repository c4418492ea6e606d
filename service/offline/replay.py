"""`prexid replay`: the service's own pipeline over recorded files, as fast as event time allows.

Inputs: a `prexid simulate` directory (columnar `metrics-*.npz` + `series.jsonl`, or wire
`metrics.jsonl`) with its `kernel.log`, or explicit `--metrics`/`--logs` files in the configured formats.
Metrics and kernel lines are merged in event-time order: each scrape first, then the lines stamped
before the next one. Wire files go through `Processor` (decode included); columnar files skip only the
JSON decode and feed `Pipeline.ingest_columns`, the same vectorised core. Alerts are written as JSON
lines with `emitted_at`, the event time at which the pipeline emitted them.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import orjson
from numpy.typing import NDArray
from rich.console import Console

from prexid.detectors.alert_budget import LEVELS, AlertBudget
from prexid.detectors.family_calibration import FamilyCalibration
from prexid.detectors.signals import Family
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.decode.syslog import decode as decode_syslog
from prexid.service.decode.types import DecodeError, Samples
from prexid.service.offline.sim.command import progress
from prexid.service.pipeline.fleet import Fleet
from prexid.service.pipeline.processor import Message, Output, Processor
from prexid.service.pipeline.series_registry import SeriesRegistry, normalise_host
from prexid.service.schemas import Alert
from prexid.service.sources.key_placement import PARTITIONERS

_TS = re.compile(rb'"timestamp":"([^"]+)"')


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("data", nargs="?", type=Path, help="a `prexid simulate` output directory")
    p.add_argument("--metrics", type=Path, help="metrics file (one message per line)")
    p.add_argument("--logs", type=Path, help="kernel log file (one line per message)")
    p.add_argument("--out", type=Path, default=Path("alerts.jsonl"), help="alerts as JSON lines")
    p.add_argument("--baselines", action="store_true", help="also run the baselines (columnar input only)")
    p.add_argument("--csv", type=Path, help="univariate mode: a timestamp,value CSV (see docs/evaluation.md)")
    p.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="columnar input: split the nodes into this many pipelines as Kafka's murmur2 partitioner"
        " would key them, one pipeline a partition, as `prexid run` scales out",
    )


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    console = Console(stderr=True)
    if args.csv:
        from prexid.service.offline.evaluate.univariate import replay_csv

        n = replay_csv(args.csv, args.out)
        console.print(f"scored {n} points of {args.csv} -> {args.out}")
        return 0
    if args.partitions < 1:
        raise SystemExit("replay: --partitions must be at least 1")
    state, processor = build(settings)
    processors = [processor] + [build(settings, state)[1] for _ in range(args.partitions - 1)]
    columnar, metrics = _inputs(args)
    if args.partitions > 1 and not columnar:
        raise SystemExit("replay: --partitions needs a columnar `prexid simulate` directory")
    dead_path = args.out.with_suffix(".dead-letters.jsonl")
    with args.out.open("wb") as out, dead_path.open("wb") as dead:
        writer = AlertWriter(out, dead)
        if columnar:
            n = _replay_with_baselines(
                args.data, args.baselines, args.out.parent, processors, writer, console
            )
        else:
            logs = args.logs or (args.data / "kernel.log" if args.data else None)
            n = replay_wire(metrics, logs, processor, writer, console)
    if writer.dead:
        console.print(f"[red]{writer.dead} unreadable messages[/red] -> {dead_path} (with reasons)")
    console.print(f"{n} scrapes replayed, {writer.count} alert messages -> {args.out}")
    for p, proc in enumerate(processors):
        if (budget := proc.pipeline.budget) is not None:
            console.print(f"partition {p}: {budget_line(budget)}")
        if (calibration := proc.pipeline.calibration) is not None:
            console.print(f"partition {p}: {calibration_line(calibration)}")
    return 0


def budget_line(budget: AlertBudget) -> str:
    """Where the false-alert budget left the firing thresholds, and the rates it holds them to."""
    per = [
        f"{level} fire {budget.thresholds[i]:.1f} (null {budget.null_rate()[i]:.4f}, "
        f"realised {budget.realised_rate()[i]:.4f})"
        for i, level in enumerate(LEVELS)
    ]
    return f"false-alert budget {budget.config.pages_per_node_day}/node-day: " + "; ".join(per)


def calibration_line(calibration: FamilyCalibration) -> str:
    """What the family calibration takes off each family's surprise, where it takes anything off."""
    per = [
        f"{level} {Family(f).label}{path} -{table[i, f]:.2f}"
        for path, table in (("", calibration.shift), (" sustained", calibration.sustained_shift))
        for i, level in enumerate(LEVELS)
        for f in np.flatnonzero(table[i] >= 0.005).tolist()
    ]
    return "family calibration: " + (", ".join(per) or "nothing lowered")


def _inputs(args: argparse.Namespace) -> tuple[bool, Path]:
    """Columnar directory or a metrics file; a clear error when neither is there."""
    data: Path | None = args.data
    if data is not None and (data / "series.jsonl").exists():
        return True, data
    if args.baselines:
        raise SystemExit("replay: --baselines needs a columnar `prexid simulate` directory")
    metrics = args.metrics or (data / "metrics.jsonl" if data else None)
    if metrics is None or not metrics.exists():
        raise SystemExit(f"replay: no series.jsonl or metrics.jsonl in {data} (or give --metrics FILE)")
    return False, metrics


def _replay_with_baselines(
    data: Path,
    baselines: bool,
    out_dir: Path,
    processors: list[Processor],
    writer: AlertWriter,
    console: Console,
) -> int:
    from prexid.service.offline.baselines.runner import HST_AVAILABLE, BaselineRunner

    runner = BaselineRunner(data, out_dir) if baselines else None
    if runner is not None and not HST_AVAILABLE:
        console.print("no hst baseline: river is not installed (pip install 'prexid[river]')")
    n = replay_columnar(data, processors, writer, console, runner)
    if runner is not None:
        runner.close()
    return n


class AlertWriter:
    """Alerts as JSON lines with `emitted_at`; messages that could not be read go to a dead-letter file."""

    def __init__(self, out: IO[bytes], dead: IO[bytes]) -> None:
        self.out, self.dead_out = out, dead
        self.count = self.dead = 0

    def write(self, output: Output, emitted_at: float) -> list[Alert]:
        for alert in output.alerts:
            self.out.write(orjson.dumps({**alert.model_dump(mode="json"), "emitted_at": emitted_at}) + b"\n")
        for dl in output.dead_letters:
            record = {"reason": dl.reason, "detail": dl.detail, "source": dl.message.topic}
            self.dead_out.write(
                orjson.dumps({**record, "payload": dl.message.payload.decode(errors="replace")}) + b"\n"
            )
        self.count += len(output.alerts)
        self.dead += len(output.dead_letters)
        return output.alerts


class LogFeed:
    """Kernel lines in file order, handed out up to a given event time."""

    def __init__(self, path: Path | None) -> None:
        self.lines: list[tuple[float, str, bytes]] = []  # event time, host (the record key), the line
        self.pos = 0
        self.path = path

    def prime(self, ref_ts: float) -> None:
        if self.path is None or not self.path.exists():
            return
        for raw in self.path.read_bytes().splitlines():
            try:
                line = decode_syslog(raw, ref_ts)[0]
                ts, host = line.ts, normalise_host(line.host)
            except DecodeError:
                ts, host = ref_ts, ""  # still replayed: the processor dead-letters it with its reason
            self.lines.append((ts, host, raw))
        self.lines.sort(key=lambda x: x[0])

    def until(self, ts: float) -> list[tuple[str, Message]]:
        """The lines stamped before `ts`, each with the host a shipper would key its record by."""
        out = []
        while self.pos < len(self.lines) and self.lines[self.pos][0] < ts:
            t, host, raw = self.lines[self.pos]
            out.append((host, Message(raw, t, "replay.kernel-logs")))
            self.pos += 1
        return out


class Partitioning:
    """Nodes dealt to `n` pipelines the way a producer keyed by node name deals them to Kafka's
    partitions (murmur2, the Java client's and aiokafka's default)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def of(self, host: str) -> int:
        return PARTITIONERS["murmur2"](host.encode(), self.n) if self.n > 1 else 0

    def deal(self, lines: list[tuple[str, Message]]) -> list[list[Message]]:
        """Kernel lines per partition, each by the host its record would be keyed by."""
        out: list[list[Message]] = [[] for _ in range(self.n)]
        for host, message in lines:
            out[self.of(host)].append(message)
        return out

    def columns(self, names: list[str], labels: list[dict[str, str]]) -> list[NDArray[np.int64]]:
        """For each partition, the columns (series) of the nodes it holds; series with no node go to
        the partition of the empty key, as a record without a node key would."""
        reg = SeriesRegistry()
        sids = reg.intern_many(names, labels)
        hosts = [reg.entities[int(reg.entity_of[sid])].node if sid >= 0 else "" for sid in sids.tolist()]
        part = np.fromiter((self.of(h) for h in hosts), dtype=np.int64, count=len(hosts))
        return [np.flatnonzero(part == p) for p in range(self.n)]


METRICS_SOURCE = "replay.metrics:0"


def replay_columnar(
    data: Path, processors: list[Processor], writer: AlertWriter, console: Console, baselines: object
) -> int:
    """Each scrape goes into each pipeline's event-time buffer as columns (series interned once, through
    the pipeline's own `add_samples` on the first scrape), exactly as `add_samples` would put it. With
    several processors, each is one partition's: it sees only its nodes' series and kernel lines, and
    they are advanced as one `Fleet` (one shared-cause verdict, one cluster alert)."""
    series = [orjson.loads(x) for x in (data / "series.jsonl").read_bytes().splitlines()]
    names, labels = [s["name"] for s in series], [s["labels"] for s in series]
    parts = Partitioning(len(processors))
    columns = parts.columns(names, labels) if parts.n > 1 else [np.arange(len(names))]
    chunks = sorted(data.glob("metrics-*.npz"))
    logs = LogFeed(data / "kernel.log")
    ids = [np.zeros(0, dtype=np.int64) for _ in processors]
    fleet = Fleet([processor.pipeline for processor in processors])  # one shared-cause verdict for all
    n, last = 0, 0.0
    with progress(console) as bar:
        task = bar.add_task("replaying (columnar)", total=len(chunks))
        for ts_arr, values in _chunks(chunks):
            for ts, full_row in zip(ts_arr.tolist(), values, strict=True):
                lines = parts.deal(logs.until(ts))  # lines stamped before it
                for p, (processor, cols) in enumerate(zip(processors, columns, strict=True)):
                    pipe, row = processor.pipeline, full_row[cols]
                    writer.write(processor.process([], lines[p], ()), ts)
                    if n == 0:
                        some = [names[c] for c in cols.tolist()], [labels[c] for c in cols.tolist()]
                        pipe.add_samples(Samples(*some, [ts] * len(cols), row.tolist()), METRICS_SOURCE)
                        ids[p] = pipe.registry.intern_many(*some)
                    else:
                        present = ~np.isnan(row)
                        _reintern_expired(pipe.registry, ids[p], present, cols, names, labels)
                        at = np.full(int(present.sum()), ts)
                        pipe.add_series(ids[p][present], at, row[present], METRICS_SOURCE)
                        pipe.watermarks.observe(METRICS_SOURCE, ts)  # a scrape of nothing moves time too
                for alerts in fleet.advance():
                    writer.write(Output(alerts=alerts), ts)
                if n == 0:
                    logs.prime(ts)
                last = ts
                if baselines is not None:
                    baselines.observe(ts, full_row)  # type: ignore[attr-defined]
                n += 1
            bar.advance(task)
    for alerts in fleet.advance(drain=True):
        writer.write(Output(alerts=alerts), last + 15.0)
    rest = parts.deal(logs.until(np.inf))
    for p, processor in enumerate(processors):
        writer.write(processor.process([], rest[p], (), drain=True), last + 15.0)
    return n


def _reintern_expired(
    reg: SeriesRegistry,
    ids: NDArray[np.int64],
    present: NDArray[np.bool_],
    cols: NDArray[np.int64],
    names: list[str],
    labels: list[dict[str, str]],
) -> None:
    """Series of these columns that expired while silent and report again are new series, as a record
    of them would make them (`SeriesRegistry.intern`): their ids in `ids` are replaced in place."""
    back = np.flatnonzero(present & (ids >= 0) & (reg.last_seen[np.maximum(ids, 0)] == np.inf))
    if len(back):
        col = cols[back].tolist()
        ids[back] = reg.intern_many([names[c] for c in col], [labels[c] for c in col])


def _chunks(paths: list[Path]) -> Iterator[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    for path in paths:
        with np.load(path) as blob:
            yield blob["ts"], blob["values"]


def replay_wire(
    metrics: Path, logs_path: Path | None, processor: Processor, writer: AlertWriter, console: Console
) -> int:
    logs = LogFeed(logs_path)
    n = 0
    size = metrics.stat().st_size
    with progress(console) as bar, metrics.open("rb") as f:
        task = bar.add_task("replaying (wire)", total=size)
        for ts, batch, nbytes in _scrapes(f):
            if n == 0:
                logs.prime(ts)
            lines = [m for _, m in logs.until(ts)]  # stamped before this scrape
            writer.write(processor.process([], lines, ()), ts)
            writer.write(processor.process(batch, [], ()), ts)
            n += 1
            bar.advance(task, nbytes)
        rest = [m for _, m in logs.until(np.inf)]
        writer.write(processor.process([], rest, (), drain=True), ts if n else 0.0)
    return n


def _scrapes(f: IO[bytes]) -> Iterator[tuple[float, list[Message], int]]:
    """Consecutive lines with the same timestamp form one batch (the adapter writes scrape by scrape)."""
    from prexid.service.decode.common import parse_rfc3339

    batch: list[Message] = []
    stamp, nbytes, ts = b"", 0, 0.0
    for line in f:
        m = _TS.search(line)
        key = m.group(1) if m else stamp
        if key != stamp and batch:
            yield ts, batch, nbytes
            batch, nbytes = [], 0
        if key != stamp:
            stamp = key
            ts = parse_rfc3339(key.decode()) if key else ts
        batch.append(Message(line.rstrip(b"\n"), np.nan, "replay.metrics", 0))  # files have no record time
        nbytes += len(line)
    if batch:
        yield ts, batch, nbytes
