"""river HalfSpaceTrees per node over a small feature vector of the node and its GPUs.

Features are scaled by fixed physical ranges (never by the data's own min/max, which would peek at the
future). A node is scored then learnt every `every` scrapes; it alerts when the score exceeds
`threshold` for two evaluations running.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from river.anomaly import HalfSpaceTrees

from prexid.service.offline.baselines.episodes import Episodes, Layout

GPU_GAUGES = {
    "DCGM_FI_DEV_GPU_TEMP": 100.0,
    "DCGM_FI_DEV_POWER_USAGE": 1200.0,
    "DCGM_FI_DEV_GPU_UTIL": 100.0,
    "DCGM_FI_DEV_SM_CLOCK": 2100.0,
}
ERRORS = (
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
)
NODE_RATES = {
    "node_infiniband_port_data_received_bytes_total": 25.0,
    "node_mountstats_nfs_transport_backlog_queue_total": 20.0,
    "node_pressure_io_waiting_seconds_total": 3.0,
}


class NodeHST:
    name = "hst"

    def __init__(self, layout: Layout, every: int = 4, threshold: float = 0.9, seed: int = 7) -> None:
        self.layout, self.every, self.threshold = layout, every, threshold
        nodes, gpus = len(layout.nodes), layout.gpus
        self.cols = {m: layout.columns(m) for m in (*GPU_GAUGES, *ERRORS, *NODE_RATES)}
        self.shape = (nodes, gpus)
        self.last = {m: np.full(len(self.cols[m]), np.nan) for m in (*ERRORS, *NODE_RATES)}
        self.models = [
            HalfSpaceTrees(n_trees=10, height=8, window_size=240, seed=seed + n) for n in range(nodes)
        ]
        self.episodes = Episodes(layout, "HalfSpaceTrees score > 0.9", 2)
        self.k = 0

    def _increase(self, m: str, row: NDArray[np.float64]) -> NDArray[np.float64]:
        now = row[self.cols[m]]
        with np.errstate(invalid="ignore"):
            inc = np.where(now >= self.last[m], now - self.last[m], now)
        inc[np.isnan(self.last[m])] = 0.0
        self.last[m] = np.where(np.isnan(now), self.last[m], now)
        return np.nan_to_num(inc)

    def features(self, row: NDArray[np.float64]) -> NDArray[np.float64]:
        n = len(self.layout.nodes)
        parts = []
        for m, scale in GPU_GAUGES.items():
            g = np.nan_to_num(row[self.cols[m]].reshape(self.shape) / scale)
            parts += [g.mean(axis=1), g.max(axis=1), g.min(axis=1)]
        errors = np.zeros(n)
        for m in ERRORS:  # a stock dcgm-exporter ships no SBE or NVLink CRC counters: they add nothing
            if len(self.cols[m]) == n * self.layout.gpus:
                errors += self._increase(m, row).reshape(self.shape).sum(axis=1)
        parts.append(np.log1p(errors) / 8.0)
        for m, scale in NODE_RATES.items():
            parts.append(np.log1p(self._increase(m, row)[:n]) / scale)
        return np.asarray(np.clip(np.stack(parts, axis=1), 0.0, 1.0), dtype=np.float64)

    def observe(self, ts: float, row: NDArray[np.float64]) -> None:
        feats = self.features(row)  # every scrape: counter increments must not be skipped
        self.k += 1
        if self.k % self.every:
            return
        hot = np.zeros(self.layout.n_entities, dtype=bool)
        base = len(self.layout.nodes) * self.layout.gpus
        for n, model in enumerate(self.models):
            x = {i: float(v) for i, v in enumerate(feats[n])}
            hot[base + n] = model.score_one(x) > self.threshold  # type: ignore[no-untyped-call]
            model.learn_one(x)  # type: ignore[no-untyped-call]
        self.episodes.step(ts, hot)

    def alerts(self) -> list[dict[str, object]]:
        return self.episodes.alerts
