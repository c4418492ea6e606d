"""How tests build a processor and feed it, in one place.

`processor` wires a `Processor` around a pipeline and Prometheus registry of its own, through
`prexid.service.app.wiring.processor_of` as `build` wires one, for tests that drive decoding and the
pipeline without settings or service state. Tests that want the service's wiring call `build`.

`scrape`, `step` and `feed` hand a processor the demo cluster's ticks as a consumer reads them: one
tick is one scrape of the whole cluster, its samples on partition 0 of `metrics` and its kernel lines
on partition 0 of `logs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from numpy.typing import NDArray
from prometheus_client import CollectorRegistry

from prexid.detectors.base import Detector
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import processor_of
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.processor import Message, Output, Processor
from prexid.service.schemas import Alert
from prexid.service.sinks.prometheus import Telemetry
from prexid.service.sources.demo_cluster import Tick

BACKLOGGED = ("metrics:0",)  # a replay: more of the metrics partition is still to be read


def processor(
    metrics_format: str = "auto",
    logs_format: str = "auto",
    topic_formats: Mapping[str, str] | None = None,
    *,
    pipeline: Pipeline | None = None,
    metrics: CollectorRegistry | None = None,
    kernel_only_topics: list[str] | None = None,
) -> Processor:
    pipe = Pipeline() if pipeline is None else pipeline
    telemetry = Telemetry(CollectorRegistry() if metrics is None else metrics, lambda: [pipe])
    formats = Settings(
        metrics_format=metrics_format,
        logs_format=logs_format,
        topic_formats=dict(topic_formats or {}),
        kernel_only_topics=kernel_only_topics,
    )
    return processor_of(pipe, telemetry, formats)


def scrape(tick: Tick, logs: bool = True) -> tuple[list[Message], list[Message]]:
    """One tick as consumed records: (metric records, kernel lines); `logs=False` leaves the lines out."""
    return (
        [Message(m, tick.ts, "metrics", 0) for m in tick.metrics],
        [Message(x, tick.ts, "logs", 0) for x in tick.logs] if logs else [],
    )


def step(
    processor: Processor, tick: Tick, backlogged: Iterable[str] = BACKLOGGED, logs: bool = True
) -> Output:
    """Process one tick as one batch. `backlogged=()` is a consumer caught up: an Xid pages at once."""
    metrics, lines = scrape(tick, logs)
    return processor.process(metrics, lines, set(backlogged))


def feed(
    processor: Processor,
    ticks: Iterable[Tick],
    *,
    drain: bool = False,
    logs: bool = True,
    backlogged: Iterable[str] = BACKLOGGED,
) -> list[Alert]:
    """The alerts of `ticks` fed one batch each; `drain` ends the replay (everything buffered is scored).
    The demo's traffic is well formed: a dead letter fails the test."""
    alerts: list[Alert] = []
    for tick in ticks:
        out = step(processor, tick, backlogged, logs)
        assert out.dead_letters == [], out.dead_letters
        alerts += out.alerts
    if drain:
        alerts += processor.process([], [], (), drain=True).alerts
    return alerts


STEP_S = 15.0  # one scrape interval


def scores(
    det: Detector, x: NDArray[np.float64], t0: int = 0, ids: NDArray[np.int64] | None = None
) -> NDArray[np.float64]:
    """A (time x series) matrix fed to one detector a scrape at a time, 15 s apart from scrape `t0`:
    the (time x series) p-values it gave."""
    ids = np.arange(x.shape[1], dtype=np.int64) if ids is None else ids
    return np.array([det.update(ids, np.full(len(ids), (t0 + t) * STEP_S), row) for t, row in enumerate(x)])
