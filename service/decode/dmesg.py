"""The kernel ring buffer read directly: `dmesg` output and `/dev/kmsg` records. Every line is a kernel line.

- `dmesg`: `[ 1234.567890] message` (seconds since boot) or `dmesg -T`: `[Sun Nov 30 02:20:00 2026] message`,
  optionally with `dmesg -x` prefixes `kern  :err   : `.
- `/dev/kmsg`: `PRI,SEQ,TS_USEC,FLAGS[,...];message`, followed by ` KEY=VALUE` dictionary lines (skipped).
  Only facility `kern` records count; userspace can write other facilities to /dev/kmsg.
Neither names the host: it comes from the Kafka key or `host` header (`unknown` without one). Seconds
since boot are not a wall time, so those lines take the record time; `dmesg -T` times are read as UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from prexid.service.decode.types import DecodeError, KernelLine, utf8

_DMESG = re.compile(r"^(?:[a-z]+ *:[a-z]+ *: )?\[(?P<stamp>[^\]]*)\] ?(?P<msg>.*)$")
_KMSG = re.compile(r"^(?P<pri>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_MONOTONIC = re.compile(r"^\s*\d+\.\d+$")


def _human_time(stamp: str, line: str) -> float:
    try:
        return datetime.strptime(stamp.strip(), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise DecodeError("bad_timestamp", line[:120]) from None


def decode_dmesg(payload: bytes, ref_ts: float, /, host: str | None = None) -> list[KernelLine]:
    out = []
    for raw in utf8(payload).splitlines():
        if not raw.strip():
            continue
        m = _DMESG.match(raw)
        if m is None:
            raise DecodeError("not_dmesg", raw[:120])
        ts = ref_ts if _MONOTONIC.match(m["stamp"]) else _human_time(m["stamp"], raw)
        out.append(KernelLine(ts, host or "unknown", m["msg"]))
    if not out:
        raise DecodeError("empty", "no lines")
    return out


def decode_kmsg(payload: bytes, ref_ts: float, /, host: str | None = None) -> list[KernelLine]:
    out = []
    for raw in utf8(payload).splitlines():
        if not raw.strip() or raw[0] == " ":  # dictionary continuation lines
            continue
        m = _KMSG.match(raw)
        if m is None:
            raise DecodeError("not_kmsg", raw[:120])
        out.append(KernelLine(ref_ts, host or "unknown", m["msg"], int(m["pri"]) >> 3 == 0))
    if not out:
        raise DecodeError("empty", "no records")
    return out
