"""Headline numbers from a match result: detection, pre-XID share, lead times, false alerts per day."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prexid.service.offline.evaluate.match import Outcome, Result, Rules


@dataclass(frozen=True, slots=True)
class Summary:
    xid_failures: int
    detected: float  # share of Xid failures detected
    pre_xid: float  # share of Xid failures alerted before the Xid
    pre_xid_with_precursor: float  # the same, among those that had a precursor
    median_lead_s: float | None
    silent_failures: int  # failures without an Xid (straggler, thermal, NFS storm)
    silent_detected: float
    alerts: int
    false_alerts: int
    false_per_day: float
    false_per_node_day: float
    chance_detected: float  # share of Xid failures its false alerts alone would "detect"


def share(outcomes: list[Outcome], pred: str) -> float:
    return float(np.mean([getattr(o, pred) for o in outcomes])) if outcomes else float("nan")


def chance(result: Result, days: float, entities: int, rules: Rules) -> float:
    """Expected share of Xid failures hit by chance: false alerts spread evenly over GPU and node
    entities, landing in a failure's window on its GPU or its node (two entities)."""
    xid = [o.label for o in result.outcomes if o.label.xid_ts is not None]
    if not xid:
        return float("nan")
    rate = len(result.false_alerts) / (max(entities, 1) * days * 86400.0)
    widths = np.array([f.deadline + rules.grace_s - f.onset_ts + rules.pre_window_s for f in xid])
    return float(np.mean(1.0 - np.exp(-rate * 2.0 * widths)))


def summarise(result: Result, days: float, nodes: int, gpus: int = 8, rules: Rules | None = None) -> Summary:
    xid = [o for o in result.outcomes if o.label.xid_ts is not None]
    pre = [o for o in xid if o.label.has_precursor]
    silent = [o for o in result.outcomes if o.label.xid_ts is None]
    leads = [o.lead_s for o in xid if o.lead_s is not None]
    nf = len(result.false_alerts)
    return Summary(
        xid_failures=len(xid),
        detected=share(xid, "detected"),
        pre_xid=share(xid, "pre_xid"),
        pre_xid_with_precursor=share(pre, "pre_xid"),
        median_lead_s=float(np.median(leads)) if leads else None,
        silent_failures=len(silent),
        silent_detected=share(silent, "detected"),
        alerts=result.alerts,
        false_alerts=nf,
        false_per_day=nf / days,
        false_per_node_day=nf / (days * nodes),
        chance_detected=chance(result, days, nodes * (gpus + 1), rules or Rules()),
    )


def by_type(result: Result) -> dict[str, list[Outcome]]:
    out: dict[str, list[Outcome]] = {}
    for o in result.outcomes:
        out.setdefault(o.label.type, []).append(o)
    return dict(sorted(out.items()))
