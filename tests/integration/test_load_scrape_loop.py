"""A scrape loop against the read API does not hold the consumer back (issue 15, item 9), on the real
broker with `prexid run` as a process: thousands of GPUs' metrics, a backlog drained without the loop,
then another with `/metrics` and `/api/v1/scores` asked as fast as they are answered.

Behaviour, not speed: with the loop, the replica still reads the whole backlog within the bounded
window, its lag (records written, not yet read) comes back to 0 and its offsets are committed to the
end, while every scrape is answered, many of them while the replica still had a backlog. How much the
loop costs the consumer is `prexid bench scrape` (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from prexid.service.offline.bench import e2e_load as load
from prexid.service.offline.bench.scrape_loop import ScrapeLoop
from tests.integration.traffic import ProcessReplica, committed_everything, eventually, settings_for

PARTITIONS = 2
pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=PARTITIONS)]
CLUSTERS, NODES, GPUS = 32, 8, 8  # 2,048 GPUs and 256 nodes: a read view of 2,304 entities
TICKS = 10  # scrapes of 15 s per half: ~95k records each
DRAIN_S = 120.0  # the bounded window for a backlog to be read


class LagProbe:
    """Samples (monotonic time, lag) every 0.2 s: records on the input topics' logs minus the records the
    replica says it has read (`prexid_messages_total`). Commits come every checkpoint, so the replica's
    own count is the lag as it stands."""

    def __init__(self, bootstrap: str, topics: dict[str, str], replica: load.Replica) -> None:
        self.bootstrap, self.replica = bootstrap, replica
        self.tps = [TopicPartition(topics[t], p) for t in ("metrics", "logs") for p in range(PARTITIONS)]
        self.samples: list[tuple[float, float]] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await consumer.start()
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                while True:
                    at = time.monotonic()
                    read = await self.replica.consumed(client)  # before the ends: never a negative lag
                    written = sum((await consumer.end_offsets(self.tps)).values())
                    self.samples.append((at, written - read))
                    await asyncio.sleep(0.2)
        finally:
            await consumer.stop()

    def lag(self) -> float:
        return self.samples[-1][1] if self.samples else float("inf")

    async def drained(self, since: float, what: str) -> None:
        """Lag 0 in a sample begun after `since`, when the last record was written (a sample from before
        or during the writing may be 0 before the records land)."""
        await eventually(
            lambda: any(t > since and lag == 0 for t, lag in self.samples), limit_s=DRAIN_S, what=what
        )

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def test_a_scrape_loop_against_the_read_api_does_not_hold_the_consumer_back(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    ticks = load.traffic(CLUSTERS, 2 * TICKS * 15.0, NODES)
    assert len(ticks) == 2 * TICKS
    half = [ticks[:TICKS], ticks[TICKS:]]
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    port = load.free_port()
    proc = await ProcessReplica.start(settings, PREXID_HTTP_PORT=str(port))
    replica = load.Replica(proc.proc, port)
    probe = LagProbe(kafka_bootstrap, topics, replica)
    inputs = [topics["metrics"], topics["logs"]]
    loop: ScrapeLoop | None = None
    try:
        await eventually(lambda: proc.owned == {0, 1}, limit_s=60, what="both partitions owned")

        # without the loop: the first half, read to the end
        await load.produce(kafka_bootstrap, topics["metrics"], topics["logs"], half[0], PARTITIONS)
        await probe.drained(time.monotonic(), "drained backlog without the scrape loop")
        await _committed(kafka_bootstrap, kafka_group, inputs)

        # with the loop: started first, answered before the backlog is written, kept up all along
        loop = scraper = ScrapeLoop(port, clients=2, limit_s=DRAIN_S + 60, max_requests=50_000).start()
        await eventually(lambda: scraper.count.answered >= 2, what="a first scrape answered")
        since = time.monotonic()
        await load.produce(kafka_bootstrap, topics["metrics"], topics["logs"], half[1], PARTITIONS)
        await probe.drained(time.monotonic(), "drained backlog with the scrape loop")
        drained = time.monotonic()
        backlog = [lag for t, lag in probe.samples if since < t < drained]
        count = scraper.stop()
        await _committed(kafka_bootstrap, kafka_group, inputs)
    finally:
        if loop is not None:
            loop.stop()
        await probe.stop()
        code = await proc.terminate()
    assert code == 0, proc.log_tail()

    assert count.failed == 0, count.errors  # every scrape answered, none refused or timed out
    during = [t for t in count.answered_at if since < t < drained]
    assert len(during) >= 4  # the loop ran while the replica read the backlog, not only around it
    assert max(backlog) > 0  # ... and there was a backlog to read while it did
    assert probe.lag() == 0  # ... and the lag came back to 0, every record read
    scores = orjson.loads(scraper.last_scores)  # the view served is the whole fleet's
    assert len(scores["nodes"]) == CLUSTERS * NODES
    assert sum(len(n["gpus"]) for n in scores["nodes"]) == CLUSTERS * NODES * GPUS
    assert all(g["score"] is not None for n in scores["nodes"] for g in n["gpus"])


async def _committed(bootstrap: str, group: str, inputs: list[str]) -> None:
    """Offsets committed to the end of every input partition (the replica checkpoints every second)."""
    for _ in range(60):
        if await committed_everything(bootstrap, group, inputs, PARTITIONS):
            return
        await asyncio.sleep(0.5)
    raise AssertionError("offsets not committed to the end within 30 s")
