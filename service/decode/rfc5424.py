"""RFC5424 syslog: `<PRI>1 TIMESTAMP HOST APP-NAME PROCID MSGID STRUCTURED-DATA MSG`.

`<4>1 2026-12-02T13:00:15.123456+00:00 node-17 kernel - - - NVRM: Xid (...)`. A kernel line has
facility `kern` (PRI < 8); APP-NAME is the sender's to choose, so APP-NAME `kernel` with another
facility is a refused claim, never a kernel line. A nil (`-`) timestamp falls back to the record time.
"""

from __future__ import annotations

import re

from prexid.service.decode.common import parse_rfc3339
from prexid.service.decode.types import DecodeError, KernelLine, LineError, at_split_size, each_line, utf8

_HEAD = re.compile(r"^<(?P<pri>\d{1,3})>1 (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) \S+ \S+ (?P<rest>.*)$")
_SD = re.compile(r'^(?:-|(?:\[(?:[^\]"\\]|\\.|"(?:[^"\\]|\\.)*")*\])+)(?: |$)')


def parse_line(raw: str, ref_ts: float) -> KernelLine:
    m = _HEAD.match(raw)
    if m is None:
        raise DecodeError("not_rfc5424", raw[:120])
    sd = _SD.match(m["rest"])
    if sd is None:
        raise DecodeError("bad_structured_data", raw[:120])
    message = m["rest"][sd.end() :].removeprefix("\ufeff")
    ts = ref_ts if m["ts"] == "-" else parse_rfc3339(m["ts"])
    host = "unknown" if m["host"] == "-" else m["host"]
    kernel = int(m["pri"]) >> 3 == 0
    refused = not kernel and m["app"] == "kernel"
    return KernelLine(ts, host, message, kernel, "refused" if refused else "proven")


def decode(
    payload: bytes, ref_ts: float, /, host: str | None = None, errors: list[LineError] | None = None
) -> list[KernelLine]:
    return each_line(payload, lambda raw: at_split_size(parse_line(utf8(raw), ref_ts), raw), errors)
