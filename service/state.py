"""What the HTTP side reads: the live pipeline, its telemetry, and whether the feed is ready."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from service.pipeline import Pipeline
from service.telemetry import Telemetry


@dataclass
class ServiceState:
    pipeline: Pipeline
    telemetry: Telemetry
    ready: bool = False
    not_ready_reason: str = "starting"
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)  # e.g. sinks

    @classmethod
    def new(cls, pipeline: Pipeline) -> ServiceState:
        return cls(pipeline, Telemetry(CollectorRegistry(), pipeline))
