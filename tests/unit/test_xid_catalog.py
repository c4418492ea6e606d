"""The Xid catalog itself: complete rows, no duplicates, and the codes the fleet sees most."""

from __future__ import annotations

from prexid.detectors.xid_catalog import CATALOG, ROWS, xid_info

FATAL_FOR_THE_JOB = {48, 62, 64, 74, 79, 95, 119, 120}


def test_every_code_has_a_mnemonic_a_severity_and_an_action() -> None:
    for row in ROWS:
        assert row.code > 0
        assert row.mnemonic.strip() and row.action.strip(), row
        assert row.severity in ("critical", "warning", "info"), row


def test_no_code_appears_twice() -> None:
    codes = [row.code for row in ROWS]
    assert len(codes) == len(set(codes)) == len(CATALOG)


def test_the_newer_hopper_and_blackwell_codes_are_catalogued() -> None:
    assert {136, 140, *range(143, 151), 154} <= set(CATALOG)


def test_job_fatal_codes_page() -> None:
    assert {c for c in FATAL_FOR_THE_JOB if CATALOG[c].severity == "critical"} == FATAL_FOR_THE_JOB


def test_an_unknown_code_is_a_warning_not_dropped() -> None:
    info = xid_info(99999)
    assert (info.code, info.severity) == (99999, "warning") and "catalog" in info.action
