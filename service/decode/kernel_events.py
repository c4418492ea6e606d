"""GPU events in kernel lines: Xid, NVSwitch SXid bursts, "fallen off the bus", reset and recovery.

Only lines whose envelope says they came from the kernel are searched. The patterns are searched
anywhere in the message, since forwarders add prefixes (`kernel: [1234.5] ...`): a message is cut
into segments, each starting at an `NVRM: ` or `nvidia-nvswitchN` and ending at the next one or at
a newline, so one record holding two Xids (a journald MESSAGE of two lines, say) gives two events.
Only the first `MAX_LINE_CHARS` of a message are searched (a kernel record is at most 1 KiB), and
every pattern is anchored at its segment's start with bounded quantifiers: the cost is linear in
the line, whatever it repeats.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from prexid.service.decode.types import KernelLine
from prexid.service.decode.xid import PCI, match_xid, normalise_pci, xid_event
from prexid.service.schemas import GpuOffBusEvent, GpuResetAction, GpuResetEvent, KernelEvent, SxidEvent

MAX_LINE_CHARS = 16_384
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
