"""A small seeded GPU cluster for the embedded demo: DCGM and node-exporter samples plus kernel lines.

It speaks the wire formats prexid reads from Kafka (prometheus-kafka-adapter JSON, RFC3164 syslog), so
the demo exercises the real decoders. One GPU degrades before it falls off the bus: PCIe replays grow
and it runs hotter for `precursor_s` before its Xid 79, then its DCGM series stop. Every
`checkpoint_every_s` the whole job dips utilisation and power together (a checkpoint must not page).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from prexid.service.offline.sim.wire import adapter_json as _adapter_json
from prexid.service.offline.sim.wire import gpu_labels, host, pci
from prexid.service.offline.sim.wire import syslog_line as _syslog

GPU_GAUGES = {  # metric -> (healthy mean, noise sd)
    "DCGM_FI_DEV_GPU_TEMP": (62.0, 0.4),
    "DCGM_FI_DEV_MEMORY_TEMP": (70.0, 0.4),
    "DCGM_FI_DEV_POWER_USAGE": (650.0, 8.0),
    "DCGM_FI_DEV_GPU_UTIL": (97.0, 1.0),
    "DCGM_FI_DEV_SM_CLOCK": (1965.0, 5.0),
}
GPU_ERROR_COUNTERS = (
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
)


@dataclass(frozen=True, slots=True)
class DemoFault:
    node: int = 3
    gpu: int = 5
    xid_at_s: float = 1800.0  # seconds after the start
    precursor_s: float = 600.0
    xid_code: int = 79


@dataclass(frozen=True, slots=True)
class DemoCluster:
    nodes: int = 8
    gpus: int = 8
    start: float = 1_796_205_600.0  # 2026-12-01T10:00:00Z
    step_s: float = 15.0
    duration_s: float = 2400.0
    checkpoint_every_s: float = 600.0
    seed: int = 7
    fault: DemoFault = field(default_factory=DemoFault)

    def host(self, n: int) -> str:
        return host(n)

    def pci(self, g: int) -> str:
        return pci(g)


@dataclass(frozen=True, slots=True)
class Tick:
    ts: float
    metrics: list[bytes]  # prometheus-kafka-adapter JSON, one sample each
    logs: list[bytes]  # RFC3164 syslog lines


def simulate(c: DemoCluster) -> Iterator[Tick]:
    """Yield one scrape of the whole cluster per step, in event-time order."""
    rng = np.random.default_rng(c.seed)
    shape = (c.nodes, c.gpus)
    offsets = {m: rng.normal(0.0, sd * 3, shape) for m, (_, sd) in GPU_GAUGES.items()}
    counters = {m: np.zeros(shape) for m in GPU_ERROR_COUNTERS}
    net_bytes = np.zeros(c.nodes)
    f = c.fault
    fault_start = f.xid_at_s - f.precursor_s
    for k in range(int(c.duration_s // c.step_s)):
        t = k * c.step_s
        ts = c.start + t
        in_checkpoint = t > 0 and (t % c.checkpoint_every_s) < c.step_s
        ramp = float(np.clip((t - fault_start) / f.precursor_s, 0.0, 1.0))
        dead = t >= f.xid_at_s
        metrics: list[bytes] = []
        for m, (mean, sd) in GPU_GAUGES.items():
            vals = mean + offsets[m] + rng.normal(0.0, sd, shape)
            if in_checkpoint and m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"):
                vals *= 0.3
            if m in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"):
                vals[f.node, f.gpu] += 14.0 * ramp
            for n in range(c.nodes):
                for g in range(c.gpus):
                    if dead and (n, g) == (f.node, f.gpu):
                        continue
                    metrics.append(_adapter_json(m, gpu_labels(n, g), ts, round(float(vals[n, g]), 2)))
        counters["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] += rng.poisson(0.002, shape)
        if ramp > 0:
            counters["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][f.node, f.gpu] += rng.poisson(1.0 + 20.0 * ramp)
        for m, vals in counters.items():
            for n in range(c.nodes):
                for g in range(c.gpus):
                    if dead and (n, g) == (f.node, f.gpu):
                        continue
                    metrics.append(_adapter_json(m, gpu_labels(n, g), ts, float(vals[n, g])))
        net_bytes += rng.normal(1.2e9, 3e7, c.nodes) * c.step_s
        for n in range(c.nodes):
            node_labels = {"instance": f"{c.host(n)}:9100", "job": "node"}
            metrics.append(_adapter_json("node_load1", node_labels, ts, round(float(rng.normal(24, 1)), 2)))
            metrics.append(
                _adapter_json(
                    "node_network_receive_bytes_total", {**node_labels, "device": "ib0"}, ts, net_bytes[n]
                )
            )
        logs: list[bytes] = []
        if t <= f.xid_at_s < t + c.step_s:
            pci = c.pci(f.gpu)
            short = pci[4:].lower()[:10]
            host = c.host(f.node)
            logs.append(
                _syslog(
                    ts,
                    host,
                    f"[{t:12.6f}] NVRM: Xid (PCI:{short}): {f.xid_code}, pid=4242, name=python3, "
                    "GPU has fallen off the bus.",
                )
            )
            logs.append(_syslog(ts, host, f"NVRM: GPU {short}.0: GPU has fallen off the bus."))
        yield Tick(ts, metrics, logs)
