"""Syslog as rsyslog/syslog-ng forward it: RFC3164 and rsyslog's `RSYSLOG_ForwardFormat`.

RFC3164: `[<PRI>]Mmm dd hh:mm:ss host tag: message`. It carries neither year nor zone: times are read
as UTC, in the year that puts the line closest to `ref_ts` (the Kafka record time), so a December line
read in January lands in the right year. `RSYSLOG_ForwardFormat` (omkafka/omfwd) is the same shape with
an RFC3339 time: `<PRI>2026-12-02T13:00:15.123456+00:00 host tag: message`.
A line is a kernel line when its PRI says facility `kern` (0); a line with another facility never is,
whatever its tag (`logger -t kernel` sends facility `user`: a refused claim). Without PRI, a tag
`kernel` is only a claim (`unproven`), believed on a topic declared kernel-only.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from prexid.service.decode.common import parse_rfc3339
from prexid.service.decode.types import (
    DecodeError,
    KernelLine,
    LineError,
    Trust,
    at_split_size,
    each_line,
    utf8,
)

_LINE = re.compile(
    r"^(?:<(?P<pri>\d{1,3})>)?(?:(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) (?P<time>\d{2}:\d{2}:\d{2})"
    r"|(?P<iso>\d{4}-\d\d-\d\dT\S+)) (?P<host>\S+) (?P<rest>.*)$"
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


def _timestamp(mon: str, day: str, hms: str, ref_ts: float) -> float:
    if mon not in _MONTHS:
        raise DecodeError("bad_timestamp", mon)
    ref_year = datetime.fromtimestamp(ref_ts, tz=UTC).year if 0 <= ref_ts < 7e9 else 2026
    h, m, s = (int(x) for x in hms.split(":"))
    best: float | None = None
    for year in (ref_year - 1, ref_year, ref_year + 1):
        try:
            ts = datetime(year, _MONTHS[mon], int(day), h, m, s, tzinfo=UTC).timestamp()
        except ValueError:
            continue
        if best is None or abs(ts - ref_ts) < abs(best - ref_ts):
            best = ts
    if best is None:
        raise DecodeError("bad_timestamp", f"{mon} {day} {hms}")
    return best


def origin(pri: str | None, rest: str) -> tuple[bool, Trust]:
    """Whether the line is a kernel line, and what that rests on (`KernelLine.trust`)."""
    claim = rest.startswith(("kernel:", "kernel["))
    if pri is None:
        return claim, "unproven"
    if int(pri) >> 3 == 0:
        return True, "proven"
    return False, "refused" if claim else "proven"


def parse_line(raw: str, ref_ts: float) -> KernelLine:
    m = _LINE.match(raw)
    if m is None:
        raise DecodeError("not_syslog", raw[:120])
    iso = m["iso"]
    ts = parse_rfc3339(iso) if iso else _timestamp(m["mon"], m["day"], m["time"], ref_ts)
    return KernelLine(ts, m["host"], m["rest"], *origin(m["pri"], m["rest"]))


def decode(
    payload: bytes, ref_ts: float, /, host: str | None = None, errors: list[LineError] | None = None
) -> list[KernelLine]:
    """Every non-empty line of the message; a message may hold several lines. A record exactly a
    split size long (RFC3164's 1024 bytes) may go on in the host's next one: marked `partial`."""
    return each_line(payload, lambda raw: at_split_size(parse_line(utf8(raw), ref_ts), raw), errors)
