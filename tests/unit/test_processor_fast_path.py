"""The processor's fast path (prometheus-kafka-adapter messages of known series, read without parsing
JSON) must read every message exactly as the decoders do: same samples, same series, same dead letters."""

from __future__ import annotations

import numpy as np
import pytest
from aiokafka import ConsumerRecord, TopicPartition
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from prexid.service.decode import prom_kafka_adapter
from prexid.service.pipeline.processor import Message, Processor
from prexid.service.sources.kafka import to_run
from tests.unit import wiring
from tests.unit.test_decode_properties import FUZZ, mutated

T0 = "2026-12-02T10:00:00Z"
GPU = '{"gpu":"0","Hostname":"node-1"}'


def adapter(value: str = "1.5", ts: str = T0, labels: str = GPU, name: str = "DCGM_FI_DEV_GPU_TEMP") -> bytes:
    return f'{{"timestamp":"{ts}","value":"{value}","name":"{name}","labels":{labels}}}'.encode()


def go_adapter(value: str = "1.5", ts: str = T0, labels: str = GPU) -> bytes:
    """As the adapter itself writes it: Go's encoder sorts the keys, so timestamp and value come last."""
    return (
        f'{{"labels":{labels},"name":"DCGM_FI_DEV_GPU_TEMP","timestamp":"{ts}","value":"{value}"}}'.encode()
    )


# Each case twice in a row: the first decodes in full (and may teach an alias), the second may take
# the fast path. Every one of them must come out as the decoder alone reads it.
CASES: list[tuple[bytes, bytes | None]] = [
    (adapter(), None),
    (adapter("2.5"), None),
    (go_adapter("3.5"), None),
    (adapter("NaN"), None),
    (adapter("+Inf", "2026-12-02T10:00:15Z"), None),
    (adapter("abc"), None),  # bad_value
    (adapter(ts="yesterday"), None),  # bad_timestamp
    (adapter(ts="2026-12-02T10:00:30+00:00"), None),
    (adapter("\\u0031"), None),  # an escaped value: the decoder's, never the fast path's
    (adapter() + b"\n", None),
    (adapter(labels='{"gpu":"1","Hostname":"node-1","value":"x","timestamp":"y"}'), None),
    (adapter()[:-1] + b',"value":"9.5"}', None),  # a second value: JSON's last one wins
    (adapter()[:-1] + b',"timestamp":"2026-12-02T11:00:00Z"}', None),
    (adapter(labels='{"gpu":"2"}'), b"node-a"),  # no host label: the record key names the host
    (adapter(labels='{"gpu":"2"}'), b"node-b"),
    (adapter(labels='{"gpu":"3","nodename":"kernel-name"}'), b"node-c"),  # nodename yields to the key
    (adapter(labels='{"gpu":"4","Hostname":"node-1","n":7}'), None),  # a number label is read as text
    (adapter()[:-1] + b',"metrics":{}}', None),  # under `auto` another decoder's shape
    (adapter(name="node_load1", labels='{"instance":"node-2:9100"}'), None),
    (b'{"timestamp":"' + T0.encode() + b'","value":"1","name":"x","labels":{"a":"\xff"}}', None),
    (b"{oops", None),
]


def processor(fast: bool, fmt: str = "prom_kafka_adapter") -> Processor:
    proc = wiring.processor(fmt, "syslog")
    if not fast:
        proc._fast = lambda topic: False  # type: ignore[method-assign]
    return proc


Sample = tuple[bytes, float, str]


def handed_over(proc: Processor) -> list[Sample]:
    """The samples `proc` will hand its pipeline from now on (series by canonical key, value's repr)."""
    reg, handed = proc.pipeline.registry, []
    add = proc.pipeline.add_series

    def record(
        ids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64], source: str
    ) -> None:
        handed.extend(
            (reg.keys[i], t, repr(v))
            for i, t, v in zip(ids.tolist(), ts.tolist(), values.tolist(), strict=True)
        )
        add(ids, ts, values, source)

    proc.pipeline.add_series = record  # type: ignore[method-assign]
    return handed


def read(proc: Processor, via_kafka: bool = False) -> tuple[list[tuple[bytes, int, str, str]], list[Sample]]:
    """Dead letters and the samples handed to the pipeline (series by canonical key) for the cases,
    each sent twice; as `Message`s, or as the Kafka runner hands them over (records in a `Run`)."""
    msgs = [
        Message(payload, 1_796_205_600.0, "metrics", 0, 2 * i + k, key)
        for i, (payload, key) in enumerate(CASES)
        for k in range(2)
    ]
    handed = handed_over(proc)
    if via_kafka:
        records = [
            ConsumerRecord(
                m.topic, m.partition, m.offset, int(m.ts * 1000), 0, m.key, m.payload, None, 0, 0, ()
            )
            for m in msgs
        ]
        out = proc.process_runs([to_run(TopicPartition("metrics", 0), records)], [], {"metrics:0"})
        assert [d.message for d in out.dead_letters] == [msgs[d.message.offset] for d in out.dead_letters]
    else:
        out = proc.process(msgs, [], {"metrics:0"})
    dead = [(d.message.payload, d.message.offset, d.reason, d.detail) for d in out.dead_letters]
    return dead, handed


