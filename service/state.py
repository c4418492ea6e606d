"""What the HTTP side reads: the live pipeline, its telemetry, and whether the feed is ready."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from service.pipeline import Pipeline
from service.telemetry import Telemetry


@dataclass
class ServiceState:
    pipeline: Pipeline
    telemetry: Telemetry
    ready: bool = False
    not_ready_reason: str = "starting"

    @classmethod
    def new(cls, pipeline: Pipeline) -> ServiceState:
        return cls(pipeline, Telemetry(CollectorRegistry(), pipeline))
