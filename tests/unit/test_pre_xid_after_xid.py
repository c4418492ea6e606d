"""A GPU's warning is not raised while its own Xid alert fires: the fault is known and paged, and what
it does until its repair (NVLink errors ticking on after an Xid 74, on the wide tuning cell seed 40) is
that fault's, not a warning of another one. Before, such errors paged `pre_xid` twice after the Xid.
Nor after the Xid alert resolved, while only the family the Xid explains votes (`known_faults`): on
wide-s40 one stale CPU series read as the node's reboot resolved the Xid 74 alert, and the lane's next
two CRC errors paged."""

from __future__ import annotations

from prexid.detectors.known_faults import KnownFaults
from prexid.detectors.signals import Family
from prexid.service.decode.common import parse_rfc3339
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline, PipelineConfig
from prexid.service.schemas import Alert, XidEvent

T0 = 1_796_205_600.0
PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"


def _fleet(
    pending_at: int,
    xid_on: tuple[str, int] | None,
    xid_at: int,
    scrapes: int = 600,
    code: int = 74,
    config: PipelineConfig | None = None,
    xid_read_early: int = 0,
) -> list[Alert]:
    """16 GPUs on 2 nodes (each labelled with its PCI id), their ROW_REMAP_PENDING scraped every 15 s;
    GPU 1 of node-1 has a row remap pending from scrape `pending_at`; an Xid `code` on `xid_on` at
    `xid_at`, its line read `xid_read_early` scrapes before that scrape's samples are."""
    pipe = Pipeline(config)
    alerts: list[Alert] = []
    for k in range(scrapes):
        ts = T0 + 15 * k
        batch = [
            RawSample(
                PENDING,
                {"Hostname": f"node-{n}", "gpu": str(g), "pci_bus_id": f"00000000:{0x10 + g:02X}:00.0"},
                ts,
                1.0 if (n, g) == (1, 1) and k >= pending_at else 0.0,
            )
            for n in range(2)
            for g in range(8)
        ]
        if xid_on is not None and k == xid_at - xid_read_early:
            node, gpu = xid_on
            alerts += pipe.ingest_xids(
                [
                    XidEvent(
                        ts=T0 + 15 * xid_at,
                        node=node,
                        pci_bus_id=f"0000:{0x10 + gpu:02x}:00.0",
                        code=code,
                        pid=None,
                        process=None,
                        message="",
                    )
                ]
            )
        alerts += pipe.ingest_samples(batch)
    return alerts + pipe.advance(drain=True)


def _warnings(alerts: list[Alert]) -> list[tuple[str, int | None]]:
    return [(a.node, a.gpu) for a in alerts if a.kind == "pre_xid" and a.status == "firing"]


def test_a_gpu_whose_xid_alert_fires_raises_no_warning_and_no_resolve() -> None:
    alerts = _fleet(pending_at=400, xid_on=("node-1", 1), xid_at=380)
    assert [(a.node, a.gpu) for a in alerts if a.kind == "xid" and a.status == "firing"] == [("node-1", 1)]
    assert [a for a in alerts if a.kind == "pre_xid"] == []


def test_another_gpus_xid_does_not_silence_the_warning() -> None:
    assert _warnings(_fleet(pending_at=400, xid_on=("node-1", 2), xid_at=380)) == [("node-1", 1)]
    assert _warnings(_fleet(pending_at=400, xid_on=None, xid_at=0)) == [("node-1", 1)]


RESOLVED_AFTER_10_MIN = PipelineConfig(xid_resolve_after_s=600.0)


def test_after_its_xid_alert_resolved_the_family_the_xid_explains_does_not_warn_of_that_gpu() -> None:
    """An Xid 48 (double-bit ECC) on the GPU, its alert resolved 10 minutes later; the row remap it
    leaves pending an hour on is the known fault's (memory ECC), not news."""
    alerts = _fleet(pending_at=340, xid_on=("node-1", 1), xid_at=100, code=48, config=RESOLVED_AFTER_10_MIN)
    assert [(a.kind, a.status) for a in alerts if a.kind == "xid"] == [("xid", "firing"), ("xid", "resolved")]
    assert [a for a in alerts if a.kind == "pre_xid"] == []


def test_a_family_the_xid_does_not_explain_still_warns_of_the_repaired_gpu() -> None:
    """The same GPU after an Xid 74 (NVLink): a row remap pending is a new failure of another kind."""
    alerts = _fleet(pending_at=340, xid_on=("node-1", 1), xid_at=100, code=74, config=RESOLVED_AFTER_10_MIN)
    assert _warnings(alerts) == [("node-1", 1)]


def test_the_explained_family_warns_again_once_it_has_been_quiet_on_the_gpu_for_a_while() -> None:
    """Quiet for `KnownFaults.quiet_s` after the Xid: the part was repaired, and errors now are news."""
    quiet = int(KnownFaults().quiet_s / 15)
    later = _fleet(
        pending_at=100 + quiet + 20,
        xid_on=("node-1", 1),
        xid_at=100,
        scrapes=100 + quiet + 200,
        code=48,
        config=RESOLVED_AFTER_10_MIN,
    )
    assert _warnings(later) == [("node-1", 1)]


def test_a_warning_of_a_tick_before_the_xid_is_raised_though_the_xid_line_was_read_first() -> None:
    """Event time decides, not the order lines and scrapes are read in: the row remap is pending from
    scrape 400 and pages at tick 402; the Xid 64 comes at scrape 403, its kernel line read before that
    scrape's samples, so before tick 402 is judged (a line is read as it is printed; a tick once the
    scrapes past it are in). The warning of tick 402 is a warning before the Xid. Before, the Xid alert
    already firing (and the family it marks as known) withheld it: wide-s39's GSP timeout lost its 15 s
    warning so. A warning that fires at or after its Xid's event time is still withheld (above)."""
    alerts = _fleet(pending_at=400, xid_on=("node-1", 1), xid_at=403, code=64, xid_read_early=1)
    assert [a.kind for a in alerts if a.status == "firing"] == ["xid", "pre_xid"]  # the line was read first
    assert _warnings(alerts) == [("node-1", 1)]
    xid = next(a for a in alerts if a.kind == "xid")
    assert parse_rfc3339(xid.starts_at) == T0 + 15 * 403
    late = _fleet(pending_at=400, xid_on=("node-1", 1), xid_at=402, code=64, xid_read_early=1)
    assert _warnings(late) == []  # fires at tick 402: not before an Xid at 402


def test_a_known_fault_marks_its_family_from_its_xid_s_event_time_on() -> None:
    known = KnownFaults()
    known.record(entity=3, code=74, at=1000.0)  # NVLink
    assert not known.explains(3, [int(Family.NVLINK)], at=999.0)
    assert known.explains(3, [int(Family.NVLINK)], at=1000.0)
    restored = KnownFaults()
    restored.restore_meta(known.snapshot_meta())
    assert not restored.explains(3, [int(Family.NVLINK)], at=999.0)
    assert restored.explains(3, [int(Family.NVLINK)], at=1500.0)
