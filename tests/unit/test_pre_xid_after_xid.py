"""A GPU's warning is not raised while its own Xid alert fires: the fault is known and paged, and what
it does until its repair (NVLink errors ticking on after an Xid 74, on the wide tuning cell seed 40) is
that fault's, not a warning of another one. Before, such errors paged `pre_xid` twice after the Xid."""

from __future__ import annotations

from prexid.service.decode.types import RawSample
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.schemas import Alert, XidEvent

T0 = 1_796_205_600.0
PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"


def _fleet(pending_at: int, xid_on: tuple[str, int] | None, xid_at: int, scrapes: int = 600) -> list[Alert]:
    """16 GPUs on 2 nodes (each labelled with its PCI id), their ROW_REMAP_PENDING scraped every 15 s;
    GPU 1 of node-1 has a row remap pending from scrape `pending_at`; an Xid on `xid_on` at `xid_at`."""
    pipe = Pipeline()
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
        if xid_on is not None and k == xid_at:
            node, gpu = xid_on
            alerts += pipe.ingest_xids(
                [
                    XidEvent(
                        ts=ts,
                        node=node,
                        pci_bus_id=f"0000:{0x10 + gpu:02x}:00.0",
                        code=74,
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
