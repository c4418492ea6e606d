"""Generic univariate series with labelled anomalies, one kind of change each, NAB's file layout.

The public benchmark stays a held-out check made elsewhere; this corpus is where the univariate path is
developed. Each file is 4,032 points (NAB's typical size: 14 days at 5 minutes, the default cadence;
`step_s` sets another, as NAB's hourly and half-hourly files have), a level, an optional daily cycle and
noise (Gaussian or Student-t, optionally quantised), with one or two anomalies of its
kind placed after the probationary first 15%. Windows follow NAB: 10% of the file's length in all,
split among its anomalies, centred on each onset. Kind `none` has no anomaly: every detection there is
a false one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
from numpy.typing import NDArray

STEP_S = 300.0  # the default cadence
MAX_STEP_S = 86400.0 / 4  # a day of at least four points: its cycle, and a transient's span of a quarter
POINTS = 4032
PROBATION = 0.15
WINDOW_SHARE = 0.10
START = datetime(2026, 1, 5, tzinfo=UTC).timestamp()

KINDS = (
    "spike",
    "level_shift",
    "variance",
    "trend",
    "seasonality",
    "quantised",
    "heavy_tail",
    "gaps",
    "flatline",
    "none",
)


@dataclass(frozen=True, slots=True)
class Series:
    """One corpus file: times (epoch s, gaps removed), values, the onsets' times and the label windows."""

    name: str
    kind: str
    ts: NDArray[np.float64]
    values: NDArray[np.float64]
    windows: list[tuple[float, float]]


def _base(rng: np.random.Generator, heavy: bool, day: int) -> tuple[NDArray[np.float64], float]:
    """Level + daily cycle + noise; returns the series and its noise scale."""
    level = float(rng.uniform(10.0, 1000.0))
    sigma = level * float(rng.uniform(0.01, 0.08))
    i = np.arange(POINTS, dtype=np.float64)
    cycle = (
        level
        * float(rng.choice([0.0, rng.uniform(0.05, 0.4)]))
        * np.sin(2 * np.pi * i / day + rng.uniform(0, 6.3))
    )
    noise = rng.standard_t(3.0, POINTS) * sigma * 0.6 if heavy else rng.normal(0.0, sigma, POINTS)
    return level + cycle + noise, sigma


def _onsets(rng: np.random.Generator, count: int) -> list[int]:
    lo, hi = int(POINTS * (PROBATION + 0.05)), POINTS - int(POINTS * 0.08)
    while True:
        picks = sorted(int(x) for x in rng.integers(lo, hi, count))
        if all(b - a > POINTS // 5 for a, b in itertools.pairwise(picks)):
            return picks


def _inject(
    kind: str, x: NDArray[np.float64], sigma: float, at: int, rng: np.random.Generator, day: int
) -> None:
    """Put one anomaly of `kind` into `x` from index `at` (in place); `day` points make a day."""
    span = int(rng.integers(day // 4, day))  # how long a transient change lasts
    end = min(at + span, POINTS)
    sign = float(rng.choice([-1.0, 1.0]))
    if kind in ("spike", "gaps"):
        x[at : at + int(rng.integers(1, 4))] += sign * sigma * float(rng.uniform(8.0, 15.0))
    elif kind in ("level_shift", "heavy_tail", "quantised"):
        x[at:] += sign * sigma * float(rng.uniform(4.0, 8.0))
    elif kind == "variance":
        x[at:end] += rng.normal(0.0, sigma * float(rng.uniform(3.0, 6.0)), end - at)
    elif kind == "trend":
        x[at:] += sign * sigma * float(rng.uniform(0.02, 0.06)) * np.arange(POINTS - at)
    elif kind == "seasonality":
        amp = max(float(np.std(x[:at])), sigma) * float(rng.uniform(1.5, 3.0))
        x[at:end] += amp * np.sin(2 * np.pi * np.arange(end - at) / (day / 4))
    elif kind == "flatline":
        x[at:end] = x[at - 1]


def make_series(kind: str, index: int, rng: np.random.Generator, step_s: float = STEP_S) -> Series:
    day = int(86400 / step_s)
    x, sigma = _base(rng, kind == "heavy_tail", day)
    if kind == "seasonality":  # a cycle to break
        i = np.arange(POINTS, dtype=np.float64)
        x += sigma * 4.0 * np.sin(2 * np.pi * i / day)
    onsets = [] if kind == "none" else _onsets(rng, int(rng.integers(1, 3)))
    for at in onsets:
        _inject(kind, x, sigma, at, rng, day)
    if kind == "quantised":
        x = np.round(x / (sigma * 1.5)) * (sigma * 1.5)
    ts = START + step_s * np.arange(POINTS, dtype=np.float64)
    keep = np.ones(POINTS, dtype=bool)
    if kind == "gaps":  # outages of 1-12 h, none over an onset
        for g in rng.integers(int(POINTS * PROBATION), POINTS - 200, 4):
            if all(abs(int(g) - a) > 200 for a in onsets):
                keep[int(g) : int(g) + int(rng.integers(12, 144))] = False
    half = WINDOW_SHARE * POINTS * step_s / max(len(onsets), 1) / 2
    windows = [(float(ts[a] - half), float(ts[a] + half)) for a in onsets]
    return Series(f"{kind}-{index}", kind, ts[keep], x[keep], windows)


def make_corpus(seed: int, per_kind: int, step_s: float = STEP_S) -> list[Series]:
    rng = np.random.default_rng(seed)
    return [make_series(kind, i, rng, step_s) for kind in KINDS for i in range(per_kind)]


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def write_corpus(series: list[Series], out: Path) -> None:
    """`<name>.csv` (timestamp,value) per file and NAB's `combined_windows.json` beside them."""
    out.mkdir(parents=True, exist_ok=True)
    for s in series:
        lines = ["timestamp,value"] + [f"{iso(t)},{v:.6g}" for t, v in zip(s.ts, s.values, strict=True)]
        (out / f"{s.name}.csv").write_text("\n".join(lines) + "\n")
    windows = {f"{s.name}.csv": [[iso(a), iso(b)] for a, b in s.windows] for s in series}
    (out / "combined_windows.json").write_bytes(orjson.dumps(windows, option=orjson.OPT_INDENT_2))
