"""The detector bank: routes every sample to the detector for its series' kind, in one vectorised pass.

Each series has a `Kind` (from the signal catalog); the bank keeps it in an array indexed by series id,
splits a batch by kind with boolean masks and hands each detector only its own samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from detectors.base import Detector, Floats, Ids, pack_blobs, unpack_blobs
from detectors.counter_rate import CounterRate
from detectors.error_counter import ErrorCounterSurprise
from detectors.robust import RobustDeviation
from detectors.signals import Kind


@dataclass(frozen=True, slots=True)
class Evidence:
    """Per-sample result of one bank update: tail probability and the value that earned it."""

    ids: Ids
    ts: Floats
    values: Floats
    p: Floats


class DetectorBank:
    """One detector per series kind, state in arrays indexed by series id."""

    def __init__(self) -> None:
        self.detectors: dict[Kind, Detector] = {
            Kind.GAUGE: RobustDeviation(),
            Kind.COUNTER: CounterRate(),
            Kind.ERROR_COUNTER: ErrorCounterSurprise(),
        }
        self.kinds: NDArray[np.uint8] = np.zeros(1024, dtype=np.uint8)

    def set_kinds(self, ids: Ids, kinds: NDArray[np.uint8]) -> None:
        """Declare the kind of newly registered series (Kind.IGNORED series are never scored)."""
        if len(ids) and int(ids.max()) >= len(self.kinds):
            grown = np.zeros(max(2 * len(self.kinds), int(ids.max()) + 1), dtype=np.uint8)
            grown[: len(self.kinds)] = self.kinds
            self.kinds = grown
        self.kinds[ids] = kinds

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Evidence:
        p = np.ones(len(ids), dtype=np.float64)
        known = ids < len(self.kinds)
        kinds = np.where(known, self.kinds[np.where(known, ids, 0)], Kind.IGNORED)
        for kind, det in self.detectors.items():
            mask = kinds == kind
            if mask.any():
                p[mask] = det.update(ids[mask], ts[mask], values[mask])
        return Evidence(ids=ids, ts=ts, values=values, p=p)

    def baseline(self, ids: Ids) -> Floats:
        out = np.full(len(ids), np.nan)
        kinds = self.kinds[ids]
        for kind, det in self.detectors.items():
            mask = kinds == kind
            if mask.any():
                out[mask] = det.baseline(ids[mask])
        return out

    def snapshot(self) -> bytes:
        return pack_blobs(self.kinds.tobytes(), *(d.snapshot() for d in self.detectors.values()))

    def restore(self, data: bytes) -> None:
        kinds, *parts = unpack_blobs(data)
        if len(parts) != len(self.detectors):
            raise ValueError("snapshot does not match this bank's detectors")
        self.kinds = np.frombuffer(kinds, dtype=np.uint8).copy()
        for det, part in zip(self.detectors.values(), parts, strict=True):
            det.restore(part)
