"""Raw RFC3164 syslog lines, as rsyslog/syslog-ng forward them: `Mmm dd hh:mm:ss host tag: message`.

RFC3164 carries neither year nor zone: times are read as UTC, in the year that puts the line closest
to `ref_ts` (the Kafka record time), so a December line read in January lands in the right year.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from service.decode.types import DecodeError, KernelLine

_LINE = re.compile(
    r"^(?:<\d{1,3}>)?(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) (?P<time>\d{2}:\d{2}:\d{2}) "
    r"(?P<host>\S+) (?P<rest>.*)$"
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
    ref_year = datetime.fromtimestamp(ref_ts, tz=UTC).year
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


def decode(payload: bytes, ref_ts: float) -> list[KernelLine]:
    """Every non-empty line of the message; a message may hold several lines."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("not_utf8", str(exc)[:80]) from exc
    out: list[KernelLine] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        m = _LINE.match(raw)
        if m is None:
            raise DecodeError("not_rfc3164", raw[:120])
        ts = _timestamp(m["mon"], m["day"], m["time"], ref_ts)
        out.append(KernelLine(ts, m["host"], m["rest"]))
    if not out:
        raise DecodeError("empty_message")
    return out
