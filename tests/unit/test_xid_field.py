"""DCGM's Xid field (`DCGM_FI_DEV_XID_ERRORS`, the GPU's last Xid code) is a second Xid source: a
change to a non-zero code pages, a constant one never does, and a kernel line for the same Xid is
its twin, whichever comes first."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.processor import Message
from prexid.service.pipeline.xid_field import XidField
from prexid.service.schemas import Alert, XidEvent, rfc3339
from prexid.service.state import snapshot

T0 = 1_796_205_600.0  # 2026-12-02T10:00:00Z
GPU = {"gpu": "2", "Hostname": "node-3", "pci_bus_id": "00000000:3B:00.0", "UUID": "GPU-abc"}


def scrape(ts: float, code: float) -> list[RawSample]:
    return [
        RawSample("DCGM_FI_DEV_GPU_TEMP", GPU, ts, 50.0),
        RawSample("DCGM_FI_DEV_XID_ERRORS", GPU, ts, code),
    ]


def run(p: Pipeline, codes: list[tuple[float, float]], start: float = T0) -> list[Alert]:
    """Scrapes every 15 s from `start`: each (until, code) holds `code` until `until` seconds in."""
    alerts: list[Alert] = []
    ts = start
    for until, code in codes:
        while ts < start + until:
            alerts += p.ingest_samples(scrape(ts, code), "metrics:0")
            ts += 15.0
    return alerts


def fired(alerts: list[Alert]) -> list[Alert]:
    return [a for a in alerts if a.kind == "xid" and a.status == "firing"]


def starts(alerts: list[Alert]) -> list[float]:
    """When each firing Xid alert starts, seconds after T0."""
    return [datetime.fromisoformat(a.starts_at).timestamp() - T0 for a in fired(alerts)]


def kernel(code: int, ts: float) -> XidEvent:
    return XidEvent(
        ts=ts, node="node-3", pci_bus_id="0000:3b:00", code=code, pid=1, process="python", message=""
    )


def test_a_cluster_without_kernel_logs_pages_on_the_field() -> None:
    p = Pipeline()
    alerts = run(p, [(600, 0), (1200, 79)]) + p.advance(drain=True)
    [xid] = fired(alerts)
    assert (xid.node, xid.gpu, xid.xid_code, xid.starts_at) == ("node-3", 2, 79, rfc3339(T0 + 600))
    assert xid.pci_bus_id == GPU["pci_bus_id"] and "DCGM's Xid field" in xid.summary


def test_the_same_code_re_scraped_never_pages_again() -> None:
    p = Pipeline()
    alerts = run(p, [(300, 0), (3 * 3600, 79)]) + p.advance(drain=True)  # past the burst and its resolve
    assert [a.xid_code for a in fired(alerts)] == [79]
    assert [a.status for a in alerts if a.kind == "xid"] == ["firing", "resolved"]


def test_a_code_already_there_when_prexid_starts_is_the_baseline() -> None:
    p = Pipeline()
    assert fired(run(p, [(1200, 79)]) + p.advance(drain=True)) == []


def test_a_reset_to_zero_re_arms_the_same_code() -> None:
    p = Pipeline()
    alerts = run(p, [(300, 0), (900, 79), (1500, 0), (2100, 79)]) + p.advance(drain=True)
    first, second = fired(alerts)
    assert starts(alerts) == [300, 1500]
    assert first.fingerprint != second.fingerprint and second.xid_code == 79


@pytest.mark.parametrize("gap_s", [30.0, 240.0])  # 240: the bursts would not join, the twins do
@pytest.mark.parametrize("kernel_first", [True, False])
def test_a_kernel_line_and_the_field_for_one_xid_page_once(kernel_first: bool, gap_s: float) -> None:
    """The field shows the Xid a DCGM poll and a scrape after the kernel line; either may be read
    first (a replay catching up reads a batch of metrics before its logs)."""
    p = Pipeline()
    xid_at = T0 + 600.0
    changed_at = xid_at + gap_s
    alerts = run(p, [(300, 0)])
    if kernel_first:
        alerts += run(p, [(xid_at - T0 - 300, 0)], start=T0 + 300)
        alerts += p.ingest_xids([kernel(79, xid_at)])
        alerts += run(p, [(changed_at - xid_at, 0), (1200, 79)], start=xid_at)
    else:
        alerts += run(p, [(changed_at - T0 - 300, 0), (900, 79)], start=T0 + 300)
        assert len(fired(alerts)) == 1
        alerts += p.ingest_xids([kernel(79, xid_at)])
    alerts += p.advance(drain=True)
    [xid] = fired(alerts)
    assert (xid.gpu, xid.xid_code) == (2, 79)
    assert starts(alerts) == [(xid_at if kernel_first else changed_at) - T0]


def test_a_kernel_line_long_before_the_field_change_is_another_xid() -> None:
    p = Pipeline()
    alerts = run(p, [(300, 0)]) + p.ingest_xids([kernel(79, T0 + 300)])
    alerts += run(p, [(1500, 0), (2100, 79)], start=T0 + 300) + p.advance(drain=True)
    assert starts(alerts) == [300, 1800]


def test_a_field_code_the_kernel_did_not_print_joins_the_burst_as_a_new_code() -> None:
    p = Pipeline()
    alerts = run(p, [(300, 0)]) + p.ingest_xids([kernel(119, T0 + 300)])
    alerts += run(p, [(30, 0), (300, 154)], start=T0 + 300) + p.advance(drain=True)
    assert [a.xid_codes for a in fired(alerts)] == [[119], [119, 154]]
    assert len({a.fingerprint for a in fired(alerts)}) == 1


def adapter(ts: float, code: int) -> bytes:
    stamp = np.datetime_as_string(np.datetime64(int(ts), "s"), unit="s") + "Z"
    return (
        b'{"timestamp":"%s","value":"%d","name":"DCGM_FI_DEV_XID_ERRORS","labels":{"gpu":"2",'
        b'"Hostname":"node-3","pci_bus_id":"00000000:3B:00.0","UUID":"GPU-abc"}}' % (stamp.encode(), code)
    )


def test_a_batch_holding_both_the_kernel_line_and_the_field_change_pages_once() -> None:
    """A consumer catching up: the metric records are decoded and scored before the batch's log lines,
    so the field's Xid pages and the kernel line is its twin."""
    _, processor = build(Settings())
    line = b"<4>Dec  2 10:10:00 node-3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, fallen off"
    metrics = [
        Message(adapter(T0 + dt, 79 if dt >= 615 else 0), T0 + dt, "metrics", 0) for dt in range(0, 1200, 15)
    ]
    out = processor.process(metrics, [Message(line, T0 + 600, "logs", 0)], (), drain=True)
    assert out.dead_letters == []
    assert [a.xid_code for a in fired(out.alerts)] == [79] and starts(out.alerts) == [615]


