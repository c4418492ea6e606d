"""Shapes shared by all decoders: columnar samples, kernel lines, the decoder signatures and their error."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol


class RawSample(NamedTuple):
    """One decoded metric sample (row view of `Samples`, for tests and the `parse` tool)."""

    name: str
    labels: dict[str, str]
    ts: float  # event time, epoch seconds
    value: float


@dataclass(frozen=True, slots=True)
class Samples:
    """Decoded samples as parallel columns (plain lists: cheap to build and extend per message; the
    pipeline turns them into numpy arrays once per batch). `labels` dicts may be shared between the
    samples of one series, since decoders cache them: treat them as read-only. `skipped`: points of
    kinds prexid does not read (OTLP histograms, summaries), by reason, so they are counted, not lost
    unseen; a message of only such points is decoded to no samples, not a dead letter.
    """

    names: list[str] = field(default_factory=list)
    labels: list[dict[str, str]] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def rows(self) -> Iterator[RawSample]:
        return map(RawSample, self.names, self.labels, self.ts, self.values)

    def extend(self, other: Samples) -> None:
        self.names.extend(other.names)
        self.labels.extend(other.labels)
        self.ts.extend(other.ts)
        self.values.extend(other.values)
        for reason, n in other.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + n

    @staticmethod
    def of(rows: Iterable[RawSample]) -> Samples:
        out = Samples()
        for r in rows:
            out.names.append(r.name)
            out.labels.append(r.labels)
            out.ts.append(r.ts)
            out.values.append(r.value)
        return out


Trust = Literal["proven", "unproven", "refused"]


class KernelLine(NamedTuple):
    """One log message with the host and event time its envelope carried.

    `kernel` is False when the envelope says the line did not come from the kernel (journald
    `_TRANSPORT`, syslog facility/tag): such lines are decoded and counted but never yield events.
    `trust` says what that rests on. `proven`: a facility or transport set by the kernel or the
    relay (syslog PRI, RFC5424 PRI, `/dev/kmsg` and `dmesg -x` facilities, journald `_TRANSPORT`).
    `unproven`: no facility, only what any local user can write (`logger -t kernel`: a tag, an
    APP-NAME or ident), or nothing at all; the processor believes such a kernel claim only on a topic
    declared kernel-only. `refused`: a kernel claim prexid does not believe, never a kernel line: a
    tag, APP-NAME or ident saying `kernel` against an explicit non-kernel facility (set by the
    decoder), or an `unproven` claim on a topic not declared kernel-only (set by the processor).
    """

    ts: float
    host: str
    message: str
    kernel: bool = True
    trust: Trust = "proven"
    # the envelope says the line goes on in the host's next record: a `/dev/kmsg` fragment (flag `c`,
    # or `+` on kernels before 4.9), or a syslog record exactly a shipper's size limit long
    partial: bool = False


# Record sizes at which shippers split a longer line into the next record (RFC3164's 1024 bytes, and
# the buffer sizes of common relays): a record of exactly such a size may be a line's first part.
SPLIT_SIZES = frozenset({1024, 2048, 4096, 8192})


def at_split_size(line: KernelLine, raw: bytes) -> KernelLine:
    """The line, marked `partial` when its record is exactly a shipper's split size long."""
    return line._replace(partial=True) if len(raw) in SPLIT_SIZES else line


class DecodeError(Exception):
    """A message that cannot be decoded; `reason` is a short, bounded label for metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class LineError(NamedTuple):
    """One line of a log message that could not be read: the message's other lines still are."""

    number: int  # 1-based, among the message's lines
    line: bytes
    error: DecodeError


class MetricDecoder(Protocol):
    """`host` is what the transport names (Kafka key or `host` header), used when the payload has none."""

    def __call__(self, payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples: ...


class LogDecoder(Protocol):
    """A message's lines. Without `errors`, the first bad line fails the whole message (DecodeError);
    with it, each bad line is appended there and the others are returned (possibly none)."""

    def __call__(
        self, payload: bytes, ref_ts: float, /, host: str | None = None, errors: list[LineError] | None = None
    ) -> list[KernelLine]: ...


def utf8(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("not_utf8", str(exc)[:80]) from exc


def split_lines(payload: bytes) -> Iterator[tuple[int, bytes]]:
    """A message's non-blank lines, numbered from 1. Split on `\n` only, a trailing `\r` cut: not
    `splitlines()`, which also splits on U+0085, U+2028 and friends, legal inside a JSON string or a
    process name, so one line would become two broken ones."""
    for number, raw in enumerate(payload.split(b"\n"), 1):
        line = raw.removesuffix(b"\r")
        if line.strip():
            yield number, line


def each_line(
    payload: bytes,
    parse: Callable[[bytes], KernelLine | None],
    errors: list[LineError] | None,
    empty: str = "no lines",
) -> list[KernelLine]:
    """`parse` over every line of the message (None: a line to skip). Without `errors` the first
    DecodeError fails the message; with it, bad lines are collected there and the rest returned."""
    if b"\n" not in payload and payload.strip():  # the usual one-line message
        try:
            line = parse(payload.removesuffix(b"\r"))
        except DecodeError as err:
            if errors is None:
                raise
            errors.append(LineError(1, payload, err))
            return []
        if line is not None:
            return [line]
    out: list[KernelLine] = []
    failed = False
    for number, raw in split_lines(payload):
        try:
            line = parse(raw)
        except DecodeError as err:
            if errors is None:
                raise
            errors.append(LineError(number, raw, err))
            failed = True
            continue
        if line is not None:
            out.append(line)
    if not out and not failed:
        raise DecodeError("empty", empty)
    return out


def finite_ts(ts: float, raw: object) -> float:
    """Event times must be finite and plausible (year 1970..2200), else the message is bad."""
    if not 0.0 <= ts < 7_258_118_400.0:
        raise DecodeError("bad_timestamp", repr(raw)[:64])
    return ts
