"""`prexid parse metrics|logs`: what prexid reads in some input, one JSON object per line.

The SRE's "why didn't my Xid alert fire?" tool. Records print as `{"kind": "sample", ...}`,
`{"kind": "xid", ...}` (also `sxid`, `gpu_off_bus`, `gpu_reset`), log lines that their envelope says
are not from the kernel as `{"kind": "not_kernel", ...}`, and rejected input as
`{"kind": "error", "reason": ..., "input": ...}`. Samples go through a SeriesRegistry, so a DCGM sample
earlier in the same input teaches the PCI bus id of each GPU and later Xid lines name their `gpu`.

Framing: log input is one message per line. Metric input is one message per line when it is JSON
(`{` first), else the whole input is one message (a scrape, or Influx lines).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

import orjson

from prexid.service.decode import formats
from prexid.service.decode.kernel_events import extract_events
from prexid.service.decode.types import DecodeError, KernelLine, Samples
from prexid.service.pipeline.series_registry import SeriesRegistry, normalise_host
from prexid.service.schemas import KernelEvent


def cmd_parse(args: argparse.Namespace) -> int:
    data = sys.stdin.buffer.read()
    ref_ts = args.ts if args.ts is not None else time.time()  # what a Kafka record time would say
    try:
        run(args.stream, args.format, data, args.host, ref_ts, sys.stdout.buffer)
    except BrokenPipeError:
        return 0
    return 0


def run(stream: str, fmt: str, data: bytes, host: str | None, ref_ts: float, out: IO[bytes]) -> None:
    registry = SeriesRegistry()
    records = _metrics(fmt, data, host, ref_ts, registry) if stream == "metrics" else None
    if records is None:
        records = _logs(fmt, data, host, ref_ts, registry)
    for rec in records:
        out.write(orjson.dumps(rec) + b"\n")
    out.flush()


def _metrics(
    fmt: str, data: bytes, host: str | None, ref_ts: float, registry: SeriesRegistry
) -> Iterator[dict[str, Any]]:
    decode = formats.metric_decoder(fmt)
    messages = data.splitlines() if data.lstrip()[:1] == b"{" else [data]
    for msg in messages:
        if not msg.strip():
            continue
        try:
            samples = decode(msg, ref_ts, host)
        except DecodeError as err:
            yield _error(err, msg)
            continue
        yield from _samples(samples, registry)


def _logs(
    fmt: str, data: bytes, host: str | None, ref_ts: float, registry: SeriesRegistry
) -> Iterator[dict[str, Any]]:
    decode = formats.log_decoder(fmt)
    lines: list[KernelLine] = []
    for msg in data.splitlines():
        if not msg.strip():
            continue
        try:
            lines.extend(decode(msg, ref_ts, host))
        except DecodeError as err:
            samples = _as_metrics(msg, ref_ts, host) if fmt == "auto" else None
            if samples is None:
                yield _error(err, msg)
            else:
                yield from _samples(samples, registry)
    for line in lines:
        if not line.kernel:
            yield {"kind": "not_kernel", "ts": line.ts, "host": line.host, "message": line.message}
    for ev in extract_events(lines):
        yield _event(ev, registry)


def _as_metrics(msg: bytes, ref_ts: float, host: str | None) -> Samples | None:
    """With `--format auto`, a DCGM sample among log lines teaches the PCI map (see module doc)."""
    try:
        return formats.decode_metrics_auto(msg, ref_ts, host)
    except DecodeError:
        return None


_NON_FINITE = {math.inf: "+Inf", -math.inf: "-Inf"}  # JSON has no NaN/Inf: spelt as Prometheus does


def _samples(samples: Samples, registry: SeriesRegistry) -> Iterator[dict[str, Any]]:
    registry.intern_many(samples.names, samples.labels)
    for s in samples.rows():
        value: float | str = s.value if math.isfinite(s.value) else _NON_FINITE.get(s.value, "NaN")
        yield {"kind": "sample", "name": s.name, "labels": s.labels, "ts": s.ts, "value": value}


def _event(ev: KernelEvent, registry: SeriesRegistry) -> dict[str, Any]:
    rec: dict[str, Any] = ev.model_dump(mode="json")
    rec["node"] = normalise_host(ev.node)
    if ev.kind != "sxid":
        eid = registry.gpu_for_pci(ev.node, ev.pci_bus_id)
        rec["gpu"] = registry.entities[eid].gpu if eid is not None else None
    return rec


def _error(err: DecodeError, msg: bytes) -> dict[str, Any]:
    text = msg[:500].decode("utf-8", errors="replace")
    return {"kind": "error", "reason": err.reason, "detail": err.detail, "input": text}
