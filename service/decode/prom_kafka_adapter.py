"""prometheus-kafka-adapter JSON: one sample per message, value as a string, RFC3339 timestamp.

`{"timestamp":"2026-12-02T13:00:15Z","value":"71.5","name":"DCGM_FI_DEV_GPU_TEMP","labels":{...}}`

`split` reads a message without parsing JSON, for series already seen (`pipeline.processor` says how).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Any

from prexid.service.decode.common import (
    load_object,
    metric_name,
    number,
    parse_rfc3339,
    str_labels,
    with_host,
)
from prexid.service.decode.types import DecodeError, Samples


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    return decode_doc(load_object(payload), ref_ts, host)


def decode_doc(doc: dict[str, Any], ref_ts: float, host: str | None = None) -> Samples:
    name = metric_name(doc.get("name"))
    labels, ts = doc.get("labels"), doc.get("timestamp")
    if not isinstance(labels, dict):
        raise DecodeError("missing_labels")
    if not isinstance(ts, str):
        raise DecodeError("missing_timestamp")
    value = number(doc.get("value"))  # the adapter sends strings, "NaN" and "+Inf" included
    return Samples([name], [with_host(str_labels(labels), host)], [parse_rfc3339(ts)], [value])


_TEXT = rb'"([\x20\x21\x23-\x5b\x5d-\x7e]*)"'  # a JSON string of printable ASCII, nothing escaped
_STAMP_FIRST = re.compile(rb'\{"timestamp":' + _TEXT + rb',"value":' + _TEXT + rb",(.+)\}\Z", re.S)
_STAMP_LAST = re.compile(rb"\{(.+),\"timestamp\":" + _TEXT + rb',"value":' + _TEXT + rb"\}\Z", re.S)
# The same two layouts, one message per line of a joined run; a line of neither layout matches empty.
_LINES_FIRST = re.compile(rb'^(?:\{"timestamp":' + _TEXT + rb',"value":' + _TEXT + rb",(.+)\}|.*)$", re.M)
_LINES_LAST = re.compile(rb"^(?:\{(.+),\"timestamp\":" + _TEXT + rb',"value":' + _TEXT + rb"\}|.*)$", re.M)


def split(payload: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(series, timestamp, value) of a compact message with timestamp and value first (as our
    simulator and Vector write it) or last (the adapter's Go encoder sorts its keys); else None.

    `series` is the message's other members, verbatim: the bytes that name the series. Nothing is
    validated here; a caller may only trust the parts for a `series` whose full message it once
    decoded (see `alias`).
    """
    m = _STAMP_FIRST.match(payload)
    if m is not None:
        ts, value, series = m.groups()
        return series, ts, value
    m = _STAMP_LAST.match(payload)
    if m is not None:
        series, ts, value = m.groups()
        return series, ts, value
    return None


def split_many(payloads: Sequence[bytes]) -> tuple[Sequence[bytes], Sequence[bytes], Sequence[bytes]] | None:
    """`split` of a whole run in one regex pass over its messages joined by newlines: (series,
    timestamps, values) columns, series b"" for a message of neither layout; None when the run cannot
    be cut that way (a message holding a newline).

    All messages are read in the layout of the first (a producer writes one). A message in both
    layouts may come out split the other way than `split` does, but then its series bytes carry a
    `timestamp` member and are never an alias: the caller reads such messages one by one.
    """
    if not payloads:
        return None
    first = payloads[0].startswith(b'{"timestamp":')
    found = (_LINES_FIRST if first else _LINES_LAST).findall(b"\n".join(payloads))
    if len(found) != len(payloads):  # every line matches once: more lines than messages
        return None
    a, b, c = zip(*found, strict=True)
    return (c, a, b) if first else (a, b, c)


def alias(series: bytes, host: str | None) -> Hashable | None:
    """What every message `split` into these `series` bytes, sent with this transport `host`,
    decodes to the same name and labels under; None when the bytes cannot vouch for that.

    The bytes must hold exactly `name` and `labels` (no duplicate timestamp or value, and `auto`
    reads the message as this format). If the labels name the host the bytes alone decide; if not,
    the transport's host is added to the labels, so it is part of the alias.
    """
    try:
        doc = load_object(b"{" + series + b"}")
        labels = str_labels(doc.get("labels"))
    except DecodeError:
        return None
    if doc.keys() != {"name", "labels"}:
        return None
    return series if with_host(labels, "-") is labels else (series, host)
