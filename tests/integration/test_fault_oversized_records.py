"""A dead letter or alert larger than a producer request, published to the real broker (issue 15,
item 1): before `fitted_dead_letter`/`fitted_alert`, the producer raised `MessageSizeTooLargeError`,
the batch failed, and every replica taking the partition over failed on the same record."""

from __future__ import annotations

import orjson
import pytest

from prexid.service.pipeline.processor import DeadLetter, Message, Output
from prexid.service.schemas import Alert, Signal
from prexid.service.sinks.kafka import MAX_REQUEST_BYTES, KafkaSink
from tests.integration.traffic import read_all, settings_for

pytestmark = pytest.mark.integration

BIG = 3 << 20  # a kernel message a relay let through from a topic that allows large records


def megabyte_label_alert() -> Alert:
    signal = Signal(
        family="thermal", metric="m", labels={"job": "j" * (2 << 20)}, value=1.0, baseline=0.0, surprise=9.0
    )
    return Alert(
        fingerprint="f",
        status="firing",
        kind="pre_xid",
        severity="warning",
        cluster="c",
        node="node-1",
        gpu=3,
        starts_at="2025-12-03T10:00:00.000Z",
        ends_at=None,
        score=0.5,
        signals=[signal],
        summary="s",
    )


async def test_an_oversized_dead_letter_and_alert_are_published_cut_to_fit_with_a_header(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    sink = KafkaSink(settings_for(kafka_bootstrap, topics, kafka_group))
    await sink.start()
    try:
        dead = DeadLetter(Message(b"x" * BIG, 0.0, "logs", 0, 9), "line_too_long", "3 MiB")
        await sink.publish(Output(alerts=[megabyte_label_alert()], dead_letters=[dead]))
    finally:
        await sink.stop()

    (letter,) = await read_all(kafka_bootstrap, topics["dead"], 1)
    headers = dict(letter.headers)
    assert headers["prexid.truncated"] == str(BIG).encode() and headers["prexid.reason"] == b"line_too_long"
    assert len(letter.value) < MAX_REQUEST_BYTES and set(letter.value) == {ord("x")}
    (alert,) = await read_all(kafka_bootstrap, topics["alerts"], 1)
    assert dict(alert.headers)["prexid.truncated"].isdigit()
    doc = orjson.loads(alert.value)
    assert (doc["fingerprint"], doc["node"], doc["signals"][0]["labels"]) == ("f", "node-1", {})
