"""A dcgm-exporter scrape teaches which GPU each PCI bus id is, so a later Xid line names its GPU."""

from __future__ import annotations

from prexid.service.pipeline.processor import Message
from tests.unit import wiring

T0 = 1_796_205_600.0
# dcgm-exporter's /metrics as it serves it (labels in its order; Hostname is the node's short name)
DCGM_SCRAPE = b"""# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-0b2c7a0e-1111-2222-3333-444455556666",pci_bus_id="00000000:19:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-17",DCGM_FI_DRIVER_VERSION="550.54.15"} 1980
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-1b2c7a0e-1111-2222-3333-444455556666",pci_bus_id="00000000:3B:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-17",DCGM_FI_DRIVER_VERSION="550.54.15"} 1980
"""


def test_an_xid_after_a_dcgm_scrape_is_about_the_right_gpu() -> None:
    processor = wiring.processor()
    pipeline = processor.pipeline
    out = processor.process(
        [Message(DCGM_SCRAPE, T0, "scrapes", 0, 0, key=b"node-17.dc1.example.com:9400")],
        [
            Message(
                b"<4>1 2026-12-02T10:00:30Z node-17.dc1.example.com kernel - - - NVRM: Xid (PCI:0000:3b:00): 74, x",
                T0 + 30,
                "logs",
                0,
                0,
            )
        ],
        backlogged=(),
    )
    assert out.dead_letters == []
    [alert] = [a for a in out.alerts if a.kind == "xid"]
    assert (alert.node, alert.gpu, alert.pci_bus_id, alert.xid_code) == ("node-17", 1, "0000:3b:00", 74)
    eid = pipeline.registry.gpu_for_uuid("GPU-1B2C7A0E-1111-2222-3333-444455556666")
    assert eid is not None and pipeline.registry.entities[eid].gpu == 1
