"""GPU events in kernel lines: Xid, NVSwitch SXid bursts, "fallen off the bus", reset and recovery.

Only lines whose envelope says they came from the kernel are searched. The patterns are searched
anywhere in the message, since forwarders add prefixes (`kernel: [1234.5] ...`): a message is cut
into segments, each starting at an `NVRM: ` or `nvidia-nvswitchN` and ending at the next one or at
a newline, so one record holding two Xids (a journald MESSAGE of two lines, say) gives two events.
Only the first `MAX_LINE_CHARS` of a message are searched (a kernel record is at most 1 KiB), and
every pattern is anchored at its segment's start with bounded quantifiers: the cost is linear in
the line, whatever it repeats.

A line may reach prexid in pieces: the kernel stores a line printed in parts as `/dev/kmsg` fragments
(flag `c`), and a shipper splits a record longer than its limit (RFC3164's 1024 bytes) into a second
record of the same host without the `NVRM: Xid` head. `Rejoiner` joins a host's pieces back into one
line before events are read, so the Xid code and its details are one event (`Rejoiner` says how).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from prexid.service.decode.types import KernelLine
from prexid.service.decode.xid import PCI, match_xid, normalise_pci, split_name, xid_event
from prexid.service.schemas import GpuOffBusEvent, GpuResetAction, GpuResetEvent, KernelEvent, SxidEvent

MAX_LINE_CHARS = 16_384
T = TypeVar("T")
_MARK = re.compile(r"NVRM: |nvidia-nvswitch\d")
_SXID = re.compile(
    rf"nvidia-nvswitch(?P<switch>\d{{1,4}}): SXid \((?:PCI:)?(?P<pci>{PCI})[^)\n]{{0,64}}\): "
    r"(?P<code>\d{1,6})(?!\d), "
)
_LINK = re.compile(r"\bLink (?P<link>-?\d{1,6})(?!\d)")
# `NVRM: GPU 0000:3b:00.0: <text>`, and `NVRM: Resetting GPU 0000:3b:00.0`
_GPU_LINE = re.compile(rf"NVRM: (?P<verb>Resetting )?GPU (?:at )?(?:PCI:)?(?P<pci>{PCI})(?:\.[0-7])?:? ?")
_OFF_BUS = re.compile(r"fallen off the bus", re.IGNORECASE)
_RESET_ACTIONS: tuple[tuple[re.Pattern[str], GpuResetAction], ...] = (
    (re.compile(r"reset required", re.IGNORECASE), "reset_required"),
    (re.compile(r"reboot required", re.IGNORECASE), "reboot_required"),
    (re.compile(r"rm_?init_?adapter failed|failed to initialize", re.IGNORECASE), "init_failed"),
    (re.compile(r"recover", re.IGNORECASE), "recovery"),
    (re.compile(r"\breset(?:ting)?\b", re.IGNORECASE), "reset"),
)


def extract_events(lines: Sequence[KernelLine]) -> list[KernelEvent]:
    """Every event in these lines, in line order; an SXid burst's follow-up lines join its event."""
    events: list[KernelEvent] = []
    open_sxid: dict[tuple[str, str, int], int] = {}  # (node, switch pci, code) -> index in events
    for line in lines:
        if not line.kernel or ("NVRM" not in line.message and "SXid" not in line.message):
            continue
        for seg in segments(line.message):
            if (x := match_xid(seg)) is not None:
                events.append(xid_event(line, x, seg[x.end() :]))
            elif (m := _SXID.match(seg)) is not None:
                _sxid(line, m, seg[m.end() :], events, open_sxid)
            elif (g := _GPU_LINE.match(seg)) is not None and (ev := _gpu_line(line, g, seg)) is not None:
                events.append(ev)
    return events


def segments(message: str) -> Iterator[str]:
    """The parts of a message that may hold one event each: from an `NVRM: ` or `nvidia-nvswitchN`
    to the next one or the end of the line, in the first `MAX_LINE_CHARS` of the message."""
    if len(message) > MAX_LINE_CHARS:
        message = message[:MAX_LINE_CHARS]
    if "\n" not in message:  # the usual line, holding one marker: no list, no zip
        first = _MARK.search(message)
        if first is None:
            return
        if _MARK.search(message, first.end()) is None:
            yield message[first.start() :]
            return
    for part in message.split("\n"):
        starts = [m.start() for m in _MARK.finditer(part)]
        if not starts:
            continue
        for start, end in zip(starts, [*starts[1:], len(part)], strict=True):
            yield part[start:end]


