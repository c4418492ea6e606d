"""A GPU falling behind the other GPUs of its node is fail-slow evidence; the whole node slowing is not."""

from __future__ import annotations

import numpy as np

from service.decode.types import RawSample
from service.models import Alert
from service.pipeline import Pipeline

GPUS = 8
START = 1_796_205_600.0


def scrape(t: int, rng: np.random.Generator, slow: set[int], factor: float) -> list[RawSample]:
    """One scrape of one node: SM clock and power of each GPU, the `slow` ones at `factor`."""
    out: list[RawSample] = []
    for g in range(GPUS):
        labels = {"Hostname": "node-00", "gpu": str(g), "pci_bus_id": f"00000000:{0x18 + 16 * g:02x}:00.0"}
        f = factor if g in slow else 1.0
        ts = START + 15.0 * t
        out.append(RawSample("DCGM_FI_DEV_SM_CLOCK", labels, ts, 1965.0 * f + rng.normal(0, 4.0)))
        out.append(RawSample("DCGM_FI_DEV_POWER_USAGE", labels, ts, 900.0 * f + rng.normal(0, 7.0)))
    return out


def run(slow: set[int], factor: float, slow_from: int = 300, ticks: int = 340) -> list[Alert]:
    rng = np.random.default_rng(3)
    pipeline = Pipeline()
    alerts: list[Alert] = []
    for t in range(ticks):
        alerts += pipeline.ingest_samples(scrape(t, rng, slow if t >= slow_from else set(), factor))
    return alerts + pipeline.advance(drain=True)


def test_one_gpu_at_seventy_percent_of_its_peers_pages_as_fail_slow() -> None:
    alerts = run({5}, 0.7)
    firing = [a for a in alerts if a.status == "firing"]
    assert [(a.kind, a.gpu) for a in firing] == [("pre_xid", 5)]
    assert "fail-slow" in {s.family for s in firing[0].signals}


def test_every_gpu_of_the_node_slowing_together_is_the_job_not_a_fault() -> None:
    assert run(set(range(GPUS)), 0.7) == []


def test_a_single_slow_scrape_does_not_page() -> None:
    alerts = run({5}, 0.6, slow_from=300, ticks=301)
    assert [a for a in alerts if a.status == "firing"] == []
