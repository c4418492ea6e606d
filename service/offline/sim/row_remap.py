"""The weak row-remap failure (issue 16): an Xid 63/64 warned only by 1-20 SBEs on one GPU.

The independent generator's missed failure: a handful of correctable errors grow on one GPU over
5-30 minutes before the Xid, while a few percent of the fleet leak an SBE every few hours. Arrival
times are drawn with density rising as t^2 towards the Xid; every 8th SBE also remaps a row
(`CORRECTABLE_REMAPPED_ROWS`, which stock dcgm-exporter exports even without the ECC counters).
At the Xid the remapper books the row: 63 adds an uncorrectable remapped row (pending is set by the
Xid itself), 64 sets `ROW_REMAP_FAILURE`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.faults import Failure
from prexid.service.offline.sim.injections import Injection, Injections, add

SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
ROWS = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
UNC_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
WINDOW_S = (300.0, 1800.0)
SBES = (1, 20)


def is_row_remap(f: Failure) -> bool:
    return f.type.startswith(("xid63", "xid64"))


def weaken(
    cfg: SimConfig, rng: np.random.Generator, failures: list[Failure], out: Injections
) -> list[Failure]:
    """Shorten each row-remap precursor to 5-30 min and schedule its SBEs into `out`."""
    result = []
    for f in failures:
        if not (is_row_remap(f) and f.has_precursor and f.xid_ts is not None):
            result.append(f)
            continue
        length = float(rng.uniform(*WINDOW_S))
        onset = max(f.xid_ts - length, cfg.start)
        n_sbe = int(rng.integers(SBES[0], SBES[1] + 1))
        times = np.sort(onset + (f.xid_ts - onset) * rng.random(n_sbe) ** (1 / 3))
        g = int(f.gpu or 0)
        for i, t in enumerate(times):
            k = int(np.ceil((t - cfg.start) / cfg.step_s))  # the first scrape that sees it
            add(out, k, Injection(SBE, f.node_index, g, 1.0))
            if i % 8 == 7 or i == n_sbe - 1:
                add(out, k, Injection(ROWS, f.node_index, g, 1.0))
        if f.type.startswith("xid63"):
            k = int(np.ceil((f.xid_ts - cfg.start) / cfg.step_s))
            add(out, k, Injection(UNC_ROWS, f.node_index, g, 1.0))
        result.append(dataclasses.replace(f, onset_ts=onset))
    return sorted(result, key=lambda x: x.onset_ts)
