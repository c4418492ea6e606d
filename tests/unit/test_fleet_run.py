"""`prexid run`'s fleet vote in process: partitions judged with the others' published counts, one aggregator.

The same stall as a real-broker test runs (tests/integration/test_scale_fleet_vote.py), with the
summaries topic's lag made explicit: a partition sees the others' records of the previous batch.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from aiokafka.partitioner import murmur2
from prometheus_client import CollectorRegistry

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.aggregator import Aggregator
from prexid.service.pipeline.fleet_judge import FleetBoard, FleetJudge
from prexid.service.pipeline.fleet_summary import PartitionSummary
from prexid.service.pipeline.pipeline import Pipeline, PipelineConfig
from prexid.service.schemas import Alert
from prexid.service.sinks.alertmanager import AlertmanagerSink
from prexid.service.sinks.kafka import KafkaSink
from prexid.service.sources.aggregator_role import AggregatorRole
from prexid.service.state import snapshot
from tests.unit import wiring
from tests.unit.stall_traffic import node_of, stall_scrapes

NODES, PARTITIONS, TICKS = 8, 4, 200
STALL = range(80, 140)


def partition_of(node: str) -> int:
    return int(murmur2(node.encode()) & 0x7FFFFFFF) % PARTITIONS


def split(samples: list[RawSample]) -> list[list[RawSample]]:
    out: list[list[RawSample]] = [[] for _ in range(PARTITIONS)]
    for s in samples:
        out[partition_of(node_of(s))].append(s)
    return out


def pages(alerts: list[Alert]) -> list[tuple[str, str]]:
    return [(a.kind, a.node) for a in alerts if a.kind != "cluster" and a.status == "firing"]


def test_judged_apart_the_stall_pages_nodes_one_by_one() -> None:
    """What the fleet vote is for: two families on every node, and the partitions with one node alone
    (1 and 2) too few to call it shared, so their nodes page; those with three raise cluster alerts of
    their own."""
    pipelines = [Pipeline() for _ in range(PARTITIONS)]
    alerts: list[Alert] = []
    for scrape in stall_scrapes(NODES, TICKS, STALL):
        for pipe, mine in zip(pipelines, split(scrape), strict=True):
            alerts += pipe.ingest_samples(mine, "metrics:0")
    assert sorted(pages(alerts)) == [("node", "node-01"), ("node", "node-06")]
    assert sum(a.kind == "cluster" and a.status == "firing" for a in alerts) == 2


def run_fleet(
    on_record: Callable[[PartitionSummary, int], None],
    silent: tuple[int, float] | None = None,
    until: float = float("inf"),
) -> tuple[list[Alert], list[FleetJudge]]:
    """Four partitions' pipelines with fleet judges on one board; every record goes, one batch late, to
    the board and to `on_record` (the aggregator) with its offset. `silent`: a partition whose records
    stop arriving from that tick on (its replica died); `until`: the event time the stream stops at."""
    board = FleetBoard()
    pipelines = [Pipeline() for _ in range(PARTITIONS)]
    judges = [FleetJudge(p, i, board, lateness_s=120.0) for i, p in enumerate(pipelines)]
    alerts: list[Alert] = []
    offset = 0
    for scrape in stall_scrapes(NODES, TICKS, STALL):
        if scrape[0].ts > until:
            break
        for pipe, mine in zip(pipelines, split(scrape), strict=True):
            alerts += pipe.ingest_samples(mine, "metrics:0")
        for judge in judges:
            for record in judge.take_outbox():
                if silent is not None and record.partition == silent[0] and record.tick >= silent[1]:
                    continue
                wired = PartitionSummary.from_bytes(record.to_bytes())
                board.observe(wired)
                on_record(wired, offset)
                offset += 1
    return alerts, judges


def test_judged_as_a_fleet_no_node_pages_and_one_cluster_alert() -> None:
    aggregator = Aggregator(PipelineConfig(), lateness_s=120.0)
    raised: list[Alert] = []

    def feed(record: PartitionSummary, offset: int) -> None:
        aggregator.observe(record, offset)
        raised.extend(aggregator.advance()[0])

    alerts, judges = run_fleet(feed)
    assert pages(alerts) == []
    assert [a for a in alerts if a.kind == "cluster"] == []  # partitions leave it to the aggregator
    assert [(a.kind, a.status) for a in raised] == [("cluster", "firing"), ("cluster", "resolved")]
    assert {s.family for s in raised[0].signals} == {"network", "storage-io"}
    assert all(j.degraded_ticks <= 1 for j in judges)  # the first tick, before any record was read
    assert aggregator.late == 0


@pytest.mark.parametrize("published_by", ["this build", "a build before alerts were held"])
def test_an_aggregator_taking_over_mid_stall_raises_the_same_one_alert(published_by: str) -> None:
    """The first aggregator dies mid-stall after firing; the next restores the state published with its
    last verdict, re-reads the summaries from where that verdict says, and resolves the same alert. A
    verdict published before alerts were held (no `quiet_from`: a rolling upgrade) restores too."""
    first = Aggregator(PipelineConfig(), lateness_s=120.0)
    records: list[tuple[PartitionSummary, int]] = []
    raised: list[Alert] = []
    state: list[tuple[bytes, int]] = []  # the verdict record: its state and the offset to resume from

    def feed(record: PartitionSummary, offset: int) -> None:
        records.append((record, offset))
        if offset > 0 and not state and any(a.status == "firing" for a in raised):
            state.append((orjson.dumps(first.snapshot()), first.resume_offset(offset)))
        if not state or len(records) < 20 + state[0][1]:  # it goes on a while after its last verdict
            first.observe(record, offset)
            raised.extend(first.advance()[0])

    run_fleet(feed)
    doc, resume = state[0]
    second = Aggregator(PipelineConfig(), lateness_s=120.0)
    published = orjson.loads(doc)
    if published_by != "this build":
        del published["lifecycle"]["quiet_from"]
    second.restore(published)
    second.replaying_to = len(records)
    after: list[Alert] = []
    for record, offset in records[resume:]:
        second.observe(record, offset)
        after.extend(second.advance()[0])
    firing = [a for a in raised if a.status == "firing"]
    assert len(firing) == 1
    assert [(a.kind, a.status) for a in after] == [("cluster", "resolved")]
    assert after[0].fingerprint == firing[0].fingerprint
    assert second.late == 0


def test_a_partition_gone_silent_mid_stall_is_left_out_counted_and_pages_stay_held() -> None:
    """Partition 3's replica dies at the stall's start: the others judge without it once its last
    record is 120 s old (counted), the aggregator leaves it out of its ticks (counted), and the other
    partitions' seven nodes are still enough to hold every page under the one cluster alert."""
    aggregator = Aggregator(PipelineConfig(), lateness_s=120.0)
    raised: list[Alert] = []

    def feed(record: PartitionSummary, offset: int) -> None:
        aggregator.observe(record, offset)
        raised.extend(aggregator.advance()[0])

    stall_start = 1_796_205_600.0 + 15.0 * STALL.start
    alerts, judges = run_fleet(feed, silent=(3, stall_start))
    assert pages([a for a in alerts if not a.node or partition_of(a.node) != 3]) == []
    assert all(j.missing == [3] for i, j in enumerate(judges) if i != 3)
    assert all(j.degraded_ticks >= TICKS - STALL.start - 10 for i, j in enumerate(judges) if i != 3)
    assert aggregator.missing_ticks >= TICKS - STALL.start - 10
    assert [(a.kind, a.status) for a in raised] == [("cluster", "firing"), ("cluster", "resolved")]


