"""Are a node's metrics and kernel lines on the same partition index? Checked on the records themselves.

prexid joins a node's Xids with its metrics inside one shard, so every topic must place a key on the
same partition index. That holds only if every producer hashes keys alike, and the shippers do not:
the Java client and aiokafka use murmur2; librdkafka (Vector, Fluent Bit, rsyslog's omkafka, kcat)
defaults to `consistent_random`, a CRC32 of the key, unless told `partitioner=murmur2_random`; Go's
sarama (Telegraf) hashes with FNV-1a. Metrics shipped by one and logs by another put most nodes' Xids
in a shard that never sees their metrics. This watches the first keyed records of each partition,
names the partitioner that explains each topic's placement, and reports a key found on different
partition indexes in two topics.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiokafka.partitioner import murmur2


def _fnv1a_32(key: bytes) -> int:
    h = 0x811C9DC5
    for byte in key:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _sarama(key: bytes, n: int) -> int:
    """sarama: `int32(fnv1a) % n`, negated if negative (Go's % truncates: the same as abs first)."""
    h = _fnv1a_32(key)
    return abs(h - (1 << 32) if h & 0x80000000 else h) % n


# How each producer family maps a key to a partition of n.
PARTITIONERS: dict[str, Callable[[bytes, int], int]] = {
    "murmur2": lambda key, n: (murmur2(key) & 0x7FFFFFFF) % n,  # Java client, aiokafka, murmur2_random
    "crc32": lambda key, n: zlib.crc32(key) % n,  # librdkafka's default consistent_random
    "fnv1a": _sarama,  # sarama's hash partitioner (Telegraf, older OTel Collector exporters)
}


def explaining(key: bytes, partition: int, n: int) -> set[str]:
    """The partitioners that would have put `key` on `partition` of `n`."""
    return {name for name, place in PARTITIONERS.items() if place(key, n) == partition}


@dataclass
class KeyPlacement:
    """Watches up to `sample` keyed records per topic; cheap enough for the consume loop."""

    n_partitions: int
    sample: int = 2000
    seen: dict[str, int] = field(default_factory=dict)  # topic -> keyed records looked at
    fits: dict[str, set[str]] = field(default_factory=dict)  # topic -> partitioners explaining them all
    where: dict[bytes, tuple[str, int]] = field(default_factory=dict)  # key -> (first topic, partition)
    mismatched: dict[str, set[bytes]] = field(default_factory=dict)  # topic -> keys misplaced vs another

    def observe(self, topic: str, partition: int, keys: Iterable[bytes | None]) -> list[bytes]:
        """Look at a partition's records' keys; returns keys newly found on another index elsewhere."""
        if self.seen.get(topic, 0) >= self.sample or self.n_partitions < 2:
            return []
        new: list[bytes] = []
        fits = self.fits.setdefault(topic, set(PARTITIONERS))
        for key in keys:
            if key is None:
                continue
            self.seen[topic] = self.seen.get(topic, 0) + 1
            fits &= explaining(key, partition, self.n_partitions)
            first = self.where.setdefault(key, (topic, partition))
            if first[0] != topic and first[1] != partition:
                bad = self.mismatched.setdefault(topic, set())
                if key not in bad:
                    bad.add(key)
                    new.append(key)
            if self.seen[topic] >= self.sample:
                break
        return new

    def partitioner(self, topic: str) -> str:
        """The partitioner the topic's placement fits so far: a name, "ambiguous", or "unknown" (keys
        placed by none of them, e.g. a producer choosing partitions itself)."""
        fits = self.fits.get(topic)
        if not fits:
            return "unknown"
        return next(iter(fits)) if len(fits) == 1 else "ambiguous"
