"""Which signal families a pipeline has data for.

A family with no series never votes: a fleet whose dcgm-exporter leaves out the ECC or NVLink fields
(its default counters do) is blind to those faults, and nothing else would say so. The count is a
metric (`prexid_family_series`), and once the first minutes of data are in, the families still
without a series are logged.
"""

from __future__ import annotations

import logging

import numpy as np

from prexid.detectors.signals import CATALOG, Family, Kind
from prexid.service.pipeline.pipeline import Pipeline

log = logging.getLogger("prexid.coverage")

# Families fed by metric series (Xids come from kernel lines; liveness and fail-slow are derived).
DATA_FAMILIES = tuple(sorted({s.family for s in CATALOG.values() if s.kind != Kind.IGNORED}))


def series_per_family(pipeline: Pipeline) -> dict[Family, int]:
    """Series the pipeline holds per data family."""
    per_family = np.asarray(pipeline.fusion.n_series).sum(axis=0)
    return {f: int(per_family[f]) if f < len(per_family) else 0 for f in DATA_FAMILIES}


def missing_families(pipeline: Pipeline) -> list[Family]:
    return [f for f, n in series_per_family(pipeline).items() if n == 0]


class CoverageLog:
    """A tick listener: after `after_ticks` ticks of data (default 20: five minutes, every exporter has
    been scraped), log once which families have no series."""

    def __init__(self, pipeline: Pipeline, after_ticks: int = 20) -> None:
        self.pipeline, self.after_ticks, self.ticks = pipeline, after_ticks, 0

    def __call__(self, tick: float, fused: np.ndarray, evidence: np.ndarray) -> None:
        self.ticks += 1
        if self.ticks != self.after_ticks:
            return
        missing = missing_families(self.pipeline)
        if missing:
            log.warning(
                "no data for signal families %s: faults they show are not detected "
                "(docs/ingest.md, which field feeds which family; deploy/dcgm-exporter/counters.csv)",
                ", ".join(f.label for f in missing),
            )
        else:
            log.info("every signal family has data")
