"""Fields beyond today's set, and the subset a stock dcgm-exporter ships (issue 16).

- `EXTRA_GPU_FIELDS`: DCGM fields the simulator did not emit (encoder/decoder utilisation, FB free,
  persistent ECC, graphics-engine activity, SM occupancy, NVLink and NVML PCIe throughput);
- `DEFAULT_COUNTERS`: the fields in dcgm-exporter's `etc/default-counters.csv`; with
  `dcgm_set="default-counters"` every other GPU field is left out (no SBE/DBE, no NVLink error
  counters, no violations, no throttle reasons, no row-remap pending);
- `NodeExtra`: up to a few hundred more node-exporter series per node (per-core CPU modes, more NICs,
  filesystems, hwmon sensors, vmstat), driven by the node's CPU load, so they are numerous, mostly
  uninformative and correlated, as on a real host.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.gpu_model import IDX as GPU_IDX
from prexid.service.offline.sim.gpu_model import Levels

EXTRA_GPU_FIELDS: tuple[str, ...] = (
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
)
DEFAULT_COUNTERS: frozenset[str] = frozenset(
    {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
)
FB_TOTAL_MIB = 183_359.0


class GpuExtra:
    """The extra DCGM fields of one scrape, read from the GPU model's levels and base fields."""

    def __init__(self, shape: tuple[int, int], rng: np.random.Generator) -> None:
        self.rng, self.shape = rng, shape
        self.sbe_agg = np.round(rng.exponential(3.0, shape))  # lifetime errors before this run
        self.prev_sbe = np.zeros(shape)
        self.nvlink = np.zeros(shape)
        self.pcie = np.zeros((2, *shape))

    def step(self, lv: Levels, base: NDArray[np.float64], step_s: float) -> NDArray[np.float64]:
        rng, shape = self.rng, self.shape
        sbe = base[GPU_IDX["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"]]
        self.sbe_agg += np.maximum(sbe - self.prev_sbe, 0.0)  # persistent: survives resets
        self.prev_sbe = sbe.copy()
        bw = base[GPU_IDX["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]]
        self.nvlink = bw * 4.1e3 * (1 + rng.normal(0, 0.02, shape))
        tx, rx = base[GPU_IDX["DCGM_FI_PROF_PCIE_TX_BYTES"]], base[GPU_IDX["DCGM_FI_PROF_PCIE_RX_BYTES"]]
        self.pcie += np.stack([tx, rx]) * step_s / 1024.0
        busy = lv.busy.astype(np.float64)
        return np.stack(
            [
                np.zeros(shape),
                np.round(np.clip(rng.normal(0.5, 0.5, shape), 0, 3)) * busy,
                FB_TOTAL_MIB - base[GPU_IDX["DCGM_FI_DEV_FB_USED"]],
                self.sbe_agg.copy(),
                base[GPU_IDX["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]],
                np.round(np.clip(lv.act * 0.93 + rng.normal(0, 0.005, shape), 0, 1), 4),
                np.round(np.clip(lv.act * 0.36 + rng.normal(0, 0.01, shape), 0, 1), 4),
                np.round(self.nvlink),
                np.round(self.nvlink * 0.98),
                np.round(self.pcie[0]),
                np.round(self.pcie[1]),
            ]
        )


_MODES = (("user", 0.8, 0.0), ("system", 0.12, 0.002), ("idle", -1.0, 1.0), ("iowait", 0.01, 0.001))
_NICS = tuple(f"ibp{i}s0" for i in range(8))
_FS = ("/", "/var", "/tmp", "/scratch", "/home", "/opt")


def node_catalogue(count: int) -> list[tuple[str, dict[str, str], bool, float, float]]:
    """`count` extra node series: (name, labels, is_counter, per-second base, per-second load slope)."""
    out: list[tuple[str, dict[str, str], bool, float, float]] = []
    for i in range(2, 18):
        out.append(
            (
                "node_hwmon_temp_celsius",
                {"chip": "platform_coretemp_0", "sensor": f"temp{i}"},
                False,
                40.0,
                28.0,
            )
        )
    for fs in _FS:
        out.append(("node_filesystem_avail_bytes", {"mountpoint": fs, "fstype": "xfs"}, False, 4e11, -2e9))
    for nic in _NICS:
        out.append(("node_network_up", {"device": nic}, False, 1.0, 0.0))
        for d in ("receive", "transmit"):
            out.append((f"node_network_{d}_bytes_total", {"device": nic}, True, 1e6, 2.5e9))
            out.append((f"node_network_{d}_packets_total", {"device": nic}, True, 1e3, 6e5))
    for name in ("pgfault", "pgmajfault", "pswpin", "pswpout", "oom_kill"):
        out.append(
            (
                f"node_vmstat_{name}",
                {},
                True,
                50.0 if name == "pgfault" else 0.0,
                2e4 if name == "pgfault" else 0.0,
            )
        )
    for core in range(96):
        for mode, slope, base in _MODES:
            out.append(("node_cpu_seconds_total", {"cpu": str(core), "mode": mode}, True, base, slope))
    return out[:count]


class NodeExtra:
    """The extra node series over nodes: counters integrate base + slope x CPU load, gauges read it."""

    def __init__(self, count: int, nodes: int, rng: np.random.Generator) -> None:
        cat = node_catalogue(count)
        self.names = [(n, lab) for n, lab, *_ in cat]
        self.counter = np.array([c for _, _, c, _, _ in cat], dtype=bool)
        self.base = np.array([b for *_, b, _ in cat])[:, None]
        self.slope = np.array([s for *_, s in cat])[:, None]
        self.nic = np.array([n.startswith("node_network_") for n, *_ in cat], dtype=bool)
        self.rng = rng
        self.c = np.where(self.counter[:, None], rng.uniform(1e5, 1e8, (len(cat), nodes)), 0.0)

    def step(self, cpu: NDArray[np.float64], step_s: float) -> NDArray[np.float64]:
        rng = self.rng
        level = self.base + self.slope * cpu[None, :]
        noise = 1 + rng.normal(0, 0.03, level.shape)
        self.c += np.where(self.counter[:, None], np.maximum(level, 0.0) * step_s * noise, 0.0)
        gauge = np.round(level * noise, 0)
        return np.where(self.counter[:, None], np.round(self.c, 2), gauge)

    def reboot(self, n: int) -> None:
        self.c[:, n] = 0.0

    def reset_nic(self, n: int) -> None:
        self.c[self.nic, n] = 0.0
