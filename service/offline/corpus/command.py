"""`prexid corpus`: write the generic corpus, score `replay --csv`'s decisions on it, report and plot."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from prexid.service.offline.corpus.generate import KINDS, MAX_STEP_S, STEP_S, make_corpus, write_corpus
from prexid.service.offline.corpus.score import CorpusResult, evaluate
from prexid.service.offline.evaluate.univariate import score_many


def cadence(text: str) -> float:
    """A corpus cadence: 1 s to `MAX_STEP_S` (argparse's error otherwise, not a crash: a slower one made
    a day of no points, and the generator divided by it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1.0 <= value <= MAX_STEP_S:
        raise argparse.ArgumentTypeError(
            f"a cadence is 1 to {MAX_STEP_S:g} s (four points a day), not {text!r}"
        )
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/corpus"), help="corpus files and report.md")
    p.add_argument("--seed", type=int, default=1, help="seed 1 is the development corpus; others hold out")
    p.add_argument("--per-kind", type=int, default=3, help=f"files per kind ({len(KINDS)} kinds)")
    p.add_argument(
        "--step-s",
        type=cadence,
        default=STEP_S,
        help="seconds between points (NAB's files: 300 most, 1800 and 3600 some); default %(default)s",
    )


def cmd_corpus(args: argparse.Namespace) -> int:
    console = Console()
    series = make_corpus(args.seed, args.per_kind, args.step_s)
    write_corpus(series, args.out)
    with console.status(f"scoring {len(series)} files, all in one bank, point by point"):
        result = evaluate(series, score_many)
    (args.out / "result.json").write_bytes(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2))
    (args.out / "report.md").write_text(report(result, args))
    console.print(table(result))
    try:
        from prexid.service.offline.corpus.plot import by_kind

        console.print(f"plot: {by_kind(result, args.out / 'by_kind.png')}")
    except ImportError:
        console.print("no plot: install prexid[plot] (matplotlib)")
    console.print(f"report: {args.out / 'report.md'}")
    return 0


def table(r: CorpusResult) -> Table:
    t = Table(title=f"NAB-style scores on the generic corpus ({r.files} files, {r.windows} windows)")
    t.add_column("profile")
    t.add_column("prexid (own decisions)", justify="right")
    t.add_column("prexid's score, swept", justify="right")
    t.add_column("windowed Gaussian, swept", justify="right")
    for name, got in r.prexid.items():
        t.add_row(name, f"{got:.1f}", f"{r.prexid_swept[name]:.1f}", f"{r.windowed_gaussian_best[name]:.1f}")
    return t


def report(r: CorpusResult, args: argparse.Namespace) -> str:
    lines = [
        f"# Generic univariate corpus, seed {args.seed}",
        "",
        f"`prexid corpus --seed {args.seed} --per-kind {args.per_kind} --step-s {args.step_s:g}`: "
        f"{r.files} files of a point every {args.step_s:g} s, {r.windows} label "
        f"windows, {r.detections} detections by prexid.",
        "",
        "Swept: a score column at the best threshold in hindsight for the whole corpus (NAB's optimiser).",
        "",
        "| profile | prexid (own decisions) | prexid's score, swept | windowed Gaussian, swept |",
        "|---|---|---|---|",
        *(
            f"| {n} | {v:.1f} | {r.prexid_swept[n]:.1f} | {r.windowed_gaussian_best[n]:.1f} |"
            for n, v in r.prexid.items()
        ),
        "",
        "prexid per kind (standard profile; `none`: false detections after probation):",
        "",
        "| kind | score |",
        "|---|---|",
        *(f"| {k} | {v:.1f} |" for k, v in r.prexid_by_kind.items()),
        "",
        f"Score ranking: {r.share_at_max_score:.4%} of points at the highest score, "
        f"{r.distinct_score_share:.1%} of scores distinct.",
        "",
    ]
    return "\n".join(lines)
