"""One cell's headline numbers per system, scored with `prexid evaluate`'s own matching rules.

- detected: share of the predictable failures (those with a precursor, Xid or not) with any matching alert;
- pre_xid: share of the failures with an Xid warned strictly before it (issue 16's goal: no detector can
  warn of those without a precursor, so `pre_xid_warnable` is the same share among those with one);
- median_lead_min: median lead of those warnings; 0 when Xid failures had a precursor but none was
  warned about (a worst case must not hide as "n/a"), None when the cell has no such failure;
- false_per_node_day: false alerts / (days x nodes).

The counts behind the shares and every lead are kept too, so cells can be pooled (`pooled.py`): a cell
holds a handful of failures, and one failure moves its share by 20-100%.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from prexid.service.offline.evaluate.match import Detection, Label, Rules, match


@dataclass(frozen=True, slots=True)
class Score:
    cell: str
    set: str
    system: str
    predictable: int
    detected: float | None
    xid_failures: int
    pre_xid: float | None
    pre_xid_warnable: float | None
    median_lead_min: float | None
    false_alerts: int
    false_per_node_day: float
    node_days: float = 0.0  # days x nodes: one false alert is 1 / node_days a node-day here
    detected_n: int = 0  # predictable failures with a matching alert
    pre_xid_n: int = 0  # Xid failures warned strictly before the Xid
    warnable: int = 0  # Xid failures with a precursor
    warned_n: int = 0  # of those, warned before the Xid
    leads_min: tuple[float, ...] = ()  # every warning's lead, minutes
    counted: bool = False  # False on rows written before the counts above were kept

    @property
    def variant(self) -> str:
        return self.cell.rsplit("-s", 1)[0]

    def row(self) -> dict[str, object]:
        return asdict(self)


METRICS: dict[str, bool] = {  # metric -> higher is better
    "detected": True,
    "pre_xid": True,
    "pre_xid_warnable": True,
    "median_lead_min": True,
    "false_per_node_day": False,
}


def score(
    cell: str,
    set_: str,
    system: str,
    detections: list[Detection],
    labels: list[Label],
    days: float,
    nodes: int,
    rules: Rules | None = None,
) -> Score:
    result = match(detections, labels, rules or Rules())
    predictable = [o for o in result.outcomes if o.label.has_precursor]
    xid = [o for o in result.outcomes if o.label.xid_ts is not None]
    warnable = [o for o in xid if o.label.has_precursor]
    leads = [o.lead_s / 60.0 for o in xid if o.lead_s is not None]
    lead = float(np.median(leads)) if leads else (0.0 if warnable else None)
    return Score(
        cell=cell,
        set=set_,
        system=system,
        predictable=len(predictable),
        detected=float(np.mean([o.detected for o in predictable])) if predictable else None,
        xid_failures=len(xid),
        pre_xid=float(np.mean([o.pre_xid for o in xid])) if xid else None,
        pre_xid_warnable=float(np.mean([o.pre_xid for o in warnable])) if warnable else None,
        median_lead_min=lead,
        false_alerts=len(result.false_alerts),
        false_per_node_day=len(result.false_alerts) / max(days * nodes, 1e-9),
        node_days=days * nodes,
        detected_n=sum(o.detected for o in predictable),
        pre_xid_n=sum(o.pre_xid for o in xid),
        warnable=len(warnable),
        warned_n=sum(o.pre_xid for o in warnable),
        leads_min=tuple(leads),
        counted=True,
    )


def write(scores: list[Score], path: Path) -> None:
    import orjson

    path.write_bytes(b"".join(orjson.dumps(s.row()) + b"\n" for s in scores))


def read(path: Path, node_days: float = 0.0) -> list[Score]:
    """`node_days`: the cell's, for scores written before they carried it."""
    import orjson

    rows = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
    out = []
    for row in rows:
        row = {"node_days": node_days, **row}
        row["leads_min"] = tuple(row.get("leads_min", ()))
        out.append(Score(**row))
    return out
