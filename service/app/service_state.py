"""What the HTTP side reads: the live pipeline, its telemetry, and whether the feed is ready."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from prexid.service.actions.quarantine import QuarantineAction
from prexid.service.app.batch_gate import BatchGate
from prexid.service.http.history import ScoreHistory
from prexid.service.pipeline.fleet_judge import FleetBoard
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.series_registry import SeriesBudget
from prexid.service.schemas import Alert
from prexid.service.sinks.prometheus import Telemetry
from prexid.service.sources.remote_write import RemoteWriteEndpoint


@dataclass
class ServiceState:
    pipeline: Pipeline
    telemetry: Telemetry
    ready: bool = False
    not_ready_reason: str = "starting"
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)  # e.g. sinks
    history_ticks: int = 120
    # each pipeline's own score history (entity ids are per pipeline); a shard's goes with its pipeline
    histories: weakref.WeakKeyDictionary[Pipeline, ScoreHistory] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    alert_listeners: list[Callable[[list[Alert]], None]] = field(default_factory=list)  # sinks
    # sinks that re-send firing alerts, told (by fingerprint) which to leave to another replica now
    alert_forgetters: list[Callable[[list[str]], None]] = field(default_factory=list)
    shards: dict[int, Pipeline] = field(default_factory=dict)  # `prexid run`: one per partition index
    admin_token: SecretStr | None = None  # admin endpoints are off without one
    checkpoint: Callable[[], Awaitable[int]] | None = None  # set by feeds that checkpoint
    series_budget: SeriesBudget | None = None  # the cardinality limit every shard's registry shares
    remote_write: RemoteWriteEndpoint | None = None  # POST /api/v1/write is served with one
    # pipelines beside the feed's, on another event clock: the demo's for samples received over HTTP
    others: list[Pipeline] = field(default_factory=list)
    quarantine: QuarantineAction | None = None  # the quarantine action, when enabled (/admin/quarantine)
    fleet_board: FleetBoard | None = None  # `prexid run` with the fleet vote: every partition's summaries
    # closed while a batch runs in the worker thread: loop code awaits `quiet()` before touching pipelines
    gate: BatchGate = field(default_factory=BatchGate)

    def active_alerts(self) -> dict[str, Alert]:
        """Firing alerts of the pipeline and of every partition this replica owns."""
        merged = dict(self.pipeline.alert_book.active)
        for p in self.pipelines():
            merged |= p.alert_book.active
        return merged

    def pipeline_of(self, node: str) -> Pipeline:
        """The pipeline holding `node`'s series: its partition's under `prexid run`, else the first that
        has it, else the feed's."""
        for p in self.pipelines():
            if any(e.node == node for e in p.registry.entities):
                return p
        return self.pipeline

    def record_history(self, pipeline: Pipeline) -> None:
        """Keep `pipeline`'s score history for the dashboard: every pipeline, not only the first (under
        `prexid run` the first never gets data; the shards do)."""
        history = self.histories[pipeline] = ScoreHistory(self.history_ticks)
        pipeline.tick_listeners.append(history.record)

    def history_of(self, pipeline: Pipeline) -> ScoreHistory:
        return self.histories.get(pipeline) or ScoreHistory(self.history_ticks)

    def pipelines(self) -> list[Pipeline]:
        """Every live pipeline: one per owned partition under `prexid run`, else the feed's; then the
        `others`."""
        return (list(self.shards.values()) or [self.pipeline]) + self.others

    @classmethod
    def new(cls, pipeline: Pipeline, history_ticks: int = 120) -> ServiceState:
        state: ServiceState
        # bound late: shards change; pipelines are read only while no batch runs (`batch_gate`)
        telemetry = Telemetry(CollectorRegistry(), lambda: state.pipelines(), lambda: state.gate.busy)
        state = cls(pipeline, telemetry, history_ticks=history_ticks)
        telemetry.partitions.set_function(lambda: len(state.shards))
        state.record_history(pipeline)
        return state
