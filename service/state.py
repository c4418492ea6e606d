"""What the HTTP side reads: the live pipeline, its telemetry, and whether the feed is ready."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from service.history import ScoreHistory
from service.models import Alert
from service.pipeline import Pipeline
from service.telemetry import Telemetry


@dataclass
class ServiceState:
    pipeline: Pipeline
    telemetry: Telemetry
    ready: bool = False
    not_ready_reason: str = "starting"
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)  # e.g. sinks
    history: ScoreHistory = field(default_factory=lambda: ScoreHistory(120))
    alert_listeners: list[Callable[[list[Alert]], None]] = field(default_factory=list)  # sinks
    shards: dict[int, Pipeline] = field(default_factory=dict)  # `prexid run`: one per partition index
    admin_token: SecretStr | None = None  # admin endpoints are off without one
    checkpoint: Callable[[], Awaitable[int]] | None = None  # set by feeds that checkpoint

    def active_alerts(self) -> dict[str, Alert]:
        """Firing alerts of the pipeline and of every partition this replica owns."""
        merged = dict(self.pipeline.active)
        for shard in self.shards.values():
            merged |= shard.active
        return merged

    def pipeline_of(self, node: str) -> Pipeline:
        """The pipeline holding `node`'s series: its partition's under `prexid run`, else the only one."""
        for shard in self.shards.values():
            if any(e.node == node for e in shard.registry.entities):
                return shard
        return self.pipeline

    def pipelines(self) -> list[Pipeline]:
        """Every live pipeline: one per owned partition under `prexid run`, else the only one."""
        return list(self.shards.values()) or [self.pipeline]

    @classmethod
    def new(cls, pipeline: Pipeline, history_ticks: int = 120) -> ServiceState:
        state = cls(pipeline, Telemetry(CollectorRegistry(), pipeline), history=ScoreHistory(history_ticks))
        pipeline.tick_listeners.append(state.history.record)
        state._gauges_over_partitions()
        return state

    def _gauges_over_partitions(self) -> None:
        """Series counts add up over the partitions; the watermark is the slowest partition's."""
        t = self.telemetry
        t.series.set_function(lambda: sum(len(p.registry) for p in self.pipelines()))
        t.series_refused.set_function(lambda: sum(p.registry.refused for p in self.pipelines()))
        t.watermark.set_function(
            lambda: min((p.watermark for p in self.pipelines() if np.isfinite(p.watermark)), default=0.0)
        )
