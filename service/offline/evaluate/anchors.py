"""What the anchor studies report, per system: precision, recall and F1 per fault type, lead times per
Xid class, time to detect from onset, false alerts per 1,000 GPU-days (issue 16 item 6).

Definitions (the report repeats them):
- recall of a type: its failures with a matching alert / its failures;
- precision of a type is the pager's view: alerts matching a failure of that type / (those + every
  false alert). A false alert carries no fault type, and whoever is paged for that type is paged by it;
- F1 = 2PR / (P + R);
- time to detect: first matching alert - precursor onset (negative: warned inside the pre-window);
- lead: Xid time - first matching alert, for failures warned before their Xid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prexid.service.offline.evaluate.match import Result
from prexid.service.offline.evaluate.summary import by_type


@dataclass(frozen=True, slots=True)
class TypeScore:
    ftype: str
    failures: int
    recall: float
    precision: float
    f1: float
    ttd_median_s: float | None
    ttd_p90_s: float | None


def type_scores(result: Result) -> list[TypeScore]:
    false = len(result.false_alerts)
    out = []
    for ftype, outs in by_type(result).items():
        recall = float(np.mean([o.detected for o in outs]))
        matched = sum(o.alerts for o in outs)
        precision = matched / (matched + false) if matched + false else float("nan")
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        ttd = [o.first_alert - o.label.onset_ts for o in outs if o.first_alert is not None]
        out.append(
            TypeScore(
                ftype,
                len(outs),
                recall,
                precision,
                f1,
                float(np.median(ttd)) if ttd else None,
                float(np.percentile(ttd, 90)) if ttd else None,
            )
        )
    return out


def leads_by_xid(result: Result) -> dict[int, tuple[int, int, list[float]]]:
    """Per Xid code: failures, warned before the Xid, and their leads in seconds."""
    out: dict[int, tuple[int, int, list[float]]] = {}
    for o in result.outcomes:
        code = o.label.xid_code
        if code is None or o.label.xid_ts is None:
            continue
        n, warned, leads = out.get(code, (0, 0, []))
        out[code] = (n + 1, warned + o.pre_xid, [*leads, *([o.lead_s] if o.lead_s is not None else [])])
    return dict(sorted(out.items()))


def false_per_kilo_gpu_day(result: Result, days: float, gpus: int) -> float:
    return 1000.0 * len(result.false_alerts) / max(days * gpus, 1e-9)


def _m(s: float | None) -> str:
    return "n/a" if s is None else f"{s / 60:.1f}"


def _p(x: float) -> str:
    return "n/a" if np.isnan(x) else f"{x:.2f}"


def render(results: dict[str, Result], days: float, gpus: int) -> str:
    """Markdown tables, one column per system, fault types and Xid classes as prexid's (first) saw them."""
    names = list(results)
    scores = {n: {t.ftype: t for t in type_scores(r)} for n, r in results.items()}
    types = list(scores[names[0]])
    cols = " | ".join(names)
    sep = "|---|---|" + "---|" * len(names)
    prf = [f"| fault type | n | {cols} |", sep]
    ttd = [f"| fault type | n | {cols} |", sep]
    for t in types:
        first = scores[names[0]][t]
        prf.append(
            f"| {t} | {first.failures} | "
            + " | ".join(f"{_p(s[t].precision)} / {_p(s[t].recall)} / {_p(s[t].f1)}" for s in scores.values())
            + " |"
        )
        ttd.append(
            f"| {t} | {first.failures} | "
            + " | ".join(f"{_m(s[t].ttd_median_s)} ({_m(s[t].ttd_p90_s)})" for s in scores.values())
            + " |"
        )
    xids = {n: leads_by_xid(r) for n, r in results.items()}
    lead = [f"| Xid | n | {cols} |", sep]
    for code, (n, _, _) in xids[names[0]].items():
        cells = []
        for per in xids.values():
            _, warned, leads = per[code]
            q = np.percentile(leads, [10, 50, 90]) if leads else None
            cells.append(f"{warned}: " + ("-" if q is None else " / ".join(f"{v / 60:.1f}" for v in q)))
        lead.append(f"| {code} | {n} | " + " | ".join(cells) + " |")
    kilo = " · ".join(f"{n} {false_per_kilo_gpu_day(r, days, gpus):.2f}" for n, r in results.items())
    return "\n\n".join(
        [
            "Precision / recall / F1 per fault type (precision: alerts matching that type's failures over"
            " those plus every false alert, the pager's view):",
            "\n".join(prf),
            "Time to detect from precursor onset, minutes: median (p90); negative = inside the pre-window:",
            "\n".join(ttd),
            "Lead time per Xid class: warned before the Xid, then p10 / p50 / p90 lead in minutes:",
            "\n".join(lead),
            f"False alerts per 1,000 GPU-days: {kilo}.",
        ]
    )
