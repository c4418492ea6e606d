"""Cluster-level evidence: a fault family moving on many entities at once is one cluster event.

The fusion layer already clears common-mode families from every entity's sum (no node pages for a
shared cause). Here the same common-mode state becomes evidence for one `cluster` alert — but only for
families whose cluster-wide movement means a fault (shared storage, the fabric, cooling, telemetry
itself), not those that move with the workload (utilisation, power, host load at checkpoints).
"""

from __future__ import annotations

import numpy as np

from detectors.fusion import Fusion
from detectors.signals import SHARED_CAUSE_FAMILIES, Family

CLUSTER_FAULT_FAMILIES = SHARED_CAUSE_FAMILIES


def cluster_fused(fusion: Fusion, fire: float, families: frozenset[Family] = CLUSTER_FAULT_FAMILIES) -> float:
    """Fused cluster score: `fire` when a fault family is common-mode at exactly the threshold share,
    growing with the share of entities involved; 0 when no fault family is common-mode."""
    eligible = np.zeros(len(fusion.common), dtype=bool)
    eligible[[int(f) for f in families]] = True
    involved = fusion.common & eligible
    if not involved.any():
        return 0.0
    return float(fire * fusion.common_share[involved].max() / fusion.config.common_mode_frac)


def cluster_families(fusion: Fusion, families: frozenset[Family] = CLUSTER_FAULT_FAMILIES) -> list[Family]:
    """The fault families common-mode at the last evaluation, most widespread first."""
    found = [Family(int(f)) for f in np.flatnonzero(fusion.common) if int(f) in families]
    return sorted(found, key=lambda f: -fusion.common_share[f])
