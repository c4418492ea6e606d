"""Each variant pooled over its seeds, with the uncertainty its counts leave: what "worst variant" means.

A 12-h cell of 8 nodes holds 3-7 failures and 4 node-days. Its detected share moves by 15-100% with one
failure and its false-alert rate by 0.25 a node-day with one alert, so the worst *cell* is mostly the
unluckiest draw. Pooling a variant's seeds gives counts large enough to read, and the intervals say how
far they can be read: a Wilson 95% interval for each share, and a one-sided 95% upper bound on the
false-alert rate (exact Poisson). With no false alert at all in N node-days that bound is ~3/N, so a
rate of 0.008 a node-day cannot be shown by fewer than ~375 clean node-days.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest, chi2

from prexid.service.offline.matrix.score import Score


@dataclass(frozen=True, slots=True)
class Share:
    hits: int
    of: int

    def interval(self) -> tuple[float, float]:
        """Wilson score interval at 95%: sound at 0 and n hits, where the normal one collapses."""
        ci = binomtest(self.hits, self.of).proportion_ci(0.95, method="wilson")
        return float(ci.low), float(ci.high)

    def text(self) -> str:
        if self.of == 0:
            return "n/a"
        lo, hi = self.interval()
        return f"{self.hits}/{self.of} ({100 * self.hits / self.of:.0f}%, {100 * lo:.0f}-{100 * hi:.0f}%)"


def rate_upper(false_alerts: int, node_days: float) -> float:
    """One-sided 95% upper bound on a Poisson rate per node-day, `false_alerts` seen in `node_days`."""
    return float(chi2.ppf(0.95, 2 * (false_alerts + 1)) / 2 / node_days)


@dataclass(frozen=True, slots=True)
class Pool:
    set: str
    system: str
    variant: str
    cells: int
    node_days: float
    detected: Share
    pre_xid: Share
    warned: Share
    median_lead_min: float | None
    false_alerts: int

    @property
    def false_per_node_day(self) -> float:
        return self.false_alerts / self.node_days

    @property
    def false_upper(self) -> float:
        return rate_upper(self.false_alerts, self.node_days)


def pool(scores: list[Score]) -> list[Pool]:
    """One Pool per (set, system, variant) of counted rows; rows without counts are left out."""
    groups: dict[tuple[str, str, str], list[Score]] = {}
    for s in scores:
        if s.counted and s.node_days > 0:
            groups.setdefault((s.set, s.system, s.variant), []).append(s)
    out = []
    for (set_, system, variant), mine in groups.items():
        leads = [lead for s in mine for lead in s.leads_min]
        warnable = sum(s.warnable for s in mine)
        out.append(
            Pool(
                set=set_,
                system=system,
                variant=variant,
                cells=len(mine),
                node_days=sum(s.node_days for s in mine),
                detected=Share(sum(s.detected_n for s in mine), sum(s.predictable for s in mine)),
                pre_xid=Share(sum(s.pre_xid_n for s in mine), sum(s.xid_failures for s in mine)),
                warned=Share(sum(s.warned_n for s in mine), warnable),
                median_lead_min=float(np.median(leads)) if leads else (0.0 if warnable else None),
                false_alerts=sum(s.false_alerts for s in mine),
            )
        )
    return sorted(out, key=lambda p: (p.set != "report", p.system != "prexid", p.system, p.variant))


def worst_first(pools: list[Pool]) -> list[Pool]:
    """A set's variants for one system: the highest false-alert rate first, then the fewest detected,
    then the fewest warned before their Xid of those with a precursor."""

    def share(s: Share) -> float:
        return s.hits / s.of if s.of else 1.0

    return sorted(pools, key=lambda p: (-p.false_per_node_day, share(p.detected), share(p.warned)))
