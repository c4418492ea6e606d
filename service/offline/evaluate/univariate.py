"""Univariate replay for public benchmarks: one `timestamp,value` CSV through prexid's gauge detector.

Each point is scored by the same `RobustDeviation` the pipeline runs on gauges, strictly online: a
point's score uses only the points before it (no whole-file min/max, no look-ahead). A point is a
detection when its surprise (-log10 p) reaches `threshold` and none was raised in the `cooldown`
points before it, as NAB expects one detection per anomaly rather than one per anomalous point.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from prexid.detectors.fusion import surprise
from prexid.detectors.robust import RobustDeviation
from prexid.service.offline.evaluate.nab import nab_time


def replay_csv(path: Path, out: Path, threshold: float = 6.0, cooldown: int = 20) -> int:
    with path.open() as f:
        rows = [(r["timestamp"], r["value"]) for r in csv.DictReader(f)]
    det = RobustDeviation(half_life_s=6 * 3600.0, warmup=30)
    ids = np.zeros(1, dtype=np.int64)
    quiet = cooldown
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "value", "score", "detected"])
        for stamp, value in rows:
            x = float(value) if value not in ("", "nan") else np.nan
            s = float(surprise(det.update(ids, np.array([nab_time(stamp)]), np.array([x])))[0])
            fire = s >= threshold and quiet >= cooldown
            quiet = 0 if fire else quiet + 1
            w.writerow([stamp, value, f"{s / 12:.4f}", int(fire)])
    return len(rows)
