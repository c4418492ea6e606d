"""Child process of `prexid bench e2e`: the baseline, a plain aiokafka consumer reading the backlog.

A process of its own, as a replica is (in the bench's own process, which holds the whole backlog, the
collector's walks slowed it by a fifth). As it comes, or with prexid's process tuning
(`app.gc_and_malloc`): the collector setting that spares a replica 9% of its time makes this loop, which
only allocates records and drops them, a quarter to a half faster; the bench reports both. Prints
one JSON line: records/s.
"""

from __future__ import annotations

import asyncio
import sys
import time

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from prexid.service.app.gc_and_malloc import collect_garbage_less_often, keep_large_blocks_on_heap
from prexid.service.app.settings import Settings

BATCH = Settings.model_fields["batch_max_records"].default  # the batches a replica takes


async def bare_rate(bootstrap: str, tps: list[TopicPartition], total: int) -> float:
    """Records/s of a plain consumer reading the backlog and doing nothing with it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen, counted, first = 0, 0, 0.0
        while seen < total:
            batch = await consumer.getmany(timeout_ms=1000, max_records=BATCH)
            got = sum(len(r) for r in batch.values())
            seen += got
            if first:  # the clock starts once the first batch is in: it does not count that batch
                counted += got
            elif got:
                first = time.perf_counter()
        return counted / (time.perf_counter() - first)
    finally:
        await consumer.stop()


def main() -> None:
    """argv: bootstrap, topics as a JSON list, partitions per topic, records in the backlog, and
    "tuned" for prexid's process tuning."""
    bootstrap, topics, partitions, total = sys.argv[1], orjson.loads(sys.argv[2]), *map(int, sys.argv[3:5])
    if sys.argv[5:] == ["tuned"]:
        keep_large_blocks_on_heap()
        collect_garbage_less_often()
    tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    print(orjson.dumps({"rate": asyncio.run(bare_rate(bootstrap, tps, total))}).decode())


if __name__ == "__main__":
    main()
