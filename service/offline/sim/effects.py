"""How each failure bends the telemetry of its GPU, node or job at one tick (the precursor physics).

A precursor ramps as r = ((t - onset) / (xid - onset))^2: faint at first, strongest just before the Xid,
as degradation accelerates. docs/simulator.md gives the physical story behind each type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.faults import Failure

Grid = NDArray[np.float64]


@dataclass
class Effects:
    """Per-tick modifiers on the healthy model; `rate` adds Poisson rates to error counters."""

    nodes: int
    gpus: int
    temp_add: Grid = field(init=False)
    clock_mult: Grid = field(init=False)
    power_mult: Grid = field(init=False)
    tensor_mult: Grid = field(init=False)
    bw_mult: Grid = field(init=False)
    rate: dict[str, Grid] = field(default_factory=dict)
    nfs_storm: NDArray[np.bool_] = field(init=False)
    job_slow: NDArray[np.float64] = field(init=False)  # per node: share of job throughput lost
    cpu_mult: NDArray[np.float64] | None = None  # per node: host load from a benign event, if any
    strength: float = 1.0  # scales every precursor's ramp (weak-precursor variants)
    ramp_power: float = 2.0
    skip_row_remap: bool = False  # Xid 63/64 precursors come as discrete SBEs instead (row_remap.py)

    def __post_init__(self) -> None:
        shape = (self.nodes, self.gpus)
        self.temp_add = np.zeros(shape)
        self.clock_mult = np.ones(shape)
        self.power_mult = np.ones(shape)
        self.tensor_mult = np.ones(shape)
        self.bw_mult = np.ones(shape)
        self.nfs_storm = np.zeros(self.nodes, dtype=bool)
        self.job_slow = np.zeros(self.nodes)

    def add_rate(self, metric: str, n: int, g: int, value: float) -> None:
        grid = self.rate.setdefault(metric, np.zeros((self.nodes, self.gpus)))
        grid[n, g] += value


def ramp(f: Failure, t: float, power: float = 2.0) -> float:
    """0 before onset (and for no-precursor failures), rising to 1 at the Xid or end."""
    if not f.has_precursor or t < f.onset_ts:
        return 0.0
    end = f.xid_ts if f.xid_ts is not None else f.end_ts
    progress = float(np.clip((t - f.onset_ts) / max(end - f.onset_ts, 1.0), 0.0, 1.0))
    return float(progress**power)


def apply(
    eff: Effects, f: Failure, t: float, rng: np.random.Generator, slot_nodes: NDArray[np.int64]
) -> None:
    """Fold one active failure's precursor into `eff` (nothing after its Xid: the Xid has its own effects)."""
    end = f.xid_ts if f.xid_ts is not None else f.end_ts
    if not f.onset_ts <= t < end:
        return
    r = ramp(f, t, eff.ramp_power) * eff.strength
    if eff.skip_row_remap and f.type.startswith(("xid63", "xid64")):
        return
    if f.type == "nfs_saturation":
        eff.nfs_storm[slot_nodes] = True
        return
    n, g = f.node_index, int(f.gpu or 0)
    _PRECURSORS[f.type.split("_")[0]](eff, n, g, r, rng, slot_nodes)


def _pcie(eff: Effects, n: int, g: int, r: float, rng: np.random.Generator, slot: NDArray[np.int64]) -> None:
    # a marginal PCIe link or riser: replays climb, the board runs hotter, power readings get jittery
    eff.add_rate("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", n, g, 0.3 + 40.0 * r)
    eff.temp_add[n, g] += 9.0 * r
    eff.power_mult[n, g] *= 1.0 + rng.normal(0.0, 0.08 * r)


def _ecc(eff: Effects, n: int, g: int, r: float, rng: np.random.Generator, slot: NDArray[np.int64]) -> None:
    # a weakening HBM row: correctable errors accelerate, pages retire and rows remap before the DBE
    eff.add_rate("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", n, g, 0.05 + 8.0 * r)
    eff.add_rate("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", n, g, 0.002 + 0.15 * r)
    eff.add_rate("DCGM_FI_DEV_RETIRED_SBE", n, g, 0.05 * r)
    eff.temp_add[n, g] += 2.0 * r  # memory-bound retries


def _nvlink(
    eff: Effects, n: int, g: int, r: float, rng: np.random.Generator, slot: NDArray[np.int64]
) -> None:
    # a degrading NVLink lane: CRC flit/data errors and replays, effective bandwidth sags
    eff.add_rate("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", n, g, 0.5 + 60.0 * r)
    eff.add_rate("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", n, g, 0.1 + 10.0 * r)
    eff.add_rate("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", n, g, 0.05 + 4.0 * r)
    eff.bw_mult[n, g] *= 1.0 - 0.25 * r


def _gsp(eff: Effects, n: int, g: int, r: float, rng: np.random.Generator, slot: NDArray[np.int64]) -> None:
    # a struggling GSP firmware: slow RPCs show up as intermittent clock drops and stalled kernels
    if rng.random() < 0.15 + 0.6 * r:
        eff.clock_mult[n, g] *= 0.6
        eff.tensor_mult[n, g] *= 0.5
        eff.power_mult[n, g] *= 0.75


def _thermal(
    eff: Effects, n: int, g: int, r: float, rng: np.random.Generator, slot: NDArray[np.int64]
) -> None:
    # failing cooling (a fan, a clogged cold plate): temperature creeps up until the GPU throttles
    eff.temp_add[n, g] += 24.0 * np.sqrt(r)


def _straggler(
    eff: Effects, n: int, g: int, r: float, rng: np.random.Generator, slot: NDArray[np.int64]
) -> None:
    # fail-slow: one GPU runs ~30% slower with no error at all; the whole job waits for it at collectives
    eff.clock_mult[n, g] *= 0.72
    eff.power_mult[n, g] *= 0.82
    eff.tensor_mult[n, g] *= 0.7
    eff.job_slow[slot] = np.maximum(eff.job_slow[slot], 0.15)


_PRECURSORS = {
    "xid79": _pcie,
    "xid48": _ecc,
    "xid94": _ecc,
    "xid95": _ecc,
    "xid63": _ecc,
    "xid64": _ecc,
    "xid74": _nvlink,
    "xid119": _gsp,
    "xid13": lambda *a: None,
    "xid31": lambda *a: None,
    "thermal": _thermal,
    "straggler": _straggler,
}
