"""An Xid waits for the metric stream to reach it (for its lead time), but not for ever: a metric
partition whose leader is down looks backlogged for as long as it is down."""

from __future__ import annotations

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import Message

XID = b"<4>Dec  3 10:00:00 node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
BEHIND = {"metrics:0"}  # a metric partition that never stops looking backlogged


def test_an_xid_held_for_a_partition_that_stays_behind_pages_after_the_longest_hold() -> None:
    state, processor = build(Settings(xid_max_hold_s=60.0))
    held = processor.process_runs([], [Message(XID, 1_764_756_000.0, "logs", 0)], BEHIND, now=1000.0)
    assert held.alerts == [] and len(processor.held_xids) == 1
    assert processor.process_runs([], [], BEHIND, now=1059.0).alerts == []
    paged = processor.process_runs([], [], BEHIND, now=1060.0).alerts
    assert [(a.kind, a.node, a.xid_code) for a in paged] == [("xid", "node-7", 79)]
    assert processor.held_xids == []
    assert state.telemetry.registry.get_sample_value("prexid_xid_holds_expired_total") == 1.0


def test_a_replay_without_wall_time_holds_an_xid_until_its_metrics_arrive() -> None:
    """Replays pass no `now`: what pages, and when, depends on the data alone."""
    _, processor = build(Settings(xid_max_hold_s=60.0))
    processor.process_runs([], [Message(XID, 1_764_756_000.0, "logs", 0)], BEHIND)
    assert processor.process_runs([], [], BEHIND).alerts == [] and len(processor.held_xids) == 1