def test_a_restored_pipeline_keeps_each_field_s_last_code() -> None:
    """Restored from a snapshot taken at 0, a first scrape at 79 is a change, not a baseline."""
    _, first = build(Settings())
    run(first.pipeline, [(600, 0)])
    _, second = build(Settings())
    snapshot.load(snapshot.dump(first, {}), second)
    alerts = run(second.pipeline, [(600, 79)], start=T0 + 600) + second.pipeline.advance(drain=True)
    assert starts(alerts) == [600]
    cold = Pipeline()  # what a restore that lost the state would do: 79 is its baseline
    assert fired(run(cold, [(600, 79)], start=T0 + 600) + cold.advance(drain=True)) == []


def test_late_duplicate_and_non_code_samples_never_flip_the_state() -> None:
    field = XidField()
    ids = np.array([0, 0, 1], dtype=np.int64)
    assert len(field.changes(ids, np.array([10.0, 20.0, 10.0]), np.array([0.0, 0.0, 13.0]))[0]) == 0
    # a late 79, a NaN (stale marker), a fractional value, then a duplicate of the newest time
    late = field.changes(
        np.array([0, 0, 0, 1, 1], dtype=np.int64),
        np.array([15.0, 30.0, 40.0, 20.0, 20.0]),
        np.array([79.0, np.nan, 79.5, 13.0, 48.0]),
    )
    assert len(late[0]) == 0 and field.last.tolist() == [0.0, 13.0] and field.last_ts.tolist() == [20.0, 20.0]


def test_every_change_in_one_release_is_an_xid_oldest_first() -> None:
    field = XidField()
    field.changes(np.array([0, 1], dtype=np.int64), np.array([0.0, 0.0]), np.array([0.0, 0.0]))
    ids, ts, codes = field.changes(
        np.array([1, 0, 0, 0, 1], dtype=np.int64),
        np.array([40.0, 10.0, 20.0, 30.0, 5.0]),
        np.array([48.0, 79.0, 0.0, 79.0, 0.0]),
    )
    assert (ids.tolist(), ts.tolist(), codes.tolist()) == ([0, 0, 1], [10.0, 30.0, 40.0], [79, 79, 48])
