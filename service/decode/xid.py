"""Find NVIDIA Xid events in kernel messages, whatever envelope carried them.

`NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python3, GPU has fallen off the bus.` — searched for
anywhere in the message, since forwarders add prefixes (`kernel: [1234.5] ...`). Variants: no `PCI:`
prefix (old drivers), MIG ids in the parentheses, upper-case hex, non-zero domains, `pid='<unknown>'`.
"""

from __future__ import annotations

import re

from prexid.service.decode.types import KernelLine
from prexid.service.schemas import XidEvent

PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
_XID = re.compile(
    rf"NVRM: Xid \((?:PCI:)?(?P<pci>{PCI})(?:\.[0-7])?[^)]*\): "
    r"(?P<code>\d{1,6})(?:, pid=(?P<pid>'?<?[\w-]+>?'?))?(?:, name=(?P<name>[^,]*))?,? ?(?P<text>.*)$"
)


def normalise_pci(pci: str) -> str:
    """Canonical PCI bus id `dddd:bb:dd`: lower case, 4-digit domain, no function.

    Xid lines say `0000:3b:00`, DCGM's label says `00000000:3B:00.0`; both become `0000:3b:00`.
    Anything that is not a PCI id is returned lower-cased, never an exception (labels are untrusted).
    """
    head = pci.strip().lower().split(".")[0]
    parts = head.split(":")
    if len(parts) != 3:
        return head
    domain, bus, dev = parts
    try:
        return f"{int(domain, 16):04x}:{bus}:{dev}"
    except ValueError:
        return head


def parse_xid(line: KernelLine) -> XidEvent | None:
    m = _XID.search(line.message)
    if m is None:
        return None
    pid_text = (m["pid"] or "").strip("'")
    return XidEvent(
        ts=line.ts,
        node=line.host,
        pci_bus_id=normalise_pci(m["pci"]),
        code=int(m["code"]),
        pid=int(pid_text) if pid_text.isdecimal() and pid_text.isascii() and len(pid_text) < 10 else None,
        process=(m["name"] or "").strip() or None,
        message=m["text"].strip(),
    )
