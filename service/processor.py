"""Turns consumed messages into alerts and dead letters: decode, then the pipeline. No I/O here.

Metrics and kernel logs arrive on different topics, and a consumer catching up on a backlog can read a
kernel line long before the samples that preceded it. So Xid events are held until the metric stream
has reached their event time (then every pre_xid alert those samples could fire has fired and the
lead time is right), or until the metric stream is caught up, when there is nothing left to wait for
and the Xid pages at once. Replays are therefore deterministic and live paging is not delayed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
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

    @property
    def source(self) -> str:
        """The stream this record is ordered within: its topic partition."""
        return f"{self.topic}:{self.partition}"


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
        self.held_xids: list[XidEvent] = []
        self.listeners: list[Callable[[list[Alert]], None]] = []  # sinks that take alerts as they happen

    def process(
        self,
        metrics: Sequence[Message],
        logs: Sequence[Message],
        backlogged: Collection[str],
        drain: bool = False,
    ) -> Output:
        """Decode and run one batch.

        `backlogged`: metric sources (`Message.source`) that still have unread records; they hold the
        event-time watermark back. `drain` (end of a replay) scores everything still buffered.
        """
        out = Output()
        by_source: dict[str, list[RawSample]] = {}
        for msg in metrics:
            try:
                by_source.setdefault(msg.source, []).extend(self.decode_metrics(msg.payload, msg.ts))
            except DecodeError as err:
                out.dead_letters.append(DeadLetter(msg, err.reason, err.detail))
        lines: list[KernelLine] = []
        for msg in logs:
            try:
                lines.extend(self.decode_logs(msg.payload, msg.ts))
            except DecodeError as err:
                out.dead_letters.append(DeadLetter(msg, err.reason, err.detail))
        for source, samples in by_source.items():
            self.pipeline.add_samples(samples, source)
        self.pipeline.watermarks.set_backlogged(set(backlogged))
        out.alerts.extend(self.pipeline.advance(drain))
        self.held_xids += [x for line in lines if (x := parse_xid(line)) is not None]
        out.alerts.extend(self.pipeline.ingest_xids(self._release_xids(everything=drain or not backlogged)))

        t = self.telemetry
        t.messages.labels("metrics").inc(len(metrics))
        t.messages.labels("logs").inc(len(logs))
        t.samples.inc(sum(map(len, by_source.values())))
        t.kernel_lines.inc(len(lines))
        for dl in out.dead_letters:
            t.dead_letters.labels(dl.reason).inc()
        t.observe_alerts(out.alerts)
        if out.alerts:
            for listener in self.listeners:
                listener(out.alerts)
        return out

    def _release_xids(self, everything: bool) -> list[XidEvent]:
        """Held Xids the metric stream has reached (all of them if it is caught up), oldest first."""
        seen_until = self.pipeline.watermark
        ready = [x for x in self.held_xids if everything or x.ts <= seen_until]
        self.held_xids = [x for x in self.held_xids if not (everything or x.ts <= seen_until)]
        return sorted(ready, key=lambda x: x.ts)
