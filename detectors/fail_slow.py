"""Fail-slow: a GPU working slower than its node's other GPUs, scrape after scrape.

Data-parallel ranks run the same kernels, so a GPU whose work rate (its SM clock) reads at least
`shortfall` below the median of its node's other GPUs at the same instant is behind, whatever its own
history says: a throttling, degraded or firmware-stalled part, or a straggler that holds the whole job
back. Each scrape spent behind is one event on a per-GPU counter, and that counter is judged like a
hardware error counter (`ErrorCounterSurprise`): one lagging scrape at a job's phase change is weak
evidence, a GPU behind on scrape after scrape (or again and again, as stalling firmware is) is strong,
and does not fade as an own-history detector would once the slow level became the GPU's usual one.
The peers' residuals come from the bank's `PeerDeviation`, already computed for the same samples.
"""

from __future__ import annotations

import numpy as np

from prexid.detectors.base import (
    Floats,
    Ids,
    Packed,
    Stored,
    array_pieces,
    load_array,
    pack_blobs,
    rows,
    unpack_blobs,
)
from prexid.detectors.error_counter import ErrorCounterSurprise
from prexid.detectors.peer import PeerDeviation


class FailSlow:
    """Scrapes spent behind the peers, per watched series, judged as an error counter."""

    name = "fail_slow"

    def __init__(self, peer: PeerDeviation, shortfall: float = 0.1, window_s: float = 1800.0) -> None:
        self.peer = peer
        self.shortfall = shortfall
        self.slot = np.full(0, -1, dtype=np.int32)  # series id -> its row among the watched, or -1
        self.behind = np.zeros(0)  # per watched series: scrapes spent behind its peers (a counter)
        # Slowness is a state that lasts: scrapes behind add up over half an hour (hardware errors: minutes)
        self.events = ErrorCounterSurprise(window_s=window_s)

    def watch(self, ids: Ids) -> None:
        """Watch these series (a GPU's work rate: registration time, not per sample)."""
        if not len(ids):
            return
        if int(ids.max()) >= len(self.slot):
            grown = np.full(max(2 * len(self.slot), int(ids.max()) + 1, 1024), -1, dtype=np.int32)
            grown[: len(self.slot)] = self.slot
            self.slot = grown
        new = np.unique(ids[self.slot[ids] < 0])
        self.slot[new] = len(self.behind) + np.arange(len(new))
        self.behind = np.r_[self.behind, np.zeros(len(new))]

    def update(self, ids: Ids, ts: Floats) -> Floats:
        """p of each sample of a watched series (1 elsewhere and on scrapes not behind); call after the
        peer detector has seen the same samples."""
        p = np.ones(len(ids))
        if not len(self.behind) or not len(ids):
            return p
        if int(ids.max()) < len(self.slot):  # the usual case: one gather (a view for a run of ids)
            slot = self.slot[rows(ids)]
        else:
            known = ids < len(self.slot)
            slot = np.where(known, self.slot[np.where(known, ids, 0)], -1)
        sel = np.flatnonzero(slot >= 0)
        if not len(sel):
            return p
        watched = slot[sel].astype(np.int64)
        with np.errstate(invalid="ignore"):
            late = self.peer.shortfall(ids[sel]) <= -self.shortfall
        np.add.at(self.behind, watched, late)
        p[sel] = self.events.update(watched, ts[sel], self.behind[watched])
        return p

    def snapshot(self) -> Packed:
        return pack_blobs(array_pieces(self.slot), array_pieces(self.behind), self.events.snapshot())

    def restore(self, data: Stored) -> None:
        slot, behind, events = unpack_blobs(data)
        self.slot = load_array(slot).astype(np.int32, copy=False)
        self.behind = load_array(behind).astype(np.float64, copy=False)
        self.events.restore(events)
