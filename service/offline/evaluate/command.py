"""`prexid evaluate`: score prexid's alerts (and any baselines') against labels; markdown + PNG report."""

from __future__ import annotations

import argparse
import importlib.util
from collections import Counter
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from prexid.service.offline.evaluate import anchors, attribution
from prexid.service.offline.evaluate.match import Detection, Label, Result, Rules, match, parse_alert
from prexid.service.offline.evaluate.reliability import reliability_table
from prexid.service.offline.evaluate.report import render
from prexid.service.offline.evaluate.summary import Summary, summarise


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alerts", type=Path, help="prexid's alerts (JSON lines from `prexid replay`)")
    p.add_argument("--labels", type=Path, help="ground truth (labels.jsonl from `prexid simulate`)")
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a baseline's alerts; default: every alerts-*.jsonl beside --alerts",
    )
    p.add_argument("--data", type=Path, help="the simulate directory (events, days, timeline plot)")
    p.add_argument("--report", type=Path, default=Path("report"), help="directory for report.md and PNGs")
    p.add_argument("--pre-window", type=float, default=600.0, help="seconds before onset that still match")
    p.add_argument(
        "--grace", type=float, default=300.0, help="seconds after the Xid (or end) that still match"
    )
    p.add_argument("--nab-scores", type=Path, help="NAB mode: scores CSV from `prexid replay --csv`")
    p.add_argument("--nab-windows", type=Path, help="NAB mode: label windows JSON for that file")


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def load_detections(path: Path) -> list[Detection]:
    return [d for doc in read_jsonl(path) if (d := parse_alert(doc)) is not None]


def load_labels(path: Path) -> list[Label]:
    return [Label(**doc) for doc in read_jsonl(path)]  # type: ignore[arg-type]


def systems(args: argparse.Namespace) -> dict[str, Path]:
    out = {"prexid": args.alerts}
    if args.baseline:
        out.update(dict(spec.split("=", 1) for spec in args.baseline))
    else:
        for path in sorted(args.alerts.parent.glob("alerts-*.jsonl")):
            out[path.stem.removeprefix("alerts-")] = path
    return {k: Path(v) for k, v in out.items()}


def cmd_evaluate(args: argparse.Namespace) -> int:
    console = Console(width=150)
    if args.nab_scores:
        from prexid.service.offline.evaluate.nab import cmd_nab

        return cmd_nab(args.nab_scores, args.nab_windows, console)
    if args.alerts is None or args.labels is None:
        raise SystemExit("evaluate needs --alerts and --labels (or --nab-scores and --nab-windows)")
    rules = Rules(args.pre_window, args.grace)
    labels = load_labels(args.labels)
    data: Path = args.data or args.labels.parent
    meta = orjson.loads((data / "meta.json").read_bytes()) if (data / "meta.json").exists() else None
    days = float(meta["config"]["days"]) if meta else 1.0
    nodes = int(meta["config"]["nodes"]) if meta else 1
    gpus = int(meta["config"]["gpus"]) if meta else 8
    events = read_jsonl(data / "events.jsonl") if (data / "events.jsonl").exists() else []
    detections = {name: load_detections(path) for name, path in systems(args).items()}
    results: dict[str, Result] = {n: match(d, labels, rules) for n, d in detections.items()}
    summaries: dict[str, Summary] = {n: summarise(r, days, nodes, gpus, rules) for n, r in results.items()}
    causes: dict[str, Counter[str]] = {
        n: attribution.attribute(r.false_alerts, events) for n, r in results.items()
    }
    args.report.mkdir(parents=True, exist_ok=True)
    if (
        importlib.util.find_spec("matplotlib") is None
    ):  # an extra: the figures are the report's, not its plots
        pngs: list[str] = []
        console.print("no plots: matplotlib is not installed (pip install 'prexid[plot]')")
    else:
        pngs = write_plots(args.report, data, results, detections)
    title = f"prexid evaluation: {nodes} nodes, {days:g} simulated days, {len(labels)} labelled failures"
    reliability = reliability_table(labels, read_jsonl(args.alerts), nodes)
    fired = {name: Counter(d.kind or "unknown" for d in found) for name, found in detections.items()}
    (args.report / "report.md").write_text(
        render(
            title,
            rules,
            summaries,
            results,
            causes,
            pngs,
            reliability,
            fired=fired,
            anchors=anchors.render(results, days, nodes * gpus),
        )
    )
    console.print(table(summaries))
    console.print(f"report: {args.report / 'report.md'}")
    return 0


def write_plots(
    report: Path, data: Path, results: dict[str, Result], detections: dict[str, list[Detection]]
) -> list[str]:
    """The lead-time plot and one failure's timeline; their file names, for the report to embed."""
    from prexid.service.offline.evaluate import plots  # matplotlib: only here, not in every `prexid` command

    pngs = [plots.lead_times(results, report / "lead_times.png").name]
    chosen = plots.pick_failure(results["prexid"])
    if chosen is not None and (data / "series.jsonl").exists():
        tl = plots.timeline(data, chosen, detections, report / "timeline.png")
        pngs += [tl.name] if tl else []
    return pngs


def table(summaries: dict[str, Summary]) -> Table:
    t = Table(title="detection the way SREs judge it")
    for col in (
        "system",
        "detected",
        "pre-XID",
        "median lead",
        "no-Xid detected",
        "false/day",
        "chance-level detection",
    ):
        t.add_column(col)
    for name, s in summaries.items():
        lead = "n/a" if s.median_lead_s is None else f"{s.median_lead_s / 60:.1f} min"
        t.add_row(
            name,
            f"{100 * s.detected:.0f}% of {s.xid_failures}",
            f"{100 * s.pre_xid:.0f}%",
            lead,
            f"{100 * s.silent_detected:.0f}% of {s.silent_failures}",
            f"{s.false_per_day:.2f}",
            f"{100 * s.chance_detected:.0f}%",
        )
    return t
