"""Xid alerts resolve: the driver reports a fault, never its end, so an Xid alert fires until its burst
has been quiet for an hour of event time. Before, every Xid ever seen stayed firing, in `/api/v1/alerts`
and in every snapshot, and each takeover re-sent all of them to Alertmanager."""

from __future__ import annotations

import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.processor import Processor
from prexid.service.schemas import Alert, XidEvent
from prexid.service.state import snapshot

T0 = 1_764_756_000.0
TEMP = {"Hostname": "node-1", "gpu": "0", "UUID": "GPU-1"}


def xid(ts: float, node: str = "node-7", code: int = 79) -> XidEvent:
    return XidEvent(ts=ts, node=node, pci_bus_id="0000:3b:00", code=code, pid=None, process=None, message="")


def scrapes(processor: Processor, start: float, end: float) -> list[Alert]:
    """One gauge scraped every 15 s: the ticks that event time needs to move."""
    out: list[Alert] = []
    for ts in range(int(start), int(end), 15):
        out += processor.pipeline.ingest_samples([RawSample("DCGM_FI_DEV_GPU_TEMP", TEMP, float(ts), 60.0)])
    return out


def test_an_xid_alert_resolves_an_hour_after_its_burst_went_quiet() -> None:
    _, processor = build(Settings())
    (fired,) = processor.pipeline.ingest_xids([xid(T0)])
    before = scrapes(processor, T0, T0 + 3590)
    assert [a for a in before if a.kind == "xid"] == []
    assert fired.fingerprint in processor.pipeline.alert_book.active
    after = [a for a in scrapes(processor, T0 + 3590, T0 + 3700) if a.kind == "xid"]
    assert [(a.fingerprint, a.status) for a in after] == [(fired.fingerprint, "resolved")]
    assert after[0].ends_at is not None and after[0].starts_at == fired.starts_at
    assert processor.pipeline.alert_book.active == {}


def test_a_later_xid_of_the_same_burst_keeps_its_alert_firing_for_an_hour_after_it() -> None:
    _, processor = build(Settings())
    (fired,) = processor.pipeline.ingest_xids([xid(T0)])
    processor.pipeline.ingest_xids([xid(T0 + 120)])  # same burst, same code: nothing new to say
    assert [a for a in scrapes(processor, T0, T0 + 3700) if a.kind == "xid"] == []
    (resolved,) = [a for a in scrapes(processor, T0 + 3700, T0 + 3800) if a.kind == "xid"]
    assert resolved.fingerprint == fired.fingerprint and resolved.status == "resolved"


def test_kernel_logs_alone_resolve_old_xid_alerts_as_new_ones_arrive() -> None:
    """A cluster that ships kernel logs but no metrics has no fusion ticks."""
    _, processor = build(Settings())
    (first,) = processor.pipeline.ingest_xids([xid(T0, "node-1")])
    later = processor.pipeline.ingest_xids([xid(T0 + 4000, "node-2")])
    assert [(a.node, a.status) for a in later] == [("node-2", "firing"), ("node-1", "resolved")]
    assert later[1].fingerprint == first.fingerprint
    assert list(processor.pipeline.alert_book.active) == [later[0].fingerprint]


def test_a_takeover_neither_lists_nor_resends_an_xid_alert_that_resolved() -> None:
    _, processor = build(Settings(xid_max_hold_s=60.0))
    processor.pipeline.ingest_xids([xid(T0)])
    scrapes(processor, T0, T0 + 3700)
    _, taker = build(Settings(xid_max_hold_s=60.0))
    snapshot.load(snapshot.dump(processor, {}), taker)
    assert taker.pipeline.alert_book.active == {}
    assert taker.pipeline.xid_alerts.last_event == {}


