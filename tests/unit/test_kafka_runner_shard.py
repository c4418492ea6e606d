"""A shard takes each record once, even when a takeover's seek makes Kafka deliver it twice; the
runner's checkpoints are counted as SREs read them."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaConnectionError

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import DeadLetter, Message, Output, Processor
from prexid.service.schemas import Alert, Signal
from prexid.service.sinks.kafka import (
    MAX_REQUEST_BYTES,
    alert_key,
    dead_letter_headers,
    fitted_alert,
    fitted_dead_letter,
)
from prexid.service.sources import kafka as kafka_source
from prexid.service.sources.kafka import KafkaRunner, Shard
from prexid.service.state.changelog_store import claimed_size
from prexid.service.state.snapshot import SnapshotError

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


class Store:
    """The changelog store's save, failing while `down` (a broker away)."""

    def __init__(self) -> None:
        self.down = True
        self.saved: list[int] = []

    async def save(self, shard: int, pieces: object) -> None:
        if self.down:
            raise KafkaConnectionError("broker away")
        self.saved.append(shard)


class Committing:
    def __init__(self) -> None:
        self.committed: list[dict[TopicPartition, object]] = []

    async def commit(self, offsets: dict[TopicPartition, object]) -> None:
        self.committed.append(offsets)


async def test_checkpoints_are_counted_by_outcome_and_the_last_good_one_is_timed() -> None:
    """What `PrexidCheckpointsFailing` reads: a failed checkpoint is counted and leaves the time of
    the last good one as it was; a good one commits the shard's offsets and moves that time."""
    state, _ = build(Settings())
    t = state.telemetry
    runner = KafkaRunner(Settings(), state, build_processor)
    runner.store = store = Store()  # type: ignore[assignment]
    runner.consumer = consumer = Committing()  # type: ignore[assignment]
    runner.shards[1] = Shard(build_processor(), {TP: 42})
    with pytest.raises(KafkaConnectionError):
        await runner.checkpoint([1])
    sample = t.registry.get_sample_value
    assert sample("prexid_checkpoints_total", {"outcome": "failed"}) == 1.0
    assert sample("prexid_checkpoints_total", {"outcome": "ok"}) == 0.0
    assert sample("prexid_last_checkpoint_timestamp_seconds") == 0.0 and consumer.committed == []
    store.down = False
    before = time.time()
    await runner.checkpoint([1])
    assert sample("prexid_checkpoints_total", {"outcome": "ok"}) == 1.0 and store.saved == [1]
    assert sample("prexid_last_checkpoint_timestamp_seconds") >= before
    assert [{tp: o.offset for tp, o in c.items()} for c in consumer.committed] == [{TP: 42}]  # type: ignore[attr-defined]
    assert sample("prexid_checkpoint_duration_seconds_count") == 2.0


class CaughtUpConsumer(AssignedConsumer):
    """What `_handle` asks of aiokafka's consumer about a caught-up partition."""

    def highwater(self, tp: TopicPartition) -> int:
        return 10

    def last_poll_timestamp(self, tp: TopicPartition) -> int:
        return 1

    async def position(self, tp: TopicPartition) -> int:
        return 10


class CancelledSink:
    """A publish cut short, as SIGTERM during a rolling deploy cancels the batch task."""

    async def publish(self, out: object) -> None:
        raise asyncio.CancelledError


async def test_a_batch_cut_short_while_publishing_leaves_the_shards_offsets_where_they_were() -> None:
    """A revoke callback waiting on the lock checkpoints and commits the shard's offsets: they must
    cover only what was published, or the batch's alerts are lost for good."""
    state, _ = build(Settings())
    runner = KafkaRunner(Settings(), state, build_processor)
    runner.shards[1] = shard = Shard(build_processor(), {TP: 3})
    runner.consumer = CaughtUpConsumer({TP})  # type: ignore[assignment]
    runner.sink = CancelledSink()  # type: ignore[assignment]
    with pytest.raises(asyncio.CancelledError):
        await runner._handle({TP: records(3, 9)})
    assert shard.offsets == {TP: 3}
    runner.sink = Published()  # type: ignore[assignment]
    await runner._handle({TP: records(3, 9)})
    assert shard.offsets == {TP: 10}


class Published:
    async def publish(self, out: object) -> None:
        return None


class CaughtUpCommitting(CaughtUpConsumer):
    def __init__(self, assigned: set[TopicPartition]) -> None:
        super().__init__(assigned)
        self.committed: list[dict[TopicPartition, object]] = []

    async def commit(self, offsets: dict[TopicPartition, object]) -> None:
        self.committed.append(offsets)


