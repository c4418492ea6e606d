"""Failure scenarios and their ground truth: when the precursor starts, when (and whether) an Xid lands.

Each type's precursor physics is documented in docs/simulator.md. `has_precursor` is drawn per failure:
some failures of every hardware type arrive with no warning at all, and application Xids never have one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.wire import host


@dataclass(frozen=True, slots=True)
class FaultType:
    name: str
    xid_codes: tuple[int, ...]  # the burst printed at failure time; () for failures without an Xid
    weight: float
    precursor_s: tuple[float, float]  # uniform range of the precursor's length
    p_precursor: float
    fatal: bool  # the job dies and the node is drained for repair afterwards
    gpu_level: bool = True


FAULT_TYPES: tuple[FaultType, ...] = (
    FaultType("xid79_fell_off_bus", (79,), 3.0, (900, 5400), 0.7, True),
    FaultType("xid48_dbe", (48, 63), 1.0, (3600, 6 * 3600), 0.6, True),
    FaultType("xid94_contained_ecc", (94, 45), 1.0, (3600, 4 * 3600), 0.6, False),
    FaultType("xid95_uncontained_ecc", (95, 45), 1.0, (3600, 4 * 3600), 0.6, True),
    FaultType("xid63_row_remap", (63,), 1.0, (1800, 3 * 3600), 0.8, False),
    FaultType("xid64_row_remap_failure", (64,), 1.0, (1800, 3 * 3600), 0.8, True),
    FaultType("xid74_nvlink", (74,), 2.0, (600, 3600), 0.75, True),
    FaultType("xid119_gsp_timeout", (119, 120, 154), 2.0, (600, 2400), 0.4, True),
    FaultType("xid13_app", (13, 43), 0.7, (0, 0), 0.0, False),
    FaultType("xid31_page_fault", (31, 43), 0.7, (0, 0), 0.0, False),
    FaultType("thermal_degradation", (), 1.0, (2 * 3600, 5 * 3600), 1.0, True),
    FaultType("straggler", (), 1.0, (3600, 4 * 3600), 1.0, True),
)
NFS_SATURATION = FaultType("nfs_saturation", (), 0.0, (900, 2400), 1.0, False, gpu_level=False)
BY_NAME = {t.name: t for t in (*FAULT_TYPES, NFS_SATURATION)}


@dataclass(frozen=True, slots=True)
class Failure:
    """One labelled failure; `end_ts` closes no-Xid failures (the straggler found, the storm over)."""

    id: str
    type: str
    node: str  # "*" for cluster-wide
    gpu: int | None
    onset_ts: float  # precursor start; equals the Xid time when there is no precursor
    xid_ts: float | None
    xid_code: int | None
    has_precursor: bool
    end_ts: float
    node_index: int = -1

    def label(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("node_index")
        return out


def draw_failures(
    cfg: SimConfig, rng: np.random.Generator, checkpoints: list[float], length_scale: float = 1.0
) -> list[Failure]:
    """Failures at random times after warm-up, at most one per node per 12 h, plus NFS storms;
    `length_scale` shortens every precursor (the same draws, so the failures stay where they were)."""
    end = cfg.start + cfg.ticks * cfg.step_s
    span = end - cfg.start - cfg.warmup_s - 3600.0
    weights = np.array([t.weight for t in FAULT_TYPES])
    out: list[Failure] = []
    busy: dict[int, list[float]] = {}
    n_fail = rng.poisson(cfg.failures_per_day * cfg.days) if span > 0 else 0  # too short for any
    for i in range(n_fail):
        ftype = FAULT_TYPES[int(rng.choice(len(FAULT_TYPES), p=weights / weights.sum()))]
        node, gpu = int(rng.integers(cfg.nodes)), int(rng.integers(cfg.gpus))
        event = cfg.start + cfg.warmup_s + float(rng.uniform(0, span))
        if any(abs(event - t) < 12 * 3600 for t in busy.get(node, [])):
            continue
        busy.setdefault(node, []).append(event)
        has_pre = bool(rng.random() < ftype.p_precursor)
        pre = float(rng.uniform(*ftype.precursor_s)) * length_scale if has_pre else 0.0
        pre = min(pre, event - cfg.start - cfg.warmup_s / 2)
        out.append(_failure(f"f{i:03d}", ftype, node, gpu, event, pre, has_pre))
    n_storm = rng.poisson(cfg.nfs_saturations_per_day * cfg.days)
    late = [c for c in checkpoints if c > cfg.start + cfg.warmup_s and c < end - 3600]
    for j in range(min(n_storm, len(late))):
        at = late[int(rng.integers(len(late)))]
        length = float(rng.uniform(*NFS_SATURATION.precursor_s))
        out.append(Failure(f"s{j:03d}", NFS_SATURATION.name, "*", None, at, None, None, True, at + length))
    return sorted(out, key=lambda f: f.onset_ts)


def _failure(fid: str, t: FaultType, node: int, gpu: int, event: float, pre: float, has: bool) -> Failure:
    onset = event - pre
    if t.xid_codes:
        return Failure(fid, t.name, host(node), gpu, onset, event, t.xid_codes[0], has, event, node)
    # no Xid: the "event" is when an SRE would have found it; the anomaly runs from onset to then
    return Failure(fid, t.name, host(node), gpu, onset, None, None, True, event, node)
