"""GPU events in kernel lines: Xid, NVSwitch SXid bursts, "fallen off the bus", reset and recovery.

Only lines whose envelope says they came from the kernel are searched. The patterns are searched
anywhere in the message, since forwarders add prefixes (`kernel: [1234.5] ...`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from prexid.service.decode.types import KernelLine
from prexid.service.decode.xid import PCI, normalise_pci, parse_xid
from prexid.service.schemas import GpuOffBusEvent, GpuResetAction, GpuResetEvent, KernelEvent, SxidEvent

_SXID = re.compile(
    rf"nvidia-nvswitch(?P<switch>\d{{1,4}}): SXid \((?:PCI:)?(?P<pci>{PCI})[^)]*\): "
    r"(?P<code>\d{1,6}), (?P<text>.*)$"
)
_LINK = re.compile(r"\bLink (?P<link>-?\d+)")
_GPU_LINE = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?(?P<pci>{PCI})(?:\.[0-7])?:? (?P<text>.*)$")
_OFF_BUS = re.compile(r"fallen off the bus", re.IGNORECASE)
_RESET_ACTIONS: tuple[tuple[re.Pattern[str], GpuResetAction], ...] = (
    (re.compile(r"reset required", re.IGNORECASE), "reset_required"),
    (re.compile(r"reboot required", re.IGNORECASE), "reboot_required"),
    (re.compile(r"RmInitAdapter failed|failed to initialize", re.IGNORECASE), "init_failed"),
    (re.compile(r"recover", re.IGNORECASE), "recovery"),
    (re.compile(r"\breset\b", re.IGNORECASE), "reset"),
)


def extract_events(lines: Sequence[KernelLine]) -> list[KernelEvent]:
    """Every event in these lines, in line order; an SXid burst's follow-up lines join its event."""
    events: list[KernelEvent] = []
    open_sxid: dict[tuple[str, str, int], int] = {}  # (node, switch pci, code) -> index in events
    for line in lines:
        if not line.kernel or ("NVRM" not in line.message and "SXid" not in line.message):
            continue
        if (xid := parse_xid(line)) is not None:
            events.append(xid)
        elif (m := _SXID.search(line.message)) is not None:
            _sxid(line, m, events, open_sxid)
        elif (g := _GPU_LINE.search(line.message)) is not None and (ev := _gpu_line(line, g)) is not None:
            events.append(ev)
    return events


def _sxid(
    line: KernelLine, m: re.Match[str], events: list[KernelEvent], open_sxid: dict[tuple[str, str, int], int]
) -> None:
    pci, code, text = normalise_pci(m["pci"]), int(m["code"]), m["text"].strip()
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


def _gpu_line(line: KernelLine, m: re.Match[str]) -> GpuOffBusEvent | GpuResetEvent | None:
    text, pci = m["text"].strip(), normalise_pci(m["pci"])
    if _OFF_BUS.search(text):
        return GpuOffBusEvent(ts=line.ts, node=line.host, pci_bus_id=pci, message=text)
    for pattern, action in _RESET_ACTIONS:
        if pattern.search(text):
            return GpuResetEvent(ts=line.ts, node=line.host, pci_bus_id=pci, action=action, message=text)
    return None