async def test_a_shard_whose_batch_was_cut_short_is_not_checkpointed_until_a_batch_is_published() -> None:
    """The revoke callback waiting for the lock runs right after the cancelled batch. Its snapshot
    would hold a state that has seen the batch with offsets before it: the next owner, replaying the
    batch, would take its alerts for sent ones and publish none (the real-broker rolling-deploy test)."""
    state, _ = build(Settings())
    runner = KafkaRunner(Settings(), state, build_processor)
    runner.shards[1] = Shard(build_processor(), {TP: 3})
    runner.consumer = consumer = CaughtUpCommitting({TP})  # type: ignore[assignment]
    runner.store = store = Store()  # type: ignore[assignment]
    store.down = False
    runner.sink = CancelledSink()  # type: ignore[assignment]
    with pytest.raises(asyncio.CancelledError):
        await runner._handle({TP: records(3, 9)})
    await runner.checkpoint([1])
    assert store.saved == [] and consumer.committed == []
    runner.sink = Published()  # type: ignore[assignment]
    await runner._handle({TP: records(10, 12)})
    await runner.checkpoint([1])
    assert store.saved == [1]
    assert [{tp: o.offset for tp, o in c.items()} for c in consumer.committed] == [{TP: 13}]  # type: ignore[attr-defined]


class FlakyStore:
    """A changelog store whose load fails for some partitions the way a forged record made it fail."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing

    async def load(self, shard: int) -> None:
        if shard in self.failing:
            raise MemoryError("a buffer sized from a forged record")
        return None

    async def save(self, shard: int, pieces: object) -> None:
        raise KafkaConnectionError("broker away")


async def test_a_restore_that_fails_starts_its_shard_cold_and_the_rest_of_the_assignment_goes_on() -> None:
    """aiokafka logs and swallows a rebalance callback's exception: before, that shard and every later
    one of the assignment were never created while /readyz said ready."""
    state, _ = build(Settings())
    runner = KafkaRunner(Settings(), state, build_processor)
    runner.store = FlakyStore({0})  # type: ignore[assignment]
    await runner.take_over({0: [TopicPartition("metrics", 0)], 1: [TopicPartition("metrics", 1)]})
    assert sorted(runner.shards) == [0, 1] and sorted(state.shards) == [0, 1]
    sample = state.telemetry.registry.get_sample_value
    assert sample("prexid_takeovers_total", {"how": "refused"}) == 1.0
    assert sample("prexid_takeovers_total", {"how": "no_snapshot"}) == 1.0
    assert runner.assignments == 1


async def test_a_shard_whose_checkpoint_fails_on_revoke_is_let_go_all_the_same() -> None:
    """Kept, it would go on writing snapshots of a partition another replica now owns (a zombie)."""
    state, _ = build(Settings())
    runner = KafkaRunner(Settings(), state, build_processor)
    runner.store = FlakyStore(set())  # type: ignore[assignment]
    runner.shards[2] = Shard(build_processor(), {TP: 7})
    runner.shards[3] = Shard(build_processor())
    await runner.hand_off({2, 5})
    assert sorted(runner.shards) == [3] and sorted(state.shards) == [3]
    assert state.telemetry.registry.get_sample_value("prexid_checkpoints_total", {"outcome": "failed"}) == 1.0


def test_a_snapshot_record_claiming_more_than_deflate_can_hold_is_refused() -> None:
    forged = ConsumerRecord("s", 0, 0, 0, 0, b"shard-0/0", b"x" * 18, None, 9, 18, [])
    headers = {"prexid.chunks": b"1", "prexid.size": str(2**40).encode()}
    with pytest.raises(SnapshotError, match="more than deflate can hold"):
        claimed_size(headers, [forged])
    with pytest.raises(SnapshotError, match="unreadable"):
        claimed_size({**headers, "prexid.size": b"lots"}, [forged])
    assert claimed_size({**headers, "prexid.size": b"18000"}, [forged]) == 18000


def test_a_dead_letter_larger_than_a_record_is_cut_with_a_header_saying_so() -> None:
    big = DeadLetter(Message(b"x" * (3 << 20), 0.0, "logs", 0, 9), "line_too_long", "")
    payload, headers = fitted_dead_letter(big)
    assert len(payload) < MAX_REQUEST_BYTES and payload == b"x" * len(payload)
    assert ("prexid.truncated", str(3 << 20).encode()) in headers
    small = DeadLetter(Message(b"abc", 0.0, "logs", 0, 9), "empty", "")
    assert fitted_dead_letter(small) == (b"abc", dead_letter_headers(small))


def test_an_alert_with_a_megabyte_label_is_published_slimmed_with_a_header() -> None:
    signal = Signal(
        family="thermal", metric="m", labels={"job": "j" * (2 << 20)}, value=1.0, baseline=0.0, surprise=9.0
    )
    base = {"fingerprint": "f", "severity": "warning", "cluster": "c", "node": "n", "starts_at": "x"}
    alert = Alert(
        status="firing", kind="pre_xid", gpu=3, ends_at=None, score=0.5, signals=[signal], summary="s", **base
    )
    body, headers = fitted_alert(alert)
    assert len(body) < MAX_REQUEST_BYTES and headers[0][0] == "prexid.truncated"
    slim = Alert.model_validate_json(body)
    assert slim.fingerprint == "f" and slim.signals[0].labels == {} and slim.signals[0].metric == "m"


class BehindConsumer(AssignedConsumer):
    """A metric partition whose leader is away: its high watermark unknown, it looks behind for good."""

    def highwater(self, tp: TopicPartition) -> int | None:
        return None

    def last_poll_timestamp(self, tp: TopicPartition) -> int:
        return 1

    async def position(self, tp: TopicPartition) -> int:
        return 0


class Recording:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    async def publish(self, out: Output) -> None:
        self.alerts += out.alerts


class Clock:
    """`time` as the runner reads it: a wall clock the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


