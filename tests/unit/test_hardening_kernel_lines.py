"""Kernel lines as an attacker or a careless producer writes them (issue 15, items 4, 5, 8 and 10):
matching stays linear, the details of an Xid line are read as the driver printed them."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from prexid.service.app.settings import Settings
from prexid.service.decode import formats
from prexid.service.decode.kernel_events import MAX_LINE_CHARS, MAX_PENDING_HOSTS, extract_events
from prexid.service.decode.types import DecodeError, KernelLine
from prexid.service.offline.bench.kernel_lines import (
    ADVERSARIAL_UNITS,
    BENIGN_UNIT,
    LINE_CHARS,
    LOG_FORMATS,
    decode_and_extract,
    envelope,
    repeated,
)
from prexid.service.pipeline.processor import Message, Output
from prexid.service.schemas import GpuResetEvent, XidEvent
from prexid.service.state import snapshot
from tests.unit import wiring

REF = 1_796_205_600.0  # 2026-12-02T10:00:00Z
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python3, GPU has fallen off the bus."


def _line(message: str) -> KernelLine:
    return KernelLine(REF, "node-a", message, True)


# --- item 5: linear-time matching -------------------------------------------------------------
# What matching costs (per byte against a benign line, growth with the line, a huge line) is measured
# by `prexid bench kernel-lines` (docs/benchmarks.md), not timed here.


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    unit=st.one_of(st.sampled_from(ADVERSARIAL_UNITS), st.text(min_size=1, max_size=40)),
    filler=st.text(alphabet='(): ,0123456789abcdef-=\\"[]', max_size=8),
    fmt=st.sampled_from(LOG_FORMATS),
)
@example(unit="NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, ", filler="", fmt="syslog")  # events to compare
def test_a_long_adversarial_line_gives_the_events_of_its_searched_length(
    unit: str, filler: str, fmt: str
) -> None:
    """256 KiB of a repeated partial pattern, in every envelope, is decoded and searched, and reads as
    its first `MAX_LINE_CHARS` alone (with an unbounded `[^)]*` and no cap, 1.5 MB took 20 s)."""
    payload = envelope(fmt, repeated(unit + filler, LINE_CHARS))
    try:
        lines = formats.log_decoder(fmt)(payload, REF, "node-a")
    except DecodeError:  # a line the random unit broke (a line break in it, say): also fine
        return
    events = extract_events(lines)
    cut = [line._replace(message=line.message[:MAX_LINE_CHARS]) for line in lines]
    assert events == extract_events(cut)


@pytest.mark.parametrize("fmt", LOG_FORMATS)
def test_the_bench_times_whole_kernel_lines_in_every_envelope(fmt: str) -> None:
    """`prexid bench kernel-lines` times what it says: each of its lines decodes to one kernel line,
    whole (a line its envelope did not vouch for is never searched), and the benign one has no event."""
    for unit in (BENIGN_UNIT, *ADVERSARIAL_UNITS):
        [line] = formats.log_decoder(fmt)(envelope(fmt, repeated(unit, 4096)), REF, "node-a")
        assert line.kernel and line.message.endswith(repeated(unit, 4096))
    assert decode_and_extract(fmt, envelope(fmt, repeated(BENIGN_UNIT, LINE_CHARS))) == []


def test_an_xid_past_the_searched_length_of_a_huge_line_is_not_read() -> None:
    """Only the first `MAX_LINE_CHARS` of a message are searched (a kernel record is at most 1 KiB):
    an Xid ending there is read, one past it in a 2 MB line is not."""
    inside = XID + " " + "x" * (MAX_LINE_CHARS - 2 * len(XID) - 1) + XID
    assert len(inside) == MAX_LINE_CHARS
    _, last = extract_events([_line(inside)])
    assert isinstance(last, XidEvent) and (last.code, last.message) == (79, "GPU has fallen off the bus.")
    events = extract_events([_line(XID + " " + "x" * 2_000_000 + XID)])
    assert [e.code for e in events if isinstance(e, XidEvent)] == [79]


# --- item 10: kernel-line details -------------------------------------------------------------


def test_a_seven_digit_xid_code_is_read_whole() -> None:
    [ev] = extract_events([_line("NVRM: Xid (PCI:0000:3b:00): 1234567, pid=1, name=x, Something")])
    assert isinstance(ev, XidEvent) and ev.code == 1234567 and ev.message == "Something"


def test_an_absurdly_long_xid_code_is_no_event_rather_than_a_truncated_one() -> None:
    assert extract_events([_line("NVRM: Xid (PCI:0000:3b:00): 12345678901234, pid=1, name=x, y")]) == []


@pytest.mark.parametrize(
    ("message", "process", "text"),
    [
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=my, proc, GPU has fallen off the bus.",
            "my, proc",
            "GPU has fallen off the bus.",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=a, b, c, Graphics SM Warp",
            "a, b, c",
            "Graphics SM Warp",
        ),
        # the driver's own short first field stays in the text
        (
            "NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=pt, Ch 00000009, intr 10000000. MMU Fault",
            "pt",
            "Ch 00000009, intr 10000000. MMU Fault",
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=torchrun, Ch 00000020", "torchrun", "Ch 00000020"),
        ("NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=python3", "python3", ""),
    ],
)
def test_a_process_name_holding_a_comma_is_read_whole(message: str, process: str, text: str) -> None:
    [ev] = extract_events([_line(message)])
    assert isinstance(ev, XidEvent) and (ev.process, ev.message) == (process, text)


def test_two_xids_in_one_journald_record_are_two_events() -> None:
    record = {
        "_TRANSPORT": "kernel",
        "_HOSTNAME": "node-d",
        "MESSAGE": "NVRM: Xid (PCI:0000:cc:00): 119, pid=2020, name=python3, Timeout after 6s\n"
        "NVRM: Xid (PCI:0000:cc:00): 120, pid=2020, name=python3, GSP task exception",
    }
    lines = formats.log_decoder("journald")(orjson.dumps(record), REF)
    events = extract_events(lines)
    assert [(e.code, e.message) for e in events if isinstance(e, XidEvent)] == [
        (119, "Timeout after 6s"),
        (120, "GSP task exception"),
    ]


def test_two_xids_on_one_line_are_two_events() -> None:
    message = (
        "kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=1, name=a, Contained: SM (0x1). "
        "NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=a, Preemptive Cleanup"
    )
    events = extract_events([_line(message)])
    assert [(e.code, e.message) for e in events if isinstance(e, XidEvent)] == [
        (94, "Contained: SM (0x1)."),
        (45, "Preemptive Cleanup"),
    ]


@pytest.mark.parametrize(
    ("message", "action"),
    [
        ("NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 0", "init_failed"),
        ("NVRM: GPU 0000:3b:00.0: Resetting GPU", "reset"),
        ("NVRM: Resetting GPU 0000:3b:00.0", "reset"),
    ],
)
def test_init_failures_and_resets_are_events(message: str, action: str) -> None:
    [ev] = extract_events([_line(message)])
    assert isinstance(ev, GpuResetEvent) and ev.action == action and ev.pci_bus_id == "0000:3b:00"


# --- item 8: one bad line costs one line ------------------------------------------------------

SYSLOG_XID = f"<0>Dec  2 13:00:15 node-a kernel: {XID}"


def _process(payload: bytes, logs_format: str = "auto") -> Output:
    return wiring.processor(logs_format=logs_format).process([], [Message(payload, REF, "logs", 0, 7)], ())


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_a_unicode_line_separator_inside_a_json_string_splits_nothing(separator: str) -> None:
    message = XID.replace("name=python3", f"name=py{separator}th")
    record = orjson.dumps({"_TRANSPORT": "kernel", "_HOSTNAME": "node-d", "MESSAGE": message})
    assert separator.encode() in record  # sent raw, as JSON allows
    out = _process(record, "journald")
    assert out.dead_letters == []
    [ev] = out.events
    assert isinstance(ev, XidEvent) and ev.code == 79 and ev.process == f"py{separator}th"


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_a_unicode_line_separator_splits_no_line_of_a_multi_line_message(separator: str) -> None:
    """A one-line message is read whole without any split; one of several lines is split, on `\n` only."""
    named = XID.replace("name=python3", f"name=py{separator}th")
    records = [
        orjson.dumps({"_TRANSPORT": "kernel", "MESSAGE": m}) for m in (named, XID.replace("79,", "48,"))
    ]
    syslog = f"{SYSLOG_XID.replace('name=python3', f'name=my{separator} x')}\n{SYSLOG_XID}"
    for payload, fmt in ((b"\n".join(records), "journald"), (syslog.encode(), "auto")):
        out = _process(payload, fmt)
        assert out.dead_letters == []
        assert [e.code for e in out.events if isinstance(e, XidEvent)] in ([79, 48], [79, 79])


def test_a_line_separator_in_a_process_name_cannot_hide_its_xid() -> None:
    out = _process(SYSLOG_XID.replace("name=python3", "name=my\u0085 x").encode())
    assert out.dead_letters == []
    assert [e.code for e in out.events if isinstance(e, XidEvent)] == [79]


def test_one_bad_line_is_dead_lettered_alone_and_the_other_lines_are_read() -> None:
    payload = f"{SYSLOG_XID}\r\nthis is no syslog line\n\n{SYSLOG_XID.replace('79,', '48,')}\n".encode()
    out = _process(payload)
    assert [e.code for e in out.events if isinstance(e, XidEvent)] == [79, 48]
    [dl] = out.dead_letters
    assert dl.reason == "not_syslog" and dl.message.payload == b"this is no syslog line" and dl.line == 2
    assert dl.detail.startswith("line 2: ") and (dl.message.topic, dl.message.offset) == ("logs", 7)


def test_a_bad_ndjson_record_costs_that_record_only() -> None:
    good = orjson.dumps({"_TRANSPORT": "kernel", "MESSAGE": XID})
    out = _process(good + b'\n{"MESSAGE": \n' + good, "journald")
    assert len(out.events) == 2
    [dl] = out.dead_letters
    assert dl.reason == "invalid_json" and dl.message.payload == b'{"MESSAGE": '


def test_a_message_of_only_bad_lines_is_one_dead_letter() -> None:
    payload = b"garbage\nmore garbage\n"
    [dl] = _process(payload, "syslog").dead_letters
    assert dl.reason == "not_syslog" and dl.message.payload == payload and dl.line is None
    assert "1 more" in dl.detail


# --- item 4: no local user can fake an Xid ----------------------------------------------------

FORGED = [  # what `logger -t kernel 'NVRM: Xid ...'` and friends produce, with an explicit facility
    ("rfc5424", f"<13>1 2026-12-02T13:00:15Z node-a kernel - - - {XID}"),
    ("rfc5424", f"<14>1 2026-12-02T13:00:15Z node-a kernel 42 - - {XID}"),
    ("syslog", f"<13>Dec  2 13:00:15 node-a kernel: {XID}"),
    ("syslog", f"<13>2026-12-02T13:00:15+00:00 node-a kernel[0]: {XID}"),
    ("rsyslog_json", orjson.dumps({"facility": "user", "programname": "kernel", "message": XID}).decode()),
    (
        "journald",
        orjson.dumps({"SYSLOG_FACILITY": "1", "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": XID}).decode(),
    ),
    (
        "journald",
        orjson.dumps({"_TRANSPORT": "journal", "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": XID}).decode(),
    ),
]
UNPROVEN = [  # no facility at all: a kernel claim only a kernel-only topic can vouch for
    ("syslog", f"Dec  2 13:00:15 node-a kernel: {XID}"),
    ("rsyslog_json", orjson.dumps({"programname": "kernel", "message": XID}).decode()),
    ("fluentbit", orjson.dumps({"ident": "kernel-ish", "log": XID}).decode()),
    ("fluentbit", orjson.dumps({"log": f"Dec  2 13:00:15 node-a kernel: {XID}"}).decode()),
    ("dmesg", f"[ 1234.5] {XID}"),
]
PROVEN = [  # a facility or transport the kernel or the relay set
    ("rfc5424", f"<3>1 2026-12-02T13:00:15Z node-a kernel - - - {XID}"),
    ("syslog", f"<3>Dec  2 13:00:15 node-a kernel: {XID}"),
    ("journald", orjson.dumps({"_TRANSPORT": "kernel", "MESSAGE": XID}).decode()),
    ("rsyslog_json", orjson.dumps({"facility": "kern", "programname": "kernel", "message": XID}).decode()),
    ("dmesg", f"kern  :err   : [ 1234.5] {XID}"),
    ("kmsg", f"3,1,1,-;{XID}"),
]


def _run(fmt: str, payload: str, kernel_only: list[str] | None) -> tuple[Output, CollectorRegistry]:
    registry = CollectorRegistry()
    processor = wiring.processor("auto", fmt, metrics=registry, kernel_only_topics=kernel_only)
    return processor.process([], [Message(payload.encode(), REF, "logs", 0, 1)], ()), registry


def _lines(registry: CollectorRegistry, outcome: str) -> float:
    return registry.get_sample_value("prexid_log_lines_total", {"outcome": outcome}) or 0.0


@pytest.mark.parametrize("kernel_only", [None, ["logs"], []])
@pytest.mark.parametrize(("fmt", "payload"), FORGED)
def test_a_kernel_tag_against_a_user_facility_is_refused_and_counted(
    fmt: str, payload: str, kernel_only: list[str] | None
) -> None:
    out, registry = _run(fmt, payload, kernel_only)
    assert out.events == [] and out.alerts == [] and out.dead_letters == []
    assert _lines(registry, "untrusted") == 1 and _lines(registry, "kernel") == 0


@pytest.mark.parametrize(("fmt", "payload"), UNPROVEN)
def test_a_record_without_a_facility_is_believed_only_on_a_kernel_only_topic(fmt: str, payload: str) -> None:
    believed, registry = _run(fmt, payload, None)  # the default: every log topic is kernel-only
    assert [e.code for e in believed.events if isinstance(e, XidEvent)] == [79]
    assert _lines(registry, "kernel") == 1 and _lines(registry, "untrusted") == 0
    refused, registry = _run(fmt, payload, ["prexid.kernel-logs"])  # "logs" is not declared kernel-only
    assert refused.events == [] and refused.alerts == []
    assert _lines(registry, "untrusted") == 1 and _lines(registry, "kernel") == 0


@pytest.mark.parametrize(("fmt", "payload"), PROVEN)
def test_a_kernel_facility_is_believed_on_any_topic(fmt: str, payload: str) -> None:
    out, registry = _run(fmt, payload, [])
    assert [e.code for e in out.events if isinstance(e, XidEvent)] == [79]
    assert _lines(registry, "kernel") == 1


def test_a_user_facility_line_without_a_kernel_claim_is_not_kernel_and_not_untrusted() -> None:
    _, registry = _run("syslog", f"<13>Dec  2 13:00:15 node-a sshd[1]: {XID}", None)
    assert (_lines(registry, "not_kernel"), _lines(registry, "untrusted")) == (1, 0)


def test_dmesg_x_user_facility_lines_are_userspace_writing_to_kmsg() -> None:
    [line] = formats.log_decoder("dmesg")(f"user  :warn  : [ 1234.5] {XID}".encode(), REF)
    assert not line.kernel
    [line] = formats.log_decoder("dmesg")(f"local7:info  : [ 1234.5] {XID}".encode(), REF)
    assert not line.kernel


def test_kernel_only_topics_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().kernel_only_topics is None  # every log topic
    monkeypatch.setenv("PREXID_KERNEL_ONLY_TOPICS", '["prexid.kernel-logs"]')
    assert Settings().kernel_only_topics == ["prexid.kernel-logs"]


# --- item 10: NVRM lines split across records -------------------------------------------------

FULL_TEXT = (
    "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1a_2b3c4000. "
    "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
)


def _records(*payloads: str, ts: float = REF, first_offset: int = 10) -> list[Message]:
    return [Message(p.encode(), ts, "logs", 0, first_offset + i) for i, p in enumerate(payloads)]


def _xids(out: Output) -> list[tuple[int, str | None, str]]:
    return [(e.code, e.process, e.message) for e in out.events if isinstance(e, XidEvent)]


def _fragments(registry: CollectorRegistry, outcome: str) -> float:
    return registry.get_sample_value("prexid_kernel_fragments_total", {"outcome": outcome}) or 0.0


def test_a_kmsg_line_stored_in_fragments_is_one_xid_with_its_details() -> None:
    """`/dev/kmsg` flags a line the kernel stored in pieces `c`; the piece that ends it is `-`. Before,
    the first piece paged with process `pyt` and no text, and the second was read as nothing."""
    registry = CollectorRegistry()
    processor = wiring.processor(logs_format="kmsg", metrics=registry)
    head = "3,1021,5000000,c;NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=pyt"
    out = processor.process([], _records(head, "3,1022,5000001,-;hon3, GPU has fallen off the bus."), ())
    assert _xids(out) == [(79, "python3", "GPU has fallen off the bus.")]
    assert out.dead_letters == [] and _fragments(registry, "joined") == 1


def test_an_xid_code_cut_between_its_digits_is_read_whole() -> None:
    """Cut after `: 7`, the first piece alone reads as Xid 7: a different fault, and the wrong page."""
    payload = "3,5,5000000,c;NVRM: Xid (PCI:0000:3b:00): 7\n3,6,5000000,c;9, pid=1, name=x, \n3,7,5000000,-;GPU gone"
    out = wiring.processor(logs_format="kmsg").process([], _records(payload), ())
    assert _xids(out) == [(79, "x", "GPU gone")]


def test_a_syslog_record_cut_at_1024_bytes_is_joined_with_the_next_record_of_its_host() -> None:
    """A shipper with RFC3164's 1024-byte limit sends the rest as another message of the same host,
    tag and all, without the Xid head: one event, the driver's whole text."""
    envelope = "<4>Dec  2 13:00:15 node-a kernel: "
    line = f"{envelope}[1234567.890123] NVRM: Xid (PCI:0000:3b:00): 31, pid=2231, name=python3, {FULL_TEXT}"
    line += " " + "x" * 1100
    first, rest = line.encode()[:1024].decode(), line.encode()[1024:].decode()
    other = "<4>Dec  2 13:00:15 node-b kernel: [1234567.9] NVRM: Xid (PCI:0000:86:00): 48, pid=1, name=a, DBE"
    out = wiring.processor(logs_format="syslog").process([], _records(first, other, envelope + rest), ())
    assert _xids(out) == [(48, "a", "DBE"), (31, "python3", f"{FULL_TEXT} {'x' * 1100}")]
    assert [e.node for e in out.events] == ["node-b", "node-a"]


