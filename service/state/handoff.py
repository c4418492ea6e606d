"""The rebalance listener of `prexid run`: hand shards off before they go, take over those that come.

Kafka calls every replica's `on_partitions_revoked` before any replica's `on_partitions_assigned`, so
a snapshot written on revocation is there when the new owner restores it. The listener only turns
topic partitions into partition indexes (one shard per index across the co-partitioned topics); what
a handoff does is the owner's, behind the small interface below.
"""

from __future__ import annotations

from typing import Protocol

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener


class ShardOwner(Protocol):
    async def hand_off(self, indexes: set[int]) -> None:
        """Checkpoint and drop the shards of these partition indexes (those it owns)."""

    async def take_over(self, assigned: dict[int, list[TopicPartition]]) -> None:
        """Restore the shards of newly assigned indexes, each with its topic partitions."""


class Handoff(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: ShardOwner) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.owner.hand_off({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        by_index: dict[int, list[TopicPartition]] = {}
        for tp in assigned:
            by_index.setdefault(tp.partition, []).append(tp)
        await self.owner.take_over(by_index)