def test_a_taken_over_firing_xid_alert_still_resolves_on_time() -> None:
    _, processor = build(Settings())
    (fired,) = processor.pipeline.ingest_xids([xid(T0)])
    scrapes(processor, T0, T0 + 600)
    _, taker = build(Settings())
    snapshot.load(snapshot.dump(processor, {}), taker)
    assert list(taker.pipeline.alert_book.active) == [fired.fingerprint]
    resolved = [a for a in scrapes(taker, T0 + 600, T0 + 3700) if a.kind == "xid"]
    assert [(a.fingerprint, a.status) for a in resolved] == [(fired.fingerprint, "resolved")]


def host(node: str, ts: float) -> RawSample:
    return RawSample("node_load1", {"instance": f"{node}:9100", "Hostname": node}, ts, 24.0)


def gpu(node: str, ts: float) -> RawSample:
    return RawSample("DCGM_FI_DEV_GPU_TEMP", {"Hostname": node, "gpu": "0", "UUID": f"GPU-{node}"}, ts, 60.0)


def run(processor: Processor, start: float, end: float, silent: set[str], no_gpu: set[str]) -> list[Alert]:
    """Two nodes scraped every 15 s; `silent` nodes send nothing, `no_gpu` nodes only host series."""
    out: list[Alert] = []
    for ts in range(int(start), int(end), 15):
        rows = [host(n, ts) for n in ("node-1", "node-7") if n not in silent]
        rows += [gpu(n, ts) for n in ("node-1", "node-7") if n not in silent | no_gpu]
        out += processor.pipeline.ingest_samples(rows)
    return [a for a in out if a.kind == "xid"]


def test_without_a_boot_time_an_xid_alert_resolves_when_its_node_comes_back_from_a_long_silence() -> None:
    """The fallback for a fleet exporting no `node_boot_time_seconds`: every series of the node silent
    for as long as a reboot takes, then reporting again."""
    _, processor = build(Settings())
    run(processor, T0 - 1800, T0, set(), set())  # the series' cadence is learnt
    (fired,) = processor.pipeline.ingest_xids([xid(T0, "node-7")])
    assert run(processor, T0, T0 + 300, {"node-7"}, set()) == []  # rebooting: silent five minutes
    back = run(processor, T0 + 300, T0 + 360, set(), set())
    assert [(a.fingerprint, a.status) for a in back] == [(fired.fingerprint, "resolved")]
    assert processor.pipeline.ledger.nodes["node-7"].counts == {"xid": 1, "reboot": 1}


def cpu(node: str, ts: float) -> RawSample:
    return RawSample(
        "node_cpu_seconds_total", {"instance": f"{node}:9100", "cpu": "0", "mode": "idle"}, ts, ts
    )


def test_a_stale_series_or_an_exporter_restart_is_no_reboot() -> None:
    """wide-s40: one `node_cpu_seconds_total` series of node-04 missed a sweep and reported again; read
    as the node back from a reboot, it resolved the Xid 74 alert 20 minutes before the real reboot and
    booked a reboot that was none. Here one series is stale for a minute, then the whole node-exporter
    is down for 45 s (a restart): the alert fires on, no reboot is booked."""
    _, processor = build(Settings())
    for ts in range(int(T0 - 1800), int(T0 + 1200), 15):
        if ts == T0:
            (fired,) = processor.pipeline.ingest_xids([xid(T0, "node-7")])
        stale = T0 + 120 <= ts < T0 + 180  # node-7's CPU series misses four scrapes
        restart = T0 + 600 <= ts < T0 + 645  # node-7's exporter restarts: three scrapes lost
        rows = [host(n, ts) for n in ("node-1", "node-7") if not (n == "node-7" and restart)]
        rows += [cpu(n, ts) for n in ("node-1", "node-7") if not (n == "node-7" and (stale or restart))]
        rows += [gpu(n, ts) for n in ("node-1", "node-7")]
        assert [a for a in processor.pipeline.ingest_samples(rows) if a.kind == "xid"] == []
    assert fired.fingerprint in processor.pipeline.alert_book.active
    assert processor.pipeline.ledger.nodes["node-7"].counts == {"xid": 1}


