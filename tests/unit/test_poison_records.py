"""A record that decodes fine and breaks a later stage costs that record only, never the partition:
before, the batch was never committed and every replica taking the partition over died on it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import Message, Processor, runs
from prexid.service.schemas import Alert, XidEvent

NOW = 1_764_756_000.0
GOOD = b"<4>Dec  3 10:00:00 node-1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
# a dmesg line has no wall time of its own: its record time is its time, here in microseconds
POISON = (
    b"[ 5123.118202] NVRM: Xid (PCI:0000:19:00): 48, pid=7, name=python, An uncorrectable double bit error"
)


DMESG = Settings(topic_formats={"dmesg": "dmesg"})


def logs() -> list[Message]:
    return [
        Message(GOOD, NOW, "logs", 0, 0),
        Message(POISON, NOW * 1e6, "dmesg", 0, 1, b"node-2"),
        Message(GOOD.replace(b"node-1", b"node-3"), NOW, "logs", 0, 2),
    ]


def test_a_record_time_in_microseconds_is_a_dead_letter_not_a_crash() -> None:
    """The record that crashed every replica: `year 287168 is out of range` in the Xid path."""
    state, processor = build(DMESG)
    out = processor.process_runs([], logs(), ())
    assert (
        state.telemetry.registry.get_sample_value("prexid_dead_letters_total", {"reason": "bad_timestamp"})
        == 1.0
    )
    assert [(a.kind, a.node) for a in out.alerts] == [("xid", "node-1"), ("xid", "node-3")]
    assert [(d.reason, d.message.offset) for d in out.dead_letters] == [("bad_timestamp", 1)]


def breaking_on_node_2(processor: Processor) -> Processor:
    """Whatever the bug past the decoders: here the Xid stage fails on node-2's events."""
    ingest = processor.pipeline.ingest_xids

    def broken(events: Sequence[XidEvent]) -> list[Alert]:
        if any(ev.node == "node-2" for ev in events):
            raise RuntimeError("a bug in a later stage")
        return ingest(events)

    processor.pipeline.ingest_xids = broken  # type: ignore[method-assign]
    return processor


def test_the_record_that_breaks_a_later_stage_is_the_only_one_dead_lettered() -> None:
    batch = [*logs()[:1], Message(GOOD.replace(b"node-1", b"node-2"), NOW, "logs", 0, 1), logs()[2]]
    with pytest.raises(RuntimeError):  # what failed the batch, and every replica after
        breaking_on_node_2(build(DMESG)[1]).process_runs([], batch, ())
    processor = breaking_on_node_2(build(DMESG)[1])
    out = processor.process_isolating([], batch, ())
    assert sorted((a.kind, a.node) for a in out.alerts) == [("xid", "node-1"), ("xid", "node-3")]
    (dl,) = out.dead_letters
    assert (dl.reason, dl.message.offset) == ("processing_error", 1)
    # the stage is the innermost frame of prexid's own code: where the Xids went in
    assert dl.detail.startswith("stage=prexid.service.pipeline.processor._process_runs: RuntimeError(")
    assert "a bug in a later stage" in dl.detail
    registry = processor.telemetry.registry
    assert registry.get_sample_value("prexid_dead_letters_total", {"reason": "processing_error"}) == 1.0


def test_a_batch_that_breaks_nothing_is_processed_once_as_it_is() -> None:
    _, once = build(Settings())
    _, isolating = build(Settings())
    metrics = runs(
        [
            Message(
                b'{"timestamp":"2025-12-03T10:00:00Z","value":"1","name":"up","labels":{"instance":"n"}}',
                NOW,
                "m",
                0,
            )
        ]
    )
    a = once.process_runs(metrics, logs()[:1], ())
    b = isolating.process_isolating(metrics, logs()[:1], ())
    assert a.alerts == b.alerts and a.dead_letters == b.dead_letters


def test_a_kernel_line_with_no_record_time_before_any_metric_is_dated_by_itself() -> None:
    """Found by the fuzz run: with nothing to judge its date by, the line was re-dated to -inf."""
    _, processor = build(DMESG)
    out = processor.process_runs([], [Message(GOOD, NOW * 1000.0, "logs", 0, 0)], ())
    assert [(a.kind, a.starts_at) for a in out.alerts] == [("xid", "2025-12-03T10:00:00.000Z")]


@pytest.mark.parametrize("record_ts", [NOW / 1000.0, NOW * 1000.0, -0.001])
def test_a_bare_scrape_whose_record_time_is_no_epoch_time_is_a_dead_letter(record_ts: float) -> None:
    """A scrape without timestamps takes its record time. One written in seconds where Kafka wants
    milliseconds reads as January 1970, in microseconds as the year 57,000, and -1 is Kafka's none:
    each is a dead letter, never a sample dated there."""
    state, processor = build(Settings(topic_formats={"scrapes": "prom_text"}))
    scrape = b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="node-1"} 60\n'
    out = processor.process([Message(scrape, record_ts, "scrapes", 0, 4, b"node-1")], [], ())
    assert [(d.reason, d.message.offset) for d in out.dead_letters] == [("bad_timestamp", 4)]
    assert processor.pipeline.watermarks.progress == {} and len(processor.pipeline.registry) == 0
    sample = state.telemetry.registry.get_sample_value
    assert sample("prexid_dead_letters_total", {"reason": "bad_timestamp"}) == 1.0


def test_a_kernel_line_dated_2199_is_redated_to_its_record_time_and_counted() -> None:
    """An Xid is never dropped for its clock, and one dated 2199 must not open a burst there (its
    alert would never resolve): it is dated at what its source has shown, and counted."""
    state, processor = build(Settings(topic_formats={"rfc": "rfc5424"}))
    line = GOOD.replace(
        b"<4>Dec  3 10:00:00 node-1 kernel:", b"<4>1 2199-01-01T00:00:00Z node-1 kernel - - -"
    )
    out = processor.process_runs([], [Message(line, NOW, "rfc", 0, 0)], ())
    assert [(a.kind, a.node, a.starts_at) for a in out.alerts] == [
        ("xid", "node-1", "2025-12-03T10:00:00.000Z")
    ]
    sample = state.telemetry.registry.get_sample_value
    assert sample("prexid_future_samples_total", {"source": "rfc:0"}) == 1.0
