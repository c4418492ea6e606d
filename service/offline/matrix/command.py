"""`prexid matrix`: simulate each cell, replay prexid and the baselines over it, score, report.

Each cell runs `prexid simulate`, `prexid replay --baselines` and `prexid evaluate` as child processes
(their own progress bars would fight ours; their output goes to the cell's `log.txt`), then is scored
in-process with the evaluation's matching rules. The data files are deleted after scoring unless
`--keep-data`; labels, events, alerts and the per-cell report stay. Cells already scored are reused
(`score.jsonl` in the cell), so an interrupted matrix resumes.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import orjson
from rich.console import Console

from prexid.service.app.settings import DetectionSettings
from prexid.service.offline.evaluate import anchors
from prexid.service.offline.evaluate.command import load_detections, load_labels
from prexid.service.offline.evaluate.match import Result, Rules, match
from prexid.service.offline.matrix import score as scoring
from prexid.service.offline.matrix.pooled import pool, worst_first
from prexid.service.offline.matrix.report import render
from prexid.service.offline.matrix.sets import (
    REPORT_SEEDS,
    REPORT_VARIANTS,
    TUNING_SEEDS,
    TUNING_VARIANTS,
    Cell,
    cells,
)
from prexid.service.offline.sim.command import progress
from prexid.service.offline.sim.variants import NAMES

T = TypeVar("T", int, str)
MAX_SEEDS = 10_000  # per list: a typo like 1..100000 would queue days of cells
_RANGE = re.compile(r"([0-9]+)\.\.([0-9]+)")
_NEGATIVE = re.compile(r"-[0-9]+|[0-9]+\.\.-[0-9]+|-[0-9]+\.\.-?[0-9]+")
SEEDS_HELP = (
    "whole numbers >= 0 and inclusive ranges A..B, separated by spaces or commas, e.g. '1..12 19..42' "
    "or '1 2 3'; '' for none"
)


@dataclass(frozen=True, slots=True)
class Listed:
    """A list-valued option: the words as typed (for the report's command line) and what they say."""

    text: str
    items: tuple[int | str, ...]

    def __str__(self) -> str:
        return self.text


def _words(text: str) -> list[str]:
    return text.replace(",", " ").split()


def seed_list(text: str) -> Listed:
    """`--tune-seeds`, `--report-seeds`: seeds and inclusive ranges, each seed once."""
    seeds: list[int] = []
    for word in _words(text):
        if word.isdecimal() and word.isascii():
            seeds.append(int(word))
        elif m := _RANGE.fullmatch(word):
            lo, hi = int(m[1]), int(m[2])
            if hi < lo:
                raise argparse.ArgumentTypeError(f"range {word!r} runs backwards (A..B needs A <= B)")
            if hi - lo >= MAX_SEEDS:
                raise argparse.ArgumentTypeError(f"range {word!r} holds more than {MAX_SEEDS} seeds")
            seeds.extend(range(lo, hi + 1))
        elif _NEGATIVE.fullmatch(word):
            raise argparse.ArgumentTypeError(f"{word!r}: seeds are never negative")
        else:
            raise argparse.ArgumentTypeError(f"{word!r} is not a seed: {SEEDS_HELP}")
    return Listed(text, _once(seeds, "seed"))


def variant_list(text: str) -> Listed:
    """`--tune-variants`, `--report-variants`: simulator variant names, each once."""
    names = _words(text)
    for name in names:
        if name not in NAMES:
            raise argparse.ArgumentTypeError(f"unknown variant {name!r}; choose from {', '.join(NAMES)}")
    return Listed(text, _once(names, "variant"))


def _once(items: list[T], what: str) -> tuple[T, ...]:
    """A seed or variant given twice would be one cell counted twice in every pooled figure."""
    seen: set[T] = set()
    for item in items:
        if item in seen:
            raise argparse.ArgumentTypeError(f"{what} {item!r} given twice")
        seen.add(item)
    if len(items) > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"more than {MAX_SEEDS} {what}s")
    return tuple(items)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", type=Path, default=Path("runs/matrix"), help="one directory per cell, and report.md"
    )
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--hours", type=float, default=12.0)
    p.add_argument("--failures-per-day", type=float, default=24.0, help="raised for statistics on small runs")
    variants = "simulator variants, separated by spaces or commas; '' for none (default: %(default)s)"
    seeds = SEEDS_HELP + " (default: %(default)s)"
    tv, ts = " ".join(TUNING_VARIANTS), " ".join(map(str, TUNING_SEEDS))
    rv, rs = " ".join(REPORT_VARIANTS), " ".join(map(str, REPORT_SEEDS))
    p.add_argument("--tune-variants", type=variant_list, default=tv, metavar="VARIANTS", help=variants)
    p.add_argument("--tune-seeds", type=seed_list, default=ts, metavar="SEEDS", help=seeds)
    p.add_argument("--report-variants", type=variant_list, default=rv, metavar="VARIANTS", help=variants)
    p.add_argument("--report-seeds", type=seed_list, default=rs, metavar="SEEDS", help=seeds)
    p.add_argument("--keep-data", action="store_true", help="keep each cell's metrics files")
    p.add_argument("--no-baselines", action="store_true", help="prexid only (faster)")
    p.add_argument("--report-only", action="store_true", help="rebuild report.md from the cells' scores")


