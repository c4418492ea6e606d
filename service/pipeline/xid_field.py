"""DCGM's Xid field (`DCGM_FI_DEV_XID_ERRORS`) as a second Xid source, for clusters that ship no
kernel logs.

The field is a gauge holding the last Xid code of its GPU (0 when none). A change of its value to a
non-zero code is an Xid of that code on that GPU, at the time of the sample that shows it. The first
value a series shows is its baseline, not an event: the same last code re-scraped, or seen again after
prexid or the exporter restarts, never pages. A drop to 0 (driver reload, GPU reset, reboot) re-arms
it: the same code afterwards is a new Xid. What the field cannot tell is a repeat of the last code
(the reference: it hides bursts and repeats), which kernel lines do.

Samples are read in event-time order per series; one not newer than the newest read (a duplicate, a
late arrival) is skipped, as are values that are no code (NaN, stale markers, negative or fractional
ones), so they never flip the state. Numpy over the released samples; Python only for the changes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FIELD = "DCGM_FI_DEV_XID_ERRORS"


class XidField:
    """State of the field series only (one per GPU), found by sorted series id: memory per GPU, not
    per series."""

    def __init__(self) -> None:
        self.sids = np.zeros(0, dtype=np.int64)  # the field series seen, sorted
        self.last = np.zeros(0)  # per field series: its last code read
        self.last_ts = np.zeros(0)  # and that sample's time

    def changes(
        self, ids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64]
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]:
        """The Xids among these samples of field series: (series id, time, code), oldest first."""
        slots = self._slots(ids)
        code = np.isfinite(values) & (values >= 0) & (values < 2**31)
        code[code] = values[code] == np.floor(values[code])
        keep = code & (ts > self.last_ts[slots])
        order = np.flatnonzero(keep)[np.lexsort((ts[keep], slots[keep]))]
        i, t, v = slots[order], ts[order], values[order]
        first = np.ones(len(i), dtype=bool)
        first[1:] = (i[1:] != i[:-1]) | (t[1:] > t[:-1])  # a series' first sample, or a newer one
        i, t, v = i[first], t[first], v[first]
        head = np.ones(len(i), dtype=bool)
        head[1:] = i[1:] != i[:-1]
        prev = np.empty_like(v)
        prev[1:] = v[:-1]
        prev[head] = self.last[i[head]]
        new = np.isfinite(prev) & (v != prev) & (v > 0)
        tail = np.ones(len(i), dtype=bool)
        tail[:-1] = head[1:]
        self.last[i[tail]] = v[tail]  # slots, not series ids, from here on
        self.last_ts[i[tail]] = t[tail]
        by_time = np.argsort(t[new], kind="stable")
        return self.sids[i[new][by_time]], t[new][by_time], v[new][by_time].astype(np.int64)

    def _slots(self, ids: NDArray[np.int64]) -> NDArray[np.int64]:
        """Each sample's place in the state; a series not seen before gets one, with no value yet."""
        new = np.setdiff1d(ids, self.sids)
        if len(new):
            sids = np.union1d(self.sids, new)
            old = np.searchsorted(sids, self.sids)
            last, last_ts = np.full(len(sids), np.nan), np.full(len(sids), -np.inf)
            last[old], last_ts[old] = self.last, self.last_ts
            self.sids, self.last, self.last_ts = sids, last, last_ts
        return np.searchsorted(self.sids, ids)

    def forget(self, ids: NDArray[np.int64]) -> None:
        """Expired series leave (their ids go to new series, which start with no code seen)."""
        keep = ~np.isin(self.sids, ids)
        self.sids, self.last, self.last_ts = self.sids[keep], self.last[keep], self.last_ts[keep]

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {"sids": self.sids, "last": self.last, "last_ts": self.last_ts}

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        """A snapshot from before this source had none: every field series starts from its baseline."""
        self.sids = arrays.get("sids", np.zeros(0)).astype(np.int64)
        self.last = arrays.get("last", np.zeros(0)).astype(np.float64)
        self.last_ts = arrays.get("last_ts", np.zeros(0)).astype(np.float64)
