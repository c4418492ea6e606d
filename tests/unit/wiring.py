"""A `Processor` over its own pipeline and Prometheus registry, wired by
`prexid.service.app.wiring.processor_of` as `build` wires one, for tests that drive decoding and the
pipeline without settings or service state. Tests that want the service's wiring call `build`."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import processor_of
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.processor import Processor
from prexid.service.sinks.prometheus import Telemetry


def processor(
    metrics_format: str = "auto",
    logs_format: str = "auto",
    topic_formats: Mapping[str, str] | None = None,
    *,
    pipeline: Pipeline | None = None,
    metrics: CollectorRegistry | None = None,
) -> Processor:
    pipe = Pipeline() if pipeline is None else pipeline
    telemetry = Telemetry(CollectorRegistry() if metrics is None else metrics, lambda: [pipe])
    formats = Settings(
        metrics_format=metrics_format, logs_format=logs_format, topic_formats=dict(topic_formats or {})
    )
    return processor_of(pipe, telemetry, formats)
