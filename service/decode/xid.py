"""Find NVIDIA Xid events in kernel messages, whatever envelope carried them.

`NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python3, GPU has fallen off the bus.` — searched for
anywhere in the message, since forwarders add prefixes (`kernel: [1234.5] ...`). Variants: no `PCI:`
prefix (old drivers), MIG ids in the parentheses, upper-case hex, non-zero domains, `pid='<unknown>'`.

Every quantifier is bounded, so one search costs at most a few dozen characters past each
`NVRM: Xid (` it meets: matching stays linear in the line whatever a line repeats.
"""

from __future__ import annotations

import re

from prexid.service.decode.types import KernelLine
from prexid.service.schemas import XidEvent

PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
MAX_CODE_DIGITS = 9  # longer codes are no Xid (real ones have at most 3 digits, SXids 5)
COMM_MAX = 15  # `name=` is the process's comm: TASK_COMM_LEN (16) less its NUL
_XID = re.compile(
    rf"NVRM: Xid \((?:PCI:)?(?P<pci>{PCI})(?:\.[0-7])?[^)\n]{{0,64}}\): "
    rf"(?P<code>\d{{1,{MAX_CODE_DIGITS}}})(?!\d)(?:, pid=(?P<pid>'?<?[\w-]{{1,32}}>?'?))?(?P<name>, name=)?"
)
_CHANNEL = re.compile(r", Ch [0-9a-fA-F]{8}$")  # `Ch 00000009, intr ...`: the text, not the name


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
    """The first Xid in the line's message (up to its end or a newline), if there is one."""
    m = _XID.search(line.message)
    if m is None:
        return None
    end = line.message.find("\n", m.end())
    return xid_event(line, m, line.message[m.end() : None if end < 0 else end])


def match_xid(segment: str) -> re.Match[str] | None:
    """The Xid head at the start of `segment`, if there is one."""
    return _XID.match(segment)


def xid_event(line: KernelLine, m: re.Match[str], rest: str) -> XidEvent:
    """The event of an Xid head `m`; `rest` is what follows it: `name`'s value (when the head ends in
    `name=`) and the driver's text."""
    if m["name"]:
        name, text = split_name(rest)
    else:
        name, text = None, rest.removeprefix(",").removeprefix(" ")
    pid_text = (m["pid"] or "").strip("'")
    return XidEvent(
        ts=line.ts,
        node=line.host,
        pci_bus_id=normalise_pci(m["pci"]),
        code=int(m["code"]),
        pid=int(pid_text) if pid_text.isdecimal() and pid_text.isascii() and len(pid_text) < 10 else None,
        process=(name or "").strip() or None,
        message=text.strip(),
    )


def split_name(rest: str) -> tuple[str, str]:
    """`name=`'s value and the text after it. The kernel prints at most 15 characters of the comm and
    a comm may hold ", " itself (`name=my, proc, GPU has fallen off the bus.`), so the name is the
    longest part of at most 15 characters that ends before a ", " (a `, Ch 0000001f` in it belongs to
    the text); with no such part, it ends at the first comma (older shapes)."""
    best = -1
    at = rest.find(", ")
    while 0 <= at <= COMM_MAX:
        if not _CHANNEL.search(rest, 0, at):
            best = at
        at = rest.find(", ", at + 1)
    if best < 0:
        best = rest.find(",")
        if best < 0:
            return rest, ""
    return rest[:best], rest[best + 1 :].removeprefix(" ")
