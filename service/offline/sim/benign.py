"""Benign events beyond the workload's own: things that bend telemetry on healthy hardware.

Each is logged in `events.jsonl` (so evaluation can attribute a false alert to it) and must not page:
- `cooling_excursion`: a node's inlet warms (a CRAC cycle, a door open): every GPU +3-8 C for 20-90 min;
- `power_imbalance`: one GPU of a healthy job draws 8-20% less (data-dependent work) for 0.5-3 h;
- `error_burst`: a healthy GPU books 5-60 correctable errors on one counter in one scrape;
- `link_flap`: a node's fabric link drops and recovers (link downed +1, error recovery +1-3);
- `host_load`: a host process (data preprocessing, a core dump) doubles to quadruples the CPU load.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.effects import Effects
from prexid.service.offline.sim.injections import Injection, Injections, add
from prexid.service.offline.sim.schedule import BenignEvent, Schedule
from prexid.service.offline.sim.wire import host

KINDS = ("cooling_excursion", "power_imbalance", "error_burst", "link_flap", "host_load")
WEIGHTS = np.array([0.25, 0.2, 0.25, 0.15, 0.15])
BURST_FIELDS = (
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
)


class BenignEffects:
    """Windows of benign effects (kind, node, GPU, size) folded into each tick's `Effects`."""

    def __init__(
        self,
        cfg: SimConfig,
        rng: np.random.Generator,
        sched: Schedule,
        per_node_day: float,
        out: Injections,
    ) -> None:
        rows: list[tuple[int, int, int, int, int, float]] = []
        for _ in range(int(rng.poisson(per_node_day * cfg.nodes * cfg.days))):
            kind = KINDS[int(rng.choice(len(KINDS), p=WEIGHTS))]
            n, g, k0 = int(rng.integers(cfg.nodes)), int(rng.integers(cfg.gpus)), int(rng.integers(cfg.ticks))
            minutes = {"cooling_excursion": (20, 90), "power_imbalance": (30, 180), "host_load": (10, 40)}
            span = minutes.get(kind, (0.25, 0.25))
            k1 = min(cfg.ticks, k0 + max(1, round(float(rng.uniform(*span)) * 60 / cfg.step_s)))
            if kind == "cooling_excursion":
                rows.append((0, n, -1, k0, k1, float(rng.uniform(3, 8))))
            elif kind == "power_imbalance":
                rows.append((1, n, g, k0, k1, float(rng.uniform(0.8, 0.92))))
            elif kind == "host_load":
                rows.append((2, n, -1, k0, k1, float(rng.uniform(2, 4))))
            elif kind == "error_burst":
                field = BURST_FIELDS[int(rng.integers(len(BURST_FIELDS)))]
                add(out, k0, Injection(field, n, g, float(rng.integers(5, 61))))
            else:
                add(out, k0, Injection("node_infiniband_link_downed_total", n, None, 1.0))
                add(
                    out,
                    k0,
                    Injection(
                        "node_infiniband_link_error_recovery_total", n, None, float(rng.integers(1, 4))
                    ),
                )
            sched.events.append(BenignEvent(kind, host(n), cfg.ts(k0), cfg.ts(k1)))
        arr = np.array(rows, dtype=np.float64).reshape(-1, 6)
        self.kind, self.node, self.gpu = arr[:, 0].astype(int), arr[:, 1].astype(int), arr[:, 2].astype(int)
        self.k0, self.k1, self.size = arr[:, 3], arr[:, 4], arr[:, 5]
        self.nodes = cfg.nodes

    def apply(self, eff: Effects, k: int) -> None:
        live: NDArray[np.int64] = np.flatnonzero((self.k0 <= k) & (k < self.k1))
        for i in live.tolist():
            n, size = self.node[i], self.size[i]
            if self.kind[i] == 0:
                eff.temp_add[n, :] += size
            elif self.kind[i] == 1:
                eff.power_mult[n, self.gpu[i]] *= size
            else:
                if eff.cpu_mult is None:
                    eff.cpu_mult = np.ones(self.nodes)
                eff.cpu_mult[n] *= size
