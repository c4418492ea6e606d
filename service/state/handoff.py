"""The rebalance listener of `prexid run`: checkpoint shards before they go, restore those that come.

Kafka calls every replica's `on_partitions_revoked` before any replica's `on_partitions_assigned`, so
a snapshot written on revocation is there when the new owner restores it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

if TYPE_CHECKING:
    from prexid.service.sources.kafka import KafkaRunner

log = logging.getLogger("prexid.service.sources.kafka")  # one logger for the runner's story


class Handoff(ConsumerRebalanceListener):  # type: ignore[misc]
    """Checkpoints shards before they are revoked; restores shards newly assigned."""

    def __init__(self, runner: KafkaRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        r = self.runner
        async with r.lock:
            gone = sorted({tp.partition for tp in revoked} & set(r.shards))
            await r.checkpoint(gone)
            for index in gone:
                del r.shards[index]
                log.info("partition %d handed off", index)
            r.state.shards = {i: s.processor.pipeline for i, s in r.shards.items()}

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        r = self.runner
        async with r.lock:
            by_index: dict[int, list[TopicPartition]] = {}
            for tp in assigned:
                by_index.setdefault(tp.partition, []).append(tp)
            for index, tps in sorted(by_index.items()):
                if index not in r.shards:
                    await r.restore(index, tps)
            r.state.shards = {i: s.processor.pipeline for i, s in r.shards.items()}
            r.assignments += 1
