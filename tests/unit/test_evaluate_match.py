"""The scorer's matching rules on small hand-built cases, and NAB's scoring profiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from prexid.service.offline.evaluate.match import Detection, Label, Rules, match, parse_alert
from prexid.service.offline.evaluate.nab import PROFILES, normalised, raw_score, scaled_sigmoid
from prexid.service.offline.evaluate.summary import summarise

XID = 10_000.0
GPU_FAILURE = Label("f1", "xid79_fell_off_bus", "node-01", 3, XID - 1800, XID, 79, True, XID)
RULES = Rules(pre_window_s=600.0, grace_s=300.0)


def one(d: Detection, label: Label = GPU_FAILURE):
    return match([d], [label], RULES)


def test_alert_on_the_failing_gpu_before_the_xid_is_a_pre_xid_detection_with_its_lead_time() -> None:
    r = one(Detection(XID - 900, "node-01", 3))
    assert r.outcomes[0].detected and r.outcomes[0].pre_xid
    assert r.outcomes[0].lead_s == pytest.approx(900)
    assert r.false_alerts == []


def test_alert_on_another_gpu_of_the_same_node_is_false_and_misses() -> None:
    r = one(Detection(XID - 900, "node-01", 4))
    assert not r.outcomes[0].detected
    assert len(r.false_alerts) == 1


def test_node_level_alert_on_the_failing_node_matches_a_gpu_failure() -> None:
    assert one(Detection(XID - 60, "node-01", None)).outcomes[0].pre_xid


def test_window_opens_pre_window_before_onset_inclusive_and_not_earlier() -> None:
    opening = GPU_FAILURE.onset_ts - RULES.pre_window_s
    assert one(Detection(opening, "node-01", 3)).outcomes[0].detected
    early = one(Detection(opening - 1, "node-01", 3))
    assert not early.outcomes[0].detected and len(early.false_alerts) == 1


def test_alert_within_grace_after_the_xid_detects_but_is_not_pre_xid() -> None:
    o = one(Detection(XID + 300, "node-01", 3)).outcomes[0]
    assert o.detected and not o.pre_xid and o.lead_s is None


def test_alert_after_the_grace_period_is_false() -> None:
    r = one(Detection(XID + 301, "node-01", 3))
    assert not r.outcomes[0].detected and len(r.false_alerts) == 1


def test_alert_at_the_xid_instant_is_not_pre_xid() -> None:
    assert not one(Detection(XID, "node-01", 3)).outcomes[0].pre_xid


def test_first_matching_alert_decides_the_lead_time() -> None:
    r = match([Detection(XID - 60, "node-01", 3), Detection(XID - 1200, "node-01", 3)], [GPU_FAILURE], RULES)
    assert r.outcomes[0].lead_s == pytest.approx(1200)


def test_cluster_wide_failure_is_matched_by_an_alert_on_any_node() -> None:
    storm = Label("s1", "nfs_saturation", "*", None, 5000.0, None, None, True, 6000.0)
    r = one(Detection(5500.0, "node-42", None), storm)
    assert r.outcomes[0].detected and not r.outcomes[0].pre_xid and r.false_alerts == []


def test_resolved_messages_are_not_alerts() -> None:
    doc = {"status": "resolved", "node": "node-01", "gpu": 3, "starts_at": "2026-12-01T10:00:00Z"}
    assert parse_alert(doc) is None


def test_alert_time_is_emitted_at_when_present_else_starts_at() -> None:
    base = {"status": "firing", "node": "node-01", "gpu": 3, "starts_at": "2026-12-01T10:00:00Z"}
    assert parse_alert({**base, "emitted_at": 123.0}).t == 123.0  # type: ignore[union-attr]
    assert parse_alert(base).t == pytest.approx(1796119200.0)  # type: ignore[union-attr]


def test_false_alerts_per_day_and_per_node_day() -> None:
    r = match([Detection(1.0, "node-09", 0), Detection(2.0, "node-09", 1)], [GPU_FAILURE], RULES)
    s = summarise(r, days=4.0, nodes=10)
    assert s.false_alerts == 2
    assert s.false_per_day == pytest.approx(0.5)
    assert s.false_per_node_day == pytest.approx(0.05)
    assert s.detected == 0.0


def test_nab_sigmoid_is_near_one_at_window_start_and_zero_at_its_end() -> None:
    assert scaled_sigmoid(-1.0) == pytest.approx(0.9866, abs=1e-3)
    assert scaled_sigmoid(0.0) == pytest.approx(0.0)
    assert scaled_sigmoid(1.0) < 0


def test_nab_null_detector_scores_zero_and_perfect_detector_scores_hundred() -> None:
    ts = [float(t) for t in range(100)]
    windows = [(20.0, 30.0), (60.0, 70.0)]
    p = PROFILES["standard"]
    assert normalised(ts, [False] * 100, windows, p) == pytest.approx(0.0)
    perfect = [t in (20.0, 60.0) for t in ts]
    assert normalised(ts, perfect, windows, p) == pytest.approx(100.0)


def test_nab_false_positive_before_any_window_costs_the_profiles_fp_weight() -> None:
    ts = [0.0, 1.0, 50.0]
    windows = [(40.0, 60.0)]
    low, high = PROFILES["standard"], PROFILES["reward_low_FP_rate"]
    detected = [True, False, True]
    inside = scaled_sigmoid((50.0 - 60.0) / 20.0)
    assert raw_score(ts, detected, windows, low) == pytest.approx(inside - 0.11)
    assert raw_score(ts, detected, windows, high) == pytest.approx(inside - 0.22)


def test_nab_only_the_first_detection_in_a_window_counts_and_misses_cost_fn() -> None:
    ts = [10.0, 11.0, 12.0]
    windows = [(10.0, 20.0), (30.0, 40.0)]
    p = PROFILES["reward_low_FN_rate"]
    assert raw_score(ts, [True, True, True], windows, p) == pytest.approx(scaled_sigmoid(-1.0) - 2.0)


def test_univariate_replay_scores_each_point_from_past_data_only(tmp_path: Path) -> None:
    from prexid.service.offline.evaluate.nab import read_scores
    from prexid.service.offline.evaluate.univariate import replay_csv

    rng = np.random.default_rng(0)
    values = 10 + rng.normal(0, 0.5, 300)
    values[200] = 40.0
    future_changed = values.copy()
    future_changed[250:] = 1000.0  # a wild future must not change any score before it

    def run(vals: np.ndarray, name: str) -> list[str]:
        src = tmp_path / f"{name}.csv"
        src.write_text("timestamp,value\n" + "".join(f"{60 * i},{v}\n" for i, v in enumerate(vals)))
        out = tmp_path / f"{name}-scores.csv"
        replay_csv(src, out)
        return out.read_text().splitlines()

    a, b = run(values, "a"), run(future_changed, "b")
    assert a[: 250 + 1] == b[: 250 + 1]
    _, detected = read_scores(tmp_path / "a-scores.csv")
    assert detected[200] and sum(detected[:200]) == 0


def test_nab_windows_file_in_nabs_own_format_reads_as_utc(tmp_path: Path) -> None:
    from prexid.service.offline.evaluate.nab import read_windows

    path = tmp_path / "combined_windows.json"
    path.write_text(
        '{"realKnownCause/x.csv": [["2013-12-10 06:25:00.000000", "2013-12-12 05:35:00.000000"]]}'
    )
    assert read_windows(path) == [(1386656700.0, 1386826500.0)]


def test_a_report_table_of_counts_with_nothing_counted_says_so_rather_than_breaking() -> None:
    from collections import Counter

    from prexid.service.offline.evaluate.report import causes_table

    assert causes_table({"prexid": Counter(), "static": Counter()}) == "None, for any system."
    table = causes_table({"prexid": Counter({"node": 2}), "static": Counter()}).splitlines()
    assert table == ["| system | node |", "|---|---|", "| prexid | 2 |", "| static | 0 |"]
