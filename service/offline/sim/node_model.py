"""Healthy node-exporter telemetry per node, bent by the tick's effects; arrays over nodes.

Checkpoints write over NFS (Ethernet/RoCE bytes, RPC counts, a moderate transport backlog and queue
time); job (re)starts read the checkpoint back. In an NFS saturation the 128-slot RPC layer is the
bottleneck: backlog and queue time explode while bytes on the wire *fall* (the study's bandwidth paradox).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.effects import Effects
from prexid.service.offline.sim.fields import NODE_FIELDS
from prexid.service.offline.sim.physics import Physics

CPU = np.array([0.02, 0.22, 0.30, 0.45, 0.01])  # busy share of 224 cores, by Phase
IB = np.array([1e6, 2.2e10, 2.0e9, 1.0e9, 1e6])  # RoCE/IB bytes/s (collectives)
NFS_WRITE = np.array([2e6, 5e6, 1.2e9, 5e6, 1e6])  # bytes/s
NFS_READ = np.array([1e6, 3e6, 1e6, 2.5e9, 1e6])
IO_PRESSURE = np.array([0.001, 0.004, 0.08, 0.12, 0.001])  # share of time some task waits on IO
RPC = 1 << 20  # wsize/rsize: 1 MiB per RPC
COUNTERS = tuple(name for name, _ in NODE_FIELDS if name.endswith(("_total", "RetransSegs")))
IDX = {name: i for i, (name, _) in enumerate(NODE_FIELDS)}
LEAKY_COUNTERS = (
    "node_infiniband_port_errors_received_total",
    "node_network_receive_errs_total",
    "node_network_receive_drop_total",
    "node_edac_correctable_errors_total",
)


class NodeModel:
    def __init__(self, cfg: SimConfig, rng: np.random.Generator, ph: Physics | None = None) -> None:
        self.cfg, self.rng = cfg, rng
        cn = (ph or Physics()).counters
        self.load: NDArray[np.float64] | None = None  # per node: the inference load this tick, if any
        self.cpu: NDArray[np.float64] = np.zeros(cfg.nodes)  # the last tick's busy share, for extra series
        self.c = {name: rng.uniform(1e6, 1e9, cfg.nodes) for name in COUNTERS}
        for name in COUNTERS:
            if (
                "err" in name
                or "drop" in name
                or "downed" in name
                or "recovery" in name
                or "timeouts" in name
            ):
                self.c[name] = np.zeros(cfg.nodes)
        self.leaky = np.where(rng.random(cfg.nodes) < cn.node_leaky_share, cn.node_leaky_rate, 1e-4)

    def reboot(self, n: int) -> None:
        for arr in self.c.values():
            arr[n] = 0.0

    def reset(self, n: int, prefixes: tuple[str, ...]) -> None:
        """A driver reload of one subsystem (a NIC): only its counters restart from zero."""
        for name, arr in self.c.items():
            if name.startswith(prefixes):
                arr[n] = 0.0

    def inject(self, name: str, n: int, count: float) -> None:
        """Discrete events on one node's counter (a benign link flap)."""
        self.c[name][n] += count

    def step(self, phase: NDArray[np.uint8], slots: NDArray[np.int64], eff: Effects) -> NDArray[np.float64]:
        """One scrape of every node field, shape [fields, nodes]."""
        ph = phase.astype(np.int64)
        jitter = 1 + self.rng.normal(0, 0.03, self.cfg.nodes)
        cpu = CPU[ph] * jitter
        if self.load is not None:
            cpu = cpu * (0.3 + 0.7 * self.load)
        if eff.cpu_mult is not None:
            cpu = np.minimum(cpu * eff.cpu_mult, 1.0)
        self.cpu = cpu
        self._host(ph, cpu, jitter, eff)
        self._nfs(ph, eff.nfs_storm, jitter)
        self._errors()
        return self._read(ph, cpu)

    def _host(
        self, ph: NDArray[np.int64], cpu: NDArray[np.float64], jitter: NDArray[np.float64], eff: Effects
    ) -> None:
        dt = self.cfg.step_s
        io_p = np.where(eff.nfs_storm, 0.7, IO_PRESSURE[ph]) * jitter
        ib = IB[ph] * (1 - eff.job_slow) * jitter
        if self.load is not None:
            ib = ib * self.load
        self._add("node_cpu_seconds_total", 224 * cpu * dt)
        self._add("node_pressure_cpu_waiting_seconds_total", (0.002 + 0.02 * cpu) * dt)
        self._add("node_pressure_memory_waiting_seconds_total", 0.0005 * dt * jitter)
        self._add("node_pressure_io_waiting_seconds_total", io_p * dt)
        self._add("node_pressure_io_stalled_seconds_total", 0.4 * io_p * dt)
        self._add("node_infiniband_port_data_received_bytes_total", ib * dt)
        self._add("node_infiniband_port_data_transmitted_bytes_total", ib * dt)
        self._add("node_disk_read_bytes_total", np.where(ph == 1, 4e8, 1e6) * dt * jitter)
        self._add("node_disk_written_bytes_total", 2e6 * dt * jitter)
        self._add("node_disk_io_time_seconds_total", np.minimum(1.0, 0.02 + cpu) * dt)

    def _nfs(self, ph: NDArray[np.int64], storm: NDArray[np.bool_], jitter: NDArray[np.float64]) -> None:
        """Checkpoint traffic over NFS; in a storm the RPC queue explodes while bytes fall."""
        rng, dt, n = self.rng, self.cfg.step_s, self.cfg.nodes
        write = NFS_WRITE[ph] * np.where(storm, 0.3, 1.0) * jitter
        read = NFS_READ[ph] * jitter
        rpcs = (write + read) * dt / RPC
        backlog = np.where(storm, rng.uniform(300, 900, n), np.where(ph == 2, 12.0, 0.5))
        qtime = np.where(storm, rng.uniform(0.8, 2.5, n), np.where(ph == 2, 0.015, 0.0005))
        self._add("node_network_receive_bytes_total", (read + 3e6) * dt)
        self._add("node_network_transmit_bytes_total", (write + 3e6) * dt)
        self._add("node_netstat_Tcp_RetransSegs", rng.poisson(np.where(storm, 400.0, 2.0 + rpcs * 0.001)))
        self._add("node_mountstats_nfs_transport_backlog_queue_total", rpcs * backlog)
        self._add("node_mountstats_nfs_transport_pending_queue_total", rpcs * np.minimum(backlog, 128))
        self._add("node_mountstats_nfs_operations_requests_total", np.round(rpcs))
        self._add("node_mountstats_nfs_operations_queue_time_seconds_total", rpcs * qtime)
        self._add("node_mountstats_nfs_operations_response_time_seconds_total", rpcs * (qtime + 0.004))
        self._add(
            "node_mountstats_nfs_operations_major_timeouts_total", rng.poisson(np.where(storm, 0.3, 0.0))
        )
        self._add("node_mountstats_nfs_write_bytes_total", write * dt)
        self._add("node_mountstats_nfs_read_bytes_total", read * dt)

    def _errors(self) -> None:
        """Benign background: most nodes almost never, 10% "leaky" ones now and then."""
        rng, n = self.rng, self.cfg.nodes
        for name in LEAKY_COUNTERS:
            self._add(name, rng.poisson(self.leaky))
        self._add("node_infiniband_link_downed_total", rng.poisson(np.full(n, 2e-5)))
        self._add("node_infiniband_link_error_recovery_total", rng.poisson(np.full(n, 5e-5)))

    def _read(self, ph: NDArray[np.int64], cpu: NDArray[np.float64]) -> NDArray[np.float64]:
        """What node-exporter prints: whole bytes and packets, microsecond seconds."""
        rng, n = self.rng, self.cfg.nodes
        out = np.empty((len(NODE_FIELDS), n))
        for name in COUNTERS:
            out[IDX[name]] = np.round(self.c[name], 6 if "seconds" in name else 0)
        out[IDX["node_load1"]] = np.round(224 * cpu + rng.normal(0, 1.0, n), 2)
        in_use = 1.2e12 * ((ph > 0) & (ph < 4))
        out[IDX["node_memory_MemAvailable_bytes"]] = np.round(2.0e12 - in_use + rng.normal(0, 5e9, n), -3)
        out[IDX["node_hwmon_temp_celsius"]] = np.round(42.0 + 25 * cpu + rng.normal(0, 0.5, n))
        return out

    def _add(self, name: str, inc: NDArray[np.float64] | NDArray[np.int64]) -> None:
        self.c[name] += inc
