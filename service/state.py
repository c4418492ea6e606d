"""What the HTTP side reads: the live pipeline, its telemetry, and whether the feed is ready."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from service.history import ScoreHistory
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

    @classmethod
    def new(cls, pipeline: Pipeline, history_ticks: int = 120) -> ServiceState:
        state = cls(pipeline, Telemetry(CollectorRegistry(), pipeline), history=ScoreHistory(history_ticks))
        pipeline.tick_listeners.append(state.history.record)
        return state
