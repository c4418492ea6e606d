"""Cluster-level evidence: a fault family moving on many entities at once is one cluster event.

The fusion layer already clears common-mode families from every entity's sum (no node pages for a
shared cause). Here the same common-mode state becomes evidence for one `cluster` alert — but only for
families whose cluster-wide movement means a fault (shared storage, the fabric, cooling, telemetry
itself), not those that move with the workload (utilisation, power, host load at checkpoints).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.fusion import Fusion, family_mask
from prexid.detectors.signals import SHARED_CAUSE_FAMILIES, STALL_FAMILIES, Family

CLUSTER_FAULT_FAMILIES = SHARED_CAUSE_FAMILIES


def cluster_fused(fusion: Fusion, fire: float, families: frozenset[Family] = CLUSTER_FAULT_FAMILIES) -> float:
    """Fused cluster score: `fire` when a fault family is common-mode and rising (hotter, more backlog,
    more errors) on exactly the threshold share of entities, growing with that share; 0 otherwise.
    A cluster cooling down or going quiet at once is a job stopping, not a fault."""
    involved = _involved(fusion, families)
    if not involved.any():
        return 0.0
    cfg = fusion.config
    by_share = fusion.rising_share[involved].max() / cfg.common_mode_frac
    by_stall = fusion.stalled_votes[involved].max() / cfg.stall_min_votes
    return float(fire * max(by_share, by_stall))


WORKLOAD_HEAT_S = 1800.0  # GPUs take this long to settle thermally after the job's load changes


def _involved(fusion: Fusion, families: frozenset[Family]) -> NDArray[np.bool_]:
    """Shared-cause families rising on much of the cluster, less heat that the workload explains.

    Temperature follows power: a cluster warming within half an hour of the job's load changing
    (a start, a restart after a checkpoint) is the job, not the cooling.

    Storage rising on much of the cluster as the job changes phase is the job's checkpoint (or its
    load of one) until it outlasts the job's usual ones (`Fusion.job_io`): a storm is a checkpoint that
    cannot finish.

    A `STALL_FAMILIES` family is involved also when its error counters rise with it on
    `stall_min_votes` entities, whatever their share: a storage server stalling on an idle fleet times
    out the RPCs of its only clients, the busy nodes (two of eight), while a checkpoint's I/O on those
    nodes, however surprising, times nothing out.
    """
    eligible = family_mask(families)
    if fusion.last_tick - fusion.workload_shift_at <= WORKLOAD_HEAT_S:
        eligible[Family.THERMAL] = False
    wide = fusion.wide_rising()
    if fusion.job_io.explains(fusion.last_tick):
        wide &= ~family_mask(STALL_FAMILIES)
    stalled = family_mask(STALL_FAMILIES) & (fusion.stalled_votes >= fusion.config.stall_min_votes)
    return eligible & (wide | stalled)


def cluster_families(fusion: Fusion, families: frozenset[Family] = CLUSTER_FAULT_FAMILIES) -> list[Family]:
    """The fault families common-mode at the last evaluation, most widespread first."""
    found = [Family(int(f)) for f in np.flatnonzero(_involved(fusion, families))]
    return sorted(found, key=lambda f: -fusion.rising_share[f])
