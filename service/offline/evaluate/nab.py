"""NAB-style scoring of one univariate series: label windows, sigmoid-weighted detections, three profiles.

As in the Numenta Anomaly Benchmark: inside a window only the first detection counts, weighted by
where it fell (early in the window ~ +1 x A_TP, at its end 0); a detection outside every window costs
A_FP, scaled by the sigmoid of its distance after the preceding window (full cost when no window came
before); each window with no detection costs A_FN. The normalised score is
100 * (raw - null) / (perfect - null), where the null detector never fires and the perfect one fires at
the start of every window.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table


@dataclass(frozen=True, slots=True)
class Profile:
    tp: float
    fp: float
    fn: float


PROFILES = {
    "standard": Profile(tp=1.0, fp=0.11, fn=1.0),
    "reward_low_FP_rate": Profile(tp=1.0, fp=0.22, fn=1.0),
    "reward_low_FN_rate": Profile(tp=1.0, fp=0.11, fn=2.0),
}


def scaled_sigmoid(position: float) -> float:
    """NAB's weight: ~1 at a window's start (position -1), 0 at its end (0), towards -1 after it."""
    if position > 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * position)) - 1.0


def raw_score(ts: list[float], detected: list[bool], windows: list[tuple[float, float]], p: Profile) -> float:
    """Sum of NAB weights over one series; `ts` sorted, `windows` sorted and disjoint."""
    score = 0.0
    hit = [False] * len(windows)
    for t, flag in zip(ts, detected, strict=True):
        if not flag:
            continue
        inside = next((i for i, (a, b) in enumerate(windows) if a <= t <= b), None)
        if inside is not None:
            if not hit[inside]:
                a, b = windows[inside]
                hit[inside] = True
                score += p.tp * scaled_sigmoid((t - b) / max(b - a, 1e-9))
            continue
        before = [(a, b) for a, b in windows if b < t]
        if before:
            a, b = before[-1]
            score += p.fp * scaled_sigmoid((t - b) / max(b - a, 1e-9))
        else:
            score -= p.fp
    return score - p.fn * sum(not h for h in hit)


@dataclass(frozen=True, slots=True)
class Totals:
    """A raw score with its null (never fires) and perfect (fires at every window's start) scores, so
    the totals of many files add up and are normalised once, as NAB scores a corpus."""

    raw: float
    null: float
    perfect: float

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.raw + other.raw, self.null + other.null, self.perfect + other.perfect)

    @property
    def normalised(self) -> float:
        """100 * (raw - null) / (perfect - null): the null detector 0, a perfect one 100."""
        if self.perfect == self.null:
            return 0.0
        return 100.0 * (self.raw - self.null) / (self.perfect - self.null)


def totals(ts: list[float], detected: list[bool], windows: list[tuple[float, float]], p: Profile) -> Totals:
    n = len(windows)
    return Totals(raw_score(ts, detected, windows, p), -p.fn * n, p.tp * scaled_sigmoid(-1.0) * n)


def normalised(
    ts: list[float], detected: list[bool], windows: list[tuple[float, float]], p: Profile
) -> float:
    return totals(ts, detected, windows, p).normalised


def nab_time(text: str) -> float:
    """Epoch seconds, or ISO 8601 as NAB writes it (`2013-12-10 06:25:00.000000`); naive times are UTC."""
    try:
        return float(text)
    except ValueError:
        stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def read_scores(path: Path) -> tuple[list[float], list[bool]]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [nab_time(r["timestamp"]) for r in rows], [r["detected"] in ("1", "True", "true") for r in rows]


def read_windows(path: Path) -> list[tuple[float, float]]:
    """A JSON list of [start, end] pairs, or NAB's combined_windows.json mapping (its first entry)."""
    doc = orjson.loads(path.read_bytes())
    pairs = next(iter(doc.values())) if isinstance(doc, dict) else doc
    return sorted((nab_time(str(a)), nab_time(str(b))) for a, b in pairs)


def cmd_nab(scores: Path, windows_path: Path | None, console: Console) -> int:
    if windows_path is None:
        raise SystemExit("NAB mode needs --nab-windows")
    ts, detected = read_scores(scores)
    windows = read_windows(windows_path)
    t = Table(title=f"NAB scores for {scores.name} ({len(windows)} windows, {sum(detected)} detections)")
    t.add_column("profile")
    t.add_column("normalised score")
    for name, profile in PROFILES.items():
        t.add_row(name, f"{normalised(ts, detected, windows, profile):.1f}")
    console.print(t)
    return 0
