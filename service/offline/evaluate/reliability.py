"""The node reliability ledger on a replay: are failures concentrated on a few nodes, and does prexid's
ledger see the same concentration the labels hold? (In the study, 3 of 63 nodes caused more than half
of all node exclusions.)"""

from __future__ import annotations

from collections import Counter

from prexid.service.offline.evaluate.match import Label
from prexid.service.pipeline.ledger import Ledger, gini, top_share
from prexid.service.schemas import Alert


def ledger_of(alerts: list[dict[str, object]]) -> Ledger:
    """The ledger prexid kept while it raised `alerts` (as `replay` wrote them)."""
    ledger = Ledger()
    ledger.observe(Alert.model_validate(doc) for doc in alerts if doc.get("kind") != "cluster")
    return ledger


def concentration(per_node: Counter[str], nodes: int) -> tuple[float | None, float]:
    """(share of the failures on the 3 worst nodes, Gini over all `nodes`, the silent ones too)."""
    counts = list(per_node.values())
    return top_share(counts), gini(counts + [0] * max(nodes - len(counts), 0))


def reliability_table(labels: list[Label], alerts: list[dict[str, object]], nodes: int) -> str:
    truth: Counter[str] = Counter(lab.node for lab in labels if lab.xid_ts is not None)
    ledger = ledger_of(alerts)
    booked: Counter[str] = Counter({n: r.counts.get("xid", 0) for n, r in ledger.nodes.items()})
    booked = +booked
    rows = [
        "| source | Xid failures | nodes with one | top-3 share | Gini | worst nodes |",
        "|---|---|---|---|---|---|",
    ]
    for name, per_node in (("labels (truth)", truth), ("prexid ledger", booked)):
        share, g = concentration(per_node, nodes)
        worst = ", ".join(f"{n} ({c})" for n, c in per_node.most_common(3))
        share_text = "n/a" if share is None else f"{100 * share:.0f}%"
        rows.append(
            f"| {name} | {sum(per_node.values())} | {len(per_node)} | {share_text} | {g:.2f} | {worst} |"
        )
    offenders = [s.node for s in ledger.ranking() if s.score >= 1.0]
    rows.append("")
    rows.append(f"Repeat offenders by the ledger (score >= 1): {', '.join(offenders) or 'none'}.")
    return "\n".join(rows)
