"""Static threshold rules as SREs write them for dcgm-exporter (Prometheus alerting rules).

GPU_TEMP > 85 for 1m; MEMORY_TEMP > 95 for 1m; ECC_DBE_VOL_TOTAL > 0; XID_ERRORS != 0;
ROW_REMAP_FAILURE > 0; ROW_REMAP_PENDING > 0; RETIRED_PENDING > 0;
increase(PCIE_REPLAY_COUNTER[5m]) > 50; increase(NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[5m]) > 100;
increase(ECC_SBE_VOL_TOTAL[5m]) > 10; increase(node_infiniband_link_downed_total[5m]) > 0
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.baselines.episodes import Episodes, Layout, per_entity

LEVEL_RULES = (  # (metric, threshold, for scrapes); fires when value > threshold
    ("DCGM_FI_DEV_GPU_TEMP", 85.0, 4),
    ("DCGM_FI_DEV_MEMORY_TEMP", 95.0, 4),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0.0, 1),
    ("DCGM_FI_DEV_XID_ERRORS", 0.0, 1),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0.0, 1),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", 0.0, 1),
    ("DCGM_FI_DEV_RETIRED_PENDING", 0.0, 1),
)
INCREASE_RULES = (  # (counter, increase over 5 minutes that fires)
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 50.0),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 100.0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 10.0),
    ("node_infiniband_link_downed_total", 0.0),
)
WINDOW = 20  # scrapes in 5 minutes at 15 s


class StaticRules:
    name = "static_rules"

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.level = [
            (layout.columns(m), thr, Episodes(layout, f"{m} > {thr:g}", n)) for m, thr, n in LEVEL_RULES
        ]
        self.increase = [(layout.columns(m), thr) for m, thr in INCREASE_RULES]
        self.history = [np.full((WINDOW + 1, len(cols)), np.nan) for cols, _ in self.increase]
        self.inc_episodes = Episodes(layout, "increase(errors[5m]) above threshold", 1)
        self.k = 0

    def observe(self, ts: float, row: NDArray[np.float64]) -> None:
        for cols, thr, ep in self.level:
            vals = row[cols]
            ep.step(ts, per_entity(self.layout, cols, np.nan_to_num(vals) > thr))
        hit = np.zeros(self.layout.n_entities, dtype=bool)
        for (cols, thr), hist in zip(self.increase, self.history, strict=True):
            hist[self.k % (WINDOW + 1)] = row[cols]
            old = oldest(hist, self.k)
            now = row[cols]
            with np.errstate(invalid="ignore"):
                inc = np.where(now >= old, now - old, now)  # a drop is a counter reset, as in increase()
            inc[np.isnan(old)] = 0.0  # increase() needs two samples in the window
            hit |= per_entity(self.layout, cols, np.nan_to_num(inc) > thr)
        self.inc_episodes.step(ts, hit)
        self.k += 1

    def alerts(self) -> list[dict[str, object]]:
        out = [a for _, _, ep in self.level for a in ep.alerts] + self.inc_episodes.alerts
        return sorted(out, key=lambda a: float(a["emitted_at"]))  # type: ignore[arg-type]


def oldest(hist: NDArray[np.float64], k: int) -> NDArray[np.float64]:
    """Per column, the oldest sample still in the 5-minute ring (as increase() starts from it)."""
    ordered = np.roll(hist, -((k + 1) % len(hist)), axis=0)
    first = np.argmax(~np.isnan(ordered), axis=0)
    return np.asarray(ordered[first, np.arange(hist.shape[1])], dtype=np.float64)
