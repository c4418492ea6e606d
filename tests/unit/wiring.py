"""A `Processor` over its own pipeline and Prometheus registry, wired as `prexid.service.app.wiring.build` wires one,
for tests that drive decoding and the pipeline without settings."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

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
    return Processor(pipe, telemetry, metrics_format, logs_format, topic_formats)
