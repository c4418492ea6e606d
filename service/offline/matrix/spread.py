"""Worst case and spread over cells, per set, system and metric: what the matrix report leads with.

The worst cell is the one a pager would be judged on: the lowest detection, pre-XID share and lead, the
highest false-alert rate. Cells where a metric is undefined (no failure of that kind) are left out of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prexid.service.offline.matrix.score import METRICS, Score


@dataclass(frozen=True, slots=True)
class Spread:
    set: str
    system: str
    metric: str
    worst: float
    worst_cell: str
    median: float
    best: float
    best_cell: str
    cells: int


def spread(scores: list[Score], set_: str, system: str, metric: str) -> Spread | None:
    pairs = [
        (float(v), s.cell)
        for s in scores
        if s.set == set_ and s.system == system and (v := getattr(s, metric)) is not None
    ]
    if not pairs:
        return None
    higher_better = METRICS[metric]
    ordered = sorted(pairs, key=lambda p: (p[0] if higher_better else -p[0], p[1]))  # worst first
    values = np.array([v for v, _ in pairs])
    return Spread(
        set_,
        system,
        metric,
        ordered[0][0],
        ordered[0][1],
        float(np.median(values)),
        ordered[-1][0],
        ordered[-1][1],
        len(pairs),
    )


def spreads(scores: list[Score]) -> list[Spread]:
    """Every (set, system, metric) with data, prexid first, then the baselines by name."""
    sets = [s for s in ("report", "tuning") if any(x.set == s for x in scores)]
    systems = sorted({s.system for s in scores}, key=lambda n: (n != "prexid", n))
    out = []
    for set_ in sets:
        for system in systems:
            for metric in METRICS:
                if (sp := spread(scores, set_, system, metric)) is not None:
                    out.append(sp)
    return out
