"""Exporter restarts and counter resets beyond today's dcgm-exporter gaps (issue 16).

- a share of dcgm-exporter restarts come back with every GPU counter of the node at zero (a driver or
  DCGM host-engine restart underneath), so a detector must read a drop as a reset, not a negative rate;
- node-exporter restarts: every node series of the node vanishes for 1-3 scrapes and returns;
- NIC driver reloads: the node's InfiniBand and Ethernet counters restart from zero, nothing else does.
Each is logged in `events.jsonl`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.physics import Exporters
from prexid.service.offline.sim.schedule import BenignEvent, Schedule
from prexid.service.offline.sim.wire import host

NIC_PREFIXES = ("node_infiniband_port_", "node_infiniband_link_", "node_network_")


@dataclass
class ExporterPlan:
    gpu_resets: dict[int, list[int]] = field(default_factory=dict)  # tick -> nodes
    node_gaps: dict[int, list[int]] = field(default_factory=dict)
    nic_resets: dict[int, list[int]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.gpu_resets or self.node_gaps or self.nic_resets)


def plan(cfg: SimConfig, rng: np.random.Generator, sched: Schedule, ex: Exporters) -> ExporterPlan:
    out = ExporterPlan()
    if ex.reset_share > 0:
        for e in list(sched.events):
            if e.type == "exporter_restart" and rng.random() < ex.reset_share:
                k = cfg.tick_of(e.end_ts)
                n = int(e.node.removeprefix("node-"))
                if k < cfg.ticks:
                    out.gpu_resets.setdefault(k, []).append(n)
                    sched.events.append(BenignEvent("counter_reset", e.node, e.end_ts, e.end_ts + cfg.step_s))
    for _ in range(int(rng.poisson(ex.node_restarts_per_day * cfg.days))):
        n, at = int(rng.integers(cfg.nodes)), int(rng.integers(cfg.ticks))
        gap = int(rng.integers(1, 4))
        for k in range(at, min(cfg.ticks, at + gap)):
            out.node_gaps.setdefault(k, []).append(n)
        sched.events.append(BenignEvent("node_exporter_restart", host(n), cfg.ts(at), cfg.ts(at + gap)))
    for _ in range(int(rng.poisson(ex.nic_resets_per_day * cfg.days))):
        n, at = int(rng.integers(cfg.nodes)), int(rng.integers(cfg.ticks))
        out.nic_resets.setdefault(at, []).append(n)
        sched.events.append(BenignEvent("nic_reset", host(n), cfg.ts(at), cfg.ts(at + 1)))
    return out
