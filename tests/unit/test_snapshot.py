"""A restored processor carries on exactly where its snapshot was taken."""

from __future__ import annotations

import pytest

from service import snapshot
from service.cli import build
from service.demo_sim import DemoCluster, DemoFault, simulate
from service.models import Alert
from service.processor import Message, Processor
from service.settings import DetectionSettings, Settings

INCIDENT = DemoCluster(nodes=3, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))


def fresh(settings: Settings | None = None) -> Processor:
    return build(settings or Settings())[1]


def feed(processor: Processor, ticks: list[object], drain: bool = False) -> list[Alert]:
    alerts: list[Alert] = []
    for tick in ticks:
        metrics = [Message(m, tick.ts, "metrics", 0) for m in tick.metrics]  # type: ignore[attr-defined]
        logs = [Message(x, tick.ts, "logs", 0) for x in tick.logs]  # type: ignore[attr-defined]
        alerts += processor.process(metrics, logs, {"metrics:0"}).alerts
    if drain:
        alerts += processor.process([], [], (), drain=True).alerts
    return alerts


@pytest.mark.parametrize("cut_s", [600.0, 1500.0, 1650.0])
def test_a_restored_pipeline_raises_exactly_the_alerts_of_an_uninterrupted_one(cut_s: float) -> None:
    ticks = list(simulate(INCIDENT))
    cut = int(cut_s // INCIDENT.step_s)
    uninterrupted = fresh()
    expected = feed(uninterrupted, ticks, drain=True)
    assert [a.kind for a in expected if a.status == "firing"] == ["pre_xid", "xid"]

    first = fresh()
    before = feed(first, ticks[:cut])
    blob = snapshot.dump(first, {"metrics:0": 1234})
    second = fresh()
    assert snapshot.load(blob, second) == {"metrics:0": 1234}
    after = feed(second, ticks[cut:], drain=True)
    assert before + after == expected
    assert second.pipeline.active.keys() == uninterrupted.pipeline.active.keys()


def test_a_snapshot_of_a_restored_pipeline_is_byte_identical() -> None:
    first = fresh()
    feed(first, list(simulate(INCIDENT))[:100])
    blob = snapshot.dump(first, {})
    second = fresh()
    snapshot.load(blob, second)
    assert snapshot.dump(second, {}) == blob


def test_another_format_version_is_refused_with_a_clear_error() -> None:
    blob = bytearray(snapshot.dump(fresh(), {}))
    blob[len(snapshot.MAGIC)] += 1
    with pytest.raises(snapshot.SnapshotError, match="format v2"):
        snapshot.load(bytes(blob), fresh())
    with pytest.raises(snapshot.SnapshotError, match="not a prexid snapshot"):
        snapshot.load(b"garbage", fresh())


def test_a_snapshot_taken_under_other_detection_settings_is_refused() -> None:
    blob = snapshot.dump(fresh(), {})
    other = Settings(detection=DetectionSettings(fire_threshold=9.0))
    with pytest.raises(snapshot.SnapshotError, match="other detection settings"):
        snapshot.load(blob, fresh(other))
