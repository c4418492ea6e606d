"""Node-vs-node peer groups over a whole fleet, from per-partition sketches that merge.

`PeerDeviation` judges a node series against the same metric on the other nodes (`peer.py`). A
partition's pipeline holds only its own nodes, so on its own it would judge a node against a few
partition-mates, not the fleet. So each partition tells the fleet, per node peer group and tick, its
nodes' fresh values (`PeerSketch`): sorted, at most `CAP` of them (a larger partition sends `CAP`
evenly spaced order statistics standing for all its values, so the size is fixed however many nodes
it holds), as float32. A partition's pipeline then computes each node group's median and spread over
its own current values together with the other partitions' (`outside`: their sketches merged, each
group's values by fleet key), which at one tick is the fleet's group, as one process holding every
node sees it. GPU groups (a node's GPUs, always in one partition) stay local.

Group keys are a stable 32-bit hash of the peer-group key (metric name and non-identity labels), the
same in every process (`fleet_key`); a collision among a fleet's few hundred node groups is a
one-in-a-million chance and would only widen one group.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Floats, Ids, order_statistics, ragged

CAP = 16  # values per group and partition at most (order statistics beyond); at most 255 (a byte)
_KEY = np.dtype("<u4")
_COUNT = np.dtype("<u4")  # nodes a group stands for
_SIZE = np.dtype("u1")  # values stored for a group: at most CAP
_VALUE = np.dtype("<f4")


def fleet_key(key: tuple[object, ...]) -> int:
    """A node peer group's key as the same 32-bit integer in every process (not Python's `hash`)."""
    return zlib.crc32(repr(key).encode())


@dataclass(frozen=True, slots=True, eq=False)
class PeerSketch:
    """One partition's fresh node values per node peer group at one tick (groups in key order)."""

    tick: float
    keys: NDArray[np.int64]  # fleet key of each group, ascending
    counts: NDArray[np.int64]  # values each group stands for (its fresh nodes in the partition)
    starts: NDArray[np.int64]  # CSR offsets of each group's stored values in `values`
    values: NDArray[np.float32]  # sorted within each group; at most CAP a group

    @classmethod
    def of(cls, tick: float, keys: Ids, values: Floats, cap: int = CAP) -> PeerSketch:
        """Sketch of (group key, value) pairs: each group's values sorted, capped at `cap` (<= 255)."""
        if not 1 <= cap <= 255:
            raise ValueError(f"a peer sketch keeps 1 to 255 values a group, not {cap}")
        keep = np.isfinite(values)
        v32: NDArray[np.float32] = values[keep].astype(np.float32)
        keys = keys[keep]
        order = np.lexsort((v32, keys))
        keys, v32 = keys[order], v32[order]
        uniq, first, counts = np.unique(keys, return_index=True, return_counts=True)
        if not len(counts) or int(counts.max()) <= cap:
            starts = np.append(first, len(v32)).astype(np.int64)
            return cls(tick, uniq.astype(np.int64), counts.astype(np.int64), starts, v32)
        kept = []
        for lo, n in zip(first.tolist(), counts.tolist(), strict=True):
            group = v32[lo : lo + n]
            if n > cap:  # evenly spaced order statistics, the ends included
                group = order_statistics(group.astype(np.float64), cap).astype(np.float32)
            kept.append(group)
        sizes = np.array([len(g) for g in kept], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        stored = np.concatenate(kept).astype(np.float32)
        return cls(tick, uniq.astype(np.int64), counts.astype(np.int64), starts, stored)

    def to_wire(self) -> str:
        """Compact text for a JSON record: base64 of (groups, then per group key, count, size, values)."""
        sizes = np.diff(self.starts)
        head = np.array([len(self.keys)], dtype=_KEY).tobytes()
        body = (
            self.keys.astype(_KEY).tobytes()
            + self.counts.astype(_COUNT).tobytes()
            + sizes.astype(_SIZE).tobytes()
            + self.values.astype(_VALUE).tobytes()
        )
        return base64.b64encode(head + body).decode()

    @classmethod
    def from_wire(cls, tick: float, text: str) -> PeerSketch:
        """`to_wire` read back; ValueError on anything else."""
        raw = base64.b64decode(text, validate=True)
        if len(raw) < 4:
            raise ValueError("peer sketch too short")
        n = int(np.frombuffer(raw[:4], dtype=_KEY)[0])
        at = 4
        keys = np.frombuffer(raw[at : at + 4 * n], dtype=_KEY).astype(np.int64)
        at += 4 * n
        counts = np.frombuffer(raw[at : at + 4 * n], dtype=_COUNT).astype(np.int64)
        at += 4 * n
        sizes = np.frombuffer(raw[at : at + n], dtype=_SIZE).astype(np.int64)
        at += n
        values = np.frombuffer(raw[at:], dtype=_VALUE).copy()
        if len(keys) != n or len(counts) != n or len(sizes) != n or len(values) != int(sizes.sum()):
            raise ValueError("peer sketch truncated or malformed")
        if bool((sizes > counts).any()):
            raise ValueError("peer sketch stores more values than it counts")
        return cls(tick, keys, counts, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), values)


@dataclass(frozen=True, slots=True, eq=False)
class Outside:
    """Other partitions' node values per fleet group key: what a partition adds to its own groups."""

    keys: NDArray[np.int64]  # ascending fleet keys
    starts: NDArray[np.int64]  # CSR offsets into `values`
    values: Floats

    def for_groups(self, group_keys: Ids) -> tuple[Ids, Floats]:
        """(local group id, value) pairs for local groups given by their fleet key (-1: local only)."""
        pos = np.searchsorted(self.keys, group_keys)
        pos = np.minimum(pos, max(len(self.keys) - 1, 0))
        hit = (group_keys >= 0) & (len(self.keys) > 0)
        if len(self.keys):
            hit &= self.keys[pos] == group_keys
        local = np.flatnonzero(hit)
        lo, hi = self.starts[pos[local]], self.starts[pos[local] + 1]
        sizes = hi - lo
        slot, _, at = ragged(lo, sizes)
        return local[slot].astype(np.int64), self.values[at]


def outside(sketches: Sequence[PeerSketch]) -> Outside | None:
    """The merged values of other partitions' sketches (None when there are none): a group's stored
    values as they are when uncapped, else spread back over its count by the order statistics."""
    keys_, values_ = [], []
    for s in sketches:
        sizes = np.diff(s.starts)
        for i in np.flatnonzero(sizes < s.counts).tolist():  # capped groups: the rare case
            n = int(s.counts[i])
            spread = order_statistics(s.values[s.starts[i] : s.starts[i + 1]].astype(np.float64), n)
            keys_.append(np.full(n, s.keys[i], dtype=np.int64))
            values_.append(spread)
        whole = np.repeat(sizes == s.counts, sizes)
        keys_.append(np.repeat(s.keys, sizes)[whole])
        values_.append(s.values[whole].astype(np.float64))
    if not keys_:
        return None
    keys, values = np.concatenate(keys_), np.concatenate(values_)
    if not len(keys):
        return None
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    uniq, first = np.unique(keys, return_index=True)
    return Outside(uniq, np.append(first, len(keys)).astype(np.int64), values)
