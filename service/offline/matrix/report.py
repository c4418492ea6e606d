"""The matrix report in markdown: the worst case and the spread first, the best case last.

Leading with the best case is how a detector looks good on one simulator and fails on a fleet; the
goals of issue 16 are judged on the worst report-set cell; the anchors' figures are given on the worst
report variant, its seeds pooled.
"""

from __future__ import annotations

from prexid.service.offline.matrix.pooled import Pool, pool, worst_first
from prexid.service.offline.matrix.score import Score
from prexid.service.offline.matrix.spread import Spread, spreads

LABEL = {
    "detected": "detected (predictable)",
    "pre_xid": "pre-XID (of Xid failures)",
    "pre_xid_warnable": "pre-XID (had precursor)",
    "median_lead_min": "median lead",
    "false_per_node_day": "false alerts / node-day",
}
GOAL = {  # issue 16's goals, on the worst cell never tuned on
    "detected": (0.95, ">= 95%"),
    "pre_xid": (0.60, ">= 60%"),
    "pre_xid_warnable": (0.95, ">= 95%"),
    "median_lead_min": (10.0, ">= 10 min"),
    "false_per_node_day": (0.008, "<= 0.008"),
}


def fmt(metric: str, v: float) -> str:
    if metric in ("detected", "pre_xid", "pre_xid_warnable"):
        return f"{100 * v:.0f}%"
    if metric == "median_lead_min":
        return f"{v:.1f} min"
    return f"{v:.3f}"


def times(rate: float, budget: float) -> str:
    """A realised false-alert rate as a multiple of the budget ("n/a" without one)."""
    return f"{rate / budget:.1f}x" if budget > 0 else "n/a"


def meets(metric: str, v: float) -> bool:
    goal = GOAL[metric][0]
    return v <= goal if metric == "false_per_node_day" else v >= goal


def render(
    title: str,
    command: str,
    scores: list[Score],
    failed: list[str] | None = None,
    worst_anchors: tuple[str, str] | None = None,
    budget: float = 0.0,
) -> str:
    """`budget`: the false-alert budget (pages per node-day) the detection settings hold; every cell's
    realised false-alert rate is reported against it."""
    all_spreads = spreads(scores)
    lines = [f"# {title}", "", f"`{command}`", ""]
    if failed:  # a cell that did not run is the worst case of all: it leads
        lines += ["## Cells that failed to run", "", *(f"- {f}" for f in failed), ""]
    for set_ in ("report", "tuning"):
        mine = [s for s in all_spreads if s.set == set_]
        if not mine:
            continue
        never = " (never tuned on)" if set_ == "report" else ""
        lines += [f"## {set_.capitalize()} set{never}: worst case first", ""]
        lines += _worst_table(mine)
        lines.append("")
    lines += _pooled(scores)
    lines += _variants(pool(scores))
    if worst_anchors and worst_anchors[1]:
        cell, section = worst_anchors
        lines += [
            f"## What the anchors report, on the worst report variant ({cell}), beside the baselines",
            "",
        ]
        lines += [section, ""]
    lines += ["## Every cell (prexid), worst false-alert rate first", ""]
    if budget > 0:
        lines += [f"False-alert budget: {budget:g} per node-day (`detection.false_alert_budget`).", ""]
    lines += _cells_table([s for s in scores if s.system == "prexid"], budget)
    return "\n".join(lines) + "\n"


def _pooled(scores: list[Score]) -> list[str]:
    """False alerts over all of a set's node-days, per system: a cell of a few node-days cannot show a
    rate below one alert in its node-days, so the worst cell alone cannot tell 0.008 from 0.25."""
    rows = []
    for set_ in ("report", "tuning"):
        for system in sorted({s.system for s in scores}, key=lambda n: (n != "prexid", n)):
            mine = [s for s in scores if s.set == set_ and s.system == system]
            node_days = sum(s.node_days for s in mine)
            if not mine or node_days <= 0:
                continue
            false = sum(s.false_alerts for s in mine)
            finest = min(s.node_days for s in mine)
            rows.append(
                f"| {set_} | {system} | {len(mine)} | {node_days:g} | {false} | {false / node_days:.3f} | "
                f"{1 / finest:.3f} |"
            )
    if not rows:
        return []
    return [
        "## False alerts pooled over each set's cells",
        "",
        "| set | system | cells | node-days | false alerts | per node-day | one alert in a cell |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _variants(pools: list[Pool]) -> list[str]:
    """Each variant pooled over its seeds, worst false-alert rate first, with 95% intervals."""
    if not pools:
        return []
    out = [
        "## Each variant pooled over its seeds, worst first",
        "",
        "A cell's few failures make its shares coarse; pooled counts with 95% intervals (Wilson for shares,",
        "an exact one-sided Poisson bound for the false-alert rate) say what the runs can show. The goals",
        "above are still judged on the worst cell.",
        "",
        "| set | system | variant | cells | node-days | detected | pre-XID (of Xid failures) "
        "| pre-XID (had precursor) | median lead | false | per node-day | 95% upper |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((p.set, p.system) for p in pools)
    for set_, system in keys:
        for p in worst_first([x for x in pools if (x.set, x.system) == (set_, system)]):
            lead = "n/a" if p.median_lead_min is None else fmt("median_lead_min", p.median_lead_min)
            out.append(
                f"| {p.set} | {p.system} | {p.variant} | {p.cells} | {p.node_days:g} | {p.detected.text()} | "
                f"{p.pre_xid.text()} | {p.warned.text()} | {lead} | {p.false_alerts} | "
                f"{p.false_per_node_day:.3f} | {p.false_upper:.3f} |"
            )
    return [*out, ""]


def _worst_table(spreads_: list[Spread]) -> list[str]:
    out = [
        "| system | metric | worst | worst cell | median | best | best cell | cells | goal (worst) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in spreads_:
        goal = f"{GOAL[s.metric][1]}: {'met' if meets(s.metric, s.worst) else '**missed**'}"
        out.append(
            f"| {s.system} | {LABEL[s.metric]} | **{fmt(s.metric, s.worst)}** | {s.worst_cell} | "
            f"{fmt(s.metric, s.median)} | {fmt(s.metric, s.best)} | {s.best_cell} | {s.cells} | {goal} |"
        )
    return out


def _cells_table(scores: list[Score], budget: float) -> list[str]:
    out = [
        "| set | cell | predictable | detected | Xid failures | pre-XID | pre-XID (had precursor) "
        "| median lead | false "
        "| per node-day | x budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def opt(metric: str, v: float | None) -> str:
        return "n/a" if v is None else fmt(metric, v)

    for s in sorted(scores, key=lambda x: (-x.false_per_node_day, x.set, x.cell)):
        out.append(
            f"| {s.set} | {s.cell} | {s.predictable} | {opt('detected', s.detected)} | {s.xid_failures} | "
            f"{opt('pre_xid', s.pre_xid)} | {opt('pre_xid', s.pre_xid_warnable)} | "
            f"{opt('median_lead_min', s.median_lead_min)} | "
            f"{s.false_alerts} | {s.false_per_node_day:.3f} | {times(s.false_per_node_day, budget)} |"
        )
    return out
