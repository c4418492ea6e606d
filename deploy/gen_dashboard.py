#!/usr/bin/env python3
"""Writes the Grafana dashboard `deploy/grafana/prexid.json` (provisioned by docker-compose and shipped by
the Helm chart as a ConfigMap). Panels are declared here, compactly; `--check` fails if the file is stale."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGETS = (ROOT / "deploy/grafana/prexid.json", ROOT / "helm/prexid/files/grafana-dashboard.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
C = 'cluster=~"$cluster"'


def target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def panel(
    kind: str, title: str, grid: tuple[int, int, int, int], targets: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "type": kind,
        "title": title,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        **extra,
    }


def score_colours() -> dict[str, Any]:
    steps = [
        {"color": "green", "value": None},
        {"color": "yellow", "value": 0.3},
        {"color": "red", "value": 0.5},
    ]
    return {
        "defaults": {
            "min": 0,
            "max": 1,
            "unit": "percentunit",
            "thresholds": {"mode": "absolute", "steps": steps},
            "color": {"mode": "thresholds"},
        },
        "overrides": [],
    }


def row(title: str, y: int) -> dict[str, Any]:
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }


RATE = "[$__rate_interval]"


def score_panels() -> list[dict[str, Any]]:
    return [
        row("Fused scores", 0),
        panel(
            "status-history",
            "Fused score heatmap: node × GPU (red ≥ 0.5 fires pre_xid)",
            (0, 1, 16, 14),
            [target(f"max by (node, gpu) (prexid_gpu_fused_score{{{C}}})", "{{node}} / GPU {{gpu}}")],
            fieldConfig=score_colours(),
            options={"showValue": "never", "rowHeight": 0.9},
        ),
        panel(
            "bargauge",
            "Top 10 GPUs by fused score",
            (16, 1, 8, 7),
            [target(f"topk(10, prexid_gpu_fused_score{{{C}}})", "{{node}} / GPU {{gpu}}", instant=True)],
            fieldConfig=score_colours(),
            options={"orientation": "horizontal", "displayMode": "gradient"},
        ),
        panel(
            "status-history",
            "Node (host) fused score",
            (16, 8, 8, 7),
            [target(f"max by (node) (prexid_node_fused_score{{{C}}})", "{{node}}")],
            fieldConfig=score_colours(),
            options={"showValue": "never"},
        ),
    ]


def alert_panels() -> list[dict[str, Any]]:
    return [
        row("Alerts", 15),
        panel(
            "table",
            "Active alerts",
            (0, 16, 14, 8),
            [
                target(
                    'ALERTS{alertstate="firing", kind=~"pre_xid|xid|node|cluster|prexid"}',
                    "",
                    format="table",
                    instant=True,
                )
            ],
            transformations=[
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}},
                }
            ],
        ),
        panel(
            "timeseries",
            "Alerts emitted by kind",
            (14, 16, 10, 8),
            [
                target(
                    'sum by (kind) (increase(prexid_alerts_total{status="firing"}' + RATE + "))", "{{kind}}"
                )
            ],
        ),
    ]


def lead_time_panels() -> list[dict[str, Any]]:
    lead = f"sum by (le) (rate(prexid_pre_xid_lead_time_seconds_bucket{RATE}))"
    return [
        row("Lead time: how early pre_xid warned before the Xid", 24),
        panel(
            "timeseries",
            "Lead time quantiles",
            (0, 25, 12, 8),
            [
                target(f"histogram_quantile(0.1, {lead})", "p10", "A"),
                target(f"histogram_quantile(0.5, {lead})", "p50", "B"),
                target(f"histogram_quantile(0.9, {lead})", "p90", "C"),
            ],
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        panel(
            "stat",
            "Xids warned about in time range",
            (12, 25, 6, 8),
            [
                target(
                    'sum(increase(prexid_xid_events_total{preceded="true"}[$__range]))'
                    " / sum(increase(prexid_xid_events_total[$__range]))",
                    "warned",
                    instant=True,
                )
            ],
            fieldConfig={"defaults": {"unit": "percentunit"}, "overrides": []},
        ),
        panel(
            "bargauge",
            "Lead time distribution in range",
            (18, 25, 6, 8),
            [
                target(
                    "sum by (le) (increase(prexid_pre_xid_lead_time_seconds_bucket[$__range]))",
                    "{{le}}",
                    format="heatmap",
                    instant=True,
                )
            ],
        ),
    ]


def health_panels() -> list[dict[str, Any]]:
    batch = f"sum by (le) (rate(prexid_batch_duration_seconds_bucket{RATE}))"
    return [
        row("Pipeline health", 33),
        panel(
            "timeseries",
            "Event-time lag (wall clock − watermark)",
            (0, 34, 8, 8),
            [target("time() - prexid_event_time_watermark_seconds", "{{instance}}")],
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        panel(
            "timeseries",
            "Throughput",
            (8, 34, 8, 8),
            [
                target(f"sum by (instance) (rate(prexid_samples_total{RATE}))", "samples/s {{instance}}"),
                target(f"sum by (stream) (rate(prexid_messages_total{RATE}))", "messages/s {{stream}}", "B"),
                target(f"sum(rate(prexid_kernel_lines_total{RATE}))", "kernel lines/s", "C"),
            ],
        ),
        panel(
            "timeseries",
            "Dead letters by reason",
            (16, 34, 8, 8),
            [target(f"sum by (reason) (rate(prexid_dead_letters_total{RATE}))", "{{reason}}")],
        ),
        panel(
            "timeseries",
            "Batch duration p50 / p99",
            (0, 42, 8, 8),
            [
                target(f"histogram_quantile(0.5, {batch})", "p50"),
                target(f"histogram_quantile(0.99, {batch})", "p99", "B"),
            ],
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        panel(
            "timeseries",
            "Series: known and refused",
            (8, 42, 8, 8),
            [
                target("sum by (instance) (prexid_series)", "known {{instance}}"),
                target(
                    "sum by (instance) (rate(prexid_series_refused_total[5m]))", "refused/s {{instance}}", "B"
                ),
            ],
        ),
        panel(
            "stat",
            "prexid instances up",
            (16, 42, 8, 8),
            [target('sum(up{job="prexid"})', "up", instant=True)],
        ),
        panel(
            "timeseries",
            "Cluster fault score (≥ 0.5 fires a cluster alert)",
            (0, 50, 12, 8),
            [target("max by (instance) (prexid_cluster_fused_score)", "{{instance}}")],
            fieldConfig=score_colours(),
        ),
        panel(
            "timeseries",
            "Alert delivery: Alertmanager posts and withheld firings",
            (12, 50, 12, 8),
            [
                target(
                    f"sum by (outcome) (rate(prexid_alertmanager_posts_total{RATE}))", "posts {{outcome}}"
                ),
                target(f"sum(rate(prexid_alerts_rate_limited_total{RATE}))", "withheld (flapping)", "B"),
                target(
                    f"sum(rate(prexid_alertmanager_dropped_resolved_total{RATE}))", "resolved dropped", "C"
                ),
            ],
        ),
        panel(
            "timeseries",
            "Checkpoint age (10 min alerts: a takeover replays all of it)",
            (0, 58, 12, 8),
            [
                target(
                    "time() - prexid_last_checkpoint_timestamp_seconds and prexid_partitions_owned > 0",
                    "{{instance}}",
                )
            ],
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        panel(
            "timeseries",
            "Partitions owned, and takeovers by how (refused: relearning cold)",
            (12, 58, 12, 8),
            [
                target("sum by (instance) (prexid_partitions_owned)", "owned {{instance}}"),
                target(f"sum by (how) (increase(prexid_takeovers_total{RATE}))", "taken over: {{how}}", "B"),
            ],
        ),
    ]


def reliability_panels() -> list[dict[str, Any]]:
    """The node reliability ledger: the few nodes behind most failures, for RMA or burn-in."""
    month = 'max by (node) (increase(prexid_node_failures_total{kind="xid"}[30d]))'
    return [
        row("Node reliability: repeat offenders", 66),
        panel(
            "stat",
            "Share of this month's Xid failures caused by the 3 worst nodes",
            (0, 67, 8, 8),
            [target(f"sum(topk(3, {month})) / sum({month})", "top 3", instant=True)],
            fieldConfig={"defaults": {"unit": "percentunit"}, "overrides": []},
        ),
        panel(
            "bargauge",
            "Repeat-offender score (1 or more: RMA or burn-in)",
            (8, 67, 16, 8),
            [
                target(
                    "topk(10, max by (node) (prexid_node_repeat_offender_score))",
                    "{{node}}",
                    instant=True,
                )
            ],
        ),
    ]


def fleet_panels() -> list[dict[str, Any]]:
    """The fleet vote across partitions: who aggregates, which partitions' summaries are missing, and
    what the summaries topic costs beside the metrics it summarises."""
    return [
        row("Fleet vote: summaries and the aggregator", 75),
        panel(
            "timeseries",
            "Aggregator role holders (1), partitions left out of a shard's vote (0)",
            (0, 76, 12, 8),
            [
                target("sum(prexid_fleet_aggregator)", "aggregators"),
                target("max by (instance) (prexid_fleet_partitions_missing)", "missing {{instance}}", "B"),
                target(f"sum(increase(prexid_fleet_late_summaries_total{RATE}))", "late summaries", "C"),
            ],
        ),
        panel(
            "timeseries",
            "Summaries published, bytes per second",
            (12, 76, 12, 8),
            [target(f"sum by (instance) (rate(prexid_fleet_published_bytes_total{RATE}))", "{{instance}}")],
            fieldConfig={"defaults": {"unit": "Bps"}, "overrides": []},
        ),
    ]


def panels() -> list[dict[str, Any]]:
    return (
        score_panels()
        + alert_panels()
        + lead_time_panels()
        + health_panels()
        + reliability_panels()
        + fleet_panels()
    )


def dashboard() -> dict[str, Any]:
    cluster_var = {
        "name": "cluster",
        "type": "query",
        "datasource": DS,
        "query": "label_values(prexid_gpu_fused_score, cluster)",
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "refresh": 2,
    }
    ds_var = {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}
    return {
        "uid": "prexid",
        "title": "prexid: pre-Xid GPU anomaly detection",
        "tags": ["prexid", "gpu"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [ds_var, cluster_var]},
        "panels": [{**p, "id": i + 1} for i, p in enumerate(panels())],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail if a written file is out of date")
    text = render()
    stale = [t for t in TARGETS if not t.exists() or t.read_text() != text]
    if ap.parse_args(argv).check:
        for t in stale:
            print(f"{t.relative_to(ROOT)} is out of date: run deploy/gen_dashboard.py", file=sys.stderr)
        return 1 if stale else 0
    for t in TARGETS:
        t.parent.mkdir(parents=True, exist_ok=True)
        t.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
