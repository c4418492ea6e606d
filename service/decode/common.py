"""Helpers the JSON and text decoders share: strict JSON loading, times, numbers, the host label."""

from __future__ import annotations

import math
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

import orjson
from google.protobuf.message import DecodeError as ProtobufError
from google.protobuf.message import Message

from prexid.service.decode.types import DecodeError, finite_ts

M = TypeVar("M", bound=Message)


def parse_protobuf(message: M, raw: bytes) -> M:
    """`message` read from `raw`; bytes that are not that message are a dead letter, not a crash."""
    try:
        message.ParseFromString(raw)
    except ProtobufError as exc:
        raise DecodeError("invalid_protobuf", str(exc)[:120]) from exc
    return message


# Labels that name the host a series belongs to, in the order the series registry trusts them.
HOST_LABELS = ("Hostname", "hostname", "host", "node", "instance", "nodename")


def load_json(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("invalid_json", str(exc)[:120]) from exc


def load_object(payload: bytes) -> dict[str, Any]:
    doc = load_json(payload)
    if not isinstance(doc, dict):
        raise DecodeError("not_an_object", type(doc).__name__)
    return doc


@lru_cache(maxsize=4096)  # one scrape's samples share their timestamp string
def parse_rfc3339(text: str) -> float:
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00")).timestamp()
    except (ValueError, OverflowError) as exc:
        raise DecodeError("bad_timestamp", text[:64]) from exc
    return finite_ts(ts, text)


def epoch_seconds(value: object) -> float:
    """A number of s, ms, µs or ns since the epoch (told apart by magnitude), or an RFC3339 string."""
    if isinstance(value, str):
        text = value
        if "T" in text or "-" in text[1:]:  # RFC3339, not a number (saves a failing float())
            return parse_rfc3339(text)
        try:
            value = float(text)
        except ValueError:
            raise DecodeError("bad_timestamp", text[:64]) from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DecodeError("bad_timestamp", repr(value)[:64])
    scale = 1.0
    for limit, div in ((1e17, 1e9), (1e14, 1e6), (1e11, 1e3)):
        if abs(value) >= limit:
            scale = div
            break
    return finite_ts(value / scale, value)


def number(value: object) -> float:
    """A sample value: a JSON number or a numeric string ("NaN", "+Inf" included); never a bool."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DecodeError("bad_value", repr(value)[:64])
    try:
        return float(value)
    except (ValueError, OverflowError) as exc:
        raise DecodeError("bad_value", repr(value)[:64]) from exc


def str_labels(raw: object, what: str = "labels") -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise DecodeError(f"bad_{what}", repr(raw)[:64])
    labels = dict(raw)
    labels.pop("__name__", None)
    if set(map(type, labels.values())) <= {str}:  # the usual case, checked without a Python loop
        return labels
    return {str(k): v if isinstance(v, str) else str(v) for k, v in labels.items()}


def with_host(labels: dict[str, str], host: str | None) -> dict[str, str]:
    """Adds `host` from the transport (Kafka key/header) when the payload names no host itself.

    `nodename` (node_uname_info's kernel host name) does not count: the transport's name wins over it.
    """
    if not host or any(labels.get(k) for k in HOST_LABELS if k != "nodename"):
        return labels
    return {**labels, "host": host}


def metric_name(raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise DecodeError("missing_name")
    return raw
