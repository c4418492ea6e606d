"""`prexid parse`: one JSON object per line for every record, event and rejected input; exit 0."""

from __future__ import annotations

import io
import subprocess
import sys

import orjson

from prexid.service.app.parse_cmd import run

REF = 1_796_205_600.0
DCGM = (
    b'{"timestamp":"2026-12-02T13:00:15Z","value":"1","name":"DCGM_FI_DEV_GPU_TEMP",'
    b'"labels":{"gpu":"5","Hostname":"node-3","pci_bus_id":"00000000:3B:00.0"}}'
)
XID = b"Dec  2 13:00:20 node-3.cluster.local kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p, GPU has fallen off the bus."


def parse(stream: str, data: bytes, fmt: str = "auto", host: str | None = None) -> list[dict[str, object]]:
    out = io.BytesIO()
    run(stream, fmt, data, host, REF, out)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_an_xid_names_its_gpu_once_a_dcgm_sample_in_the_input_taught_the_pci_id() -> None:
    records = parse("logs", DCGM + b"\n" + XID + b"\n")
    [xid] = [r for r in records if r["kind"] == "xid"]
    assert (xid["code"], xid["pci_bus_id"], xid["node"], xid["gpu"]) == (79, "0000:3b:00", "node-3", 5)
    assert records[0]["kind"] == "sample"


def test_an_xid_without_dcgm_labels_has_no_gpu() -> None:
    [xid] = parse("logs", XID)
    assert xid["gpu"] is None


def test_rejected_input_is_an_error_record_with_reason_and_input() -> None:
    records = parse("logs", b"what is this\n" + XID)
    assert records[0] == {
        "kind": "error",
        "reason": "unknown_format",
        "detail": "what is this",
        "input": "what is this",
    }
    assert records[1]["kind"] == "xid"


def test_non_kernel_lines_are_shown_so_a_missing_alert_can_be_explained() -> None:
    [rec] = parse(
        "logs", b'{"_HOSTNAME":"n","_TRANSPORT":"stdout","MESSAGE":"NVRM: Xid (PCI:0000:3b:00): 79, x"}'
    )
    assert rec["kind"] == "not_kernel"


def test_a_scrape_is_one_message_and_non_finite_values_are_spelt_out() -> None:
    records = parse("metrics", b"# TYPE m gauge\nm NaN\nm +Inf\nn -Inf\n", host="node-1")
    assert [(r["name"], r["value"], r["labels"]) for r in records] == [
        ("m", "NaN", {"host": "node-1"}),
        ("m", "+Inf", {"host": "node-1"}),
        ("n", "-Inf", {"host": "node-1"}),
    ]


def test_the_command_exits_zero_on_bad_input() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "prexid.service.app.cli",
            "parse",
            "metrics",
            "--format",
            "prom_kafka_adapter",
        ],
        input=b"{oops\n" + DCGM + b"\n",
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    kinds = [orjson.loads(line)["kind"] for line in done.stdout.splitlines()]
    assert kinds == ["error", "sample"]
