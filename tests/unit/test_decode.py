"""Decoders read the real line shapes and reject the rest with a reason."""

from __future__ import annotations

import math

import pytest

from prexid.service.decode import prom_kafka_adapter, syslog
from prexid.service.decode.types import DecodeError, KernelLine
from prexid.service.decode.xid import normalise_pci, parse_xid

REF = 1_796_205_600.0  # 2026-12-02T10:00:00Z


def test_adapter_json_decodes_value_strings_including_nan_and_inf() -> None:
    msg = (
        b'{"timestamp":"2026-12-02T13:00:15Z","value":"%s","name":"DCGM_FI_DEV_GPU_TEMP",'
        b'"labels":{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"3","Hostname":"node-17"}}'
    )
    [s] = prom_kafka_adapter.decode(msg % b"71.5", REF).rows()
    assert (s.name, s.labels, s.value) == ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "3", "Hostname": "node-17"}, 71.5)
    assert s.ts == 1_796_216_415.0
    assert math.isnan(prom_kafka_adapter.decode(msg % b"NaN", REF).values[0])
    assert prom_kafka_adapter.decode(msg % b"+Inf", REF).values[0] == math.inf


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "invalid_json"),
        (b"[1,2]", "not_an_object"),
        (b'{"timestamp":"2026-12-02T13:00:15Z","value":"1","labels":{}}', "missing_name"),
        (b'{"timestamp":"2026-12-02T13:00:15Z","value":"x","name":"m","labels":{}}', "bad_value"),
        (b'{"timestamp":"yesterday","value":"1","name":"m","labels":{}}', "bad_timestamp"),
        (b'{"value":"1","name":"m","labels":{}}', "missing_timestamp"),
    ],
)
def test_adapter_json_rejects_bad_messages_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        prom_kafka_adapter.decode(payload, REF)
    assert err.value.reason == reason


def test_rfc3164_year_is_taken_from_the_record_time_across_new_year() -> None:
    [line] = syslog.decode(b"Dec 31 23:59:50 node-1 kernel: hello", 1_798_761_610.0)  # 2027-01-01T00:00:10Z
    assert line == KernelLine(1_798_761_590.0, "node-1", "kernel: hello", kernel=True, trust="unproven")


def test_syslog_rejects_a_line_that_is_not_syslog() -> None:
    with pytest.raises(DecodeError) as err:
        syslog.decode(b"garbage without a date", REF)
    assert err.value.reason == "not_syslog"


XID_LINES = [
    (
        "Nov 30 02:11:09 node-a kernel: [ 51234.118202] NVRM: Xid (PCI:0000:19:00): 79, pid=3310, name=python, GPU has fallen off the bus.",
        ("node-a", "0000:19:00", 79, 3310, "python", "GPU has fallen off the bus."),
    ),
    (
        "Nov 30 02:12:40 node-b kernel: NVRM: Xid (PCI:0000:4c:00): 94, pid=8122, name=torchrun, Contained: SM (0x1). RST: No, D-RST: No",
        ("node-b", "0000:4c:00", 94, 8122, "torchrun", "Contained: SM (0x1). RST: No, D-RST: No"),
    ),
    (
        "Nov 30 02:13:00 node-c kernel: NVRM: Xid (0000:01:00): 31, pid='<unknown>', name=<unknown>, Ch 00000020",
        ("node-c", "0000:01:00", 31, None, "<unknown>", "Ch 00000020"),
    ),
    (
        "Nov 30 02:14:00 node-d kernel: NVRM: Xid (PCI:0000:9b:00 GPU-I:03 GPU-CI:01): 43, pid=1, name=x, Ch 1",
        ("node-d", "0000:9b:00", 43, 1, "x", "Ch 1"),
    ),
    (
        "Nov 30 02:15:00 node-e kernel: NVRM: Xid (PCI:0008:D8:00): 48, An uncorrectable double bit error",
        ("node-e", "0008:d8:00", 48, None, None, "An uncorrectable double bit error"),
    ),
]


@pytest.mark.parametrize(("line", "expected"), XID_LINES)
def test_xid_lines_in_their_real_shapes(line: str, expected: tuple[object, ...]) -> None:
    [kl] = syslog.decode(line.encode(), REF)
    ev = parse_xid(kl)
    assert ev is not None
    assert (ev.node, ev.pci_bus_id, ev.code, ev.pid, ev.process, ev.message) == expected


@pytest.mark.parametrize(
    "message",
    [
        "kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
        "kernel: NVRM: GPU at PCI:0000:19:00: GPU-2f1c7a0e-1111-2222-3333-444455556666",
        "kernel: nvidia-nvswitch1: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 12 LTSSM Fault Up",
    ],
)
def test_informational_nvrm_lines_are_not_xids(message: str) -> None:
    assert parse_xid(KernelLine(REF, "n", message)) is None


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [("0000:3b:00", "0000:3b:00"), ("00000000:3B:00.0", "0000:3b:00"), ("0000:3b:00.0", "0000:3b:00")],
)
def test_pci_ids_normalise_across_spellings(raw: str, canonical: str) -> None:
    assert normalise_pci(raw) == canonical
