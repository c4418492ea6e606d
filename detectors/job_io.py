"""How long the job's own storage bursts last, so that shared storage rising longer than that is a stall.

A checkpoint (or a job loading one) drives every node's storage I/O up at once, exactly as an NFS
storm does; what tells them apart is that a checkpoint starts with the job's own phase change (its
utilisation moving on much of the cluster at once) and ends about as long after as the job's last ones
did. A storm starts the same way (a checkpoint that cannot finish) but outlasts them. So each
cluster-wide storage rise that began with a workload shift is timed, and a new one counts as a cluster
fault only once it has outlasted `OUTLAST` times the median of the last `KEEP`. Each counts as at most
twice the allowance of its day: a rare storm among them leaves the median where it was, and a job whose
checkpoints grow is learned within a few of them. Before any is timed the allowance is `PRIOR_S`. A
rise shorter than `MIN_BURST_S` (a scrape or two of votes as the job changes phase) is no burst of its
I/O and is not timed: timed at 0 s, one made the allowance 0, and capped at twice that every later burst
was timed 0 too, so no checkpoint was explained again (a false `cluster` alert at a checkpoint's end on
tuning cell wide-s1497, four days in).
Stall evidence (the family's own error counters: NFS major timeouts) is not judged here: it pages
however the rise began (`cluster.py`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

WITH_SHIFT_S = 120.0  # a rise and a workload shift this close together are one phase change of the job
END_GAP_S = 60.0  # a rise that pauses this long (a few scrapes) is over
MIN_BURST_S = 60.0  # a rise timed shorter than this is a blip, not the job's I/O: not timed
PRIOR_S = 600.0  # the allowance before any of the job's bursts was timed: a long checkpoint's length
OUTLAST = 1.5  # a rise counts as a fault once it outlasts the job's usual burst by this factor
KEEP = 8  # bursts the median is taken over


class JobIO:
    """Times cluster-wide storage rises against the job's phase changes (`step` once a tick)."""

    def __init__(self) -> None:
        self.start = np.nan  # event time the current rise began (NaN: none under way)
        self.last_seen = np.nan  # ... and its last tick rising
        self.with_job = False  # the current rise began with a workload shift
        self.lengths = np.full(KEEP, np.nan)  # the last bursts the job's own, oldest overwritten first
        self.next_slot = 0

    def allowance(self) -> float:
        """How long a rise that began with the job's phase change is taken for the job's own I/O."""
        known = self.lengths[np.isfinite(self.lengths)]
        return OUTLAST * float(np.median(known)) if known.size else PRIOR_S

    def step(self, tick: float, rising: bool, workload_shift_at: float) -> None:
        """One tick: `rising`, storage rising on much of the cluster; `workload_shift_at`, the last tick
        a workload family moved on much of it (`Fusion.workload_shift_at`)."""
        if rising:
            if np.isnan(self.start):
                self.start, self.with_job = tick, False
            self.last_seen = tick
            if tick - self.start <= WITH_SHIFT_S:
                self.with_job |= abs(workload_shift_at - self.start) <= WITH_SHIFT_S
        elif not np.isnan(self.start) and tick - self.last_seen >= END_GAP_S:
            # a storm among them counts as at most twice the allowance: the median holds
            if self.with_job and self.last_seen - self.start >= MIN_BURST_S:
                self.lengths[self.next_slot] = min(self.last_seen - self.start, 2.0 * self.allowance())
                self.next_slot = (self.next_slot + 1) % KEEP
            self.start = self.last_seen = np.nan

    def explains(self, tick: float) -> bool:
        """The storage rise under way is the job's own I/O: it began with a workload shift and has not
        yet outlasted the job's usual burst."""
        return self.with_job and not np.isnan(self.start) and tick - self.start < self.allowance()

    # -- state -----------------------------------------------------------------------------------
    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {
            "job_io_times": np.array([self.start, self.last_seen]),
            "job_io_with_job": np.array([self.with_job]),
            "job_io_lengths": self.lengths,
            "job_io_next_slot": np.array([self.next_slot]),
        }

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        self.start, self.last_seen = (float(t) for t in np.asarray(arrays["job_io_times"], dtype=np.float64))
        self.with_job = bool(arrays["job_io_with_job"][0])
        self.lengths = np.asarray(arrays["job_io_lengths"], dtype=np.float64).copy()
        self.next_slot = int(arrays["job_io_next_slot"][0])
