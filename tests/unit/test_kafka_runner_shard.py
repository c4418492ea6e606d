"""A shard takes each record once, even when a takeover's seek makes Kafka deliver it twice."""

from __future__ import annotations

from aiokafka import ConsumerRecord, TopicPartition

from service.cli import build
from service.kafka_runner import KafkaRunner, Shard, alert_key
from service.models import Alert
from service.processor import Processor
from service.settings import Settings

TP = TopicPartition("metrics", 1)


def build_processor() -> Processor:
    return build(Settings())[1]


def records(first: int, last: int) -> list[ConsumerRecord]:
    return [
        ConsumerRecord("metrics", 1, o, 0, 0, None, b"{}", None, 0, 2, []) for o in range(first, last + 1)
    ]


def test_records_before_the_shards_offset_are_dropped_and_the_rest_kept() -> None:
    shard = Shard(build_processor(), {TP: 100})
    assert [r.offset for r in shard.unseen(TP, records(90, 104))] == list(range(100, 105))
    assert shard.unseen(TP, records(50, 99)) == []


def test_a_shard_with_no_offset_yet_takes_everything() -> None:
    shard = Shard(build_processor())
    assert len(shard.unseen(TP, records(0, 9))) == 10


def test_alerts_of_one_gpu_share_a_key_so_they_stay_in_order() -> None:
    base = {"fingerprint": "f", "severity": "warning", "cluster": "c", "node": "n", "starts_at": "x"}
    fields = {**base, "ends_at": None, "score": 0.5, "signals": [], "summary": "s"}
    pre = Alert(status="firing", kind="pre_xid", gpu=3, **fields)
    xid = Alert(status="firing", kind="xid", gpu=3, **fields)
    assert alert_key(pre) == alert_key(xid) == b"c/n/3"


class AssignedConsumer:
    """The two calls `_refetch_unowned` makes of aiokafka's consumer, recorded."""

    def __init__(self, assigned: set[TopicPartition]) -> None:
        self.assigned = assigned
        self.seeks: list[tuple[TopicPartition, int]] = []

    def assignment(self) -> set[TopicPartition]:
        return self.assigned

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))


def test_records_fetched_before_their_takeover_are_read_again_not_dropped() -> None:
    """aiokafka fetches a new assignment before the rebalance listener restores its shard: the
    consumer is sent back to the first such record, unless the partition is no longer assigned."""
    state, _ = build(Settings())
    runner = KafkaRunner(Settings(), state, build_processor)
    owned, revoked = TopicPartition("metrics", 0), TopicPartition("metrics", 3)
    runner.shards[0] = Shard(build_processor())
    consumer = AssignedConsumer({TP, owned})
    runner.consumer = consumer  # type: ignore[assignment]
    runner._refetch_unowned({TP: records(5, 9), owned: records(0, 1), revoked: records(7, 8)})
    assert consumer.seeks == [(TP, 5)]
