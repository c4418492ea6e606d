"""The markdown report: matching rules, prexid beside each baseline, per-type tables, false-alert causes."""

from __future__ import annotations

from collections import Counter

import numpy as np

from prexid.service.offline.evaluate.match import Result, Rules
from prexid.service.offline.evaluate.summary import Summary, by_type

TARGETS = (
    "targets: >= 95% of Xid failures detected, >= 60% before the Xid, median lead >= 5 min, "
    "<= 0.5 false alerts/day"
)


def _pct(x: float) -> str:
    return "n/a" if np.isnan(x) else f"{100 * x:.0f}%"


def _min(s: float | None) -> str:
    return "n/a" if s is None else f"{s / 60:.1f} min"


def rules_text(rules: Rules) -> str:
    return "\n".join(
        [
            "## Matching rules",
            "- Only `firing` alert messages count; an alert's time is `emitted_at` (event time at which the",
            "  pipeline emitted it), or `starts_at` when absent.",
            "- Entity: a GPU failure is matched by an alert on that GPU or on its whole node (`gpu` null);",
            "  a node failure by any alert on its node; a cluster-wide failure (`node` = `*`) by any alert.",
            f"- Window: from onset - {rules.pre_window_s:.0f} s to (Xid time, or end for failures without"
            f" an Xid) + {rules.grace_s:.0f} s, inclusive.",
            "- Detected: at least one matching alert. Pre-XID: the first matching alert is strictly before",
            "  the Xid. Lead time: Xid time - first matching alert (pre-XID failures only).",
            "- False alert: a firing alert that matches no failure. Every kind counts, `xid` alerts too.",
            "- Per day = false alerts / simulated days; per node-day = false alerts / (days x nodes).",
            "- Chance-level detection: the share of Xid failures that a system's false alerts alone would",
            "  hit if spread evenly over GPU and node entities; detection near it means nothing.",
        ]
    )


def comparison_table(summaries: dict[str, Summary]) -> str:
    head = (
        "| system | Xid failures | detected | pre-XID | pre-XID (had precursor) | median lead | "
        "no-Xid failures detected | alerts | false | false/day | false/node-day | chance-level detection |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {name} | {s.xid_failures} | {_pct(s.detected)} | {_pct(s.pre_xid)} | "
        f"{_pct(s.pre_xid_with_precursor)} | "
        f"{_min(s.median_lead_s)} | {_pct(s.silent_detected)} of {s.silent_failures} | {s.alerts} | "
        f"{s.false_alerts} | {s.false_per_day:.2f} | {s.false_per_node_day:.3f} | {_pct(s.chance_detected)} |"
        for name, s in summaries.items()
    ]
    return "\n".join([head, *rows])


def type_table(results: dict[str, Result]) -> str:
    names = list(results)
    head = (
        "| failure type | n | " + " | ".join(f"{n}: detected / pre-XID / median lead" for n in names) + " |"
    )
    sep = "|---|---|" + "---|" * len(names)
    rows = []
    per = {n: by_type(r) for n, r in results.items()}
    for ftype, outs in per[names[0]].items():
        cells = []
        for n in names:
            o = per[n][ftype]
            leads = [x.lead_s for x in o if x.lead_s is not None]
            med = _min(float(np.median(leads)) if leads else None)
            cells.append(f"{sum(x.detected for x in o)} / {sum(x.pre_xid for x in o)} / {med}")
        rows.append(f"| {ftype} | {len(outs)} | " + " | ".join(cells) + " |")
    return "\n".join([head, sep, *rows])


def causes_table(causes: dict[str, Counter[str]]) -> str:
    kinds = sorted({k for c in causes.values() for k in c})
    if not kinds:  # a table with no columns is no markdown table
        return "None, for any system."
    head = "| system | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds)
    rows = [f"| {n} | " + " | ".join(str(c.get(k, 0)) for k in kinds) + " |" for n, c in causes.items()]
    return "\n".join([head, *rows])


def render(
    title: str,
    rules: Rules,
    summaries: dict[str, Summary],
    results: dict[str, Result],
    causes: dict[str, Counter[str]],
    plots: list[str],
    reliability: str = "",
    fired: dict[str, Counter[str]] | None = None,
    anchors: str = "",
) -> str:
    """`fired`: firing alerts by kind, per system (the cluster events beside the others: `prexid
    replay --partitions N` must match N=1 on them)."""
    parts = [
        f"# {title}",
        TARGETS,
        "## prexid beside the baselines",
        comparison_table(summaries),
        "## By failure type (count detected / count pre-XID / median lead)",
        type_table(results),
        *(["## What the anchors report", anchors] if anchors else []),
        "## What the false alerts fell on (benign events within 10 min; `unexplained` = none)",
        causes_table(causes),
        "## False alerts by alert kind",
        causes_table({n: Counter(d.kind or "unknown" for d in r.false_alerts) for n, r in results.items()}),
        *(["## Firing alerts by kind (`cluster`: cluster events)", causes_table(fired)] if fired else []),
        *(
            ["## Node reliability: failures per node, as labelled and as the ledger booked them", reliability]
            if reliability
            else []
        ),
        rules_text(rules),
        *[f"![{p}]({p})" for p in plots],
    ]
    return "\n\n".join(parts) + "\n"
