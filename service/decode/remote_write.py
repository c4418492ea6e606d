"""Prometheus remote-write 1.0: a snappy block-compressed (not framed) protobuf `prometheus.WriteRequest`,
what a Prometheus `remote_write` section POSTs.

Each time series' `__name__` label is the metric name, its other labels the labels; timestamps are
milliseconds. Prometheus's staleness marker (a NaN of bit pattern 0x7ff0000000000002, sent when a
series vanishes from its target) is no measurement: such samples are counted as skipped
(`stale_marker`), as are native histograms (`native_histogram`) and series with no name
(`no_metric_name`), so one odd series does not cost the request's others. Bytes that are no snappy
block are the dead letter `invalid_snappy`, a payload that decompresses past `MAX_DECOMPRESSED_BYTES`
`too_large`, bytes that are no such message `invalid_protobuf`.
"""

from __future__ import annotations

import cramjam
import numpy as np

from prexid.service.decode.common import parse_protobuf
from prexid.service.decode.prompb.remote_pb2 import WriteRequest
from prexid.service.decode.types import DecodeError, Samples, finite_ts

STALE_NAN_BITS = 0x7FF0000000000002  # Prometheus's `value.StaleNaN`
# A snappy block states its uncompressed length; refused above this before decompressing (snappy
# expands up to ~32x, so a small body may ask for a lot). Prometheus's batches are well under 1 MiB.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


def decompress(payload: bytes) -> bytes:
    """The protobuf bytes inside a snappy block, or a DecodeError saying why not."""
    try:
        size = cramjam.snappy.decompress_raw_len(payload)
    except cramjam.DecompressionError as exc:
        raise DecodeError("invalid_snappy", str(exc)[:120]) from exc
    if size > MAX_DECOMPRESSED_BYTES:
        raise DecodeError("too_large", f"decompresses to {size} bytes (limit {MAX_DECOMPRESSED_BYTES})")
    try:
        return bytes(cramjam.snappy.decompress_raw(payload))
    except cramjam.DecompressionError as exc:
        raise DecodeError("invalid_snappy", str(exc)[:120]) from exc


def decode(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    """A snappy-compressed `WriteRequest` as samples (`ref_ts` and `host` unused: each sample carries
    its own time, each series its own labels)."""
    return decode_request(decompress(payload))


def decode_request(raw: bytes) -> Samples:
    """An uncompressed `WriteRequest` as samples."""
    request = parse_protobuf(WriteRequest(), raw)
    out = Samples()
    stamps: list[int] = []
    for series in request.timeseries:
        if series.histograms:
            _skip(out, "native_histogram", len(series.histograms))
        if not series.samples:
            continue
        labels = {label.name: label.value for label in series.labels}
        name = labels.pop("__name__", "")
        n = len(series.samples)
        if not name:
            _skip(out, "no_metric_name", n)
            continue
        out.names.extend([name] * n)
        out.labels.extend([labels] * n)  # shared by the series' samples: read-only (see `Samples`)
        out.values.extend([s.value for s in series.samples])
        stamps.extend([s.timestamp for s in series.samples])
    if not stamps:
        return out
    ts = np.array(stamps, dtype=np.float64) / 1000.0
    bad = ~((ts >= 0.0) & (ts < 7_258_118_400.0))  # years 1970..2200, as `finite_ts` checks
    if bad.any():
        finite_ts(float(ts[bad][0]), int(np.array(stamps)[bad][0]))  # raises, naming the stamp
    stale = np.array(out.values, dtype=np.float64).view(np.uint64) == STALE_NAN_BITS
    if stale.any():
        _skip(out, "stale_marker", int(stale.sum()))
        keep = np.flatnonzero(~stale).tolist()
        names, label_sets, values = out.names, out.labels, out.values
        out.names[:] = [names[i] for i in keep]
        out.labels[:] = [label_sets[i] for i in keep]
        out.values[:] = [values[i] for i in keep]
        ts = ts[~stale]
    out.ts.extend(ts.tolist())
    return out


def _skip(out: Samples, reason: str, points: int) -> None:
    out.skipped[reason] = out.skipped.get(reason, 0) + points
