"""The simulator's hot path: one scrape of the whole cluster per tick, vectorised over nodes x GPUs.

`ClusterSim.frames()` yields, in event-time order, each tick's value vector (the column order of
`fields.series_table`) and the kernel log lines of that tick. Everything random comes from one seeded
generator, so a seed gives the same telemetry, logs and labels every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim import effects
from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.faults import BY_NAME, Failure, draw_failures
from prexid.service.offline.sim.fields import GPU_FIELDS, NODE_FIELDS, series_table
from prexid.service.offline.sim.gpu_model import GpuModel
from prexid.service.offline.sim.node_model import NodeModel
from prexid.service.offline.sim.schedule import Schedule, add_benign, apply_failures, build_schedule
from prexid.service.offline.sim.wire import host, syslog_line, xid_message

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
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.schedule: Schedule = build_schedule(cfg, self.rng)
        self.failures: list[Failure] = draw_failures(cfg, self.rng, self.schedule.checkpoints)
        apply_failures(cfg, self.rng, self.schedule, self.failures)
        add_benign(cfg, self.rng, self.schedule)
        self.series = series_table(cfg.nodes, cfg.gpus, cfg.model)
        self.gpu = GpuModel(cfg, self.rng)
        self.node = NodeModel(cfg, self.rng)
        self._xids = self._xid_lines()
        self._gaps = _by_tick(self.schedule.exporter_gap)
        self._reboots = _by_tick(self.schedule.reboot_ticks)
        self._down = _by_tick(self.schedule.node_down)
        self._dead = self._dead_gpus()

    def labels(self) -> list[dict[str, object]]:
        return [f.label() for f in self.failures]

    def frames(self) -> Iterator[Frame]:
        cfg = self.cfg
        n_gpu_cols = len(GPU_FIELDS) * cfg.nodes * cfg.gpus
        slots = self.schedule.slot_of
        for k in range(cfg.ticks):
            ts = cfg.ts(k)
            eff = effects.Effects(cfg.nodes, cfg.gpus)
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
            gpu_vals = self.gpu.step(phase, slots, eff)
            node_vals = self.node.step(phase, slots, eff)
            values = np.concatenate([gpu_vals.reshape(-1), node_vals.reshape(-1)])
            self._blank(values[:n_gpu_cols].reshape(len(GPU_FIELDS), cfg.nodes, cfg.gpus), k)
            for n in self._down.get(k, []):
                values[n_gpu_cols:].reshape(len(NODE_FIELDS), cfg.nodes)[:, n] = np.nan
            yield Frame(k, ts, values, sorted(logs))

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


def _by_tick(pairs: set[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for k, n in sorted(pairs):
        out.setdefault(k, []).append(n)
    return out