def _prexid() -> list[str]:
    exe = Path(sys.executable).parent / "prexid"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "prexid.service.app.cli"]


class CellFailed(RuntimeError):
    """A cell whose simulate, replay or evaluate step exited non-zero (the matrix goes on without it)."""


def _node_days(args: argparse.Namespace) -> float:
    """A cell's node-days, for scores written before they carried them."""
    return float(args.nodes * args.hours / 24.0)


def _systems(d: Path) -> dict[str, Path]:
    """A cell's alert files by system: prexid's, then each baseline's."""
    return {
        "prexid": d / "alerts.jsonl",
        **{p.stem.removeprefix("alerts-"): p for p in sorted(d.glob("alerts-*.jsonl"))},
    }


def _score_cell(cell: Cell, d: Path, args: argparse.Namespace) -> list[scoring.Score]:
    """Score a cell from the files it keeps (labels and every system's alerts), and cache the scores."""
    days = args.hours / 24.0
    labels = load_labels(d / "data" / "labels.jsonl")
    scores = [
        scoring.score(cell.id, cell.set, name, load_detections(path), labels, days, args.nodes)
        for name, path in _systems(d).items()
    ]
    scoring.write(scores, d / "score.jsonl")
    return scores


def cached_scores(cell: Cell, args: argparse.Namespace) -> list[scoring.Score] | None:
    """A finished cell's scores (None if it has none); rows from before the counts were kept are
    scored again from the cell's kept files, so old runs pool too."""
    d: Path = args.out / cell.id
    cached = d / "score.jsonl"
    if not cached.exists():
        return None
    scores = scoring.read(cached, _node_days(args))
    if all(s.counted for s in scores) or not (d / "data" / "labels.jsonl").exists():
        return scores
    return _score_cell(cell, d, args)


def run_cell(cell: Cell, args: argparse.Namespace) -> list[scoring.Score]:
    d: Path = args.out / cell.id
    if (cached := cached_scores(cell, args)) is not None:
        return cached
    d.mkdir(parents=True, exist_ok=True)
    days = args.hours / 24.0
    size = ["--nodes", str(args.nodes), "--gpus", str(args.gpus), "--days", f"{days:g}"]
    sim = [*size, "--seed", str(cell.seed), "--failures-per-day", f"{args.failures_per_day:g}"]
    steps = [
        ["simulate", "--out", str(d / "data"), *sim, "--variant", cell.variant],
        [
            "replay",
            str(d / "data"),
            "--out",
            str(d / "alerts.jsonl"),
            *([] if args.no_baselines else ["--baselines"]),
        ],
        [
            "evaluate",
            "--alerts",
            str(d / "alerts.jsonl"),
            "--labels",
            str(d / "data" / "labels.jsonl"),
            "--report",
            str(d / "report"),
        ],
    ]
    with (d / "log.txt").open("w") as log:
        for step in steps:
            log.write("$ prexid " + shlex.join(step) + "\n")
            log.flush()
            done = subprocess.run([*_prexid(), *step], stdout=log, stderr=subprocess.STDOUT, check=False)
            if done.returncode != 0:
                raise CellFailed(f"{cell.id}: `prexid {step[0]}` failed, see {d / 'log.txt'}")
    scores = _score_cell(cell, d, args)
    if not args.keep_data:
        for f in (d / "data").glob("metrics-*.npz"):
            f.unlink()
    return scores