def _sxid(
    line: KernelLine,
    m: re.Match[str],
    rest: str,
    events: list[KernelEvent],
    open_sxid: dict[tuple[str, str, int], int],
) -> None:
    pci, code, text = normalise_pci(m["pci"]), int(m["code"]), rest.strip()
    key = (line.host, pci, code)
    follow_up = text.startswith(("Severity", "Data"))
    if follow_up and key in open_sxid:
        head = events[open_sxid[key]]
        assert isinstance(head, SxidEvent)
        events[open_sxid[key]] = head.model_copy(update={"details": [*head.details, text]})
        return
    link = _LINK.search(text)
    open_sxid[key] = len(events)
    events.append(
        SxidEvent(
            ts=line.ts,
            node=line.host,
            switch=int(m["switch"]),
            pci_bus_id=pci,
            code=code,
            fatal=None if follow_up else text.startswith("Fatal"),
            link=int(link["link"]) if link and not follow_up else None,
            message="" if follow_up else text,
            details=[text] if follow_up else [],
        )
    )


def _gpu_line(line: KernelLine, m: re.Match[str], seg: str) -> GpuOffBusEvent | GpuResetEvent | None:
    pci = normalise_pci(m["pci"])
    text = seg.removeprefix("NVRM: ").strip() if m["verb"] else seg[m.end() :].strip()
    if _OFF_BUS.search(text):
        return GpuOffBusEvent(ts=line.ts, node=line.host, pci_bus_id=pci, message=text)
    for pattern, action in _RESET_ACTIONS:
        if pattern.search(text):
            return GpuResetEvent(ts=line.ts, node=line.host, pci_bus_id=pci, action=action, message=text)
    return None


# --- lines split across records ------------------------------------------------------------------

REJOIN_WINDOW_S = 5.0  # event time a fragment waits for its host's next record
MAX_HOLD_WALL_S = 60.0  # and wall time at most, should event time stall (live feeds only)
MAX_PENDING_HOSTS = 4096  # fragments held at once; past it the oldest is let go
_HEAD = "NVRM: Xid ("
_HEAD_MAX_CHARS = 128  # a whole Xid head is shorter: a longer segment that is none is no cut head
_TAG = re.compile(r"kernel(?:\[\d{1,10}\])?: ")  # the syslog tag a split record's second part repeats
# what only a record of its own begins with: a printk time, or the head of a GPU line
_NEW_RECORD = re.compile(r"\[ *\d{1,10}\.\d{1,9}\]|NVRM: |nvidia-nvswitch\d")
_NO_CODE = re.compile(r"\): \D")  # a whole head followed by no code: no Xid, cut or not
_CUT_MARKS = ("N", "NV", "NVR", "NVRM", "NVRM:")  # a line cut inside the marker itself
Cut = Literal["head", "text"]


def cut_short(message: str) -> tuple[Cut, int] | None:
    """Whether the message's last GPU segment is evidently cut, and where that segment starts.

    `head`: an Xid head that stops before its code is certainly whole (`: 7` may be `: 79`), or a
    segment that is the start of one (`NVRM: Xid (PCI:0000:3b:0`). `text`: a whole head and code
    with none of the driver's text after them (the driver always prints some). None: nothing in
    the text says it goes on (a split at a shipper's size limit is told by the envelope)."""
    line_start = message.rfind("\n") + 1
    start = -1
    for mark in _MARK.finditer(message, line_start, min(len(message), line_start + MAX_LINE_CHARS)):
        start = mark.start()
    if start < 0:
        return None
    seg = message[start:].rstrip()
    if not seg.startswith("NVRM: Xid"):
        return ("head", start) if _HEAD.startswith(seg) else None
    m = match_xid(seg)
    if m is None:
        return ("head", start) if len(seg) <= _HEAD_MAX_CHARS and not _NO_CODE.search(seg) else None
    if m.end("code") == len(seg):
        return "head", start
    rest = seg[m.end() :]
    text = split_name(rest)[1] if m["name"] else rest.removeprefix(",")
    return ("text", start) if not text.strip() else None


