"""Turns consumed messages into alerts and dead letters: decode, then the pipeline. No I/O here.

Every message is accounted for exactly once: it decodes to at least one record, or to points of a
kind prexid counts and skips (OTLP histograms: `prexid_points_skipped_total{reason}`) (counted in
`prexid_messages_decoded_total{stream}`) or it becomes a dead letter with a reason (counted in
`prexid_dead_letters_total{reason}`), so decoded + dead-lettered = consumed (`prexid_messages_total`).
One bad line of a multi-line log message costs that line only: the message's other lines are read
(it counts as decoded) and the bad line is a dead letter of its own (its bytes as the payload, the
message's topic and offset, `line N` in the detail), counted in `prexid_dead_letters_total` too.

Most metric records are prometheus-kafka-adapter samples of series seen before. Those are read without
parsing JSON: `prom_kafka_adapter.split` cuts out timestamp, value and the bytes naming the series, and
the series is found by those bytes (a registry alias); a run whose every message is such a sample is
cut up by one regex pass (`split_many`). Anything else goes through its topic's decoder,
which stays the reference: a series' bytes become an alias only after one of its messages was decoded
in full, so both paths read every message alike (tests/unit/test_processor_fast_path.py).

Metrics and kernel logs arrive on different topics, and a consumer catching up on a backlog can read a
kernel line long before the samples that preceded it. So Xid events are held until the metric stream
has reached their event time (then every pre_xid alert those samples could fire has fired and the
lead time is right), or until the metric stream is caught up, when there is nothing left to wait for
and the Xid pages at once. Replays are therefore deterministic and live paging is not delayed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.watermark import plausible
from prexid.service.decode import formats, prom_kafka_adapter
from prexid.service.decode.common import parse_rfc3339
from prexid.service.decode.kernel_events import Fragment, Rejoiner, cut_short, extract_events
from prexid.service.decode.types import (
    DecodeError,
    KernelLine,
    LineError,
    LogDecoder,
    MetricDecoder,
    Samples,
    Trust,
)
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.schemas import Alert, GpuOffBusEvent, KernelEvent, XidEvent
from prexid.service.sinks.prometheus import Telemetry

log = logging.getLogger(__name__)
_TRUST: dict[str, Trust] = {"proven": "proven", "unproven": "unproven", "refused": "refused"}
HOST_HEADERS = ("host", "prexid.host")
T = TypeVar("T")


def stream_name(topic: str, partition: int) -> str:
    """A topic partition as sources are named (watermarks, backlog, snapshot offsets): `topic:n`."""
    return f"{topic}:{partition}"


class Message(NamedTuple):
    """One consumed record, wherever it came from (Kafka, the demo, a file). A tuple, the cheapest
    object Python makes; Kafka's metric records come as a `Run` and become one only when needed."""

    payload: bytes
    ts: float  # the record's own timestamp, epoch seconds
    topic: str = ""
    partition: int = -1
    offset: int = -1
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()

    def transport_host(self) -> str | None:
        """The host a `host` header or the record key names, for payloads that name none themselves."""
        raw = next((v for k, v in self.headers if k.lower() in HOST_HEADERS), None) or self.key
        if not raw:
            return None
        text = raw.decode("utf-8", errors="replace").strip()
        return text or None

    @property
    def source(self) -> str:
        """The stream this record is ordered within: its topic partition."""
        return stream_name(self.topic, self.partition)


class Run(NamedTuple):
    """Consecutive metric records of one topic partition. The fast path reads only each payload, so a
    transport hands over its records as they are and makes a `Message` only for a record that path
    cannot read (a `Message` per Kafka record was ~10% of a replica's CPU)."""

    topic: str
    partition: int
    payloads: Sequence[bytes]
    message: Callable[[int], Message]  # record i as a Message: for its decoder, dead letter or host
    newest_ts: float = np.nan  # the newest record time of the run (epoch s), NaN where there is none
    oldest_ts: float = np.nan  # and the oldest: no record is written before the samples in it


