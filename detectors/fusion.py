"""Multi-signal fusion: per-entity evidence by signal family, combined across families per tick.

Within a family the strongest series speaks for it (the correlated metrics of one GPU are one vote, not
many); across families, capped surprises (-log10 p) of the families that clear `vote_min` are summed,
so two independent families at p=1e-4 weigh as much as one at 1e-8. Family evidence is max-held and
decays with an event-time half-life, which is what lets scrapes of different series, arriving a few
seconds apart, meet in one vote.

Entities are GPUs and nodes alike (a node's own series, node-exporter's, form the node entity); the
registry decides which entity a series belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from detectors.bank import Evidence
from detectors.base import Floats, Ids
from detectors.signals import N_FAMILIES, PER_DEVICE_FAMILIES, SHARED_CAUSE_FAMILIES

SURPRISE_CAP = 12.0


@dataclass(frozen=True, slots=True)
class FusionConfig:
    step_s: float = 15.0  # evaluation tick, one scrape interval
    half_life_s: float = 120.0  # decay of held family evidence
    vote_min: float = 2.0  # a family votes when its surprise is at least this (p <= 0.01)
    family_cap: float = 6.0  # below the firing threshold: one family alone never pages
    common_mode_frac: float = 0.3  # a family voting on this share of its entities at once is common-mode
    common_mode_exit: float = 0.1  # ... and stays so until the share falls below this (hysteresis)
    common_mode_min_entities: int = 4  # too few entities carry a family to tell common-mode from a fault
    node_mode_frac: float = 0.5  # a family voting on this share of one node's GPUs is a node-level cause


def surprise(p: Floats) -> Floats:
    """-log10 p, capped, so p=1 gives 0 and p=1e-12 gives 12."""
    return np.minimum(-np.log10(np.clip(p, 1e-300, 1.0)), SURPRISE_CAP)


def score01(fused: Floats, fire_threshold: float) -> Floats:
    """Map fused surprise to a 0..1 score: 0.5 exactly at the firing threshold."""
    return 1.0 - np.exp2(-fused / fire_threshold)


class Fusion:
    """Held per-(entity, family) evidence and its fusion into one score per entity."""

    def __init__(self, config: FusionConfig | None = None) -> None:
        self.config = config or FusionConfig()
        self.held = np.zeros((0, N_FAMILIES))
        self.top_series = np.full((0, N_FAMILIES), -1, dtype=np.int64)
        self.top_value = np.full((0, N_FAMILIES), np.nan)
        self.top_rising = np.zeros((0, N_FAMILIES), dtype=bool)  # the top series is above its baseline
        self.last_tick = -np.inf
        self.present = np.zeros((0, N_FAMILIES), dtype=bool)  # entity has series of this family
        self.parent = np.full(0, -1, dtype=np.int64)  # a GPU's node entity; -1 for nodes themselves
        self.common = np.zeros(N_FAMILIES, dtype=bool)  # families common-mode at the last tick
        self.common_share = np.zeros(N_FAMILIES)  # share of a family's entities voting at the last tick
        self.rising_share = np.zeros(N_FAMILIES)  # ... voting with their top series above its baseline
        self.at_tick = self.held.copy()

    def ensure(self, n_entities: int) -> None:
        have = len(self.held)
        if n_entities <= have:
            return
        grow = n_entities - have  # exact: spare rows would dilute the common-mode share
        self.held = np.vstack([self.held, np.zeros((grow, N_FAMILIES))])
        self.top_series = np.vstack([self.top_series, np.full((grow, N_FAMILIES), -1, dtype=np.int64)])
        self.top_value = np.vstack([self.top_value, np.full((grow, N_FAMILIES), np.nan)])
        self.present = np.vstack([self.present, np.zeros((grow, N_FAMILIES), dtype=bool)])
        self.top_rising = np.vstack([self.top_rising, np.zeros((grow, N_FAMILIES), dtype=bool)])
        self.parent = np.r_[self.parent, np.full(grow, -1, dtype=np.int64)]

    def ingest(self, ev: Evidence, entity: Ids, family: NDArray[np.uint8]) -> None:
        """Max-hold each sample's surprise into its (entity, family) cell and remember the top series."""
        s = surprise(ev.p)
        known = entity >= 0
        self.present[entity[known], family[known]] = True
        hot = (s > 0) & known
        if not hot.any():
            return
        ent, fam, s = entity[hot], family[hot].astype(np.int64), s[hot]
        flat = self.held.reshape(-1)
        cells = ent * N_FAMILIES + fam
        np.maximum.at(flat, cells, s)
        won = s >= flat[cells]
        self.top_series.reshape(-1)[cells[won]] = ev.ids[hot][won]
        self.top_value.reshape(-1)[cells[won]] = ev.values[hot][won]
        self.top_rising.reshape(-1)[cells[won]] = ev.up()[hot][won]

    def evaluate(self, tick: float) -> Floats:
        """Fused score per entity at `tick`, then age the held evidence by one step.

        Evidence held from before a gap in the data is aged by the whole gap first. A family voting on
        at least `common_mode_frac` of all entities at once is common-mode (a checkpoint, a job restart,
        a storage stall): it is evidence against no single GPU, so its held evidence is cleared for
        everyone, before its decaying tail could leak into a few entities' sums. One level down, a
        family voting on most GPUs of one node is that node's: see `lift_node_causes`.
        """
        cfg = self.config
        if np.isfinite(self.last_tick) and tick - self.last_tick > cfg.step_s:
            self.decay(tick - self.last_tick - cfg.step_s)
        self.common = self.common_mode()
        self.held[:, self.common] = 0.0
        self.lift_node_causes()
        fused = self.fused()
        self.at_tick = self.held.copy()  # what the last evaluation saw, for explanations
        self.decay(cfg.step_s)
        self.last_tick = tick
        return fused

    def common_mode(self) -> NDArray[np.bool_]:
        """Families voting on a large share of the entities that carry them, with hysteresis."""
        cfg = self.config
        carriers = self.present.sum(axis=0)
        voting = self.held >= cfg.vote_min
        votes = voting.sum(axis=0)
        self.common_share = np.where(carriers > 0, votes / np.maximum(carriers, 1), 0.0)
        self.rising_share = (voting & self.top_rising).sum(axis=0) / np.maximum(carriers, 1)
        enough = carriers >= cfg.common_mode_min_entities
        threshold = np.where(self.common, cfg.common_mode_exit, cfg.common_mode_frac)
        return np.asarray(enough & (self.common_share >= threshold))

    def lift_node_causes(self) -> None:
        """Move evidence shared by most of a node's GPUs up to the node entity.

        Several GPUs of one node moving together (a PCIe or NVLink switch, the node's cooling) are one
        node fault, not several GPU faults: a shared-cause family is credited to the node entity and
        cleared from its GPUs; a workload family (a single-node job's phase) is only cleared; per-device
        families (ECC, Xid) stay with their GPU.
        """
        gpus = np.flatnonzero(self.parent >= 0)
        if not len(gpus):
            return
        nodes = self.parent[gpus]
        hot = self.held[gpus] >= self.config.vote_min
        votes = np.zeros_like(self.held)
        carriers = np.zeros_like(self.held)
        np.add.at(votes, nodes, hot)
        np.add.at(carriers, nodes, self.present[gpus])
        node_wide = (votes >= 2) & (votes >= self.config.node_mode_frac * carriers)  # never one GPU alone
        moved = node_wide[nodes] & hot  # (gpu, family) cells explained by their node
        if not moved.any():
            return
        shared = np.zeros(N_FAMILIES, dtype=bool)
        shared[[int(f) for f in SHARED_CAUSE_FAMILIES]] = True
        per_device = np.zeros(N_FAMILIES, dtype=bool)
        per_device[[int(f) for f in PER_DEVICE_FAMILIES]] = True
        rows, fams = np.nonzero(moved & shared)
        credit = self.held[gpus[rows], fams]
        cells = nodes[rows] * N_FAMILIES + fams
        flat = self.held.reshape(-1)
        np.maximum.at(flat, cells, credit)
        won = credit >= flat[cells]
        self.top_series.reshape(-1)[cells[won]] = self.top_series[gpus[rows], fams][won]
        self.top_value.reshape(-1)[cells[won]] = self.top_value[gpus[rows], fams][won]
        self.present[nodes[rows], fams] = True
        clear_rows, clear_fams = np.nonzero(moved & ~per_device)
        self.held[gpus[clear_rows], clear_fams] = 0.0

    def fused(self) -> Floats:
        """Fused surprise per entity: sum of the capped held evidence of families that vote."""
        capped = np.minimum(self.held, self.config.family_cap)
        votes: Floats = np.where(capped >= self.config.vote_min, capped, 0.0).sum(axis=1)
        return votes

    def voting_families(self, entity: int) -> list[int]:
        """Families of one entity that voted at the last evaluation, strongest first (explanations)."""
        row = self.at_tick[entity]
        order = np.argsort(-row, kind="stable")
        return [int(f) for f in order if row[f] >= self.config.vote_min]

    def decay(self, elapsed_s: float) -> None:
        self.held *= np.exp2(-elapsed_s / self.config.half_life_s)
        self.held[self.held < 1e-3] = 0.0

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        return {
            "held": self.held,
            "top_series": self.top_series,
            "top_value": self.top_value,
            "top_rising": self.top_rising,
            "last_tick": np.array([self.last_tick]),
            "present": self.present,
            "common": self.common,
            "parent": self.parent,
        }

    def restore_arrays(self, arrays: dict[str, NDArray[np.generic]]) -> None:
        self.held = np.array(arrays["held"], dtype=np.float64)
        self.top_series = np.array(arrays["top_series"], dtype=np.int64)
        self.top_value = np.array(arrays["top_value"], dtype=np.float64)
        self.top_rising = np.array(arrays["top_rising"], dtype=bool)
        self.last_tick = float(arrays["last_tick"][0])
        self.present = np.array(arrays["present"], dtype=bool)
        self.common = np.array(arrays["common"], dtype=bool)
        self.parent = np.array(arrays["parent"], dtype=np.int64)
