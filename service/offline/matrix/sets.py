"""The tuning and report sets, declared before any tuning (docs/evaluation.md repeats them).

Detection may be tuned on the TUNING set only. The REPORT set is never tuned on: its figures are the
ones that count (issue 16). Changing these lists after looking at report-set results voids them; the
one change so far, `wide` added to the tuning set on 2026-12-05, is stated in docs/evaluation.md.
"""

from __future__ import annotations

from dataclasses import dataclass

TUNING_VARIANTS: tuple[str, ...] = ("default", "bursty-counters", "noisy-exporters", "wide")
TUNING_SEEDS: tuple[int, ...] = (1, 2, 3)
REPORT_VARIANTS: tuple[str, ...] = (
    "weak-precursors",
    "inference-fleet",
    "stock-exporters",
    "idle-mixed",
    "random",
)
REPORT_SEEDS: tuple[int, ...] = (100, 101, 102)


@dataclass(frozen=True, slots=True)
class Cell:
    """One simulation of the matrix: a variant at a seed, in the tuning or the report set."""

    variant: str
    seed: int
    set: str  # "tuning" or "report"

    @property
    def id(self) -> str:
        return f"{self.variant}-s{self.seed}"


def cells(
    tune_variants: tuple[str, ...] = TUNING_VARIANTS,
    tune_seeds: tuple[int, ...] = TUNING_SEEDS,
    report_variants: tuple[str, ...] = REPORT_VARIANTS,
    report_seeds: tuple[int, ...] = REPORT_SEEDS,
) -> list[Cell]:
    """Every cell; a variant in both lists is refused, since a tuned variant cannot be reported on."""
    if both := set(tune_variants) & set(report_variants):
        raise SystemExit(f"matrix: {', '.join(sorted(both))} in both the tuning and the report set")
    return [Cell(v, s, "tuning") for v in tune_variants for s in tune_seeds] + [
        Cell(v, s, "report") for v in report_variants for s in report_seeds
    ]
