"""Log records as JSON objects, one per message or one per line (NDJSON): journald (`journalctl -o json`
and Vector's `journald` source), Fluent Bit's `json` output and rsyslog `omkafka` with a JSON template.

They share field names closely enough for one reader: the message is the first of `MESSAGE`,
`message`, `msg`, `log`; the host the first of `_HOSTNAME`, `host`, `hostname` (else the Kafka key or
`host` header); the time the first of `__REALTIME_TIMESTAMP` (µs), `@timestamp`, `timestamp`,
`timereported`, `date`, `time` (else the record time). A record is a kernel line when its transport
says so: `_TRANSPORT` (journald) if present, else a syslog facility (`facility`, `SYSLOG_FACILITY`);
an identifier (`SYSLOG_IDENTIFIER`, `ident`, `programname`, `syslogtag`) that says `kernel` against
either is a refused claim. With neither, the identifier (or, for a Fluent Bit `log` field holding a
raw syslog line, that line's PRI/tag) decides, and with none of these the line counts, but both only
as `unproven` claims, believed on a topic declared kernel-only (`KernelLine.trust`).
"""

from __future__ import annotations

from typing import Any

from prexid.service.decode import syslog
from prexid.service.decode.common import epoch_seconds, load_json
from prexid.service.decode.types import DecodeError, KernelLine, LineError, Trust, each_line

_MESSAGE = ("MESSAGE", "message", "msg", "log")
_HOST = ("_HOSTNAME", "host", "hostname")
_TIME = ("@timestamp", "timestamp", "timereported", "date", "time")
_FACILITY = ("facility", "SYSLOG_FACILITY")
_IDENT = ("SYSLOG_IDENTIFIER", "ident", "programname", "syslogtag")


def decode(
    payload: bytes, ref_ts: float, /, host: str | None = None, errors: list[LineError] | None = None
) -> list[KernelLine]:
    """One record per line (NDJSON); lines are split on `\n` only (a U+2028 in a string is no break)."""
    return each_line(payload, lambda raw: record_line(load_json(raw), ref_ts, host), errors, "no records")


def record_line(doc: Any, ref_ts: float, host: str | None = None) -> KernelLine:
    if not isinstance(doc, dict):
        raise DecodeError("not_an_object", type(doc).__name__)
    key = next((k for k in _MESSAGE if k in doc), None)
    if key is None:
        raise DecodeError("missing_message")
    message = _text(doc[key])
    if key == "log" and not _transport_known(doc):
        try:
            inner = syslog.parse_line(message, ref_ts)
        except DecodeError:
            pass
        else:
            return inner
    name = next((str(doc[k]) for k in _HOST if isinstance(doc.get(k), str) and doc[k]), host or "unknown")
    return KernelLine(_time(doc, ref_ts), name, message, *_origin(doc))


def _text(value: object) -> str:
    """journald sends a MESSAGE that is not valid UTF-8 as an array of byte values."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    raise DecodeError("bad_message", repr(value)[:64])


def _time(doc: dict[str, Any], ref_ts: float) -> float:
    realtime = doc.get("__REALTIME_TIMESTAMP")
    if realtime is not None:
        return epoch_seconds(realtime)
    stamp = next((doc[k] for k in _TIME if doc.get(k) is not None), None)
    return ref_ts if stamp is None else epoch_seconds(stamp)


def _transport_known(doc: dict[str, Any]) -> bool:
    return any(k in doc for k in ("_TRANSPORT", *_FACILITY, *_IDENT))


def _origin(doc: dict[str, Any]) -> tuple[bool, Trust]:
    ident = next((doc[k] for k in _IDENT if k in doc), None)
    claim = ident is None or str(ident).startswith("kernel")
    if "_TRANSPORT" in doc:
        kernel = doc["_TRANSPORT"] == "kernel"
    elif (facility := next((doc[k] for k in _FACILITY if k in doc), None)) is not None:
        kernel = str(facility) in ("0", "kern")
    else:
        return claim, "unproven"
    return kernel, "refused" if not kernel and ident is not None and claim else "proven"