@dataclass(frozen=True, slots=True)
class Fragment(Generic[T]):
    """A host's line held for its next piece: the text so far, with the first piece's time and host,
    the record of the first piece (a dead letter's, if it never completes), the event clock and the
    wall time it was held at, and how many pieces it has."""

    line: KernelLine
    origin: T
    held_at: float
    held_wall: float = math.inf
    pieces: int = 1


class Rejoiner(Generic[T]):
    """Joins lines split across a host's records, in record order, with bounded memory and time.

    A kernel line whose envelope says it goes on (`KernelLine.partial`) or whose last GPU segment is
    evidently cut (`cut_short`) is held, per host, if it holds GPU text at all. The host's next
    kernel line is its continuation, appended as it is (a split falls anywhere, even inside a word;
    a repeated syslog tag `kernel: ` is cut), unless it begins a record of its own (a printk time,
    `NVRM: `) or is more than `window_s` of event time away: then the held line is let go as it is.
    A held line no continuation reached within `window_s` of the event clock (the newest time seen:
    lines, and what the caller passes, the metric watermark), or `max_hold_wall_s` of wall time,
    or past `max_hosts`, or of `MAX_LINE_CHARS`, is let go too: the caller reads what it can and
    dead-letters an evidently cut rest. `T`: what names a line's record (the processor's message).
    """

    def __init__(
        self,
        window_s: float = REJOIN_WINDOW_S,
        max_hold_wall_s: float = MAX_HOLD_WALL_S,
        max_hosts: int = MAX_PENDING_HOSTS,
    ) -> None:
        self.window_s = window_s
        self.max_hold_wall_s = max_hold_wall_s
        self.max_hosts = max_hosts
        self.pending: dict[str, Fragment[T]] = {}  # by host, oldest first
        self.clock = -math.inf
        self.joined = 0  # continuations appended, for the caller to count

    def feed(
        self,
        lines: Sequence[KernelLine],
        origins: Sequence[T],
        clock: float = -math.inf,
        now: float | None = None,
    ) -> list[KernelLine | Fragment[T]]:
        """The lines whole (a joined line where its last piece was) and, where they were let go (a new
        record of their host, a gap, too many hosts), the held lines no continuation completed, in
        order. The rest are held."""
        if clock > self.clock:  # NaN and -inf (no watermark yet) move nothing
            self.clock = clock
        whole: list[KernelLine | Fragment[T]] = []
        for line, origin in zip(lines, origins, strict=True):
            if not line.kernel:
                whole.append(line)
                continue
            if line.ts > self.clock:
                self.clock = line.ts
            pieces = 1
            held = self.pending.pop(line.host, None)
            if held is not None:
                text = line.message
                if tag := _TAG.match(text):
                    text = text[tag.end() :]
                if _NEW_RECORD.match(text) or abs(line.ts - held.line.ts) > self.window_s:
                    whole.append(held)
                else:
                    message = (held.line.message + text)[:MAX_LINE_CHARS]
                    line, origin, pieces = (
                        held.line._replace(message=message, partial=line.partial),
                        held.origin,
                        held.pieces + 1,
                    )
                    self.joined += 1
            if len(line.message) < MAX_LINE_CHARS and _may_go_on(line):
                self.pending[line.host] = Fragment(
                    line, origin, self.clock, math.inf if now is None else now, pieces
                )
                if len(self.pending) > self.max_hosts:
                    whole.append(self.pending.pop(next(iter(self.pending))))
            else:
                whole.append(line)
        return whole

    def expire(self, now: float | None = None, everything: bool = False) -> list[Fragment[T]]:
        """Fragments held past the window of event time (or of wall time, `now` given); all of them
        with `everything` (the end of a replay)."""
        gone = [
            f
            for f in self.pending.values()
            if everything
            or self.clock - f.held_at > self.window_s
            or (now is not None and now - f.held_wall >= self.max_hold_wall_s)
        ]
        for f in gone:
            del self.pending[f.line.host]
        return gone


def _may_go_on(line: KernelLine) -> bool:
    """Whether a kernel line may go on in its host's next record, and holds GPU text worth the wait."""
    message = line.message
    if line.partial:
        return "NVRM" in message or "nvidia-nvswitch" in message or message.endswith(_CUT_MARKS)
    return "NVRM: " in message and cut_short(message) is not None
