"""Shared by every baseline: which entity each column belongs to, and condition -> alert episodes.

An entity's alert fires when its condition has held `for_ticks` consecutive scrapes (Prometheus' `for:`)
and resolves at the first scrape without it, so a baseline's alerts are counted the way prexid's are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.service.pipeline.series_registry import normalise_host
from prexid.service.schemas import rfc3339


@dataclass(frozen=True)
class Layout:
    """Entity of every column: GPUs first (node * gpus + gpu), then one per node."""

    names: list[str]
    entity: NDArray[np.int64]
    nodes: list[str]
    gpus: int

    @classmethod
    def from_series(cls, series: list[dict[str, object]]) -> Layout:
        hosts: dict[str, int] = {}
        raw = []
        gpus = 1
        for s in series:
            labels = s["labels"]
            assert isinstance(labels, dict)
            host = normalise_host(str(labels.get("Hostname") or labels.get("instance", "unknown")))
            gpu = int(labels["gpu"]) if "gpu" in labels else -1
            raw.append((hosts.setdefault(host, len(hosts)), gpu))
            gpus = max(gpus, gpu + 1)
        n_gpu_entities = len(hosts) * gpus
        entity = np.array([n * gpus + g if g >= 0 else n_gpu_entities + n for n, g in raw], dtype=np.int64)
        return cls([str(s["name"]) for s in series], entity, list(hosts), gpus)

    @property
    def n_entities(self) -> int:
        return len(self.nodes) * (self.gpus + 1)

    def columns(self, name: str) -> NDArray[np.intp]:
        return np.flatnonzero(np.array(self.names) == name)

    def describe(self, e: int) -> tuple[str, int | None]:
        n_gpu = len(self.nodes) * self.gpus
        if e < n_gpu:
            return self.nodes[e // self.gpus], e % self.gpus
        return self.nodes[e - n_gpu], None


class Episodes:
    def __init__(self, layout: Layout, name: str, for_ticks: int = 1) -> None:
        self.layout, self.name, self.for_ticks = layout, name, for_ticks
        self.run = np.zeros(layout.n_entities, dtype=np.int64)
        self.firing = np.zeros(layout.n_entities, dtype=bool)
        self.since = np.zeros(layout.n_entities)
        self.alerts: list[dict[str, object]] = []

    def step(self, ts: float, condition: NDArray[np.bool_], why: list[str] | None = None) -> None:
        """Advance every entity by one scrape of its (per-entity) condition."""
        self.since = np.where(condition & (self.run == 0), ts, self.since)
        self.run = np.where(condition, self.run + 1, 0)
        fires = (self.run >= self.for_ticks) & ~self.firing
        resolves = self.firing & ~condition
        for e in np.flatnonzero(fires):
            self._emit(int(e), "firing", ts, why[int(e)] if why else self.name)
        for e in np.flatnonzero(resolves):
            self._emit(int(e), "resolved", ts, self.name)
        self.firing = (self.firing | fires) & ~resolves

    def _emit(self, e: int, status: str, ts: float, why: str) -> None:
        node, gpu = self.layout.describe(e)
        self.alerts.append(
            {
                "kind": "pre_xid" if gpu is not None else "node",
                "status": status,
                "node": node,
                "gpu": gpu,
                "starts_at": rfc3339(float(self.since[e])),
                "emitted_at": ts,
                "summary": f"{self.name}: {why}",
                "signals": [],
            }
        )


def per_entity(layout: Layout, cols: NDArray[np.intp], hit: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """Any-of reduction of a per-column condition onto the entities of those columns."""
    out = np.zeros(layout.n_entities, dtype=bool)
    out[layout.entity[cols[hit]]] = True
    return out
