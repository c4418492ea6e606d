"""The `cluster` alert: its lifecycle over the cluster vote, and the one alert it raises per episode.

A pipeline holding the whole cluster raises it from its own fusion layer; under `prexid run` with the
fleet vote the elected aggregator (`service/pipeline/aggregator.py`) raises it from every partition's
counts merged, through the same code, so the alert reads the same whoever raised it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.cluster import cluster_families, cluster_fused
from prexid.detectors.fusion import Fusion, score01
from prexid.detectors.lifecycle import Lifecycle, LifecycleConfig, Transition
from prexid.detectors.signals import Family
from prexid.service.pipeline.alert_book import AlertBook
from prexid.service.schemas import Alert, Signal


class ClusterAlerts:
    """The cluster lifecycle (fires after `persist_ticks` of the vote) and the alerts it raises."""

    def __init__(self, book: AlertBook, lifecycle: LifecycleConfig, persist_ticks: int) -> None:
        self.book = book
        self.fire = lifecycle.fire
        self.lifecycle = Lifecycle(dataclasses.replace(lifecycle, persist_ticks=persist_ticks))
        self.families: list[Family] = []  # the families the firing alert was raised for
        self.score = 0.0  # fused cluster score at the last tick

    def step(self, fusion: Fusion, tick: float, raise_alerts: bool = True) -> list[Alert]:
        """One tick of the cluster vote over `fusion`'s last verdict (`Fusion.apply`); the alerts it
        raises, none unless `raise_alerts` (a partition whose fleet's alert another raises)."""
        self.score = cluster_fused(fusion, self.fire)
        steps = self.lifecycle.step(np.array([self.score]), tick)
        if not raise_alerts:  # only an alert it raised before (a snapshot from before the fleet vote) ends
            raised = self.book.active
            steps = [t for t in steps if not t.firing and self._fingerprint(t) in raised]
        return [self._alert(fusion, t) for t in steps]

    def _fingerprint(self, tr: Transition) -> str:
        return self.book.fingerprint("cluster", tr.starts_at)

    def _alert(self, fusion: Fusion, tr: Transition) -> Alert:
        """One alert for a cause shared by many nodes; their own pages are suppressed meanwhile."""
        families = cluster_families(fusion)
        if tr.firing:
            self.families = families
        families = families or self.families
        names = ", ".join(f.label for f in families)
        share = max((float(fusion.common_share[f]) for f in families), default=0.0)
        summary = (
            f"{names} anomalous on {share:.0%} of the cluster at once: one shared cause, node pages held back"
            if tr.firing
            else f"cluster-wide {names} anomaly is over"
        )
        signals = [
            Signal(
                family=f.label,
                metric="share_of_entities",
                labels={},
                value=round(float(fusion.common_share[f]), 3),
                baseline=None,
                surprise=0.0,
            )
            for f in families
        ]
        return self.book.record(
            self._fingerprint(tr),
            "cluster",
            node="",
            gpu=None,
            starts_at=tr.starts_at,
            ended_at=None if tr.firing else tr.at,
            score=float(score01(np.array([tr.fused]), self.fire)[0]),
            signals=signals,
            summary=summary,
        )

    def snapshot_meta(self) -> dict[str, Any]:
        return {"cluster_families": [int(f) for f in self.families]}

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return self.lifecycle.snapshot_arrays()

    def restore(self, meta: dict[str, Any], arrays: dict[str, NDArray[np.generic]]) -> None:
        self.families = [Family(f) for f in meta["cluster_families"]]
        self.lifecycle.restore_arrays(arrays)
