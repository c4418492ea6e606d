"""node-exporter's `node_boot_time_seconds`: each node's kernel boot time, in epoch seconds.

Real node-exporter always exports it (the stat collector, `btime` of /proc/stat): a whole-second gauge
that stays put while the node is up and moves on only when the node reboots. Each simulated node booted
1-90 days before the run; a reboot (the one at the end of a drain's down window, `Schedule.reboot_ticks`)
sets it to when the kernel started, 45-150 s before the node's first scrape back. A node that is down
exports nothing, nor does one whose node-exporter is restarting (its boot time does not move).

Its draws come from a generator of its own, so adding the series leaves every other one byte-identical.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.config import DAY, SimConfig
from prexid.service.offline.sim.wire import node_labels

BOOT_TIME = "node_boot_time_seconds"
STREAM = 2  # the generator [seed, STREAM]: 1 is the variants' `aux`, 16 and 17 their knob draws


def boot_series(nodes: int) -> list[tuple[str, dict[str, str]]]:
    """One boot-time series per node, in node order."""
    return [(BOOT_TIME, node_labels(n)) for n in range(nodes)]


class BootClock:
    """Every node's boot time at each tick, from the schedule's reboots."""

    def __init__(self, cfg: SimConfig, reboots: dict[int, list[int]]) -> None:
        rng = np.random.default_rng([cfg.seed, STREAM])
        self.boot: NDArray[np.float64] = cfg.start - np.round(rng.uniform(1 * DAY, 90 * DAY, cfg.nodes))
        self.cfg = cfg
        self.reboots = reboots
        self.rng = rng

    def step(self, k: int) -> NDArray[np.float64]:
        """The boot times a scrape at tick `k` reads (before the scrape's gaps blank any)."""
        back = self.reboots.get(k, [])
        if back:
            lead = np.round(self.rng.uniform(45.0, 150.0, len(back)))
            self.boot[back] = self.cfg.ts(k) - lead
        return self.boot.copy()
