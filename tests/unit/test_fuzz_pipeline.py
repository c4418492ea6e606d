"""A bounded fuzz run of whole streams through the full processor: random and near-valid records,
careless record times (microseconds, nanoseconds, -1, none), adversarial kernel lines, over several
batches, so the pipeline's later stages (ticks, fusion, Xid alerts) run on what decoded.

Invariants: no exception escapes `process_runs` (the Kafka runner isolates one anyway: this finds the
bugs it would hide), every record is decoded or dead-lettered with a reason, and a clean batch after
the fuzz still moves event time on (nothing silenced detection). `PREXID_FUZZ_EXAMPLES` raises the
number of examples (default 200)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.offline.sim.wire import adapter_json, gpu_labels
from prexid.service.pipeline.processor import Message, runs
from tests.unit.test_decode_properties import FUZZ, LOG_SEEDS, METRIC_SEEDS, payloads

NOW = 1_796_205_600.0
RECORD_TIMES = st.sampled_from(
    [NOW, NOW + 15, NOW * 1e3, NOW * 1e6, -0.001, 0.0, math.nan, 7.3e9, NOW - 86400]
)


@st.composite
def kernel_line(draw: st.DrawFn) -> bytes:
    """An Xid, SXid or reset line with adversarial fields, in a syslog envelope."""
    code = draw(st.sampled_from(["79", "48", "1234567", "0", "99999999999", "-1", "", "13,"]))
    pci = draw(
        st.sampled_from(["PCI:0000:3b:00", "0000:19:00", "PCI:", "PCI:" + "f" * 300, "(PCI:0000:3b:00"])
    )
    name = draw(st.text(max_size=20).map(lambda s: s.replace("\n", " ")))
    kind = draw(
        st.sampled_from(
            [
                "NVRM: Xid ({pci}): {code}, pid=1, name={name}, x",
                "nvidia-nvswitch0: SXid ({pci}): {code}, y",
                "NVRM: Resetting GPU {pci}",
            ]
        )
    )
    text = kind.format(pci=pci, code=code, name=name)
    pri = draw(st.sampled_from(["<4>", "<14>", "", "<999>"]))
    return f"{pri}Dec  3 10:00:00 node-{draw(st.integers(0, 3))} kernel: {text}".encode()


record = st.tuples(st.one_of(payloads(METRIC_SEEDS), st.just(b"")), RECORD_TIMES)
log_record = st.tuples(st.one_of(payloads(LOG_SEEDS), kernel_line()), RECORD_TIMES)


@FUZZ
@given(
    batches=st.lists(
        st.tuples(st.lists(record, max_size=6), st.lists(log_record, max_size=6), st.booleans()),
        min_size=1,
        max_size=4,
    )
)
def test_no_stream_of_records_breaks_the_processor_or_silences_it(
    batches: list[tuple[list[tuple[bytes, float]], list[tuple[bytes, float]], bool]],
) -> None:
    state, processor = build(Settings())
    sample = state.telemetry.registry.get_sample_value

    def decoded() -> float:
        return sum(sample("prexid_messages_decoded_total", {"stream": s}) or 0.0 for s in ("metrics", "logs"))

    offset = 0
    for metrics, logs, behind in batches:
        msgs = [Message(p, ts, "metrics", offset % 2, offset + i) for i, (p, ts) in enumerate(metrics)]
        offset += len(metrics)
        lines = [Message(p, ts, "logs", 0, offset + i) for i, (p, ts) in enumerate(logs)]
        offset += len(logs)
        before = decoded()
        out = processor.process_runs(runs(msgs), lines, {"metrics:0"} if behind else (), now=0.0)
        whole = [d for d in out.dead_letters if d.line is None]
        assert len({d.message.offset for d in whole}) == len(whole)  # one dead letter a message at most
        # every record is accounted for: decoded (bad lines of it dead-lettered alone) or a dead letter
        assert decoded() - before + len(whole) == len(msgs) + len(lines), out.dead_letters
        assert all(d.reason and len(d.reason) < 40 for d in out.dead_letters)
        assert all(d.reason != "decoder_error" for d in out.dead_letters), out.dead_letters
    consumed = sum(sample("prexid_messages_total", {"stream": s}) or 0.0 for s in ("metrics", "logs"))
    assert decoded() <= consumed
    watermark = processor.pipeline.watermark
    assert not math.isfinite(watermark) or watermark < 7_258_118_400.0
    # a clean scrape a minute after the latest seen still moves event time on
    later = max(processor.pipeline.watermarks.progress.values(), default=NOW) + 60.0
    clean = adapter_json("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0, 0), later, 61.0)
    processor.process_runs(runs([Message(clean, later, "metrics", 0, offset)]), [], ())
    assert processor.pipeline.watermark >= later - processor.pipeline.config.lateness_s - 1e-6
