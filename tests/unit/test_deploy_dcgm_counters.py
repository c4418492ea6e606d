"""deploy/dcgm-exporter/counters.csv enables every DCGM field prexid reads, in dcgm-exporter's format,
and docs/ingest.md's family table lists every field prexid reads under the family that reads it."""

from __future__ import annotations

import re
from pathlib import Path

from prexid.detectors.signals import CATALOG

ROOT = Path(__file__).resolve().parents[2]
DCGM_TYPES = {"gauge", "counter", "label"}  # what dcgm-exporter accepts in the type column


def counters() -> dict[str, str]:
    """Field -> type, read as dcgm-exporter reads the file: '#' comments, 'FIELD, type, help'."""
    out: dict[str, str] = {}
    for n, line in enumerate((ROOT / "deploy/dcgm-exporter/counters.csv").read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        field, kind, help_text = (part.strip() for part in line.split(",", 2))
        assert re.fullmatch(r"DCGM_FI_[A-Z0-9_]+", field), f"line {n}: {field!r}"
        assert kind in DCGM_TYPES, f"line {n}: type {kind!r}"
        assert help_text, f"line {n}: no help text"
        assert field not in out, f"line {n}: {field} twice"
        out[field] = kind
    return out


def test_every_dcgm_field_prexid_reads_is_enabled() -> None:
    enabled = counters()
    wanted = {m for m in CATALOG if m.startswith("DCGM_FI_")}
    assert wanted - enabled.keys() == set()


def test_counters_are_cumulative_fields_and_flags_are_gauges() -> None:
    enabled = counters()
    assert enabled["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == "counter"
    assert enabled["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == "gauge"  # a flag: 0/1, never summed
    assert enabled["DCGM_FI_DEV_XID_ERRORS"] == "gauge"  # the last Xid code, not a count


def test_the_family_table_lists_each_field_under_the_family_that_reads_it() -> None:
    text = (ROOT / "docs/ingest.md").read_text()
    section = text.split("## Which field feeds which family", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, str] = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for field in re.findall(r"`([A-Za-z0-9_:]+)`", cells[2]):
                listed[field] = cells[0].strip("`")
    assert listed == {m: spec.family.label for m, spec in CATALOG.items()}
