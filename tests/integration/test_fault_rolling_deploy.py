"""A rolling deploy: SIGTERM mid-stream, restart, repeat, and no Xid alert is lost (issue 15, item 7).

SIGTERM cancels the consumer task wherever it is, publishing a batch's alerts included. Offsets may
only be committed for what was published (`KafkaRunner._handle` advances a shard's offsets after the
publish), else the cancelled batch's Xids are committed past and never paged. Two `prexid run`
processes share the group; with small batches a SIGTERM lands mid-batch in most rounds. Duplicates
(re-sends after a takeover) are allowed and counted.

How often a SIGTERM meets a revocation waiting for a batch in the processes is left to chance, so
the second test makes it happen every time: a publish that never returns, a replica joining (the
rebalance's revoke callback waits for the batch's lock), then the task cancelled as SIGTERM cancels
it. That revoke checkpoint must not write the shard: neither offsets past the unsent Xid alert nor a
state that has seen it (the next owner, replaying the Xid, would take its alert for one sent).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import pytest

from prexid.service.offline.sim.wire import syslog_line, xid_message
from prexid.service.pipeline.processor import Output
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, Tick, simulate
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.traffic import (
    ProcessReplica,
    Replica,
    alert_docs,
    committed_everything,
    eventually,
    has_xid,
    produce,
    read_all,
    read_until,
    settings_for,
)

PARTITIONS = 4
pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=PARTITIONS)]
CLUSTER = DemoCluster(nodes=16, gpus=2, duration_s=2100.0, fault=DemoFault(node=0, gpu=0, xid_at_s=10**9))
ROUNDS = 3  # SIGTERM and restart, alternating replicas
FIRST, SECOND = 48, 79  # each node's two Xids, far enough apart to be two bursts and two alerts


def with_xids(ticks: list[Tick]) -> tuple[list[Tick], set[tuple[str, int]]]:
    """The cluster's ticks with two Xids per node spread over the stream, and every (node, code)."""
    xids: set[tuple[str, int]] = set()
    out = []
    for i, tick in enumerate(ticks):
        logs = list(tick.logs)
        for n in range(CLUSTER.nodes):
            for at, code in ((10 + 3 * n, FIRST), (80 + 3 * n, SECOND)):
                if i == at:
                    host = CLUSTER.host(n)
                    logs.append(
                        syslog_line(tick.ts, host, xid_message(1000.0 + i, n % CLUSTER.gpus, code, "x"))
                    )
                    xids.add((host, code))
        out.append(Tick(tick.ts, tick.metrics, logs))
    return out, xids


async def test_sigterm_mid_batch_in_a_rolling_deploy_loses_no_xid_alert(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group, batch_max_records=200)
    ticks, xids = with_xids(list(simulate(CLUSTER)))
    replicas = [await ProcessReplica.start(settings), await ProcessReplica.start(settings)]
    terminated = 0
    try:
        await eventually(
            lambda: sorted(len(r.owned) for r in replicas) == [2, 2], limit_s=40, what="a 2+2 split"
        )
        traffic = asyncio.create_task(
            produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks, ticks_per_s=12)
        )
        for round_ in range(ROUNDS):
            await asyncio.sleep(2.0)  # Xids flowing, batches in flight
            victim = replicas[round_ % 2]
            assert await victim.terminate() == 0, victim.log_tail()
            terminated += 1
            replicas[round_ % 2] = await ProcessReplica.start(settings)
            await eventually(
                lambda: sorted(len(r.owned) for r in replicas) == [2, 2], limit_s=40, what="the group settled"
            )
        await asyncio.wait_for(traffic, 120)
        inputs = [topics["metrics"], topics["logs"]]
        for _ in range(150):  # until both have read and checkpointed everything
            if await committed_everything(kafka_bootstrap, kafka_group, inputs, PARTITIONS):
                break
            await asyncio.sleep(0.2)
        docs = alert_docs(await read_all(kafka_bootstrap, topics["alerts"], PARTITIONS))
    finally:
        for r in replicas:
            if r.proc.returncode is None:
                await r.terminate()

    assert terminated == ROUNDS
    paged = {(d["node"], code) for d in docs if d["kind"] == "xid" for code in d["xid_codes"] or []}
    assert xids - paged == set()  # every Xid of the input has its alert: none committed past unsent
    assert await committed_everything(kafka_bootstrap, kafka_group, inputs, PARTITIONS)
    keys = Counter((d["fingerprint"], d["status"]) for d in docs if d["kind"] == "xid")
    duplicates = sum(n - 1 for n in keys.values())
    print(
        f"rolling deploy: {ROUNDS} SIGTERMs, {len(xids)} Xids, {len(keys)} Xid alerts, {duplicates} re-sends"
    )


class PublishStalls(KafkaRunner):
    """Fault injection for this test only: the first publish holding an Xid alert never returns (a
    broker that stopped acknowledging), until the task is cancelled. `stalled` is set then, and
    `revoking` once a revocation of owned partitions waits for that batch."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.stalled = asyncio.Event()
        self.revoking = asyncio.Event()

    async def _publish(self, out: Output) -> None:
        if not self.stalled.is_set() and any(a.kind == "xid" for a in out.alerts):
            self.stalled.set()
            await asyncio.Event().wait()
        await super()._publish(out)

    async def hand_off(self, indexes: set[int]) -> None:
        if indexes & set(self.shards):
            self.revoking.set()
        await super().hand_off(indexes)


async def test_a_revoke_waiting_on_a_batch_cut_short_by_sigterm_checkpoints_nothing_of_it(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    settings = settings_for(kafka_bootstrap, topics, kafka_group, checkpoint_interval_s=0.5)
    ticks, xids = with_xids(list(simulate(CLUSTER))[:40])
    (first,) = [(node, code) for node, code in xids if node == CLUSTER.host(0)]
    ticks = [
        Tick(t.ts, t.metrics, [line for line in t.logs if CLUSTER.host(0).encode() in line]) for t in ticks
    ]
    old = Replica(settings, PublishStalls)
    runner = old.runner
    assert isinstance(runner, PublishStalls)
    new: Replica | None = None
    try:
        await old.assigned()
        await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks, ticks_per_s=20)
        await eventually(runner.stalled.is_set, what="the Xid's batch publishing")
        new = Replica(settings)  # the rolling deploy's new pod joins: the old one's revoke waits
        await eventually(runner.revoking.is_set, limit_s=40, what="a revocation waiting for the batch")
        old.task.cancel()  # SIGTERM: `serve` cancels the feed task wherever it is
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(old.task, 30)
        new_runner = new.runner
        await eventually(
            lambda: len(new_runner.shards) == PARTITIONS, limit_s=40, what="the new pod owning all"
        )
        records = await read_until(kafka_bootstrap, topics["alerts"], has_xid, limit_s=60)
    finally:
        for replica in (old, new):
            if replica is not None and not replica.task.done():
                await replica.stop()
    paged = {
        (d["node"], code) for d in alert_docs(records) if d["kind"] == "xid" for code in d["xid_codes"] or []
    }
    assert first in paged
