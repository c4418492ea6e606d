"""One fault is one `xid` alert: a node's Xids group until three minutes of event-time silence."""

from __future__ import annotations

from prexid.detectors.xid_bursts import XidBursts
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.schemas import Alert, XidEvent

T0 = 1_796_205_600.0


def xid(code: int, ts: float, node: str = "node-3", pci: str = "0000:3b:00") -> XidEvent:
    return XidEvent(ts=ts, node=node, pci_bus_id=pci, code=code, pid=None, process=None, message="")


def test_events_within_three_minutes_of_each_other_share_a_burst() -> None:
    bursts = XidBursts()
    opened = [
        bursts.observe("n", T0 + dt, code)[1] for dt, code in [(0, 119), (5, 120), (170, 154), (345, 79)]
    ]
    assert opened == [True, False, False, False]  # each gap is under 180 s, though the whole spans 345 s
    burst, new = bursts.observe("n", T0 + 345 + 181, 79)
    assert new and burst.codes == (79,)


def test_bursts_are_per_node_and_quiet_ones_are_forgotten() -> None:
    bursts = XidBursts()
    assert bursts.observe("a", T0, 94)[1] and bursts.observe("b", T0 + 1, 94)[1]
    assert [b.node for b in bursts.close_quiet(T0 + 181)] == ["a"]
    assert list(bursts.open) == ["b"]


def test_a_late_event_inside_the_burst_window_joins_it() -> None:
    bursts = XidBursts()
    bursts.observe("n", T0 + 100, 94)
    burst, new = bursts.observe("n", T0 + 10, 45)
    assert not new and burst.first_ts == T0 + 10 and burst.opened_ts == T0 + 100


def pipeline_knowing_gpu(pci: str = "00000000:3B:00.0") -> Pipeline:
    p = Pipeline()
    labels = {"gpu": "2", "Hostname": "node-3.cluster.local", "pci_bus_id": pci, "UUID": "GPU-abc"}
    p.ingest_samples([RawSample("DCGM_FI_DEV_GPU_TEMP", labels, T0 - 60, 50.0)])
    return p


def test_a_burst_fires_one_alert_and_updates_it_when_a_new_code_arrives() -> None:
    p = pipeline_knowing_gpu()
    alerts: list[Alert] = []
    for code, dt in [(119, 0), (120, 2), (120, 3), (154, 9)]:
        alerts += p.ingest_xids([xid(code, T0 + dt)])
    assert [a.xid_codes for a in alerts] == [[119], [119, 120], [119, 120, 154]]
    assert len({a.fingerprint for a in alerts}) == 1
    assert all(a.gpu == 2 and a.node == "node-3" and a.severity == "critical" for a in alerts)
    assert list(p.alert_book.active) == [alerts[0].fingerprint]


def test_after_three_minutes_of_silence_a_new_alert_fires() -> None:
    p = pipeline_knowing_gpu()
    first = p.ingest_xids([xid(94, T0)])
    second = p.ingest_xids([xid(94, T0 + 181)])
    assert first[0].fingerprint != second[0].fingerprint


def test_a_more_severe_code_raises_the_burst_severity() -> None:
    p = pipeline_knowing_gpu()
    [warn] = p.ingest_xids([xid(94, T0)])
    [crit] = p.ingest_xids([xid(95, T0 + 1)])
    assert (warn.severity, crit.severity, crit.xid_code) == ("warning", "critical", 95)


def test_an_xid_with_an_unknown_pci_id_is_a_node_level_alert_carrying_the_raw_id() -> None:
    p = pipeline_knowing_gpu()
    [alert] = p.ingest_xids([xid(79, T0, pci="0000:d8:00")])
    assert (alert.node, alert.gpu, alert.pci_bus_id) == ("node-3", None, "0000:d8:00")
    assert "PCI 0000:d8:00 on node-3" in alert.summary


def test_host_spellings_and_pci_spellings_join_to_the_same_gpu() -> None:
    p = pipeline_knowing_gpu("0000:3b:00.0")
    [alert] = p.ingest_xids([xid(48, T0, node="NODE-3.cluster.local", pci="0000:3B:00")])
    assert alert.gpu == 2
    assert p.registry.gpu_for_uuid("gpu-ABC") == p.registry.gpu_for_pci("node-3", "0000:3b:00")


def test_a_lead_time_comes_only_from_the_gpu_the_alert_is_about() -> None:
    p = pipeline_knowing_gpu()
    other = {"gpu": "6", "Hostname": "node-3", "pci_bus_id": "00000000:86:00.0"}
    p.ingest_samples([RawSample("DCGM_FI_DEV_GPU_TEMP", other, T0 - 60, 50.0)])
    p.alert_book.pre_xid_fired[p.registry.gpu_for_pci("node-3", "0000:86:00") or -1] = (T0 - 600, "fp")
    [first] = p.ingest_xids([xid(74, T0)])  # GPU 2, never warned about
    later = p.ingest_xids([xid(74, T0 + 5, pci="0000:86:00")])  # GPU 6, warned 605 s before
    assert (first.gpu, first.lead_time_seconds) == (2, None)
    assert later == []  # same burst, nothing about the alert changed
    p.alert_book.pre_xid_fired[p.registry.gpu_for_pci("node-3", "0000:3b:00") or -1] = (T0 - 100, "fp2")
    [updated] = p.ingest_xids([xid(48, T0 + 9)])
    assert (updated.gpu, updated.lead_time_seconds, updated.xid_codes) == (2, 109.0, [74, 48])
