"""Univariate replay for public benchmarks: one `timestamp,value` CSV through prexid's gauge detectors.

The series is one gauge of the pipeline's `DetectorBank`, with the same detectors and configuration
every gauge gets (level/spike, CUSUM drift, flatline; peer deviation has no peers here), their p
combined the bank's way. Each point is scored strictly online: a point's score and decision use
only the points before it (no whole-file min/max, no look-ahead). A point is a detection when its
surprise -log10 p reaches `threshold` and no point in the `cooldown` points before it reached it: one
detection per episode of evidence (a flatline of hours, a variance change of a day), as NAB expects one
detection per anomaly rather than one per anomalous point.

The CSV's score ranks points the same way, for NAB's optimiser, which sweeps one threshold over every
point's score: a point scores its surprise where it is more surprising than each of the `cooldown`
points before it (the onset of an episode, or its escalation), and 0 where its episode already showed
as much. Raw surprise held an episode at the p floor for hours, every point of it a false positive to
a sweep once the label window had passed. Over its cap (12, the calibration's floor p = 1e-12) it is
in [0, 1] as NAB's tools expect; every detection scores at least `threshold` over the cap.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

from prexid.detectors.bank import DetectorBank
from prexid.detectors.fusion import SURPRISE_CAP, surprise
from prexid.detectors.signals import Kind
from prexid.service.offline.evaluate.nab import nab_time

Floats = NDArray[np.float64]


def score_series(
    ts: Floats, values: Floats, threshold: float = 6.0, cooldown: int = 20
) -> tuple[Floats, NDArray[np.bool_]]:
    """Each point's onset score and whether it is a detection, in order, one point at a time."""
    return score_many([(ts, values)], threshold, cooldown)[0]


def onset_score(surprise: Floats, cooldown: int) -> Floats:
    """A point's surprise where it exceeds every one of the `cooldown` points before it, else 0."""
    before = sliding_window_view(np.concatenate([np.zeros(cooldown), surprise]), cooldown)[:-1]
    return np.where(surprise > before.max(axis=1, initial=0.0), surprise, 0.0)


def score_many(
    files: list[tuple[Floats, Floats]], threshold: float = 6.0, cooldown: int = 20
) -> list[tuple[Floats, NDArray[np.bool_]]]:
    """`score_series` of several files at once: file k is series k of one bank, and the i-th points
    of all files are one batch (each series is still scored only from its own earlier points). The
    scores are onset scores in surprise units (`onset_score`)."""
    bank = DetectorBank()
    ids = np.arange(len(files), dtype=np.int64)
    bank.set_kinds(ids, np.full(len(files), Kind.GAUGE, dtype=np.uint8))
    lengths = np.array([len(ts) for ts, _ in files], dtype=np.int64)
    width = int(lengths.max(initial=0))
    ts_grid, x_grid = np.zeros((len(files), width)), np.zeros((len(files), width))
    for k, (ts, values) in enumerate(files):  # files side by side, each padded past its end
        ts_grid[k, : len(ts)], x_grid[k, : len(values)] = ts, values
    scores, fired = np.zeros((len(files), width)), np.zeros((len(files), width), dtype=bool)
    quiet = np.full(len(files), cooldown)
    for i in range(width):
        live = np.flatnonzero(lengths > i)
        s = surprise(bank.update(ids[live], ts_grid[live, i], x_grid[live, i]).p)
        fire = (s >= threshold) & (quiet[live] >= cooldown)
        quiet[live] = np.where(s >= threshold, 0, quiet[live] + 1)
        scores[live, i], fired[live, i] = s, fire
    return [(onset_score(scores[k, :n], cooldown), fired[k, :n]) for k, n in enumerate(lengths.tolist())]


def read_csv(path: Path) -> tuple[list[str], Floats, Floats]:
    with path.open() as f:
        rows = [(r["timestamp"], r["value"]) for r in csv.DictReader(f)]
    ts = np.array([nab_time(t) for t, _ in rows], dtype=np.float64)
    values = np.array([float(v) if v not in ("", "nan") else np.nan for _, v in rows], dtype=np.float64)
    return [t for t, _ in rows], ts, values


def replay_csv(path: Path, out: Path) -> int:
    stamps, ts, values = read_csv(path)
    scores, fired = score_series(ts, values)
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "value", "score", "detected"])
        for stamp, x, s, d in zip(stamps, values, scores, fired, strict=True):
            w.writerow([stamp, f"{x:.6g}", f"{s / SURPRISE_CAP:.4f}", int(d)])
    return len(stamps)
