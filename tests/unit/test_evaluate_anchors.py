"""The anchors' figures (issue 16 item 6) on hand-built cases: per-type P/R/F1, leads per Xid class,
time to detect, false alerts per 1,000 GPU-days."""

from __future__ import annotations

import pytest

from prexid.service.offline.evaluate.anchors import false_per_kilo_gpu_day, leads_by_xid, render, type_scores
from prexid.service.offline.evaluate.match import Detection, Label, Rules, match

T = 100_000.0
A1 = Label("a1", "xid79_fell_off_bus", "node-01", 3, T - 1800, T, 79, True, T)
A2 = Label("a2", "xid79_fell_off_bus", "node-02", 0, T - 1800, T, 79, True, T)
B1 = Label("b1", "xid48_dbe", "node-03", 5, 2 * T - 600, 2 * T, 48, True, 2 * T)
ALERTS = [
    Detection(T - 1200, "node-01", 3),  # A1 warned 20 min ahead, 10 min after onset
    Detection(T - 600, "node-01", 3),  # A1 again: a second matching alert
    Detection(2 * T + 60, "node-03", 5),  # B1 after its Xid (grace): detected, not pre-XID
    Detection(3 * T, "node-07", 1),  # false
]


def result():
    return match(ALERTS, [A1, A2, B1], Rules(pre_window_s=600.0, grace_s=300.0))


def test_precision_is_the_pagers_view_recall_and_f1_per_type() -> None:
    by = {t.ftype: t for t in type_scores(result())}
    a, b = by["xid79_fell_off_bus"], by["xid48_dbe"]
    assert (a.failures, a.recall, a.precision) == (2, 0.5, pytest.approx(2 / 3))
    assert a.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert (b.recall, b.precision) == (1.0, 0.5)  # one matching alert, one false alert
    assert a.ttd_median_s == pytest.approx(600.0) and b.ttd_median_s == pytest.approx(660.0)


def test_leads_are_grouped_by_xid_class_and_only_warnings_before_the_xid_have_one() -> None:
    assert leads_by_xid(result()) == {48: (1, 0, []), 79: (2, 1, [pytest.approx(1200.0)])}


def test_false_alerts_per_thousand_gpu_days_and_the_rendered_tables() -> None:
    r = result()
    assert false_per_kilo_gpu_day(r, days=2.0, gpus=32) == pytest.approx(1000.0 / 64)
    md = render({"prexid": r, "static": match([], [A1, A2, B1])}, days=2.0, gpus=32)
    assert "| xid79_fell_off_bus | 2 | 0.67 / 0.50 / 0.57 | n/a / 0.00 / 0.00 |" in md
    assert "| 79 | 2 | 1: 20.0 / 20.0 / 20.0 | 0: - |" in md
    assert "prexid 15.62 · static 0.00" in md
