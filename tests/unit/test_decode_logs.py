"""Every kernel-log envelope yields its lines with host, time and transport; GPU events come out of them."""

from __future__ import annotations

import pytest

from prexid.service.decode import formats
from prexid.service.decode.kernel_events import extract_events
from prexid.service.decode.types import DecodeError, KernelLine
from prexid.service.schemas import GpuOffBusEvent, GpuResetEvent, SxidEvent, XidEvent

REF = 1_796_205_600.0  # 2026-12-02T10:00:00Z
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python3, GPU has fallen off the bus."
T = 1_796_216_415.0  # 2026-12-02T13:00:15Z

LOG_CASES: list[tuple[str, str, str | None, KernelLine]] = [
    (
        "syslog",
        f"Dec  2 13:00:15 node-17 kernel: [1234567.890123] {XID}",
        None,
        KernelLine(T, "node-17", f"kernel: [1234567.890123] {XID}", True, "unproven"),
    ),
    (
        "syslog",
        f"<6>Dec  2 13:00:15 node-17 kernel: {XID}",
        None,
        KernelLine(T, "node-17", f"kernel: {XID}", True),
    ),
    (
        "syslog",
        f"Dec  2 13:00:15 node-17 sshd[12]: {XID}",
        None,
        KernelLine(T, "node-17", f"sshd[12]: {XID}", False, "unproven"),
    ),
    # rsyslog omkafka with RSYSLOG_ForwardFormat
    (
        "syslog",
        f"<4>2026-12-02T13:00:15.250000+00:00 node-17 kernel: {XID}",
        None,
        KernelLine(T + 0.25, "node-17", f"kernel: {XID}", True),
    ),
    (
        "syslog",
        f"<30>2026-12-02T13:00:15+00:00 node-17 systemd[1]: {XID}",
        None,
        KernelLine(T, "node-17", f"systemd[1]: {XID}", False),
    ),
    (
        "rfc5424",
        f"<4>1 2026-12-02T13:00:15.000000+00:00 node-17 kernel - - - {XID}",
        None,
        KernelLine(T, "node-17", XID, True),
    ),
    (
        "rfc5424",
        f'<14>1 2026-12-02T13:00:15Z node-17 app 12 ID47 [ex@32473 a="x]y"] {XID}',
        None,
        KernelLine(T, "node-17", XID, False),
    ),
    ("rfc5424", f"<4>1 - - kernel - - - \ufeff{XID}", "node-k", KernelLine(REF, "unknown", XID, True)),
    ("dmesg", f"[ 51234.118202] {XID}", "node-17", KernelLine(REF, "node-17", XID, True, "unproven")),
    (
        "dmesg",
        f"[Wed Dec  2 13:00:15 2026] {XID}",
        "node-17",
        KernelLine(T, "node-17", XID, True, "unproven"),
    ),
    ("dmesg", f"kern  :err   : [ 51234.118202] {XID}", None, KernelLine(REF, "unknown", XID, True)),
    (
        "kmsg",
        f"3,1234,51234118202,-;{XID}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0",
        "node-17",
        KernelLine(REF, "node-17", XID, True),
    ),
    ("kmsg", f"14,99,51234118202,-;{XID}", "node-17", KernelLine(REF, "node-17", XID, False)),
    (
        "journald",
        '{"_HOSTNAME":"node-d","_TRANSPORT":"kernel","SYSLOG_IDENTIFIER":"kernel","PRIORITY":"3",'
        f'"__REALTIME_TIMESTAMP":"1796216415000000","MESSAGE":"{XID}"}}',
        None,
        KernelLine(T, "node-d", XID, True),
    ),
    (
        "journald",
        '{"_HOSTNAME":"node-d","_TRANSPORT":"syslog","__REALTIME_TIMESTAMP":"1796216415000000",'
        f'"MESSAGE":"{XID}"}}',
        None,
        KernelLine(T, "node-d", XID, False),
    ),
    (
        "journald",
        '{"_HOSTNAME":"node-d","_TRANSPORT":"kernel","__REALTIME_TIMESTAMP":"1796216415000000",'
        '"MESSAGE":[78,86,82,77,255]}',
        None,
        KernelLine(T, "node-d", "NVRM\ufffd", True),
    ),
    # Vector's journald source: message/host/timestamp plus the journald fields
    (
        "journald",
        '{"host":"node-v","message":"' + XID + '","timestamp":"2026-12-02T13:00:15Z",'
        '"_TRANSPORT":"kernel","source_type":"journald"}',
        None,
        KernelLine(T, "node-v", XID, True),
    ),
    (
        "fluentbit",
        '{"@timestamp":1796216415.0,"_HOSTNAME":"node-f","_TRANSPORT":"kernel","MESSAGE":"' + XID + '"}',
        None,
        KernelLine(T, "node-f", XID, True),
    ),
    (
        "fluentbit",
        '{"@timestamp":"2026-12-02T13:00:15Z","log":"Dec  2 13:00:15 node-f kernel: ' + XID + '"}',
        None,
        KernelLine(T, "node-f", f"kernel: {XID}", True, "unproven"),
    ),
    (
        "fluentbit",
        '{"@timestamp":1796216415.0,"priority":3,"sequence":77,"sec":51234,"usec":1,"msg":"' + XID + '"}',
        "node-f",
        KernelLine(T, "node-f", XID, True, "unproven"),
    ),
    (
        "rsyslog_json",
        '{"@timestamp":"2026-12-02T13:00:15Z","host":"node-r","facility":"kern","severity":"err",'
        '"programname":"kernel","message":"' + XID + '"}',
        None,
        KernelLine(T, "node-r", XID, True),
    ),
    (
        "rsyslog_json",
        '{"@timestamp":"2026-12-02T13:00:15Z","host":"node-r","facility":"daemon",'
        '"programname":"kernel","message":"' + XID + '"}',
        None,
        KernelLine(T, "node-r", XID, False, "refused"),
    ),
]