def runs(msgs: Sequence[Message]) -> list[Run]:
    """Messages as runs of one topic partition each, in their order."""
    out: list[Run] = []
    start = 0
    for i in range(1, len(msgs) + 1):
        if i == len(msgs) or msgs[i][2:4] != msgs[start][2:4]:  # (topic, partition) changes
            run = msgs[start:i]
            times = [m.ts for m in run if np.isfinite(m.ts)]
            newest, oldest = (max(times), min(times)) if times else (np.nan, np.nan)
            payloads = [m.payload for m in run]
            out.append(Run(run[0].topic, run[0].partition, payloads, run.__getitem__, newest, oldest))
            start = i
    return out


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message prexid could not read, with where it came from and why. `line`: the 1-based number
    of a bad line in a log message whose other lines were read (`message.payload` is then that line
    alone); None for a whole message."""

    message: Message
    reason: str
    detail: str
    line: int | None = None


@dataclass
class _Columns:
    """One source's decoded samples, by series id (-1: refused by the cardinality limit), and for each
    the message it came from (its index among the source's messages: `runs` in order)."""

    ids: list[int] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    msgs: list[int] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    newest_ts: float = np.nan  # the newest record time of its runs
    oldest_ts: float = np.nan  # and the oldest

    def message(self, index: int) -> Message:
        for run in self.runs:
            if index < len(run.payloads):
                return run.message(index)
            index -= len(run.payloads)
        raise IndexError(index)


FAST_DECODERS = (prom_kafka_adapter.decode, formats.decode_metrics_auto)  # read alike by `split`


@dataclass
class Output:
    alerts: list[Alert] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    events: list[KernelEvent] = field(default_factory=list)


class Processor:
    def __init__(
        self,
        pipeline: Pipeline,
        telemetry: Telemetry,
        metrics_format: str,
        logs_format: str,
        topic_formats: Mapping[str, str] | None = None,
        kernel_only_topics: Collection[str] | None = None,
    ) -> None:
        self.pipeline = pipeline
        # log topics whose records without a facility count as kernel lines (None: every one)
        self.kernel_only_topics = None if kernel_only_topics is None else frozenset(kernel_only_topics)
        self.telemetry = telemetry
        self.decode_metrics = formats.metric_decoder(metrics_format)
        self.decode_logs = formats.log_decoder(logs_format)
        self.topic_formats = dict(topic_formats or {})
        for name in self.topic_formats.values():
            if name not in formats.METRIC_DECODERS and name not in formats.LOG_DECODERS:
                raise ValueError(f"unknown format {name!r} in topic_formats")
        self.held_xids: list[XidEvent] = []
        self.held_since: list[float] = []  # per held Xid: the wall time it was held at (`now`)
        self.max_new_series_per_message = 20_000
        self.xid_max_hold_s = 60.0  # an Xid pages after this long held, backlog or not (`now` given)
        self.rejoiner: Rejoiner[Message] = Rejoiner()  # kernel lines split across a host's records
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
        return self.process_runs(runs(metrics), logs, backlogged, drain)

    def process_runs(
        self,
        metrics: Sequence[Run],
        logs: Sequence[Message],
        backlogged: Collection[str],
        drain: bool = False,
        now: float | None = None,
    ) -> Output:
        """`process`, with the metric records as runs per topic partition (what Kafka hands over).

        `now` (wall time, live feeds only) bounds how long an Xid is held for a backlogged metric
        partition: one whose leader is away looks backlogged for as long as it is away."""
        pending, clock, joined = dict(self.rejoiner.pending), self.rejoiner.clock, self.rejoiner.joined
        try:
            return self._process_runs(metrics, logs, backlogged, drain, now)
        except BaseException:  # a batch retried in parts (`process_isolating`) sees the fragments it saw
            self.rejoiner.pending, self.rejoiner.clock, self.rejoiner.joined = pending, clock, joined
            raise

    def _process_runs(
        self,
        metrics: Sequence[Run],
        logs: Sequence[Message],
        backlogged: Collection[str],
        drain: bool,
        now: float | None,
    ) -> Output:
        out = Output()
        refused_before = self.pipeline.registry.refused
        by_source, decoded = self._decode_metrics(metrics, out)
        self.telemetry.series_refused.inc(self.pipeline.registry.refused - refused_before)
        lines, origins = self._decode_logs(logs, out)
        for source, cols in by_source.items():
            ids, ts, values, refused = self._refuse_future(source, cols, out)
            decoded -= refused
            self.pipeline.add_series(ids, ts, values, source)
        self.telemetry.messages_decoded.labels("metrics").inc(decoded)
        self.pipeline.watermarks.set_backlogged(set(backlogged))
        expired_before = self.pipeline.registry.expired
        out.alerts.extend(self.pipeline.advance(drain))
        self.telemetry.series_expired.inc(self.pipeline.registry.expired - expired_before)
        out.events = self._kernel_events(lines, origins, drain, now, out)
        fresh = [_as_xid(ev) for ev in out.events if isinstance(ev, XidEvent | GpuOffBusEvent)]
        self.held_xids += fresh
        self.held_since += [np.inf if now is None else now] * len(fresh)
        released = self._release_xids(everything=drain or not backlogged, now=now)
        out.alerts.extend(self.pipeline.ingest_xids(released))

        self._count(metrics, logs, sum(len(c.ids) for c in by_source.values()), lines, out)
        if out.alerts:
            for listener in self.listeners:
                listener(out.alerts)
        return out

    def process_isolating(
        self,
        metrics: Sequence[Run],
        logs: Sequence[Message],
        backlogged: Collection[str],
        drain: bool = False,
        now: float | None = None,
    ) -> Output:
        """`process_runs`, where a record that breaks something past its decoder costs that record only.

        Decoders are guarded message by message; anything later that raises (a bug, or input that
        decodes fine and breaks a later stage) would fail the whole batch, and every replica that
        takes the partition over would fail on the same record for ever. So the batch is halved until
        the failing record is alone, and that record becomes a dead letter (`processing_error`, with
        the stage and the exception). Records processed before a failure may be processed again."""
        try:
            return self.process_runs(metrics, logs, backlogged, drain, now)
        except Exception as exc:
            if not metrics and not logs:  # nothing to isolate: a failure of detection itself
                raise
            return self._isolate(metrics, logs, backlogged, drain, now, exc, logged=[])

    def _isolate(
        self,
        metrics: Sequence[Run],
        logs: Sequence[Message],
        backlogged: Collection[str],
        drain: bool,
        now: float | None,
        exc: Exception,
        logged: list[str],
    ) -> Output:
        """A part of a batch that failed with `exc`: each half run, a half that fails isolated the same
        way, down to the records that fail alone, each a dead letter. Only the first failure of a batch
        is logged with its traceback (a bug may fail every record)."""
        if sum(len(r.payloads) for r in metrics) + len(logs) > 1:
            out = Output()
            for half in _halves(metrics, logs):
                try:
                    part = self.process_runs(*half, backlogged, drain, now)
                except Exception as failed:
                    part = self._isolate(*half, backlogged, drain, now, failed, logged)
                out.alerts += part.alerts
                out.dead_letters += part.dead_letters
                out.events += part.events
            return out
        msg = metrics[0].message(0) if metrics else logs[0]
        stage = _stage(exc)
        where = (msg.topic, msg.partition, msg.offset, stage)
        log.error("%s[%d]@%d broke processing in %s", *where, exc_info=exc if not logged else None)
        logged.append(stage)
        dl = DeadLetter(msg, "processing_error", f"stage={stage}: {exc!r}"[:300])
        self.telemetry.dead_letters.labels(dl.reason).inc()
        self.telemetry.messages.labels("metrics" if metrics else "logs").inc()
        return Output(dead_letters=[dl])

    def _count(
        self,
        metrics: Sequence[Run],
        logs: Sequence[Message],
        samples: int,
        lines: list[KernelLine],
        out: Output,
    ) -> None:
        t = self.telemetry
        t.messages.labels("metrics").inc(sum(len(run.payloads) for run in metrics))
        t.messages.labels("logs").inc(len(logs))
        t.samples.inc(samples)
        kernel = sum(line.kernel for line in lines)
        untrusted = sum(line.trust == "refused" for line in lines)
        t.kernel_lines.inc(kernel)
        t.log_lines_not_kernel.inc(len(lines) - kernel - untrusted)
        t.log_lines.labels("kernel").inc(kernel)
        t.log_lines.labels("not_kernel").inc(len(lines) - kernel - untrusted)
        t.log_lines.labels("untrusted").inc(untrusted)
        for ev in out.events:
            t.kernel_events.labels(ev.kind).inc()
        for dl in out.dead_letters:
            t.dead_letters.labels(dl.reason).inc()
        t.observe_alerts(out.alerts)

    def _decode_metrics(self, metric_runs: Sequence[Run], out: Output) -> tuple[dict[str, _Columns], int]:
        """Metric records as columns per source, series interned (the module docstring has the fast
        path), and how many messages decoded. Per-source work is paid per run, per-record work is kept
        to the fast path's lookups."""
        registry = self.pipeline.registry
        aliases = registry.aliases
        split = prom_kafka_adapter.split
        stamps: dict[bytes, float] = {}  # a batch holds few distinct scrape times
        by_source: dict[str, _Columns] = {}
        decoded = 0
        for run in metric_runs:
            cols = by_source.setdefault(stream_name(run.topic, run.partition), _Columns())
            base = sum(len(r.payloads) for r in cols.runs)  # this run's first message, among the source's
            cols.runs.append(run)
            cols.newest_ts = float(np.fmax(cols.newest_ts, run.newest_ts))  # NaN where none has one
            cols.oldest_ts = float(np.fmin(cols.oldest_ts, run.oldest_ts))
            fast = self._fast(run.topic)
            if fast and self._read_known(run.payloads, cols, stamps):
                cols.msgs.extend(range(base, base + len(run.payloads)))
                decoded += len(run.payloads)
                continue
            ids, tss, values, msgs = cols.ids, cols.ts, cols.values, cols.msgs
            for i, payload in enumerate(run.payloads):
                parts = split(payload) if fast else None
                msg = None
                sid = None
                if parts is not None:  # series named in the labels, else named by the transport too
                    sid = aliases.get(parts[0])
                    if sid is None:
                        msg = run.message(i)
                        sid = aliases.get((parts[0], msg.transport_host()))
                if parts is not None and sid is not None:
                    try:
                        value = float(parts[2])
                        ts = _stamp(stamps, parts[1])
                    except (ValueError, DecodeError):
                        pass  # the decoder below names what is wrong
                    else:
                        ids.append(sid)
                        tss.append(ts)
                        values.append(value)
                        msgs.append(base + i)
                        decoded += 1
                        continue
                if msg is None:
                    msg = run.message(i)
                got = self._decode_one(msg, self._metrics_decoder, out)
                if got is None:
                    continue
                alias = None
                if parts is not None and len(got) == 1:
                    alias = prom_kafka_adapter.alias(parts[0], msg.transport_host())
                got_ids = self._intern(got, alias)
                if got_ids is None:
                    why = f"would create more than {self.max_new_series_per_message} new series"
                    out.dead_letters.append(DeadLetter(msg, "too_many_series", why))
                    continue
                ids.extend(got_ids)
                tss.extend(got.ts)
                values.extend(got.values)
                msgs.extend([base + i] * len(got))
                decoded += 1
        return by_source, decoded

    def _refuse_future(
        self, source: str, cols: _Columns, out: Output
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], int]:
        """The source's columns without the messages dated too far ahead of it (`Watermarks.ahead`),
        and how many messages those were: each is a dead letter, its samples dropped and counted."""
        ids = np.array(cols.ids, dtype=np.int64)
        ts = np.array(cols.ts, dtype=np.float64)
        values = np.array(cols.values, dtype=np.float64)
        marks = self.pipeline.watermarks
        ref = marks.reference(source, cols.newest_ts)  # before `ahead`, which may believe a jump
        ahead = marks.ahead(source, ts, cols.newest_ts)
        late = marks.behind(source, ts, cols.oldest_ts)  # each sample's own record is no older
        if late.any():  # dropped, not dead-lettered: a slow host sends thousands a minute
            self.telemetry.late_samples.labels(source).inc(int(late.sum()))
            registry = self.pipeline.registry
            nodes = {registry.entities[int(registry.entity_of[i])].node for i in ids[late].tolist() if i >= 0}
            log.warning(
                "%s: dropped %d samples dated over %g s behind it, of %s",
                source,
                late.sum(),
                marks.late_drop_s,
                sorted(nodes)[:5],
            )
            ids, ts, values = ids[~late], ts[~late], values[~late]
            ahead = ahead[~late]
            cols.msgs = [m for m, gone in zip(cols.msgs, late.tolist(), strict=True) if not gone]
        if not ahead.any():
            return ids, ts, values, 0
        msgs = np.array(cols.msgs, dtype=np.int64)
        bad = np.unique(msgs[ahead])
        for index in bad.tolist():
            newest = float(ts[msgs == index].max())
            detail = f"dated {newest - ref:.0f} s ahead of {source} (limit {marks.future_skew_s:g} s)"
            out.dead_letters.append(DeadLetter(cols.message(index), "future_timestamp", detail))
        dropped = np.isin(msgs, bad)
        self.telemetry.future_samples.labels(source).inc(int(dropped.sum()))
        return ids[~dropped], ts[~dropped], values[~dropped], len(bad)

    def _intern(self, got: Samples, alias: Hashable | None) -> list[int] | None:
        """Series ids of a decoded message's samples; None once it has created more new series than one
        message may (a million new series cost 16 s and 3.6 GB): the series made up to there stay."""
        registry = self.pipeline.registry
        intern = registry.intern
        if len(got) <= self.max_new_series_per_message:
            return [intern(n, lab, alias) for n, lab in zip(got.names, got.labels, strict=True)]
        limit = len(registry) + self.max_new_series_per_message
        out = []
        for n, lab in zip(got.names, got.labels, strict=True):
            out.append(intern(n, lab, alias))
            if len(registry) > limit:
                return None
        return out

    def _read_known(self, payloads: Sequence[bytes], cols: _Columns, stamps: dict[bytes, float]) -> bool:
        """Append a run whose every message `split`s into a known series, readable timestamp and value,
        a column at a time (no Python per message); False, appending nothing, for any other run: the
        loop in `_decode_metrics` then reads it message by message. Runs of the steady state are the
        first kind, read for ~0.8 us a message where the loop takes ~1.0 (bench traffic)."""
        parts = prom_kafka_adapter.split_many(payloads)
        if parts is None:
            return False
        series, stamp_bytes, value_bytes = parts
        try:
            ids = list(map(self.pipeline.registry.aliases.__getitem__, series))
        except KeyError:  # a series not seen before, or a message `split` cannot read
            return False
        try:
            for stamp in set(stamp_bytes).difference(stamps):  # a batch holds few distinct scrape times
                _stamp(stamps, stamp)
        except DecodeError:
            return False
        try:
            values = list(map(float, value_bytes))
        except ValueError:
            return False
        cols.ids.extend(ids)
        cols.ts.extend(map(stamps.__getitem__, stamp_bytes))
        cols.values.extend(values)
        return True

    def _fast(self, topic: str) -> bool:
        """Whether `prom_kafka_adapter.split` reads this topic's messages as its decoder does."""
        try:
            return self._metrics_decoder(topic) in FAST_DECODERS
        except DecodeError:  # a format that is no metric format: each message is a dead letter
            return False

    def _kernel_events(
        self, lines: list[KernelLine], origins: list[Message], drain: bool, now: float | None, out: Output
    ) -> list[KernelEvent]:
        """The events of the lines, with lines split across a host's records joined first (`Rejoiner`).
        A held line let go unjoined gives the events it holds; an evidently cut Xid head in it (its
        code may be cut) gives none and is a dead letter (`kernel_line_incomplete`) instead."""
        rejoiner = self.rejoiner
        joined_before = rejoiner.joined
        items = rejoiner.feed(lines, origins, self.pipeline.watermark, now)
        items += rejoiner.expire(now, everything=drain)
        self.telemetry.kernel_fragments.labels("joined").inc(rejoiner.joined - joined_before)
        whole = []
        for item in items:
            line = self._let_go(item, out) if isinstance(item, Fragment) else item
            if line is not None:
                whole.append(line)
        return extract_events(whole)

    def _let_go(self, frag: Fragment[Message], out: Output) -> KernelLine | None:
        """A held line no continuation completed, to be read as it stands; an evidently cut Xid head
        at its end is cut off it and dead-lettered (None: nothing else was left)."""
        line = frag.line
        cut = cut_short(line.message)
        if cut is None or cut[0] == "text":
            self.telemetry.kernel_fragments.labels("expired").inc()
            return line
        self.telemetry.kernel_fragments.labels("incomplete").inc()
        head, tail = line.message[: cut[1]], line.message[cut[1] :]
        why = f"an Xid line cut short, not continued in {self.rejoiner.window_s:g} s: {tail[:120]!r}"
        held = frag.origin._replace(payload=line.message.encode())
        # a line of a message counted as decoded (number unknown, 0, as a line without its own time)
        out.dead_letters.append(DeadLetter(held, "kernel_line_incomplete", why, line=0))
        return line._replace(message=head) if head.strip() else None

    def _decode_logs(self, logs: Sequence[Message], out: Output) -> tuple[list[KernelLine], list[Message]]:
        """Every log message's lines, and for each the message it came from. A message none of whose
        lines decode is one dead letter (the first bad line's reason); in a message with good lines,
        each bad line is a dead letter."""
        lines: list[KernelLine] = []
        origins: list[Message] = []
        decoded = 0
        for msg in logs:
            errors: list[LineError] = []
            try:  # a record time that is no epoch time (microseconds, -1) is none: lines need their own
                got = self._logs_decoder(msg.topic)(
                    msg.payload, plausible(msg.ts), msg.transport_host(), errors
                )
                got = self._dated(got, msg, errors)
            except DecodeError as err:
                out.dead_letters.append(DeadLetter(msg, err.reason, err.detail))
                continue
            except Exception as exc:  # a decoder bug must cost one message, not the consumer
                log.exception("decoder failed on %s[%d]@%d", msg.topic, msg.partition, msg.offset)
                out.dead_letters.append(DeadLetter(msg, "decoder_error", repr(exc)[:200]))
                continue
            if not got:
                first = errors[0] if errors else LineError(0, msg.payload, DecodeError("empty", "no lines"))
                more = f" (and {len(errors) - 1} more bad lines)" if len(errors) > 1 else ""
                out.dead_letters.append(DeadLetter(msg, first.error.reason, first.error.detail + more))
                continue
            if self.kernel_only_topics is not None and msg.topic not in self.kernel_only_topics:
                got = [_refuse_unproven(line) for line in got]
            for bad in errors:
                detail = f"line {bad.number}: {bad.error.detail}" if bad.number else bad.error.detail
                dl = DeadLetter(msg._replace(payload=bad.line), bad.error.reason, detail, bad.number)
                out.dead_letters.append(dl)
            lines.extend(got)
            origins.extend([msg] * len(got))
            decoded += 1
        self.telemetry.messages_decoded.labels("logs").inc(decoded)
        return lines, origins

    def _dated(self, lines: list[KernelLine], msg: Message, errors: list[LineError]) -> list[KernelLine]:
        """The lines with a usable time. One with none (no time of its own and no record time) is a bad
        line (`errors`). One dated more than the skew limit ahead of the metrics and its record (a clock
        ahead, or a syslog host writing local time, which RFC3164 cannot say) is dated at that
        reference instead, and counted: an Xid is never dropped for its clock, and one dated 2199 must
        not move Xid bursts and their resolution there."""
        marks = self.pipeline.watermarks
        ref = float(np.fmax(max(marks.progress.values(), default=-np.inf), plausible(msg.ts)))
        kept = []
        for line in lines:
            if not np.isfinite(line.ts):
                why = f"no time of its own, and record time {msg.ts!r} is none"
                errors.append(LineError(0, line.message.encode(), DecodeError("bad_timestamp", why)))
                continue
            if np.isfinite(ref) and line.ts > ref + marks.future_skew_s:  # no reference: nothing to judge by
                self.telemetry.future_samples.labels(msg.source).inc()
                line = line._replace(ts=ref)
            kept.append(line)
        return kept

    def _decode_one(self, msg: Message, pick: Callable[[str], Callable[..., T]], out: Output) -> T | None:
        """The message decoded by its topic's decoder, or None and a dead letter saying why."""
        try:
            got = pick(msg.topic)(msg.payload, plausible(msg.ts), msg.transport_host())
            skipped = got.skipped if isinstance(got, Samples) else {}
            for reason, n in skipped.items():
                self.telemetry.points_skipped.labels(reason).inc(n)
            if not len(got) and not skipped:  # type: ignore[arg-type]
                raise DecodeError("empty", "decoded to no records")
            if isinstance(got, Samples) and not np.isfinite(got.ts).all():
                raise DecodeError(
                    "bad_timestamp", f"samples with no time, and record time {msg.ts!r} is none"
                )
        except DecodeError as err:
            out.dead_letters.append(DeadLetter(msg, err.reason, err.detail))
            return None
        except Exception as exc:  # a decoder bug must cost one message, not the consumer
            log.exception("decoder failed on %s[%d]@%d", msg.topic, msg.partition, msg.offset)
            out.dead_letters.append(DeadLetter(msg, "decoder_error", repr(exc)[:200]))
            return None
        return got

    def _metrics_decoder(self, topic: str) -> MetricDecoder:
        name = self.topic_formats.get(topic)
        return self.decode_metrics if name is None else _pick(formats.METRIC_DECODERS, name, topic)

    def _logs_decoder(self, topic: str) -> LogDecoder:
        name = self.topic_formats.get(topic)
        return self.decode_logs if name is None else _pick(formats.LOG_DECODERS, name, topic)

    def snapshot_meta(self) -> dict[str, Any]:
        """Held Xids and held kernel-line fragments: a fragment's first record is behind the offsets
        stored with the snapshot, so a new owner would otherwise never see it."""
        fragments = [
            {
                "line": list(f.line),
                "origin": [f.origin.ts, f.origin.topic, f.origin.partition, f.origin.offset],
                "held_at": f.held_at,
                "pieces": f.pieces,
            }
            for f in self.rejoiner.pending.values()
        ]
        return {
            "held_xids": [x.model_dump(mode="json") for x in self.held_xids],
            "kernel_fragments": fragments,
            "kernel_clock": self.rejoiner.clock if np.isfinite(self.rejoiner.clock) else None,
        }

    def restore_meta(self, meta: dict[str, Any]) -> None:
        self.held_xids = [XidEvent.model_validate(x) for x in meta["held_xids"]]
        self.held_since = [np.inf] * len(self.held_xids)  # held again from the next batch's `now`
        pending: dict[str, Fragment[Message]] = {}
        for f in meta.get("kernel_fragments", []):  # none in snapshots of older builds
            ts, host, message, kernel, trust, partial = f["line"]
            line = KernelLine(float(ts), str(host), str(message), bool(kernel), _TRUST[trust], bool(partial))
            ts, topic, partition, offset = f["origin"]
            origin = Message(b"", float(ts), str(topic), int(partition), int(offset))
            pending[line.host] = Fragment(line, origin, float(f["held_at"]), pieces=int(f["pieces"]))
        self.rejoiner.pending = pending
        clock = meta.get("kernel_clock")
        self.rejoiner.clock = -np.inf if clock is None else float(clock)

    def _release_xids(self, everything: bool, now: float | None) -> list[XidEvent]:
        """Held Xids the metric stream has reached (all of them if it is caught up), or held for longer
        than `xid_max_hold_s` of wall time; oldest first."""
        seen_until = self.pipeline.watermark
        if now is not None:  # restored from a snapshot: held from the first batch after it
            self.held_since = [now if not np.isfinite(at) else at for at in self.held_since]
        ready, kept, since = [], [], []
        for x, at in zip(self.held_xids, self.held_since, strict=True):
            if everything or x.ts <= seen_until:
                ready.append(x)
            elif now is not None and now - at >= self.xid_max_hold_s:
                ready.append(x)
                self.telemetry.xid_holds_expired.inc()
            else:
                kept.append(x)
                since.append(at)
        self.held_xids, self.held_since = kept, since
        return sorted(ready, key=lambda x: x.ts)


