"""Healthy B200 telemetry per GPU, bent by the tick's failure effects; arrays over nodes x GPUs.

Workload sets utilisation (all GPUs of a job move together through one shared job factor); power follows
utilisation, temperature follows power with a thermal lag, clocks drop at idle and under throttling.
Error counters are Poisson: most GPUs are clean, a few are "leaky" with a low benign error rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.effects import Effects
from prexid.service.offline.sim.fields import GPU_FIELDS
from prexid.service.offline.sim.physics import Counters, Physics

UTIL = np.array([0.0, 97.0, 14.0, 35.0, 0.0])  # by Phase: idle, run, checkpoint, load, drained
FB = np.array([600.0, 152_000.0, 152_000.0, 90_000.0, 600.0])
ERROR_FIELDS = (
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
IDX = {name: i for i, name in enumerate(GPU_FIELDS)}


@dataclass(frozen=True, slots=True)
class Levels:
    """The tick's physical state of every GPU, from which the fields are read."""

    ph: NDArray[np.int64]
    busy: NDArray[np.bool_]
    slow: NDArray[np.float64]
    util: NDArray[np.float64]
    power: NDArray[np.float64]
    hot: NDArray[np.float64]
    clock: NDArray[np.float64]
    act: NDArray[np.float64]


class GpuModel:
    def __init__(
        self,
        cfg: SimConfig,
        rng: np.random.Generator,
        ph: Physics | None = None,
        aux: np.random.Generator | None = None,
    ) -> None:
        """`rng` is the stream today's physics reads; knobs that are new draw from `aux` only, so the
        default variant consumes `rng` exactly as before and stays byte-identical."""
        self.cfg, self.rng, self.ph = cfg, rng, ph or Physics()
        aux = aux or np.random.default_rng([cfg.seed, 1])
        shape = (cfg.nodes, cfg.gpus)
        self.shape = shape
        self.temp = np.full(shape, 35.0)
        self.off_temp = rng.normal(0.0, self.ph.offsets.temp_sd, shape)
        self.off_power = rng.normal(0.0, self.ph.offsets.power_sd, shape)
        sd = self.ph.offsets.clock_sd
        self.off_clock = aux.normal(0.0, sd, shape) if sd > 0 else None
        self.noise = self.ph.noise.gauge_scale
        self.load: NDArray[np.float64] | None = None  # per node: the inference load this tick, if any
        self.levels: Levels | None = None  # the last tick's, for the extra fields
        self.job = np.zeros(8)  # AR(1) job factor per slot: the GPUs of a job move together
        self.counters = {f: np.zeros(shape) for f in (*ERROR_FIELDS, "energy", "thermal_v", "power_v")}
        self.flags = {
            f: np.zeros(shape)
            for f in (
                "RETIRED_DBE",
                "RETIRED_PENDING",
                "UNC_ROWS",
                "REMAP_PENDING",
                "REMAP_FAILURE",
                "XID",
                "DBE",
            )
        }
        self.base_rate = {f: _benign_rates(rng, shape, self.ph.counters) for f in ERROR_FIELDS}
        self.counters["energy"] += rng.uniform(1e11, 5e11, shape)

    def reboot(self, n: int) -> None:
        """Driver reload: volatile counters restart from zero and the last-Xid field clears."""
        for arr in self.counters.values():
            arr[n] = 0.0
        for name in ("XID", "REMAP_PENDING", "RETIRED_PENDING"):
            self.flags[name][n] = 0.0

    def reset_counters(self, n: int) -> None:
        """An exporter or driver restart that zeroes the volatile counters but keeps the GPU's state."""
        for arr in self.counters.values():
            arr[n] = 0.0

    def inject(self, field: str, n: int, g: int, count: float) -> None:
        """Discrete errors (a weak precursor's SBEs, a benign burst) on one GPU at this scrape."""
        if field in self.counters:
            self.counters[field][n, g] += count
        else:
            self.flags[_FLAG_OF[field]][n, g] += count

    def xid(self, n: int, g: int, codes: tuple[int, ...]) -> None:
        """What the failure itself writes into DCGM's fields at the Xid."""
        fl = self.flags
        fl["XID"][n, g] = codes[-1] if codes[-1] != 154 else codes[0]
        if codes[0] in (48, 94, 95):
            fl["DBE"][n, g] += 1
            fl["RETIRED_DBE"][n, g] += 1
            fl["RETIRED_PENDING"][n, g] = 1
            fl["UNC_ROWS"][n, g] += 1
            fl["REMAP_PENDING"][n, g] = 1
        if codes[0] == 63:
            fl["REMAP_PENDING"][n, g] = 1
        if codes[0] == 64:
            fl["REMAP_FAILURE"][n, g] = 1
        if codes[0] == 74:
            self.counters["DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"][n, g] += 1

    def step(self, phase: NDArray[np.uint8], slots: NDArray[np.int64], eff: Effects) -> NDArray[np.float64]:
        """One scrape: every GPU field over nodes x GPUs, shape [fields, nodes, gpus]."""
        lv = self._levels(phase, slots, eff)
        self.levels = lv
        self._integrate(lv.power, lv.hot, eff)
        out = np.empty((len(GPU_FIELDS), *self.shape))
        for name, arr in {**self._gauges(lv, eff), **self._counters()}.items():
            out[IDX[name]] = arr
        return out

    def _levels(self, phase: NDArray[np.uint8], slots: NDArray[np.int64], eff: Effects) -> Levels:
        """Utilisation from the workload; power from utilisation; temperature lags power; clocks follow."""
        rng, shape, s, th = self.rng, self.shape, self.noise, self.ph.thermal
        self.job = 0.9 * self.job + rng.normal(0.0, 0.45, len(self.job))
        ph = phase.astype(np.int64)[:, None]
        busy = UTIL[ph] > 0
        slow = (1.0 - eff.job_slow)[:, None]
        job = 1 + 0.004 * self.job[slots][:, None]
        base = UTIL[ph] * job if self.load is None else UTIL[ph] * job * self.load[:, None]
        util = np.clip(base + rng.normal(0, 0.6 * s, shape) * busy, 0, 100)
        power = (
            145.0 + 840.0 * util / 100 * slow + self.off_power + rng.normal(0, 7.0 * s, shape)
        ) * eff.power_mult
        target = th.ambient + th.coupling * power + self.off_temp + eff.temp_add
        lag = 1 - np.exp(-self.cfg.step_s / th.lag_s)
        self.temp += (target - self.temp) * lag + rng.normal(0, 0.25 * s, shape)
        hot = np.clip((self.temp - 87.0) / 3.0, 0.0, 1.0)
        clock = np.where(busy, 1965.0, 345.0) * eff.clock_mult * (1 - 0.2 * hot) + rng.normal(
            0, 4.0 * s, shape
        )
        if self.off_clock is not None:
            clock = clock + self.off_clock * busy
        return Levels(ph, busy, slow, util, power, hot, clock, util / 100 * eff.tensor_mult * slow)

    def _gauges(self, lv: Levels, eff: Effects) -> dict[str, NDArray[np.float64]]:
        """Gauges at the precision dcgm-exporter prints them."""
        rng, shape, s, nz = self.rng, self.shape, self.noise, self.ph.noise

        def jitter(sd: float) -> NDArray[np.float64]:
            return 1 + rng.normal(0, sd * s, shape)

        def ratio(x: NDArray[np.float64]) -> NDArray[np.float64]:
            return _ratio(x, nz.ratio_decimals)

        td = nz.temp_decimals
        return {
            "DCGM_FI_DEV_GPU_TEMP": np.round(self.temp, td),  # whole degrees by default
            "DCGM_FI_DEV_MEMORY_TEMP": np.round(self.temp + 7.0 + rng.normal(0, 0.3 * s, shape), td),
            "DCGM_FI_DEV_POWER_USAGE": np.round(lv.power, nz.power_decimals),
            "DCGM_FI_DEV_GPU_UTIL": np.round(lv.util),
            "DCGM_FI_DEV_MEM_COPY_UTIL": np.round(
                np.clip(lv.util * 0.3 + rng.normal(0, 2.5 * s, shape) * lv.busy, 0, 100)
            ),
            "DCGM_FI_DEV_SM_CLOCK": np.round(lv.clock),
            "DCGM_FI_DEV_MEM_CLOCK": np.full(shape, 3996.0),
            "DCGM_FI_DEV_FB_USED": np.round(FB[lv.ph] + rng.normal(0, 40 * s, shape)),
            "DCGM_FI_PROF_SM_ACTIVE": ratio(lv.act * 0.82 + rng.normal(0, 0.005 * s, shape)),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ratio(lv.act * 0.52 + rng.normal(0, 0.005 * s, shape)),
            "DCGM_FI_PROF_DRAM_ACTIVE": ratio(lv.act * 0.41 + rng.normal(0, 0.005 * s, shape)),
            "DCGM_FI_PROF_PCIE_TX_BYTES": np.round(
                (1.5e9 * lv.util / 100 + 1.8e10 * (lv.ph == 2)) * jitter(0.03)
            ),
            "DCGM_FI_PROF_PCIE_RX_BYTES": np.round(
                (1.2e9 * lv.util / 100 + 2.0e10 * (lv.ph == 3)) * jitter(0.03)
            ),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 1.0 * ~lv.busy
            + 32.0 * (lv.hot > 0)
            + 4.0 * (lv.power > 960),
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": np.round(
                2.4e5 * lv.util / 100 * eff.bw_mult * lv.slow * jitter(0.02)
            ),
            "DCGM_FI_DEV_XID_ERRORS": self.flags["XID"],
        }

    def _counters(self) -> dict[str, NDArray[np.float64]]:
        c, fl = self.counters, self.flags
        return {
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.round(c["energy"]),
            "DCGM_FI_DEV_THERMAL_VIOLATION": c["thermal_v"],
            "DCGM_FI_DEV_POWER_VIOLATION": c["power_v"],
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": fl["DBE"],
            "DCGM_FI_DEV_RETIRED_DBE": fl["RETIRED_DBE"],
            "DCGM_FI_DEV_RETIRED_PENDING": fl["RETIRED_PENDING"],
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": fl["UNC_ROWS"],
            "DCGM_FI_DEV_ROW_REMAP_PENDING": fl["REMAP_PENDING"],
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": fl["REMAP_FAILURE"],
            **{f: c[f] for f in ERROR_FIELDS},
        }

    def _integrate(self, power: NDArray[np.float64], hot: NDArray[np.float64], eff: Effects) -> None:
        c, step = self.counters, self.cfg.step_s
        c["energy"] += power * step * 1000.0
        c["thermal_v"] += hot * step * 1e6
        c["power_v"] += np.clip((power - 960.0) / 60.0, 0.0, 1.0) * step * 1e6  # share of time at the cap
        cn = self.ph.counters
        for f in ERROR_FIELDS:
            lam = self.base_rate[f] + eff.rate.get(f, 0.0)
            bursty = cn.burst_all or f == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
            burst = 1 + self.rng.geometric(cn.burst_p, self.shape) * bursty
            c[f] += self.rng.poisson(lam) * burst


def _benign_rates(rng: np.random.Generator, shape: tuple[int, int], cn: Counters) -> NDArray[np.float64]:
    """Per-tick benign error rates: a few a month; by default 3% of GPUs "leaky" at 3-30 a day (per field)."""
    leaky = rng.random(shape) < cn.leaky_share
    return np.where(leaky, rng.uniform(cn.leaky_lo, cn.leaky_hi, shape), cn.clean_rate)


def _ratio(x: NDArray[np.float64], decimals: int = 4) -> NDArray[np.float64]:
    """DCP ratios are 0..1 with four decimals on the wire (fewer on some exporters)."""
    return np.asarray(np.round(np.clip(x, 0.0, 1.0), decimals), dtype=np.float64)


_FLAG_OF = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "DBE",
    "DCGM_FI_DEV_RETIRED_DBE": "RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING": "RETIRED_PENDING",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "UNC_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "REMAP_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "REMAP_FAILURE",
}