def test_a_cluster_alert_a_partition_raised_before_the_fleet_vote_still_resolves() -> None:
    """A shard restored from a snapshot taken when it raised its own cluster alerts: under the fleet
    vote it raises none, but the one it had firing ends when the stall does (not re-sent for ever)."""
    before, after = wiring.processor(pipeline=Pipeline()), wiring.processor(pipeline=Pipeline())
    raised: list[Alert] = []
    scrapes = list(stall_scrapes(NODES, TICKS, STALL))
    for scrape in scrapes[:130]:
        raised += before.pipeline.ingest_samples(scrape, "metrics:0")
    assert [(a.kind, a.status) for a in raised] == [("cluster", "firing")]
    snapshot.load(snapshot.dump(before, {}), after)
    after.pipeline.raises_cluster_alerts = False
    rest: list[Alert] = []
    for scrape in scrapes[130:]:
        rest += after.pipeline.ingest_samples(scrape, "metrics:0")
    assert [(a.kind, a.status, a.fingerprint) for a in rest] == [
        ("cluster", "resolved", raised[0].fingerprint)
    ]


async def test_a_replica_losing_the_aggregator_role_stops_re_sending_its_cluster_alert() -> None:
    """Its Alertmanager sink re-sends firing alerts for ever; once the role moved, the new holder
    re-sends the cluster alert and later resolves it, and re-sends from here would re-open it."""
    settings = Settings()
    state = build(settings)[0]
    sink = AlertmanagerSink(["http://am"], CollectorRegistry())
    new = lambda: Aggregator(PipelineConfig(), 120.0)  # noqa: E731
    role = AggregatorRole(settings, new, KafkaSink(settings), state.telemetry, [sink.submit], [sink.forget])
    agg = Aggregator(PipelineConfig(), lateness_s=120.0)
    raised: list[Alert] = []

    def feed(record: PartitionSummary, offset: int) -> None:
        agg.observe(record, offset)
        raised.extend(agg.advance()[0])

    run_fleet(feed, until=1_796_205_600.0 + 15.0 * 130)
    sink.submit(raised)
    assert [a.kind for a, _ in sink.active.values()] == ["cluster"]
    role.aggregator = agg
    await role.on_partitions_revoked([role.tp])
    assert role.aggregator is None and sink.active == {}
    assert sink.resolved == {}  # forgotten here, not resolved: it still fires, from the next holder