def worst_variant_anchors(scores: list[scoring.Score], args: argparse.Namespace) -> tuple[str, str] | None:
    """What the anchors report on the worst report variant, its seeds' failures and alerts pooled (issue
    16 item 6): a cell's single failure of a type is no precision, recall or lead distribution."""
    pools = [p for p in pool(scores) if p.set == "report" and p.system == "prexid"]
    if not pools:
        return None
    variant = worst_first(pools)[0].variant
    dirs = sorted(
        d
        for d in {args.out / s.cell for s in scores if s.set == "report" and s.variant == variant}
        if (d / "data" / "labels.jsonl").exists()
    )
    if not dirs:
        return None
    found = [{name: path for name, path in _systems(d).items() if path.exists()} for d in dirs]
    names = [name for name in found[0] if all(name in f for f in found)]  # systems every seed ran
    results = {name: Result(outcomes=[]) for name in names}
    for d, files in zip(dirs, found, strict=True):
        labels = load_labels(d / "data" / "labels.jsonl")
        for name in names:
            r = match(load_detections(files[name]), labels, Rules())
            results[name].outcomes += r.outcomes
            results[name].false_alerts += r.false_alerts
            results[name].alerts += r.alerts
    days = args.hours / 24.0 * len(dirs)
    return f"{variant}, {len(dirs)} seeds pooled", anchors.render(results, days, args.nodes * args.gpus)


def cmd_matrix(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    todo = cells(
        tuple(map(str, args.tune_variants.items)),
        tuple(map(int, args.tune_seeds.items)),
        tuple(map(str, args.report_variants.items)),
        tuple(map(int, args.report_seeds.items)),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    scores: list[scoring.Score] = []
    failed: list[str] = []
    started = time.perf_counter()
    if args.report_only:
        for c in todo:
            scores += cached_scores(c, args) or []
    else:
        with progress(console) as bar:
            task = bar.add_task("matrix", total=len(todo))
            for c in todo:
                bar.update(task, description=f"{c.set} {c.id}")
                try:
                    scores += run_cell(c, args)
                except CellFailed as err:  # one broken variant must not cost the other cells
                    failed.append(str(err))
                    console.print(f"[red]{err}[/red]")
                bar.advance(task)
    command = "prexid matrix " + shlex.join(
        [
            "--nodes",
            str(args.nodes),
            "--gpus",
            str(args.gpus),
            "--hours",
            f"{args.hours:g}",
            "--failures-per-day",
            f"{args.failures_per_day:g}",
            "--tune-variants",
            args.tune_variants.text,
            "--tune-seeds",
            args.tune_seeds.text,
            "--report-variants",
            args.report_variants.text,
            "--report-seeds",
            args.report_seeds.text,
        ]
    )
    title = (
        f"prexid evaluation matrix: {len(todo)} cells of {args.nodes}x{args.gpus} GPUs, {args.hours:g} h each"
    )
    budget = DetectionSettings().false_alert_budget  # what a cell's replay held (default settings)
    (args.out / "report.md").write_text(
        render(title, command, scores, failed, worst_variant_anchors(scores, args), budget)
    )
    (args.out / "scores.jsonl").write_bytes(b"".join(orjson.dumps(s.row()) + b"\n" for s in scores))
    console.print(
        f"{len(todo)} cells in {time.perf_counter() - started:.0f} s; report: {args.out / 'report.md'}"
    )
    return 1 if failed else 0
