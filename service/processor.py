"""Turns consumed messages into alerts and dead letters: decode, then the pipeline. No I/O here.

Metrics are processed before kernel lines within a batch, so an Xid sees every pre_xid alert that the
samples consumed with it could fire.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from service.decode import formats
from service.decode.types import DecodeError, KernelLine, RawSample
from service.decode.xid import parse_xid
from service.models import Alert, XidEvent
from service.pipeline import Pipeline
from service.telemetry import Telemetry


@dataclass(frozen=True, slots=True)
class Message:
    """One consumed record, wherever it came from (Kafka, the demo, a file)."""

    payload: bytes
    ts: float  # the record's own timestamp, epoch seconds
    topic: str = ""
    partition: int = -1
    offset: int = -1


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message prexid could not read, with where it came from and why."""

    message: Message
    reason: str
    detail: str


@dataclass
class Output:
    alerts: list[Alert] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)


class Processor:
    def __init__(
        self, pipeline: Pipeline, telemetry: Telemetry, metrics_format: str, logs_format: str
    ) -> None:
        self.pipeline = pipeline
        self.telemetry = telemetry
        self.decode_metrics = formats.metric_decoder(metrics_format)
        self.decode_logs = formats.log_decoder(logs_format)

    def process(self, metrics: Sequence[Message], logs: Sequence[Message]) -> Output:
        out = Output()
        samples: list[RawSample] = []
        for msg in metrics:
            try:
                samples.extend(self.decode_metrics(msg.payload, msg.ts))
            except DecodeError as err:
                out.dead_letters.append(DeadLetter(msg, err.reason, err.detail))
        lines: list[KernelLine] = []
        for msg in logs:
            try:
                lines.extend(self.decode_logs(msg.payload, msg.ts))
            except DecodeError as err:
                out.dead_letters.append(DeadLetter(msg, err.reason, err.detail))
        out.alerts.extend(self.pipeline.ingest_samples(samples))
        xids: list[XidEvent] = [x for line in lines if (x := parse_xid(line)) is not None]
        out.alerts.extend(self.pipeline.ingest_xids(xids))

        t = self.telemetry
        t.messages.labels("metrics").inc(len(metrics))
        t.messages.labels("logs").inc(len(logs))
        t.samples.inc(len(samples))
        t.kernel_lines.inc(len(lines))
        for dl in out.dead_letters:
            t.dead_letters.labels(dl.reason).inc()
        t.observe_alerts(out.alerts)
        return out
