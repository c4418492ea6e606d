"""The kernel ring buffer read directly: `dmesg` output and `/dev/kmsg` records. Every line is a kernel line.

- `dmesg`: `[ 1234.567890] message` (seconds since boot) or `dmesg -T`: `[Sun Nov 30 02:20:00 2026] message`,
  optionally with `dmesg -x` prefixes `kern  :err   : `: a facility other than `kern` is userspace
  writing to /dev/kmsg, never a kernel line. Without the prefix the origin is `unproven`.
- `/dev/kmsg`: `PRI,SEQ,TS_USEC,FLAGS[,...];message`, followed by ` KEY=VALUE` dictionary lines (skipped).
  Only facility `kern` records count; userspace can write other facilities to /dev/kmsg. FLAGS `c`
  marks a fragment of a line the kernel stored in pieces (`+` for the later ones before Linux 4.9):
  the line goes on in the next record (`KernelLine.partial`).
Neither names the host: it comes from the Kafka key or `host` header (`unknown` without one). Seconds
since boot are not a wall time, so those lines take the record time; `dmesg -T` times are read as UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from prexid.service.decode.types import DecodeError, KernelLine, LineError, each_line, utf8

_DMESG = re.compile(r"^(?:(?P<facility>[a-z0-9]{1,8}) *:[a-z]{1,8} *: )?\[(?P<stamp>[^\]]*)\] ?(?P<msg>.*)$")
_KMSG = re.compile(r"^(?P<pri>\d+),(?P<seq>\d+),(?P<usec>\d+),(?P<flags>[^,;]*)[^;]*;(?P<msg>.*)$")
_MONOTONIC = re.compile(r"^\s*\d+\.\d+$")


def _human_time(stamp: str, line: str) -> float:
    try:
        return datetime.strptime(stamp.strip(), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise DecodeError("bad_timestamp", line[:120]) from None


def decode_dmesg(
    payload: bytes, ref_ts: float, /, host: str | None = None, errors: list[LineError] | None = None
) -> list[KernelLine]:
    return each_line(payload, lambda raw: _dmesg_line(utf8(raw), ref_ts, host), errors)


def _dmesg_line(raw: str, ref_ts: float, host: str | None) -> KernelLine:
    m = _DMESG.match(raw)
    if m is None:
        raise DecodeError("not_dmesg", raw[:120])
    ts = ref_ts if _MONOTONIC.match(m["stamp"]) else _human_time(m["stamp"], raw)
    facility = m["facility"]
    if facility is None:
        return KernelLine(ts, host or "unknown", m["msg"], True, "unproven")
    return KernelLine(ts, host or "unknown", m["msg"], facility == "kern")


def decode_kmsg(
    payload: bytes, ref_ts: float, /, host: str | None = None, errors: list[LineError] | None = None
) -> list[KernelLine]:
    return each_line(payload, lambda raw: _kmsg_line(utf8(raw), ref_ts, host), errors, "no records")


def _kmsg_line(raw: str, ref_ts: float, host: str | None) -> KernelLine | None:
    if raw[0] == " ":  # dictionary continuation lines
        return None
    m = _KMSG.match(raw)
    if m is None:
        raise DecodeError("not_kmsg", raw[:120])
    partial = m["flags"] in ("c", "+")  # a fragment: the line goes on in the next record
    return KernelLine(ref_ts, host or "unknown", m["msg"], int(m["pri"]) >> 3 == 0, "proven", partial)
