"""Property tests and a bounded fuzz run over every decoder: only `DecodeError` ever escapes, what
decodes is well formed, and every message is either decoded or dead-lettered (none lost).

`PREXID_FUZZ_EXAMPLES` raises the number of examples per decoder (default 200) for a longer fuzz run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from prexid.service.decode import formats
from prexid.service.decode.types import DecodeError, KernelLine, Samples
from prexid.service.pipeline.processor import Message
from tests.unit import wiring
from tests.unit.test_decode_logs import LOG_CASES
from tests.unit.test_decode_metrics import CASES
from tests.unit.test_decode_otlp_proto import collector_request

REF = 1_796_205_600.0
T = TypeVar("T")
EXAMPLES = int(os.environ.get("PREXID_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

METRIC_SEEDS = [payload for _, payload, _, _ in CASES] + [collector_request().SerializeToString()]
LOG_SEEDS = [payload.encode() for _, payload, _, _ in LOG_CASES]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A real payload with bytes flipped, cut, duplicated or spliced in: close to valid, so deep paths run."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "dup"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at : at + draw(st.integers(1, 40))]
        elif op == "insert":
            data[at:at] = draw(
                st.sampled_from(
                    [b"{", b"}", b'"', b"\\", b"\n", b" ", b"=", b",", b"NaN", b"\xff", b"[", b"1e999", b"-1"]
                )
            )
        else:
            data += data[at:]
    return bytes(data)


def payloads(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode), mutated(seeds))


def outcome(call: Callable[[], T]) -> T | DecodeError:
    """The decoder's result or its DecodeError; any other exception fails the test."""
    try:
        return call()
    except DecodeError as err:
        return err


def check_samples(s: Samples) -> None:
    assert len(s) > 0 or (s.skipped and all(n > 0 for n in s.skipped.values()))
    assert len(s.names) == len(s.labels) == len(s.ts) == len(s.values)
    assert all(isinstance(v, float) for v in s.values)
    assert all(isinstance(t, float) and math.isfinite(t) for t in s.ts)
    assert all(isinstance(k, str) and isinstance(v, str) for lab in s.labels for k, v in lab.items())


def check_lines(lines: list[KernelLine]) -> None:
    assert lines
    assert all(isinstance(x.message, str) and isinstance(x.host, str) and math.isfinite(x.ts) for x in lines)


@FUZZ
@given(
    fmt=st.sampled_from(sorted(formats.METRIC_DECODERS)),
    payload=payloads(METRIC_SEEDS),
    host=st.none() | st.text(max_size=8),
)
def test_metric_decoders_raise_only_decode_errors(fmt: str, payload: bytes, host: str | None) -> None:
    got = outcome(lambda: formats.metric_decoder(fmt)(payload, REF, host))
    if isinstance(got, DecodeError):
        assert got.reason and len(got.reason) < 40
    else:
        check_samples(got)


@FUZZ
@given(
    fmt=st.sampled_from(sorted(formats.LOG_DECODERS)),
    payload=payloads(LOG_SEEDS),
    host=st.none() | st.text(max_size=8),
)
def test_log_decoders_raise_only_decode_errors(fmt: str, payload: bytes, host: str | None) -> None:
    got = outcome(lambda: formats.log_decoder(fmt)(payload, REF, host))
    if isinstance(got, DecodeError):
        assert got.reason and len(got.reason) < 40
    else:
        check_lines(got)


@FUZZ
@given(
    metrics=st.lists(payloads(METRIC_SEEDS), max_size=8),
    logs=st.lists(payloads(LOG_SEEDS), max_size=8),
)
def test_every_message_is_decoded_or_dead_lettered(metrics: list[bytes], logs: list[bytes]) -> None:
    registry = CollectorRegistry()
    processor = wiring.processor(metrics=registry)
    out = processor.process(
        [Message(m, REF, "metrics", 0, i) for i, m in enumerate(metrics)],
        [Message(x, REF, "logs", 0, i) for i, x in enumerate(logs)],
        backlogged=(),
    )

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    decoded = value("prexid_messages_decoded_total", stream="metrics") + value(
        "prexid_messages_decoded_total", stream="logs"
    )
    whole = [d for d in out.dead_letters if d.line is None]
    assert decoded + len(whole) == len(metrics) + len(logs)
    # a bad line of a message whose other lines were read: that message counts as decoded
    assert {d.message.offset for d in out.dead_letters if d.line is not None}.isdisjoint(
        d.message.offset for d in whole if d.message.topic == "logs"
    )
    assert all(d.reason != "decoder_error" for d in out.dead_letters), out.dead_letters
