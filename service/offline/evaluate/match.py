"""The matching rules: which alert detects which failure, and which alerts are false.

Rules (docs/evaluation.md repeats them in words; tests/unit/test_evaluate_match.py checks them):
- Only `firing` messages count; an alert's time is `emitted_at` (when it reached the pager), else its
  `starts_at`.
- Entity: a GPU failure is matched by an alert on that GPU or on its node as a whole (`gpu` null);
  a node failure by any alert on that node; a cluster-wide failure (`node` "*") by any alert.
- Window: from `onset - pre_window_s` to `(xid_ts or end_ts) + grace_s`, both inclusive.
- A failure is detected when at least one alert matches it; its first matching alert decides the rest.
  Pre-XID: the first match is strictly before the Xid. Lead time: `xid_ts - first match` (pre-XID only).
- An alert that matches no failure is a false alert. Alerts of any kind count, `xid` alerts included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Rules:
    pre_window_s: float = 600.0
    grace_s: float = 300.0


@dataclass(frozen=True, slots=True)
class Detection:
    """One firing alert, reduced to what matching needs."""

    t: float
    node: str
    gpu: int | None
    kind: str = "pre_xid"


@dataclass(frozen=True, slots=True)
class Label:
    id: str
    type: str
    node: str
    gpu: int | None
    onset_ts: float
    xid_ts: float | None
    xid_code: int | None
    has_precursor: bool
    end_ts: float

    @property
    def deadline(self) -> float:
        return self.xid_ts if self.xid_ts is not None else self.end_ts


@dataclass(frozen=True, slots=True)
class Outcome:
    label: Label
    detected: bool
    first_alert: float | None
    pre_xid: bool
    lead_s: float | None  # Xid time minus first alert, when that is positive
    alerts: int = 0  # firing alerts matching this failure


@dataclass
class Result:
    outcomes: list[Outcome]
    false_alerts: list[Detection] = field(default_factory=list)
    alerts: int = 0


def parse_alert(doc: dict[str, object]) -> Detection | None:
    """A firing alert message as a Detection; None for resolved messages."""
    if doc.get("status", "firing") != "firing":
        return None
    t = doc.get("emitted_at")
    if not isinstance(t, int | float):
        t = datetime.fromisoformat(str(doc["starts_at"]).replace("Z", "+00:00")).timestamp()
    gpu = doc.get("gpu")
    return Detection(
        float(t), str(doc["node"]), int(gpu) if isinstance(gpu, int) else None, str(doc.get("kind", ""))
    )


def entity_matches(d: Detection, f: Label) -> bool:
    if f.node == "*":
        return True
    if d.node != f.node:
        return False
    return f.gpu is None or d.gpu is None or d.gpu == f.gpu


def in_window(d: Detection, f: Label, rules: Rules) -> bool:
    return f.onset_ts - rules.pre_window_s <= d.t <= f.deadline + rules.grace_s


def match(detections: list[Detection], labels: list[Label], rules: Rules | None = None) -> Result:
    rules = rules or Rules()
    hits: dict[str, list[float]] = {f.id: [] for f in labels}
    false: list[Detection] = []
    for d in detections:
        matched = [f for f in labels if entity_matches(d, f) and in_window(d, f, rules)]
        for f in matched:
            hits[f.id].append(d.t)
        if not matched:
            false.append(d)
    outcomes = []
    for f in labels:
        first = min(hits[f.id], default=None)
        pre = first is not None and f.xid_ts is not None and first < f.xid_ts
        lead = f.xid_ts - first if pre and first is not None and f.xid_ts is not None else None
        outcomes.append(Outcome(f, first is not None, first, pre, lead, len(hits[f.id])))
    return Result(outcomes, false, len(detections))