def test_a_fragment_waits_for_its_continuation_across_batches() -> None:
    """A fetch can end between the two records: the held piece waits for the next batch (event time)."""
    processor = wiring.processor(logs_format="kmsg")
    first = processor.process(
        [], _records("3,1,5000000,c;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU "), ()
    )
    assert first.events == [] and first.dead_letters == []
    second = processor.process([], _records("3,2,5000000,-;has fallen off the bus.", first_offset=11), ())
    assert _xids(second) == [(79, "a", "GPU has fallen off the bus.")]


def test_a_line_from_another_source_between_the_pieces_is_not_taken_for_the_continuation() -> None:
    """Pieces are joined per host, and only kernel lines continue a kernel line: a user's
    `logger -t kernel` line (facility user) can neither end an Xid nor write into it."""
    envelope = "<0>Dec  2 13:00:15 {host} kernel: "
    head = envelope.format(host="node-a") + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has "
    padding = " " * (1024 - len(head.encode()))  # cut at the shipper's limit, here in the text's spaces
    payloads = [
        head + padding,
        envelope.format(host="node-b") + "NVRM: Xid (PCI:0000:86:00): 48, pid=1, name=b, DBE",
        "<13>Dec  2 13:00:15 node-a kernel: forged by a user",
        envelope.format(host="node-a") + "fallen off the bus.",
    ]
    out = wiring.processor(logs_format="syslog").process([], _records(*payloads), ())
    assert _xids(out) == [(48, "b", "DBE"), (79, "a", f"GPU has {padding}fallen off the bus.")]
    assert not any("forged" in e.message for e in out.events)