def _stage(exc: BaseException) -> str:
    """Where in prexid an exception was raised: the innermost of its frames in prexid's own code."""
    stage, tb = "?", exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.startswith("prexid."):
            stage = f"{module}.{tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return stage


def _halves(
    metrics: Sequence[Run], logs: Sequence[Message]
) -> tuple[tuple[list[Run], list[Message]], tuple[list[Run], list[Message]]]:
    """A batch cut in two of about equal record counts, each record's order kept."""
    records = [(run, i) for run in metrics for i in range(len(run.payloads))]
    cut = (len(records) + len(logs)) // 2
    if cut < len(records):
        head, tail = records[:cut], records[cut:]
        return (_as_runs(head), []), (_as_runs(tail), list(logs))
    return (list(metrics), list(logs[: cut - len(records)])), ([], list(logs[cut - len(records) :]))


def _as_runs(records: list[tuple[Run, int]]) -> list[Run]:
    """Records of runs as runs again: one per stretch of the same run."""
    groups: list[tuple[Run, list[int]]] = []
    for run, i in records:
        if groups and groups[-1][0] is run:
            groups[-1][1].append(i)
        else:
            groups.append((run, [i]))
    return [
        Run(
            run.topic,
            run.partition,
            [run.payloads[i] for i in idx],
            _pick_message(run, idx),
            run.newest_ts,
            run.oldest_ts,
        )
        for run, idx in groups
    ]


