"""The summaries topic stays under 1% of the metric traffic: bytes per node per tick, measured.

The demo cluster (8 nodes of 8 GPUs, dcgm-exporter's fields and two node-exporter series per node: far
fewer series than a real node exports, so the ratio is the worst case) runs through a partition's
pipeline with a fleet judge publishing every tick; its incident (a GPU degrading, then its Xid) makes
nodes score and vote, so rows are written too. Every record carries the partition's node values per
node peer group (`detectors/fleet_peers`), and one after each refit of the error counters' prior its
sufficient statistics (`detectors/fleet_prior`), and one every 10 minutes of event time the false-alert
budget's and the family calibration's null sums (`detectors/fleet_null_stats`), measured with the rest.
"""

from __future__ import annotations

from prexid.service.pipeline.fleet_judge import FleetBoard, FleetJudge
from prexid.service.pipeline.fleet_summary import PartitionSummary
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.sources.demo_cluster import DemoCluster, simulate
from tests.unit import wiring

CLUSTER = DemoCluster(nodes=8, gpus=8, duration_s=2100.0)


def test_summaries_are_under_one_percent_of_the_metric_bytes_they_summarise() -> None:
    pipeline = Pipeline()
    judge = FleetJudge(pipeline, 0, FleetBoard(), lateness_s=120.0)
    processor = wiring.processor(pipeline=pipeline)
    metric_bytes = summary_bytes = ticks = 0
    records: list[PartitionSummary] = []
    for tick in simulate(CLUSTER):
        metric_bytes += sum(len(m) for m in tick.metrics)
        wiring.step(processor, tick)
        for record in judge.take_outbox():
            records.append(record)
            summary_bytes += len(record.to_bytes())
        ticks += 1
    assert len(records) >= ticks - 2  # one a tick (the last scrapes wait for the watermark)
    assert any(r.nodes for r in records) and any(r.names for r in records)
    assert all(r.peers is not None for r in records)  # the node peer values ride every record
    assert sum(r.prior is not None for r in records) >= 3  # error-counter prior stats: every 10 minutes
    per_node_tick = summary_bytes / len(records) / CLUSTER.nodes
    metric_per_node_tick = metric_bytes / ticks / CLUSTER.nodes
    assert sum(r.null is not None for r in records) >= 3  # null sums: every 10 minutes
    prior_bytes = sum(len(r.prior.to_wire()) for r in records if r.prior is not None)
    nulls = [len(r.null.to_wire()) + 8 for r in records if r.null is not None]  # with `,"fn":""`
    print(
        f"summaries {per_node_tick:.1f} B/node/tick (prior stats {prior_bytes / len(records) / CLUSTER.nodes:.1f},"
        f" null sums {sum(nulls) / len(records) / CLUSTER.nodes:.1f}: {min(nulls)}-{max(nulls)} B a record"
        f" carrying them, {len(nulls)} of {len(records)}), metrics {metric_per_node_tick:.0f} B/node/tick"
    )
    assert summary_bytes < 0.01 * metric_bytes
