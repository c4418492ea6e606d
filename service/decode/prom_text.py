"""Prometheus text exposition (format 0.0.4, and OpenMetrics samples): one whole scrape per message.

How host and scrape time travel (a scrape body names neither):
- a JSON envelope `{"host": "node-17", "ts": 1796205600.0 | "2026-12-02T10:00:00Z", "body": "<exposition>"}`;
- or the bare exposition as the message value, with the host in the Kafka key or a `host` header
  (`kcat -k node-17` / `-H host=node-17`) and the scrape time as the Kafka record timestamp.
A sample's own `[timestamp_ms]` wins over both. The host becomes a `host` label unless the sample
already carries a host label (dcgm-exporter's `Hostname`).

Speed: one scrape is parsed by plain string operations per line; the label set of each distinct
series text is parsed once and cached, so a steady-state scrape costs a dict lookup per sample.
"""

from __future__ import annotations

import re
from typing import Any

from prexid.service.decode.common import epoch_seconds, load_object, with_host
from prexid.service.decode.types import DecodeError, Samples, utf8

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,|$)')
_SIMPLE_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\\n]*)"')
_SIMPLE_BODY = re.compile(r'(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*",)*(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*")?')
_SERIES_PREFIX = re.compile(r'\s*[^\s{]+(?:\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_CACHE_HOSTS, _CACHE_SERIES = 4096, 100_000
_series_cache: dict[str | None, dict[str, tuple[str, dict[str, str]]]] = {}


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    if payload[:1] == b"{":
        doc = load_object(payload)
        return decode_envelope(doc, ref_ts, host)
    return parse_exposition(utf8(payload), ref_ts, host)


def decode_envelope(doc: dict[str, Any], ref_ts: float, host: str | None = None) -> Samples:
    body, env_host = doc.get("body"), doc.get("host")
    if not isinstance(body, str):
        raise DecodeError("missing_body")
    if env_host is not None and not isinstance(env_host, str):
        raise DecodeError("bad_host", repr(env_host)[:64])
    ts = epoch_seconds(doc["ts"]) if doc.get("ts") is not None else ref_ts
    return parse_exposition(body, ts, env_host or host)


def parse_exposition(text: str, scrape_ts: float, host: str | None) -> Samples:
    parsed_series: list[tuple[str, dict[str, str]]] = []
    raw_values: list[str] = []
    stamps: dict[int, float] = {}  # sample index -> own timestamp; the rest take the scrape time
    add_series, add_value = parsed_series.append, raw_values.append
    cache = _cache_for(host)
    exemplars = " # " in text  # OpenMetrics exemplars follow the value: cut them off first
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        if exemplars:
            line = _cut_exemplar(line)
        brace = line.rfind("}")
        if brace >= 0:
            series, value = line[: brace + 1], line[brace + 1 :].strip()
        else:
            series, _, value = line.strip().partition(" ")
            if not series:
                continue
        parsed = cache.get(series)
        if parsed is None:
            parsed = cache[series] = _parse_new_series(series, line, host)
        add_series(parsed)
        if " " in value or "\t" in value:
            value = _split_timestamp(value, line, len(raw_values), stamps)
        add_value(value)
    if not raw_values:
        raise DecodeError("empty", "no samples in the exposition")
    ts = [scrape_ts] * len(raw_values)
    for i, stamp in stamps.items():
        ts[i] = stamp
    return Samples([p[0] for p in parsed_series], [p[1] for p in parsed_series], ts, _floats(raw_values))


def _cut_exemplar(line: str) -> str:
    """Drop an OpenMetrics exemplar (` # {...} value`) but not a ` # ` inside a quoted label value."""
    m = _SERIES_PREFIX.match(line)
    head, rest = (line[: m.end()], line[m.end() :]) if m else ("", line)
    return head + rest.split(" # ", 1)[0]


def _parse_new_series(series: str, line: str, host: str | None) -> tuple[str, dict[str, str]]:
    name, labels = _parse_series(series.lstrip(), line)
    return name, with_host(labels, host)


def _split_timestamp(value: str, line: str, index: int, stamps: dict[int, float]) -> str:
    parts = value.split()
    if len(parts) != 2:
        raise DecodeError("bad_sample_line", line[:120])
    stamps[index] = _timestamp_ms(parts[1], line)
    return parts[0]


def forget_series() -> None:
    """Empty the parsed-series cache (benchmarks of a first scrape; tests)."""
    _series_cache.clear()


def _cache_for(host: str | None) -> dict[str, tuple[str, dict[str, str]]]:
    """Parsed series per host; bounded, since hosts and series come from the outside."""
    cache = _series_cache.get(host)
    if cache is None:
        if len(_series_cache) > _CACHE_HOSTS:
            _series_cache.clear()
        cache = _series_cache[host] = {}
    elif len(cache) > _CACHE_SERIES:
        cache.clear()
    return cache


def _floats(raw: list[str]) -> list[float]:
    try:
        return list(map(float, raw))
    except ValueError:
        bad = next(v for v in raw if not _is_float(v))
        raise DecodeError("bad_value", bad[:64]) from None


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _timestamp_ms(text: str, line: str) -> float:
    if not text.lstrip("-").isdigit():
        raise DecodeError("bad_timestamp", line[:120])
    return epoch_seconds(int(text) / 1000.0)


def _parse_series(series: str, line: str) -> tuple[str, dict[str, str]]:
    brace = series.find("{")
    name = series if brace < 0 else series[:brace]
    if not _NAME.fullmatch(name):
        raise DecodeError("bad_metric_name", line[:120])
    if brace < 0:
        return name, {}
    body = series[brace + 1 : -1]
    simple = _simple_labels(body)
    return name, simple if simple is not None else _escaped_labels(body, line)


def _simple_labels(body: str) -> dict[str, str] | None:
    """The common case (no escapes, no spaces): one findall, checked to have consumed the whole body."""
    if "\\" in body:
        return None
    if not _SIMPLE_BODY.fullmatch(body):
        return None
    return dict(_SIMPLE_LABEL.findall(body))


def _escaped_labels(body: str, line: str) -> dict[str, str]:
    pos, out = 0, {}
    while pos < len(body):
        m = _LABEL.match(body, pos)
        if m is None:
            if body[pos:].strip():
                raise DecodeError("bad_labels", line[:120])
            break
        out[m[1]] = re.sub(r"\\.", lambda e: _UNESCAPE.get(e[0], e[0]), m[2]) if "\\" in m[2] else m[2]
        pos = m.end()
    return out