def _pick_message(run: Run, idx: list[int]) -> Callable[[int], Message]:
    return lambda k: run.message(idx[k])


def _stamp(stamps: dict[bytes, float], raw: bytes) -> float:
    """An RFC3339 scrape time, parsed once a batch (`stamps` holds the batch's)."""
    ts = stamps.get(raw)
    if ts is None:
        ts = stamps[raw] = parse_rfc3339(raw.decode())
    return ts


def _refuse_unproven(line: KernelLine) -> KernelLine:
    """On a topic not declared kernel-only, a kernel claim without a facility is not believed."""
    return line._replace(kernel=False, trust="refused") if line.kernel and line.trust == "unproven" else line


def _pick(table: Mapping[str, T], name: str, topic: str) -> T:
    if name not in table:
        raise DecodeError("format_mismatch", f"{name} is not a format for topic {topic}")
    return table[name]


def _as_xid(ev: XidEvent | GpuOffBusEvent) -> XidEvent:
    """A "fallen off the bus" line is what Xid 79 reports; without its Xid line it must still page
    (with it, both land in one burst and one alert)."""
    if isinstance(ev, XidEvent):
        return ev
    return XidEvent(
        ts=ev.ts, node=ev.node, pci_bus_id=ev.pci_bus_id, code=79, pid=None, process=None, message=ev.message
    )