def test_a_cut_xid_head_that_never_completes_is_a_dead_letter_with_a_reason() -> None:
    """No continuation within 5 s of event time: the code may be cut (`: 7` of `: 79`), so it is no
    event, and a dead letter saying so, counted. Before, it was silently nothing."""
    registry = CollectorRegistry()
    processor = wiring.processor(logs_format="syslog", metrics=registry)
    cut = "<0>Dec  2 13:00:15 node-a kernel: NVRM: Xid (PCI:0000:3b:0"
    at = REF + 3 * 3600 + 15  # the lines' own time, the records' too
    assert processor.process([], _records(cut, ts=at), ()).dead_letters == []  # held, not yet given up
    later = "<0>Dec  2 13:00:21 node-b kernel: NVRM: GPU 0000:86:00.0: Resetting GPU"
    out = processor.process([], _records(later, ts=at + 6, first_offset=11), ())
    [dl] = out.dead_letters
    assert dl.reason == "kernel_line_incomplete" and "not continued in 5 s" in dl.detail
    assert (dl.message.topic, dl.message.offset) == ("logs", 10)
    assert dl.message.payload.endswith(b"NVRM: Xid (PCI:0000:3b:0")
    assert [e.kind for e in out.events] == ["gpu_reset"]
    assert _fragments(registry, "incomplete") == 1
    assert registry.get_sample_value("prexid_dead_letters_total", {"reason": "kernel_line_incomplete"}) == 1
    # both records were decoded: the dead letter is a line of one, not a third whole message
    assert dl.line is not None
    assert registry.get_sample_value("prexid_messages_decoded_total", {"stream": "logs"}) == 2


