"""Families without data are a blind spot prexid names: a metric per family, and one log line."""

from __future__ import annotations

import logging

import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.sources.demo_cluster import DemoCluster, simulate
from tests.unit.wiring import feed

# The demo cluster has DCGM fields and a few host series, but no network or storage series.
DEMO_HAS = ("thermal", "power", "memory-ecc", "pcie", "nvlink", "utilization", "host")
DEMO_LACKS = ("network", "storage-io")


def test_series_per_family_is_exported_and_the_missing_families_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state, processor = build(Settings())
    ticks = list(simulate(DemoCluster(nodes=4, gpus=8, seed=1)))
    with caplog.at_level(logging.INFO, logger="prexid.coverage"):
        feed(processor, ticks[:19])
        assert not caplog.records  # too early to tell: not every exporter has been read yet
        feed(processor, ticks[19:60])
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert all(f in message for f in DEMO_LACKS) and not any(f" {f}," in message for f in DEMO_HAS)
    registry = state.telemetry.registry
    for family in DEMO_HAS:
        assert (registry.get_sample_value("prexid_family_series", {"family": family}) or 0) > 0
    for family in DEMO_LACKS:
        assert registry.get_sample_value("prexid_family_series", {"family": family}) == 0
    assert registry.get_sample_value("prexid_family_series", {"family": "xid"}) is None  # from logs