@pytest.mark.parametrize(("fmt", "payload", "host", "line"), LOG_CASES)
def test_each_log_format_yields_host_time_and_transport(
    fmt: str, payload: str, host: str | None, line: KernelLine
) -> None:
    assert formats.log_decoder(fmt)(payload.encode(), REF, host)[0] == line


@pytest.mark.parametrize(("fmt", "payload", "host", "line"), LOG_CASES)
def test_auto_detection_reads_every_log_format(
    fmt: str, payload: str, host: str | None, line: KernelLine
) -> None:
    assert formats.decode_logs_auto(payload.encode(), REF, host)[0] == line


@pytest.mark.parametrize(
    ("fmt", "payload", "reason"),
    [
        ("syslog", b"garbage", "not_syslog"),
        ("syslog", b"Foo  2 13:00:15 node kernel: x", "bad_timestamp"),
        ("syslog", b"Feb 30 13:00:15 node kernel: x", "bad_timestamp"),
        ("syslog", b"\n \n", "empty"),
        ("rfc5424", b"<4>1 2026-12-02T13:00:15Z node kernel - - [unclosed x", "bad_structured_data"),
        ("rfc5424", b"<4>1 yesterday node kernel - - - x", "bad_timestamp"),
        ("dmesg", b"no bracket", "not_dmesg"),
        ("dmesg", b"[Someday] x", "bad_timestamp"),
        ("kmsg", b"x;y", "not_kmsg"),
        ("journald", b'{"_HOSTNAME":"n"}', "missing_message"),
        ("journald", b"[1]", "not_an_object"),
        ("journald", b'{"MESSAGE":{"a":1}}', "bad_message"),
        ("auto", b"???", "unknown_format"),
    ],
)
def test_bad_log_messages_are_rejected_with_a_reason(fmt: str, payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        formats.log_decoder(fmt)(payload, REF)
    assert err.value.reason == reason


def _line(message: str, host: str = "node-a", kernel: bool = True) -> KernelLine:
    return KernelLine(REF, host, message, kernel)


# Every variant in /work/shared/reference/xid.md, plus NVLink5 and Xid 154 lines.
XID_VARIANTS = [
    # as a container runtime's driver process reports it (name with a colon and brackets)
    (
        "NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus.",
        ("0000:c6:00", 79, 1101234, "nvc:[driver]", "GPU has fallen off the bus."),
    ),
    (
        "NVRM: Xid (PCI:0000:1b:00): 137, pid=991, name=python3, NVLink: TLC RX PRIV Error",
        ("0000:1b:00", 137, 991, "python3", "NVLink: TLC RX PRIV Error"),
    ),
    (
        "NVRM: Xid (PCI:0000:19:00): 79, pid=3310, name=python, GPU has fallen off the bus.",
        ("0000:19:00", 79, 3310, "python", "GPU has fallen off the bus."),
    ),
    (
        "NVRM: Xid (0000:01:00): 31, pid='<unknown>', name=<unknown>, Ch 00000020",
        ("0000:01:00", 31, None, "<unknown>", "Ch 00000020"),
    ),
    (
        "NVRM: Xid (PCI:0000:9b:00 GPU-I:03 GPU-CI:01): 43, pid=1, name=x, Ch 1",
        ("0000:9b:00", 43, 1, "x", "Ch 1"),
    ),
    (
        "NVRM: Xid (PCI:0000:9b:00 GPU-I:03): 94, pid=0, name=y, Contained: SM (0x1). RST: No, D-RST: No",
        ("0000:9b:00", 94, 0, "y", "Contained: SM (0x1). RST: No, D-RST: No"),
    ),
    (
        "NVRM: Xid (PCI:0008:D8:00): 48, An uncorrectable double bit error",
        ("0008:d8:00", 48, None, None, "An uncorrectable double bit error"),
    ),
    (
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x0004c100 0x00000000 0x0)",
        ("0019:01:00", 149, None, None, "NETIR Fatal XC0 i0 Link -1 (0x0004c100 0x00000000 0x0)"),
    ),
    (
        "NVRM: Xid (PCI:0000:cc:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        (
            "0000:cc:00",
            154,
            None,
            None,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        ),
    ),
    (
        "kernel: [ 51234.1] NVRM: Xid (PCI:0000:3b:00.0): 119, pid=2020, name=python3, Timeout after 6s",
        ("0000:3b:00", 119, 2020, "python3", "Timeout after 6s"),
    ),
]