def test_a_fragment_let_go_by_its_hosts_next_record_pages_as_it_stands() -> None:
    """A `c` piece whose end never comes (the host's next record is a new line): its Xid code is
    whole, so it pages with the text it has, and the new line is read too; counted as expired."""
    registry = CollectorRegistry()
    processor = wiring.processor(logs_format="kmsg", metrics=registry)
    payloads = (
        "3,1,5000000,c;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has",
        "3,2,5000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=a, DBE",
    )
    out = processor.process([], _records(*payloads), ())
    assert _xids(out) == [(79, "a", "GPU has"), (48, "a", "DBE")]
    assert _fragments(registry, "expired") == 1 and out.dead_letters == []


def test_the_end_of_a_replay_lets_every_held_fragment_go() -> None:
    registry = CollectorRegistry()
    processor = wiring.processor(logs_format="kmsg", metrics=registry)
    out = processor.process(
        [], _records("3,1,5000000,c;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU"), (), drain=True
    )
    assert _xids(out) == [(79, "a", "GPU")] and _fragments(registry, "expired") == 1


def test_fragments_held_at_once_are_bounded_and_none_is_lost() -> None:
    """One held piece per host, at most `MAX_PENDING_HOSTS`: past it the oldest is let go (here a cut
    head each, so a dead letter each), never dropped unseen."""
    hosts = MAX_PENDING_HOSTS + 50
    processor = wiring.processor(logs_format="syslog")
    payloads = [f"<0>Dec  2 13:00:15 node-{i} kernel: NVRM: Xid (PCI:0000:3b:00): 7" for i in range(hosts)]
    out = processor.process([], _records(*payloads), ())
    assert len(processor.rejoiner.pending) == MAX_PENDING_HOSTS
    assert [dl.reason for dl in out.dead_letters] == ["kernel_line_incomplete"] * 50
    assert {dl.message.offset for dl in out.dead_letters} == set(range(10, 60))  # the oldest went first
    drained = processor.process([], [], (), drain=True)
    assert len(drained.dead_letters) == MAX_PENDING_HOSTS and processor.rejoiner.pending == {}


