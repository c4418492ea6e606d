"""`prexid matrix` pools each variant's seeds: counts, 95% intervals and the false-alert rate's upper
bound, so the report says what its few failures per cell can show; old cells are scored again from the
files they keep."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from prexid.service.offline.matrix.command import cached_scores, worst_variant_anchors
from prexid.service.offline.matrix.pooled import Share, pool, rate_upper
from prexid.service.offline.matrix.report import render
from prexid.service.offline.matrix.score import Score
from prexid.service.offline.matrix.sets import Cell

HOUR = 3600.0


def cell(
    name: str, set_: str, detected: int, predictable: int, false: int, leads: tuple[float, ...]
) -> Score:
    return Score(
        cell=name,
        set=set_,
        system="prexid",
        predictable=predictable,
        detected=detected / predictable,
        xid_failures=predictable,
        pre_xid=len(leads) / predictable,
        pre_xid_warnable=len(leads) / predictable,
        median_lead_min=None,
        false_alerts=false,
        false_per_node_day=false / 4.0,
        node_days=4.0,
        detected_n=detected,
        pre_xid_n=len(leads),
        warnable=predictable,
        warned_n=len(leads),
        leads_min=leads,
        counted=True,
    )


def test_a_variant_pools_its_seeds_counts_and_leads() -> None:
    scores = [
        cell("random-s100", "report", 3, 4, 1, (5.0, 40.0)),
        cell("random-s101", "report", 5, 5, 0, (1.0,)),
        cell("idle-mixed-s100", "report", 2, 2, 0, (30.0, 31.0)),
        cell("wide-s1", "tuning", 1, 1, 0, ()),
    ]
    pools = {(p.set, p.variant): p for p in pool(scores)}
    random = pools[("report", "random")]
    assert (random.cells, random.node_days, random.false_alerts) == (2, 8.0, 1)
    assert (random.detected.hits, random.detected.of) == (8, 9)
    assert (random.warned.hits, random.warned.of) == (3, 9)
    assert random.median_lead_min == 5.0  # the median of all three leads, not of the cells' medians
    assert pools[("tuning", "wide")].median_lead_min == 0.0  # warnable failures, none warned: 0, not n/a
    text = render("t", "prexid matrix", scores)
    section = text.split("## Each variant pooled over its seeds", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| report | prexid | ")]
    assert rows[0].startswith("| report | prexid | random | 2 | 8 | 8/9 (89%, ")  # worst false rate first
    assert rows[1].startswith("| report | prexid | idle-mixed | 1 | 4 | 2/2 (100%, ")


def test_intervals_are_wilsons_and_the_rate_bound_is_poissons() -> None:
    lo, hi = Share(0, 10).interval()
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = Share(10, 10).interval()
    assert lo == pytest.approx(0.7225, abs=1e-4) and hi == pytest.approx(1.0)
    assert rate_upper(0, 120.0) == pytest.approx(2.9957 / 120.0, rel=1e-4)  # -ln(0.05) / N
    assert rate_upper(3, 120.0) == pytest.approx(7.7537 / 120.0, rel=1e-4)
    assert rate_upper(0, 375.0) < 0.008 < rate_upper(0, 370.0)  # clean node-days the goal needs shown


def test_rows_from_before_the_counts_are_scored_again_from_the_cells_files(tmp_path: Path) -> None:
    d = tmp_path / "random-s100"
    (d / "data").mkdir(parents=True)
    xid = 10 * HOUR
    label = {
        "id": "f0", "type": "xid79_fell_off_bus", "node": "node-00", "gpu": 1, "onset_ts": xid - HOUR,
        "xid_ts": xid, "xid_code": 79, "has_precursor": True, "end_ts": xid,
    }  # fmt: skip
    (d / "data" / "labels.jsonl").write_bytes(orjson.dumps(label) + b"\n")
    alert = {"status": "firing", "emitted_at": xid - 600.0, "node": "node-00", "gpu": 1, "kind": "pre_xid"}
    (d / "alerts.jsonl").write_bytes(orjson.dumps(alert) + b"\n")
    old = {  # a score row as matrices wrote them before the counts were kept
        "cell": "random-s100", "set": "report", "system": "prexid", "predictable": 1, "detected": 1.0,
        "xid_failures": 1, "pre_xid": 1.0, "pre_xid_warnable": 1.0, "median_lead_min": 10.0,
        "false_alerts": 0, "false_per_node_day": 0.0, "node_days": 4.0,
    }  # fmt: skip
    (d / "score.jsonl").write_bytes(orjson.dumps(old) + b"\n")
    args = argparse.Namespace(out=tmp_path, nodes=8, hours=12.0)
    (score,) = cached_scores(Cell("random", 100, "report"), args) or []
    assert score.counted and (score.detected_n, score.warned_n, score.leads_min) == (1, 1, (10.0,))
    (again,) = cached_scores(Cell("random", 100, "report"), args) or []  # now cached with its counts
    assert again == score
    assert cached_scores(Cell("random", 101, "report"), args) is None


def write_cell(root: Path, cell_id: str, alerts: list[dict[str, object]], node: str = "node-00") -> None:
    d = root / cell_id
    (d / "data").mkdir(parents=True)
    xid = 10 * HOUR
    label = {
        "id": "f0", "type": "xid79_fell_off_bus", "node": node, "gpu": 1, "onset_ts": xid - HOUR,
        "xid_ts": xid, "xid_code": 79, "has_precursor": True, "end_ts": xid,
    }  # fmt: skip
    (d / "data" / "labels.jsonl").write_bytes(orjson.dumps(label) + b"\n")
    (d / "alerts.jsonl").write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in alerts))


def test_the_anchors_are_reported_on_the_worst_variant_with_its_seeds_pooled(tmp_path: Path) -> None:
    """Two seeds of `random`, each with one Xid 79: one warned 10 min ahead plus a false alert, one
    caught only at its Xid. Pooled: recall 2/2, precision 2/3, one of two warned, one false alert over
    2 x 0.5 days x 64 GPUs. `idle-mixed` is clean, so `random` is the worst variant."""
    xid = 10 * HOUR
    warned = {"status": "firing", "emitted_at": xid - 600.0, "node": "node-00", "gpu": 1, "kind": "pre_xid"}
    false = {"status": "firing", "emitted_at": 2 * HOUR, "node": "node-05", "gpu": 0, "kind": "pre_xid"}
    at_xid = {"status": "firing", "emitted_at": xid, "node": "node-00", "gpu": 1, "kind": "xid"}
    write_cell(tmp_path, "random-s100", [warned, false])
    write_cell(tmp_path, "random-s101", [at_xid])
    write_cell(tmp_path, "idle-mixed-s100", [warned])
    args = argparse.Namespace(out=tmp_path, nodes=8, gpus=8, hours=12.0)
    scores = [
        s
        for c in (
            Cell("random", 100, "report"),
            Cell("random", 101, "report"),
            Cell("idle-mixed", 100, "report"),
        )
        for s in _score_all(c, args)
    ]
    got = worst_variant_anchors(scores, args)
    assert got is not None
    title, text = got
    assert title == "random, 2 seeds pooled"
    assert "| xid79_fell_off_bus | 2 | 0.67 / 1.00 / 0.80 |" in text
    assert "| 79 | 2 | 1: 10.0 / 10.0 / 10.0 |" in text
    assert "False alerts per 1,000 GPU-days: prexid 15.62." in text  # 1000 x 1 / (1 day x 64 GPUs)


def _score_all(cell: Cell, args: argparse.Namespace) -> list[Score]:
    from prexid.service.offline.evaluate.command import load_detections, load_labels
    from prexid.service.offline.matrix.score import score

    d = args.out / cell.id
    labels = load_labels(d / "data" / "labels.jsonl")
    return [score(cell.id, cell.set, "prexid", load_detections(d / "alerts.jsonl"), labels, 0.5, args.nodes)]
