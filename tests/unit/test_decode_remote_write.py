"""Prometheus remote-write 1.0 requests, built with the generated prompb classes, decoded to samples."""

from __future__ import annotations

import math
import struct

import cramjam
import pytest

from prexid.service.decode import formats, remote_write
from prexid.service.decode.prompb.remote_pb2 import WriteRequest
from prexid.service.decode.prompb.types_pb2 import Label, Sample, TimeSeries
from prexid.service.decode.types import DecodeError

STALE = struct.unpack("<d", struct.pack("<Q", remote_write.STALE_NAN_BITS))[0]


def series(labels: dict[str, str], *samples: tuple[float, int]) -> TimeSeries:
    return TimeSeries(
        labels=[Label(name=k, value=v) for k, v in labels.items()],
        samples=[Sample(value=v, timestamp=t) for v, t in samples],
    )


def body(*ts: TimeSeries) -> bytes:
    return bytes(cramjam.snappy.compress_raw(WriteRequest(timeseries=ts).SerializeToString()))


GPU = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": "node-3", "gpu": "1"}


def test_samples_carry_name_labels_and_seconds() -> None:
    got = remote_write.decode(body(series(GPU, (71.5, 1_796_205_600_250), (72.0, 1_796_205_615_250))), 0.0)
    rows = list(got.rows())
    assert [r.name for r in rows] == ["DCGM_FI_DEV_GPU_TEMP"] * 2
    assert rows[0].labels == {"Hostname": "node-3", "gpu": "1"}
    assert [r.ts for r in rows] == [1_796_205_600.25, 1_796_205_615.25]
    assert [r.value for r in rows] == [71.5, 72.0]


def test_stale_markers_are_skipped_and_counted_but_an_ordinary_nan_is_kept() -> None:
    got = remote_write.decode(body(series(GPU, (STALE, 1_796_205_600_000), (math.nan, 1_796_205_615_000))), 0)
    assert len(got) == 1 and math.isnan(got.values[0]) and got.ts == [1_796_205_615.0]
    assert got.skipped == {"stale_marker": 1}


def test_a_series_without_a_name_costs_only_itself() -> None:
    got = remote_write.decode(
        body(series({"job": "x"}, (1.0, 1_796_205_600_000)), series(GPU, (2.0, 1_796_205_600_000))), 0
    )
    assert got.names == ["DCGM_FI_DEV_GPU_TEMP"] and got.skipped == {"no_metric_name": 1}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x20not a snappy block", "invalid_snappy"),
        (bytes(cramjam.snappy.compress_raw(b"\x0a\x05\x0a\x03")), "invalid_protobuf"),
        (WriteRequest(timeseries=[series(GPU, (1.0, 1))]).SerializeToString(), "invalid_snappy"),
    ],
)
def test_bad_payloads_are_decode_errors_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        remote_write.decode(payload, 0.0)
    assert err.value.reason == reason


def test_an_implausible_timestamp_is_a_decode_error() -> None:
    with pytest.raises(DecodeError) as err:
        remote_write.decode(body(series(GPU, (1.0, -5))), 0.0)
    assert err.value.reason == "bad_timestamp"


def test_a_block_claiming_a_huge_size_is_refused_before_decompressing() -> None:
    huge = bytes([0x80, 0x80, 0x80, 0x80, 0x08])  # varint length 2**31
    with pytest.raises(DecodeError) as err:
        remote_write.decode(huge + b"\x00" * 8, 0.0)
    assert err.value.reason == "too_large"


def test_the_format_is_selectable_by_name() -> None:
    assert formats.metric_decoder("prometheus_remote_write") is remote_write.decode