def test_a_held_fragment_travels_in_the_snapshot_to_the_next_owner() -> None:
    """The piece's record is behind the offsets a checkpoint stores: the next owner must have it."""
    first = wiring.processor(logs_format="kmsg")
    first.process([], _records("3,1,5000000,c;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=pyt"), ())
    second = wiring.processor(logs_format="kmsg")
    snapshot.load(snapshot.dump(first, {"logs:0": 11}), second)
    out = second.process([], _records("3,2,5000000,-;hon3, GPU has fallen off the bus.", first_offset=11), ())
    assert _xids(out) == [(79, "python3", "GPU has fallen off the bus.")]


def test_a_batch_retried_in_parts_sees_the_fragments_it_saw() -> None:
    """`process_isolating` reruns a failed batch in halves: a piece held by the failed run must not
    be held twice (or joined to itself)."""
    processor = wiring.processor(logs_format="kmsg")
    calls = 0
    real = processor.pipeline.ingest_xids

    def fail_once(xids: list[XidEvent]) -> list[object]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug in a later stage")
        return real(xids)  # type: ignore[return-value]

    processor.pipeline.ingest_xids = fail_once  # type: ignore[method-assign,assignment]
    piece = Message(
        b"3,1,5000000,c;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=pyt", REF, "logs", 0, 1, b"node-a"
    )
    other = Message(
        b"3,9,5000000,-;NVRM: Xid (PCI:0000:86:00): 48, pid=1, name=b, DBE", REF, "logs", 0, 2, b"node-b"
    )
    out = processor.process_isolating([], [piece, other], ())  # failed whole, then run in halves
    assert _xids(out) == [(48, "b", "DBE")]  # node-a's piece is held once, not let go by its own copy
    end = Message(b"3,2,5000000,-;hon3, GPU gone", REF, "logs", 0, 3, b"node-a")
    assert _xids(processor.process_isolating([], [end], ())) == [(79, "python3", "GPU gone")]


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=1, max_value=len(XID) - 1), apart=st.booleans())
def test_an_xid_line_cut_anywhere_into_kmsg_fragments_reads_as_the_whole_line(cut: int, apart: bool) -> None:
    """Wherever the kernel cut the line, in one record or two batches: the event of the whole line."""
    [whole] = extract_events([_line(XID)])
    processor = wiring.processor(logs_format="kmsg")
    head, tail = f"3,1,5000000,c;{XID[:cut]}", f"3,2,5000000,-;{XID[cut:]}"
    if apart:
        events = processor.process([], _records(head), ()).events
        events += processor.process([], _records(tail, first_offset=11), ()).events
    else:
        events = processor.process([], _records(f"{head}\n{tail}"), ()).events
    assert [(e.code, e.process, e.message) for e in events if isinstance(e, XidEvent)] == [
        (79, "python3", "GPU has fallen off the bus.")
    ]
    assert isinstance(whole, XidEvent) and whole.message == "GPU has fallen off the bus."


@settings(max_examples=60, deadline=None)
@given(pad=st.integers(min_value=0, max_value=1000))
def test_a_syslog_line_cut_anywhere_at_1024_bytes_reads_as_the_whole_line(pad: int) -> None:
    """The shipper's cut falls wherever the line's length puts it: before, inside or after the head."""
    envelope = "<4>Dec  2 13:00:15 node-a kernel: "
    line = f"{envelope}[1234567.890123] {'p' * pad}{XID} {'y' * 1200}".encode()
    first, rest = line[:1024].decode(), line[1024:].decode()
    processor = wiring.processor(logs_format="syslog")
    out = processor.process([], _records(first, envelope + rest), ())
    # a second record exactly a split size long (pad=679) may go on too: it is held until the end
    end = processor.process([], [], (), drain=True)
    assert _xids(out) + _xids(end) == [(79, "python3", f"GPU has fallen off the bus. {'y' * 1200}")]
    assert out.dead_letters == end.dead_letters == []
