"""Event-time watermark over several sources, and a reorder buffer that releases samples in time order.

A consumer reading a backlog from several partitions sees them at different event times: one partition
may be half an hour ahead of another. Detection must see samples in event-time order, tick by tick, or a
lagging node's samples all land in one tick and persistence means nothing. So (as in Flink or Kafka
Streams) the watermark is the progress of the slowest source that still has a backlog, minus an allowed
lateness; samples wait in the buffer until the watermark passes them. A source that is caught up (no
backlog) holds nobody back: it is merely waiting for its next scrape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Floats, Ids

# A record time outside these years is none (Kafka's -1 for "no timestamp", 0 from a test or a file,
# or a producer that wrote microseconds or nanoseconds where Kafka wants milliseconds).
PLAUSIBLE_RECORD_TIME = (946_684_800.0, 7_258_118_400.0)  # 2000-01-01 .. 2200-01-01


def plausible(record_ts: float) -> float:
    lo, hi = PLAUSIBLE_RECORD_TIME
    return record_ts if lo <= record_ts < hi else np.nan


class Watermarks:
    def __init__(
        self,
        lateness_s: float,
        future_skew_s: float = 300.0,
        jump_batches: int = 3,
        late_drop_s: float = 300.0,
    ) -> None:
        self.lateness_s = lateness_s
        self.future_skew_s = future_skew_s
        self.late_drop_s = late_drop_s
        self.jump_batches = jump_batches
        self.progress: dict[str, float] = {}  # newest event time seen per source
        self.backlogged: set[str] = set()
        self.ahead_batches: dict[
            str, int
        ] = {}  # batches in a row wholly ahead, of sources with no record time

    def reference(self, source: str, record_ts: float) -> float:
        """What `source` has shown of event time: its newest sample, or a newer record time."""
        return float(np.fmax(self.progress.get(source, -np.inf), plausible(record_ts)))

    def behind(self, source: str, ts: Floats, record_ts: float) -> NDArray[np.bool_]:
        """Which samples are dated more than `late_drop_s` before what `source` has shown: a host whose
        clock runs slow. Scored, they would be judged an hour late, their evidence aged away at once."""
        ref = self.reference(source, record_ts)
        with np.errstate(invalid="ignore"):
            return (
                np.asarray(ts < ref - self.late_drop_s) if np.isfinite(ref) else np.zeros(len(ts), dtype=bool)
            )

    def ahead(self, source: str, ts: Floats, record_ts: float) -> NDArray[np.bool_]:
        """Which samples are dated more than `future_skew_s` ahead of what `source` has shown so far
        (its newest sample, or the record time the transport gave): one sample dated 2199 would move
        the watermark there, and no tick would be evaluated again.

        A source with no record time (a file replayed) that is wholly ahead for `jump_batches` batches
        in a row moved on as a whole (data after a gap), and is believed."""
        ref = self.reference(source, record_ts)
        if not np.isfinite(ref) or not len(ts):
            return np.zeros(len(ts), dtype=bool)
        with np.errstate(invalid="ignore"):
            out = ts > ref + self.future_skew_s
        if np.isfinite(plausible(record_ts)) or not out.all():
            self.ahead_batches.pop(source, None)
            return out
        self.ahead_batches[source] = self.ahead_batches.get(source, 0) + 1
        if self.ahead_batches[source] < self.jump_batches:
            return out
        del self.ahead_batches[source]
        return np.zeros(len(ts), dtype=bool)

    def observe(self, source: str, newest_ts: float) -> None:
        if np.isfinite(newest_ts):
            self.progress[source] = max(self.progress.get(source, -np.inf), newest_ts)

    def set_backlogged(self, sources: set[str]) -> None:
        """Sources that still have unread records; only these may hold the watermark back."""
        self.backlogged = set(sources)

    @property
    def value(self) -> float:
        if not self.progress:
            return -np.inf
        waiting = [t for s, t in self.progress.items() if s in self.backlogged]
        slowest = min(waiting) if waiting else max(self.progress.values())
        return slowest - self.lateness_s

    def snapshot_meta(self) -> dict[str, Any]:
        return {"progress": self.progress, "backlogged": sorted(self.backlogged), "ahead": self.ahead_batches}

    def restore_meta(self, meta: dict[str, Any]) -> None:
        self.progress = {str(k): float(v) for k, v in meta["progress"].items()}
        self.backlogged = {str(s) for s in meta["backlogged"]}
        self.ahead_batches = {str(k): int(v) for k, v in meta["ahead"].items()}


class ReorderBuffer:
    """Columnar samples waiting for the watermark, released oldest first."""

    def __init__(self) -> None:
        self.ids: Ids = np.zeros(0, dtype=np.int64)
        self.ts: Floats = np.zeros(0)
        self.values: Floats = np.zeros(0)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Ids, ts: Floats, values: Floats) -> None:
        self.ids = np.concatenate([self.ids, ids])
        self.ts = np.concatenate([self.ts, ts])
        self.values = np.concatenate([self.values, values])

    def release(self, until: float) -> tuple[Ids, Floats, Floats]:
        """Samples with ts <= until (and undated ones), sorted by event time; the rest stay."""
        due = ~(self.ts > until)  # NaN timestamps are released: the detectors ignore them
        if not due.any():
            return self.ids[:0], self.ts[:0], self.values[:0]
        order = np.argsort(self.ts[due], kind="stable")
        out = self.ids[due][order], self.ts[due][order], self.values[due][order]
        keep = ~due
        self.ids, self.ts, self.values = self.ids[keep], self.ts[keep], self.values[keep]
        return out

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {"ids": self.ids, "ts": self.ts, "values": self.values}

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        self.ids = arrays["ids"].astype(np.int64, copy=False)
        self.ts = arrays["ts"].astype(np.float64, copy=False)
        self.values = arrays["values"].astype(np.float64, copy=False)
