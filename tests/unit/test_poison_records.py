"""A record that decodes fine and breaks a later stage costs that record only, never the partition:
before, the batch was never committed and every replica taking the partition over died on it."""

from __future__ import annotations

import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import Message, runs

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


def test_the_record_that_breaks_processing_is_the_only_one_dead_lettered() -> None:
    state, processor = build(DMESG)
    with pytest.raises(ValueError, match="out of range"):  # what crashed a replica, batch after batch
        build(DMESG)[1].process_runs([], logs(), ())
    out = processor.process_isolating([], logs(), ())
    assert [(a.kind, a.node) for a in out.alerts] == [("xid", "node-1"), ("xid", "node-3")]
    (dl,) = out.dead_letters
    assert (dl.reason, dl.message.offset) == ("processing_error", 1)
    assert dl.detail.startswith("stage=prexid.") and "out of range" in dl.detail
    assert (
        state.telemetry.registry.get_sample_value("prexid_dead_letters_total", {"reason": "processing_error"})
        == 1.0
    )


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