XID_LINE = b"<4>Dec  3 10:00:00 node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."


async def test_an_xid_held_for_a_metric_partition_that_stays_behind_pages_after_the_longest_hold_with_no_record_since(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hold is wall time the runner passes in, and a shard holding Xids is run even when a poll
    brings it nothing: its metric partition's leader is away and the node, its Xid written, is quiet."""
    clock = Clock(1000.0)
    monkeypatch.setattr(kafka_source, "time", clock)
    settings = Settings(metrics_topics=["metrics"], logs_topics=["logs"], xid_max_hold_s=60.0)
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    runner.shards[1] = shard = Shard(runner.new_processor())
    logs = TopicPartition("logs", 1)
    runner.consumer = BehindConsumer({TopicPartition("metrics", 1), logs})  # type: ignore[assignment]
    runner.sink = sink = Recording()  # type: ignore[assignment]
    xid = ConsumerRecord("logs", 1, 0, 1_764_756_000_000, 0, b"node-7", XID_LINE, None, 6, len(XID_LINE), [])
    await runner._handle({logs: [xid]})
    assert sink.alerts == [] and len(shard.processor.held_xids) == 1
    clock.now = 1059.0
    await runner._handle({})
    assert sink.alerts == []
    clock.now = 1060.0
    await runner._handle({})
    assert [(a.kind, a.node, a.xid_code) for a in sink.alerts] == [("xid", "node-7", 79)]
    assert shard.processor.held_xids == [] and shard.offsets == {logs: 1}


async def test_a_handed_off_shards_firing_alerts_are_no_longer_resent_to_alertmanager() -> None:
    """The new owner restores and re-sends them; this replica re-sending them too would re-open each in
    Alertmanager after the new owner resolved it, every minute, for good. Other shards' alerts stay."""
    settings = Settings(alertmanager_urls=["http://127.0.0.1:9"])
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, build_processor)
    runner.store = FlakyStore(set())  # type: ignore[assignment]
    base = {"severity": "warning", "cluster": "c", "starts_at": "x", "ends_at": None, "score": 0.5}
    fields = {**base, "signals": [], "summary": "s", "status": "firing", "kind": "pre_xid", "gpu": 3}
    gone, kept = (
        Alert(fingerprint="gone", node="n1", **fields),
        Alert(fingerprint="kept", node="n2", **fields),
    )
    runner.shards[2], runner.shards[3] = Shard(build_processor()), Shard(build_processor())
    runner.shards[2].processor.pipeline.alert_book.active["gone"] = gone
    runner.shards[3].processor.pipeline.alert_book.active["kept"] = kept
    for listener in state.alert_listeners:
        listener([gone, kept])
    sink = next(f.__self__ for f in state.alert_forgetters)  # the Alertmanager sink's bound `forget`
    assert set(sink.active) == {"gone", "kept"}
    await runner.hand_off({2})
    assert set(sink.active) == {"kept"} and "gone" not in sink.resolved  # forgotten, never resolved