@pytest.mark.parametrize(("message", "expected"), XID_VARIANTS)
def test_every_xid_variant_is_read(message: str, expected: tuple[object, ...]) -> None:
    [ev] = extract_events([_line(message)])
    assert isinstance(ev, XidEvent)
    assert (ev.pci_bus_id, ev.code, ev.pid, ev.process, ev.message) == expected


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
        "NVRM: GPU at PCI:0000:19:00: GPU-2f1c7a0e-1111-2222-3333-444455556666",
        "NVRM: GPU Board Serial Number: 1234567890",
        "usb 1-1: reset high-speed USB device number 2 using xhci_hcd",
    ],
)
def test_informational_lines_are_no_events(message: str) -> None:
    assert extract_events([_line(message)]) == []


def test_lines_not_from_the_kernel_never_yield_events() -> None:
    assert extract_events([_line(XID, kernel=False)]) == []


def test_an_sxid_burst_of_three_lines_is_one_event() -> None:
    head = "nvidia-nvswitch1: SXid (PCI:0000:86:00.0): 20034, "
    lines = [
        _line(head + "Fatal, Link 12 LTSSM Fault Up"),
        _line(head + "Severity 1 Engine instance 12 Sub-engine instance 00"),
        _line(head + "Data {0x50610002, 0x10100030, 0x00000000}"),
        _line(
            "nvidia-nvswitch1: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error"
        ),
        _line(head + "Fatal, Link 12 LTSSM Fault Up", host="node-b"),
    ]
    events = extract_events(lines)
    assert [
        (e.node, e.code, e.fatal, e.link, len(e.details)) for e in events if isinstance(e, SxidEvent)
    ] == [
        ("node-a", 20034, True, 12, 2),
        ("node-a", 12028, False, 44, 0),
        ("node-b", 20034, True, 12, 0),
    ]
    assert events[0].pci_bus_id == "0000:86:00"  # type: ignore[union-attr]


def test_an_sxid_follow_up_without_its_head_is_still_an_event() -> None:
    [ev] = extract_events([_line("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x1}")])
    assert isinstance(ev, SxidEvent) and ev.fatal is None and ev.details == ["Data {0x1}"]


def test_fallen_off_the_bus_without_an_xid_is_an_event() -> None:
    [ev] = extract_events([_line("NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.")])
    assert isinstance(ev, GpuOffBusEvent) and ev.pci_bus_id == "0000:19:00"


@pytest.mark.parametrize(
    ("message", "action"),
    [
        ("NVRM: GPU 0000:3b:00.0: GPU Reset Required", "reset_required"),
        ("NVRM: GPU 0000:3b:00.0: Node Reboot Required", "reboot_required"),
        ("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x55:2477)", "init_failed"),
        ("NVRM: GPU at PCI:0000:3b:00: GPU recovery completed", "recovery"),
        ("NVRM: GPU 0000:3b:00.0: GPU reset initiated", "reset"),
    ],
)
def test_gpu_reset_and_recovery_lines_are_events(message: str, action: str) -> None:
    [ev] = extract_events([_line(message)])
    assert isinstance(ev, GpuResetEvent) and ev.action == action and ev.pci_bus_id == "0000:3b:00"
