"""Why false alerts happened: the benign event (checkpoint, job restart, drain...) each one fell in.

Tuning needs to know which benign behaviour pages, not just how often. An alert is attributed to the
first benign event on its node (or its whole job) whose span, widened by `slack_s`, contains it.
"""

from __future__ import annotations

from collections import Counter

from prexid.service.offline.evaluate.match import Detection


def _nodes(spec: str) -> set[str] | None:
    """None means every node; small-job events list node indices, drains name the host."""
    if spec == "*":
        return None
    if spec.startswith("node-"):
        return {spec}
    return {f"node-{int(i):02d}" for i in spec.split(",") if i.strip().isdigit()}


def attribute(
    false_alerts: list[Detection], events: list[dict[str, object]], slack_s: float = 600.0
) -> Counter[str]:
    spans = [(str(e["type"]), _nodes(str(e["node"])), float(e["ts"]), float(e["end_ts"])) for e in events]  # type: ignore[arg-type]
    spans.sort(key=lambda s: s[2])
    out: Counter[str] = Counter()
    for d in false_alerts:
        why = "unexplained"
        for kind, nodes, t0, t1 in spans:
            if t0 - 60.0 <= d.t <= t1 + slack_s and (nodes is None or d.node in nodes):
                why = kind
                break
        out[why] += 1
    return out