def booted(node: str, ts: float, at: float) -> RawSample:
    return RawSample("node_boot_time_seconds", {"instance": f"{node}:9100"}, ts, at)


def run_booting(processor: Processor, start: float, end: float, silent: bool, boot_at: float) -> list[Alert]:
    """node-7 exports its boot time (`boot_at`) next to its load and GPU; `silent`: it sends nothing."""
    out: list[Alert] = []
    for ts in range(int(start), int(end), 15):
        rows = [] if silent else [host("node-7", ts), gpu("node-7", ts), booted("node-7", ts, boot_at)]
        out += processor.pipeline.ingest_samples([host("node-1", ts), *rows])
    return [a for a in out if a.kind == "xid"]


@pytest.mark.parametrize("down_s", [300, 15])
def test_an_xid_alert_resolves_when_its_node_boot_time_moves_on(down_s: int) -> None:
    """Whatever the silence: 15 s is a reboot faster than a scrape or two (kexec, a 1 min interval)."""
    _, processor = build(Settings())
    run_booting(processor, T0 - 1800, T0, False, T0 - 86400.0)
    (fired,) = processor.pipeline.ingest_xids([xid(T0, "node-7")])
    assert run_booting(processor, T0, T0 + down_s, True, 0.0) == []  # rebooting
    back = run_booting(processor, T0 + down_s, T0 + down_s + 60, False, T0 + down_s - 10.0)
    assert [(a.fingerprint, a.status) for a in back] == [(fired.fingerprint, "resolved")]
    assert processor.pipeline.ledger.nodes["node-7"].counts == {"xid": 1, "reboot": 1}


def test_a_node_exporting_its_boot_time_is_not_rebooted_by_a_silence_alone() -> None:
    """Ten minutes of nothing (a network partition, a scrape outage), then the same boot time: the node
    did not reboot, and its Xid alert fires on; also across a takeover mid-silence."""
    _, processor = build(Settings())
    run_booting(processor, T0 - 1800, T0, False, T0 - 86400.0)
    (fired,) = processor.pipeline.ingest_xids([xid(T0, "node-7")])
    assert run_booting(processor, T0, T0 + 300, True, 0.0) == []
    _, taker = build(Settings())
    snapshot.load(snapshot.dump(processor, {}), taker)
    assert run_booting(taker, T0 + 300, T0 + 600, True, 0.0) == []
    assert run_booting(taker, T0 + 600, T0 + 900, False, T0 - 86400.0) == []
    assert fired.fingerprint in taker.pipeline.alert_book.active
    assert taker.pipeline.ledger.nodes["node-7"].counts == {"xid": 1}


def test_a_silence_begun_before_a_takeover_still_reads_as_a_reboot_after_it() -> None:
    """How long the node has been silent comes back from the snapshot (its series' last reports)."""
    _, processor = build(Settings())
    run(processor, T0 - 1800, T0, set(), set())
    (fired,) = processor.pipeline.ingest_xids([xid(T0, "node-7")])
    run(processor, T0, T0 + 150, {"node-7"}, set())
    _, taker = build(Settings())
    snapshot.load(snapshot.dump(processor, {}), taker)
    assert run(taker, T0 + 150, T0 + 300, {"node-7"}, set()) == []  # 300 s silent in all
    back = run(taker, T0 + 300, T0 + 360, set(), set())
    assert [(a.fingerprint, a.status) for a in back] == [(fired.fingerprint, "resolved")]


def test_a_gpu_off_the_bus_on_a_node_still_reporting_keeps_its_xid_alert_firing() -> None:
    _, processor = build(Settings())
    run(processor, T0 - 1800, T0, set(), set())
    (fired,) = processor.pipeline.ingest_xids([xid(T0, "node-7")])
    assert run(processor, T0, T0 + 1200, set(), {"node-7"}) == []  # its GPU series stop, the node's go on
    assert fired.fingerprint in processor.pipeline.alert_book.active