@pytest.mark.parametrize("fmt", ["prom_kafka_adapter", "auto"])
def test_the_fast_path_reads_every_message_as_the_decoder_does(fmt: str) -> None:
    fast, slow = processor(True, fmt), processor(False, fmt)
    got, want = read(fast), read(slow)
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert len(got[1]) > 20 and len(got[0]) >= 8  # the cases do exercise both outcomes
    fast_counts = fast.telemetry.registry.get_sample_value(
        "prexid_messages_decoded_total", {"stream": "metrics"}
    )
    assert fast_counts == slow.telemetry.registry.get_sample_value(
        "prexid_messages_decoded_total", {"stream": "metrics"}
    )
    assert len(fast.pipeline.registry.aliases) > 0  # and the fast path was taken


@pytest.mark.parametrize("fmt", ["prom_kafka_adapter", "auto"])
def test_kafka_records_read_as_messages_do(fmt: str) -> None:
    """The runner hands records over without a `Message` each; they must read exactly alike."""
    assert read(processor(True, fmt), via_kafka=True) == read(processor(True, fmt))


def test_series_named_only_by_the_transport_are_aliased_with_its_host() -> None:
    proc = processor(True)
    keys = {key for key, _, _ in read(proc)[1]}
    assert b'["DCGM_FI_DEV_GPU_TEMP",{"gpu":"2","host":"node-a"}]' in keys
    assert b'["DCGM_FI_DEV_GPU_TEMP",{"gpu":"2","host":"node-b"}]' in keys
    by_transport = [
        a for a in proc.pipeline.registry.aliases if isinstance(a, tuple) and isinstance(a[0], bytes)
    ]
    assert sorted(host for _, host in by_transport) == ["node-a", "node-b", "node-c"]


def test_both_adapter_layouts_are_one_series() -> None:
    proc = processor(True)
    proc.process(
        [Message(adapter(), 0.0, "metrics", 0, 0), Message(go_adapter(), 0.0, "metrics", 0, 1)], [], ()
    )
    assert len(proc.pipeline.registry) == 1
    assert (
        prom_kafka_adapter.split(adapter()) is not None and prom_kafka_adapter.split(go_adapter()) is not None
    )


def test_a_metrics_topic_given_a_log_format_dead_letters_instead_of_failing() -> None:
    proc = wiring.processor("prom_kafka_adapter", "syslog", {"odd": "syslog"})
    pipeline = proc.pipeline
    out = proc.process(
        [Message(adapter(), 0.0, "odd", 0, 0), Message(adapter(), 0.0, "metrics", 0, 0)], [], ()
    )
    assert [d.reason for d in out.dead_letters] == ["format_mismatch"]
    assert len(pipeline.registry) == 1 and pipeline.samples_seen + len(pipeline.buffer) == 1


KNOWN_RUN = [
    adapter(v, ts) for v in ("1", "2.5", "NaN", "-0.25e3") for ts in (T0, "2026-12-02T10:00:15Z")
] + [
    adapter("7", labels='{"gpu":"5","Hostname":"node-1"}'),
    adapter("8", name="node_load1", labels='{"instance":"node-2:9100"}'),
]


def test_a_run_of_known_series_is_read_in_one_pass_as_the_decoder_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second run holds only series the first taught: it is read column by column, never a message
    at a time (`split` is not called), and hands the pipeline exactly what the decoder alone reads."""

    fast, slow = processor(True), processor(False)
    first = [Message(p, 0.0, "metrics", 0, i) for i, p in enumerate(KNOWN_RUN)]
    second = [m._replace(offset=m.offset + len(KNOWN_RUN)) for m in first]
    for proc in (fast, slow):
        proc.process(first, [], {"metrics:0"})
    got, want = handed_over(fast), handed_over(slow)
    with monkeypatch.context() as patched:
        patched.setattr(prom_kafka_adapter, "split", lambda payload: pytest.fail("read one by one"))
        out = fast.process(second, [], {"metrics:0"})
    assert not out.dead_letters
    slow.process(second, [], {"metrics:0"})
    assert got == want and len(got) == len(KNOWN_RUN)


SEEDS = [payload for payload, _ in CASES] + KNOWN_RUN + [go_adapter(v) for v in ("1", "2", "x")]


@FUZZ
@given(st.lists(mutated(SEEDS), min_size=1, max_size=8))
def test_a_run_split_at_once_agrees_with_split_wherever_a_series_could_be_known(run: list[bytes]) -> None:
    """Wherever `split_many` names series bytes an alias could be made of, `split` reads that message
    the same; a message it cannot vouch for gets bytes no alias has (the caller then reads it alone)."""
    parts = prom_kafka_adapter.split_many(run)
    if parts is None:
        assert any(b"\n" in payload for payload in run)
        return
    for payload, got in zip(run, zip(*parts, strict=True), strict=True):
        if prom_kafka_adapter.alias(got[0], "h") is not None:
            assert got == prom_kafka_adapter.split(payload)
