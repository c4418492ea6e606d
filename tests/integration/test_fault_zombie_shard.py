"""A checkpoint that fails on revoke leaves no zombie shard (issue 15, item 6), on the real broker.

aiokafka logs and swallows a rebalance callback's exception. Before `KafkaRunner.hand_off` let go of
its shards in a `finally`, a failed revoke checkpoint kept them, and the replica's periodic
checkpoints went on writing snapshots of partitions another replica had taken over: the new owner's
next takeover would restore the zombie's stale state. The state topic's `prexid.writer` header says
who wrote each snapshot, so the test reads it there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from aiokafka.errors import KafkaConnectionError

from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.sources.kafka import KafkaRunner
from prexid.service.state.changelog_store import WRITER_HEADER
from tests.integration.traffic import (
    Replica,
    alert_docs,
    eventually,
    produce,
    read_all,
    read_until,
    settings_for,
    stop_all,
)

PARTITIONS = 4
pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=PARTITIONS)]
INCIDENT = DemoCluster(nodes=8, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))
EXPECTED = {("pre_xid", "node-01", 2), ("xid", "node-01", 2)}  # what an uninterrupted run pages


class RevokeCheckpointFails(KafkaRunner):
    """Fault injection for this test only: every snapshot write made while partitions are being
    revoked fails, as when the broker drops it; periodic checkpoints write as usual. `revokes` holds
    the wall time (ms) each revocation began, `released` the time each hand-off had let its shards go."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.revoking = False
        self.revokes: list[float] = []
        self.released: list[float] = []

    def _make_clients(self) -> None:
        super()._make_clients()
        save = self.store.save

        async def save_unless_revoking(shard: int, pieces: Sequence[bytes | memoryview]) -> None:
            if self.revoking:
                raise KafkaConnectionError("injected: the snapshot write on revoke was dropped")
            await save(shard, pieces)

        self.store.save = save_unless_revoking  # type: ignore[method-assign]

    async def hand_off(self, indexes: set[int]) -> None:
        if indexes & set(self.shards):  # not the empty revocation of a first join
            self.revokes.append(time.time() * 1000)
        self.revoking = True
        try:
            await super().hand_off(indexes)
        finally:
            self.revoking = False
            self.released.append(time.time() * 1000)


async def test_a_replica_whose_revoke_checkpoint_fails_writes_no_snapshot_of_partitions_it_lost(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group, checkpoint_interval_s=0.5)
    ticks = list(simulate(INCIDENT))
    a = Replica(settings, RevokeCheckpointFails)
    runner_a = a.runner
    assert isinstance(runner_a, RevokeCheckpointFails)
    b: Replica | None = None
    try:
        await a.assigned()
        await eventually(lambda: len(runner_a.shards) == PARTITIONS, what="A owning every partition")
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[:60], ticks_per_s=30)
        await eventually(lambda: _checkpoints(runner_a, "ok") >= 2, what="A's snapshots")

        b = Replica(settings)  # joining, it makes the group rebalance: A's revoke checkpoint fails
        runner_b = b.runner
        await eventually(
            lambda: len(runner_a.shards) == len(runner_b.shards) == PARTITIONS // 2,
            limit_s=40,
            what="a 2+2 split",
        )
        assert runner_a.revokes and _checkpoints(runner_a, "failed") >= 1  # the fault happened
        lost = set(runner_b.shards)
        assert not lost & set(runner_a.shards)
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks[60:], ticks_per_s=30)
        records = await read_until(
            kafka_bootstrap, topics["alerts"], lambda rs: _firing(rs) >= EXPECTED, limit_s=60
        )
        await asyncio.sleep(4 * settings.checkpoint_interval_s)  # time for a zombie to write, if any
        assert set(runner_b.shards) == lost and not lost & set(runner_a.shards)  # no further rebalance
    finally:
        await stop_all(a, b)

    assert _firing(records) == EXPECTED  # every alert arrived, and nothing an undisturbed run would not say
    snapshots = await read_all(kafka_bootstrap, topics["state"], PARTITIONS)
    writer_a, writer_b = runner_a.store.writer, runner_b.store.writer
    # A's last hand-off gave B the lost partitions. Not its first revoke: under load the group may
    # rebalance twice (A revoked all, given all back, then split), and A rightly checkpoints a partition
    # it owns again in between, or while its revoke waits for the checkpoint in progress to end.
    revoked_at = runner_a.released[-1]

    def written(writer: str, partitions: set[int], after: float) -> list[int]:
        return [
            r.offset
            for r in snapshots
            if r.partition in partitions
            and dict(r.headers).get(WRITER_HEADER) == writer.encode()
            and r.timestamp > after
        ]

    kept = set(range(PARTITIONS)) - lost
    assert written(writer_a, lost, revoked_at) == []  # no zombie: not one snapshot of a lost partition
    assert written(writer_a, kept, revoked_at)  # while A went on checkpointing what it kept
    assert written(writer_b, lost, revoked_at)  # and B checkpoints what it took over
    print(f"zombie shard: {len(snapshots)} snapshot chunks, B took {sorted(lost)}, none of them written by A")


def _firing(records: list[object]) -> set[tuple[str, str, int | None]]:
    return {(d["kind"], d["node"], d["gpu"]) for d in alert_docs(records) if d["status"] == "firing"}


def _checkpoints(runner: KafkaRunner, outcome: str) -> float:
    sample = runner.state.telemetry.registry.get_sample_value
    return sample("prexid_checkpoints_total", {"outcome": outcome}) or 0.0
