"""The simulator's hot path: one scrape of the whole cluster per tick, vectorised over nodes x GPUs.

`ClusterSim.frames()` yields, in event-time order, each tick's value vector (the column order of
`fields.series_table`) and the kernel log lines of that tick. Everything random comes from one seeded
generator, so a seed gives the same telemetry, logs and labels every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim import effects, row_remap
from prexid.service.offline.sim.benign import BenignEffects
from prexid.service.offline.sim.boot import BootClock, boot_series
from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.exporters import NIC_PREFIXES, ExporterPlan, plan
from prexid.service.offline.sim.extra_fields import DEFAULT_COUNTERS, EXTRA_GPU_FIELDS, GpuExtra, NodeExtra
from prexid.service.offline.sim.faults import BY_NAME, Failure, draw_failures
from prexid.service.offline.sim.fields import GPU_FIELDS, NODE_FIELDS, series_table
from prexid.service.offline.sim.gpu_model import GpuModel
from prexid.service.offline.sim.injections import Injections
from prexid.service.offline.sim.node_model import NodeModel
from prexid.service.offline.sim.physics import Physics
from prexid.service.offline.sim.schedule import Schedule, add_benign, apply_failures, build_schedule
from prexid.service.offline.sim.scrape import ScrapeNoise
from prexid.service.offline.sim.wire import gpu_labels, host, node_labels, syslog_line, xid_message
from prexid.service.offline.sim.workload import LoadProcess

XID_TEXT = {
    79: "GPU has fallen off the bus.",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.",
    63: "Row remapping event: recorded a row remap for a pending uncorrectable error.",
    64: "Row remapper failure: no spare rows left in the bank.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    45: "Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x0",
    74: "NVLink: fatal error detected on link 7(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    119: "Timeout after 6s of waiting for RPC response from GPU GSP! Expected function 76 (GSP_RM_CONTROL).",
    120: "GSP task error: GSP Error: Task 1 raised error code 0x1f for reason 0x0.",
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
    13: "Graphics SM Warp Exception on (GPC 3, TPC 1, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_9e000000.",
    43: "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x1c058",
}


@dataclass(frozen=True, slots=True)
class Frame:
    tick: int
    ts: float
    values: NDArray[np.float64]
    logs: list[tuple[float, bytes]]  # (event time, RFC3164 line)


class ClusterSim:
    """One seeded cluster. `physics` (default: today's) sets the variant's knobs; everything a knob adds
    draws from `aux`, a generator of its own, so the default variant reads `rng` exactly as before."""

    def __init__(self, cfg: SimConfig, physics: Physics | None = None) -> None:
        ph = self.physics = physics or Physics()
        self.variant = not ph.is_default  # False: the hot path is exactly the one before variants
        wl = ph.workload
        cfg = replace(
            cfg,
            checkpoint_every_s=wl.checkpoint_every_s,
            restarts_per_day=wl.restarts_per_day,
            exporter_restarts_per_day=ph.exporters.dcgm_restarts_per_day,
        )
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        aux = self.aux = np.random.default_rng([cfg.seed, 1])
        self.schedule: Schedule = build_schedule(cfg, self.rng, wl)
        self.failures: list[Failure] = draw_failures(
            cfg, self.rng, self.schedule.checkpoints, ph.precursors.length_scale
        )
        self.injections: Injections = {}
        if ph.precursors.row_remap == "weak":
            self.failures = row_remap.weaken(cfg, aux, self.failures, self.injections)
        apply_failures(cfg, self.rng, self.schedule, self.failures)
        add_benign(cfg, self.rng, self.schedule)
        self.benign = BenignEffects(cfg, aux, self.schedule, ph.benign.per_node_day, self.injections)
        self.exporters: ExporterPlan = plan(cfg, aux, self.schedule, ph.exporters)
        self.gpu = GpuModel(cfg, self.rng, ph, aux)
        self.node = NodeModel(cfg, self.rng, ph)
        self.load = LoadProcess(wl, self.schedule.slot_of, cfg.step_s, aux)
        fl = ph.fields
        self.gpu_extra = GpuExtra((cfg.nodes, cfg.gpus), aux) if fl.extra_dcgm else None
        self.node_extra = NodeExtra(fl.node_extra, cfg.nodes, aux) if fl.node_extra else None
        self._all_series = self._series_table()
        self.keep = self._kept_columns()
        scraped = self._all_series if self.keep is None else [self._all_series[i] for i in self.keep.tolist()]
        node_of_col = _node_of_column(scraped)
        self.scrape = ScrapeNoise(ph.scrape, node_of_col, aux)
        self.series = scraped + boot_series(cfg.nodes)  # the boot times last, outside the scrape noise
        self._xids = self._xid_lines()
        self._gaps = _by_tick(self.schedule.exporter_gap)
        self._reboots = _by_tick(self.schedule.reboot_ticks)
        self._down = _by_tick(self.schedule.node_down)
        self._dead = self._dead_gpus()
        self.boot = BootClock(cfg, self._reboots)
        self._boot_lag = np.unique(node_of_col[self.scrape.lag_cols])  # nodes a scrape behind
        self._boot_prev: NDArray[np.float64] | None = None

    @property
    def gpu_fields(self) -> tuple[str, ...]:
        """Every GPU field computed (before the stock exporter's selection), in block order."""
        return GPU_FIELDS + (EXTRA_GPU_FIELDS if self.gpu_extra is not None else ())

    def _series_table(self) -> list[tuple[str, dict[str, str]]]:
        cfg = self.cfg
        base = series_table(cfg.nodes, cfg.gpus, cfg.model)
        n_gpu = len(GPU_FIELDS) * cfg.nodes * cfg.gpus
        extra_gpu = [
            (name, gpu_labels(n, g, cfg.model))
            for name in (EXTRA_GPU_FIELDS if self.gpu_extra is not None else ())
            for n in range(cfg.nodes)
            for g in range(cfg.gpus)
        ]
        extra_node = [
            (name, node_labels(n, **lab))
            for name, lab in (self.node_extra.names if self.node_extra is not None else [])
            for n in range(cfg.nodes)
        ]
        return base[:n_gpu] + extra_gpu + base[n_gpu:] + extra_node

    def _kept_columns(self) -> NDArray[np.int64] | None:
        """Columns a stock dcgm-exporter ships (None: all of them)."""
        if self.physics.fields.dcgm_set == "full":
            return None
        n_gpu = len(self.gpu_fields) * self.cfg.nodes * self.cfg.gpus
        keep = [i for i, (name, _) in enumerate(self._all_series) if i >= n_gpu or name in DEFAULT_COUNTERS]
        return np.array(keep, dtype=np.int64)

    def labels(self) -> list[dict[str, object]]:
        return [f.label() for f in self.failures]

    def frames(self) -> Iterator[Frame]:
        cfg = self.cfg
        n_gpu_cols = len(GPU_FIELDS) * cfg.nodes * cfg.gpus
        slots = self.schedule.slot_of
        for k in range(cfg.ticks):
            ts = cfg.ts(k)
            eff = effects.Effects(cfg.nodes, cfg.gpus)
            if self.variant:  # before the failures fold in: the precursor knobs shape their ramps
                pre = self.physics.precursors
                eff.strength, eff.ramp_power = pre.strength, pre.ramp_power
                eff.skip_row_remap = pre.row_remap == "weak"
            for f in self._active(ts):
                effects.apply(eff, f, ts, self.rng, np.flatnonzero(slots == slots[max(f.node_index, 0)]))
            logs = self._xids.get(k, [])
            for n in self._reboots.get(k, []):
                self.gpu.reboot(n)
                self.node.reboot(n)
                logs = [
                    *logs,
                    (
                        ts,
                        syslog_line(ts, host(n), "NVRM: loading NVIDIA UNIX Open Kernel Module  570.124.06"),
                    ),
                ]
            phase = self.schedule.phase[k]
            self._xid_jumps(k)
            if self.variant:
                self._variant_tick(k, eff)
            gpu_vals = self.gpu.step(phase, slots, eff)
            node_vals = self.node.step(phase, slots, eff)
            if not self.variant:
                values = np.concatenate([gpu_vals.reshape(-1), node_vals.reshape(-1)])
                self._blank(values[:n_gpu_cols].reshape(len(GPU_FIELDS), cfg.nodes, cfg.gpus), k)
                for n in self._down.get(k, []):
                    values[n_gpu_cols:].reshape(len(NODE_FIELDS), cfg.nodes)[:, n] = np.nan
                boot = self._boot_values(k, self._down.get(k, []))
                yield Frame(k, ts, np.concatenate([values, boot]), sorted(logs))
                continue
            values = self._variant_values(k, gpu_vals, node_vals)
            silent = [*self._down.get(k, []), *self.exporters.node_gaps.get(k, [])]
            yield Frame(k, ts, np.concatenate([values, self._boot_values(k, silent)]), sorted(logs))

    def _variant_tick(self, k: int, eff: effects.Effects) -> None:
        """Before the models step: the load, benign effects, injected errors and counter resets."""
        load = self.load.step()
        self.gpu.load = self.node.load = load
        self.benign.apply(eff, k)
        for inj in self.injections.get(k, []):
            if inj.gpu is None:
                self.node.inject(inj.field, inj.node, inj.count)
            else:
                self.gpu.inject(inj.field, inj.node, inj.gpu, inj.count)
        for n in self.exporters.gpu_resets.get(k, []):
            self.gpu.reset_counters(n)
        for n in self.exporters.nic_resets.get(k, []):
            self.node.reset(n, NIC_PREFIXES)
            if self.node_extra is not None:
                self.node_extra.reset_nic(n)
        if self.node_extra is not None:
            for n in self._reboots.get(k, []):
                self.node_extra.reboot(n)

    def _variant_values(
        self, k: int, gpu_vals: NDArray[np.float64], node_vals: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """The scrape vector with the extra blocks, gaps, the stock exporter's selection and scrape noise."""
        cfg = self.cfg
        gpu_blocks = [gpu_vals]
        if self.gpu_extra is not None and self.gpu.levels is not None:
            gpu_blocks.append(self.gpu_extra.step(self.gpu.levels, gpu_vals, cfg.step_s))
        gpu_all = np.concatenate(gpu_blocks) if len(gpu_blocks) > 1 else gpu_vals
        node_blocks = [node_vals]
        if self.node_extra is not None:
            node_blocks.append(self.node_extra.step(self.node.cpu, cfg.step_s))
        node_all = np.concatenate(node_blocks) if len(node_blocks) > 1 else node_vals
        self._blank(gpu_all, k)
        for n in [*self._down.get(k, []), *self.exporters.node_gaps.get(k, [])]:
            node_all[:, n] = np.nan
        values = np.concatenate([gpu_all.reshape(-1), node_all.reshape(-1)])
        if self.keep is not None:
            values = values[self.keep]
        return self.scrape.apply(values) if self.scrape.active else values

    def _boot_values(self, k: int, silent: list[int]) -> NDArray[np.float64]:
        """Each node's boot time as its node-exporter shows it: nothing while the node is down or the
        exporter restarts, and a lagging exporter's reading one scrape late, like its other series."""
        boot = self.boot.step(k)
        boot[silent] = np.nan
        if not self.variant or not len(self._boot_lag):
            return boot
        shown = boot.copy()
        if self._boot_prev is not None:
            shown[self._boot_lag] = self._boot_prev[self._boot_lag]
        self._boot_prev = boot
        return shown

    def _blank(self, gpu_block: NDArray[np.float64], k: int) -> None:
        for n in self._gaps.get(k, []):
            gpu_block[:, n, :] = np.nan
        for n, g, k0, k1 in self._dead:
            if k0 <= k < k1:
                gpu_block[:, n, g] = np.nan

    def _active(self, ts: float) -> list[Failure]:
        return [f for f in self.failures if f.onset_ts <= ts < f.end_ts]

    def _xid_jumps(self, k: int) -> None:
        for f in self.failures:
            if f.xid_ts is not None and self._first_scrape_after(f.xid_ts) == k:
                self.gpu.xid(f.node_index, int(f.gpu or 0), BY_NAME[f.type].xid_codes)

    def _first_scrape_after(self, ts: float) -> int:
        """The first scrape that can see what happened at `ts` (DCGM reads fields at scrape time)."""
        return int(np.ceil((ts - self.cfg.start) / self.cfg.step_s))

    def _xid_lines(self) -> dict[int, list[tuple[float, bytes]]]:
        out: dict[int, list[tuple[float, bytes]]] = {}
        for f in self.failures:
            if f.xid_ts is None:
                continue
            for i, code in enumerate(BY_NAME[f.type].xid_codes):
                ts = f.xid_ts + i
                msg = xid_message(ts - self.cfg.start + 351_000.0, int(f.gpu or 0), code, XID_TEXT[code])
                out.setdefault(self.cfg.tick_of(ts), []).append((ts, syslog_line(ts, f.node, msg)))
        return out

    def _dead_gpus(self) -> list[tuple[int, int, int, int]]:
        """GPUs that fell off the bus: no DCGM series from the Xid until the node's reboot."""
        out = []
        for f in self.failures:
            if f.type.startswith("xid79") and f.xid_ts is not None:
                k0 = self._first_scrape_after(f.xid_ts)
                later = [k for k, ns in self._reboots.items() if f.node_index in ns and k > k0]
                out.append((f.node_index, int(f.gpu or 0), k0, min(later, default=self.cfg.ticks)))
        return out


def _node_of_column(series: list[tuple[str, dict[str, str]]]) -> NDArray[np.int64]:
    """Each column's node for node-exporter columns, -1 for DCGM ones."""
    return np.array(
        [-1 if "Hostname" in lab else _node_index(lab["instance"]) for _, lab in series], dtype=np.int64
    )


def _node_index(instance: str) -> int:
    return int(instance.split(":")[0].removeprefix("node-"))


def _by_tick(pairs: set[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for k, n in sorted(pairs):
        out.setdefault(k, []).append(n)
    return out
