"""The Grafana dashboard: every PromQL query names only metrics prexid exports (or Prometheus' own),
parses as PromQL under promtool, and the panels people need are there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy/grafana/prexid.json"
STANDARD = {"up", "ALERTS", "ALERTS_FOR_STATE"}
KEYWORDS = {
    "by",
    "without",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "on",
    "ignoring",
    "group_left",
    "group_right",
}
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m", "$cluster": ".*"}


def exported_names() -> set[str]:
    """Sample names prexid's registry exposes (parsed from its exposition, as Prometheus would)."""
    state, _ = build(Settings(alertmanager_urls=["http://127.0.0.1:9"]))  # with the sink's counters
    names: set[str] = set()
    for family in text_string_to_metric_families(generate_latest(state.telemetry.registry).decode()):
        names |= {family.name + s for s in SUFFIXES.get(family.type, ("",))}
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label names,
    string contents, durations or Grafana variables."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)  # label matchers, ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\$\w+", " ", expr)
    idents = re.findall(r"(?<![\w.])([A-Za-z_:][\w:]*)\s*(\()?", expr)
    return {name for name, call in idents if not call and name not in KEYWORDS}


def queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def test_metric_name_extraction_keeps_metrics_and_drops_functions_labels_and_keywords() -> None:
    expr = 'histogram_quantile(0.9, sum by (le) (rate(a_bucket{x="y z"}[5m]))) / on(job) b and time() - c'
    assert metric_names(expr) == {"a_bucket", "b", "c"}


def test_every_query_names_only_metrics_prexid_exports_or_standard_ones() -> None:
    known = exported_names() | STANDARD
    assert "prexid_pre_xid_lead_time_seconds_bucket" in known and "prexid_dead_letters_total" in known
    unknown = {(title, name) for title, expr in queries() for name in metric_names(expr) - known}
    assert unknown == set()


def test_the_dashboard_covers_scores_alerts_lead_times_and_pipeline_health() -> None:
    used = set().union(*(metric_names(expr) for _, expr in queries()))
    assert used >= {
        "prexid_gpu_fused_score",
        "prexid_node_fused_score",
        "ALERTS",
        "prexid_pre_xid_lead_time_seconds_bucket",
        "prexid_event_time_watermark_seconds",
        "prexid_samples_total",
        "prexid_dead_letters_total",
        "prexid_cluster_fused_score",
        "prexid_last_checkpoint_timestamp_seconds",
        "prexid_takeovers_total",
    }
    heatmap = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if "heatmap" in p["title"])
    assert "node" in heatmap["targets"][0]["expr"] and "gpu" in heatmap["targets"][0]["expr"]


@pytest.mark.integration  # needs Debian's promtool
def test_every_query_parses_as_promql_under_promtool(tmp_path: Path) -> None:
    """Each query becomes a recording rule, which `promtool check rules` parses with Prometheus' parser."""
    rules = []
    for i, (_, expr) in enumerate(queries()):
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        rules.append({"record": f"dashboard:query{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_dashboard_json_and_the_helm_copy_are_what_the_generator_writes() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "deploy/gen_dashboard.py"), "--check"], capture_output=True
    )
    assert run.returncode == 0, run.stderr.decode()


@pytest.mark.parametrize("key", ["uid", "title", "panels", "templating", "schemaVersion"])
def test_dashboard_has_the_fields_grafana_provisioning_needs(key: str) -> None:
    assert json.loads(DASHBOARD.read_text())[key]
