"""The fleet's own nulls over a whole fleet, from per-partition sufficient statistics that merge.

The false-alert budget (`alert_budget.py`) and the family calibration (`family_calibration.py`) fit
their thresholds and shifts on the fleet's healthy episodes. A partition's pipeline holds only its own
nodes, so fitted on those alone a small partition kept the configured defaults for longer (too little
exposure) and shards of one fleet paged at different thresholds, depending on how it was partitioned.
Both nulls are sums, faded alike with event time: the budget's episodes over `tail_from`, their excess
and unconfirmed pages per level and the node-seconds watched; the calibration's episodes per (level,
family, surprise level), on the vote and the sustained path, and its entity-days per (level, family).
So each partition reduces its null to those sums (`NullStats`: 7 + 2 x families x (2 x levels + 1)
numbers, whatever its node count), the partitions' stats are added (`merge`, each faded to the newest
first), and every partition fits the same thresholds and shifts from the sum.

The wire form (`to_wire`) is versioned base64 of the nonzero sums only; anything else is a ValueError,
never a crash.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prexid.detectors.base import Floats, read_versioned

WIRE_VERSION = 1
BUDGET_SUMS = 7  # episodes (gpu, node), their excess (gpu, node), pages (gpu, node), node-seconds
_HEAD = np.dtype([("version", "u1"), ("families", "u1"), ("levels", "u1"), ("at", "<f8")])


@dataclass(frozen=True, slots=True, eq=False)
class NullStats:
    """One partition's (or a merged fleet's) null sums, as of event time `at` (the last tick folded in).

    `budget`: `AlertBudget.stats`; `episodes`, `sustained` (2, families, levels) and `exposure`
    (2, families): `FamilyCalibration.stats` (families and levels 0 when the calibration is off)."""

    at: float
    budget: Floats
    episodes: Floats
    exposure: Floats
    sustained: Floats

    @property
    def shape(self) -> tuple[int, int]:
        """(families, surprise levels) of the calibration's sums."""
        return int(self.episodes.shape[1]), int(self.episodes.shape[2])

    @classmethod
    def of(
        cls, at: float, budget: Floats | None, calibration: tuple[Floats, Floats, Floats] | None
    ) -> NullStats:
        """A partition's stats from its budget's and calibration's sums (None: that null is off)."""
        episodes, exposure, sustained = calibration or (
            np.zeros((2, 0, 0)),
            np.zeros((2, 0)),
            np.zeros((2, 0, 0)),
        )
        return cls(
            at,
            np.zeros(BUDGET_SUMS) if budget is None else np.array(budget, dtype=np.float64),
            np.array(episodes, dtype=np.float64),
            np.array(exposure, dtype=np.float64),
            np.array(sustained, dtype=np.float64),
        )

    def faded(self, to: float, budget_half_life_s: float, calibration_half_life_s: float) -> NullStats:
        """The sums as they fade by event time `to` (an older partition's, for a merge); never grown."""
        if not to > self.at or not np.isfinite(self.at):
            return self
        b = float(np.exp2(-(to - self.at) / budget_half_life_s))
        c = float(np.exp2(-(to - self.at) / calibration_half_life_s))
        return NullStats(to, self.budget * b, self.episodes * c, self.exposure * c, self.sustained * c)

    def _flat(self) -> Floats:
        return np.concatenate(
            [self.budget, self.episodes.ravel(), self.exposure.ravel(), self.sustained.ravel()]
        )

    def to_wire(self) -> str:
        """Versioned base64: head (version, families, levels, at), a bit per sum (nonzero), the nonzero
        sums (f8)."""
        families, levels = self.shape
        flat = self._flat()
        nonzero = flat != 0.0
        head = np.array([(WIRE_VERSION, families, levels, self.at)], dtype=_HEAD).tobytes()
        body = np.packbits(nonzero).tobytes() + flat[nonzero].astype("<f8").tobytes()
        return base64.b64encode(head + body).decode()

    @classmethod
    def from_wire(cls, text: str) -> NullStats:
        """`to_wire` read back; ValueError on anything else (another version, truncated, impossible)."""
        raw, head = read_versioned(text, _HEAD, WIRE_VERSION, "fleet null stats")
        f, k = int(head["families"]), int(head["levels"])
        if (f == 0) != (k == 0):
            raise ValueError("fleet null stats of families without levels")
        n = BUDGET_SUMS + 2 * f * (2 * k + 1)
        mask_bytes = (n + 7) // 8
        at = _HEAD.itemsize
        if len(raw) < at + mask_bytes:
            raise ValueError("fleet null stats truncated")
        mask = np.unpackbits(np.frombuffer(raw[at : at + mask_bytes], dtype="u1"))
        if mask[n:].any():
            raise ValueError("fleet null stats mark sums past their end")
        nonzero = mask[:n].astype(bool)
        tail = raw[at + mask_bytes :]
        if len(tail) != 8 * int(nonzero.sum()):
            raise ValueError("fleet null stats truncated or malformed")
        flat = np.zeros(n)
        flat[nonzero] = np.frombuffer(tail, dtype="<f8")
        if not (np.isfinite(flat).all() and (flat >= 0).all() and np.isfinite(float(head["at"]))):
            raise ValueError("fleet null stats hold negative or non-finite sums")
        cut = np.cumsum([BUDGET_SUMS, 2 * f * k, 2 * f])
        budget, episodes, exposure, sustained = np.split(flat, cut)
        return cls(
            float(head["at"]),
            budget,
            episodes.reshape(2, f, k),
            exposure.reshape(2, f),
            sustained.reshape(2, f, k),
        )


def merge(parts: Sequence[NullStats], budget_half_life_s: float, calibration_half_life_s: float) -> NullStats:
    """The fleet's stats: every partition's faded to the newest one's time, then added. Partitions of
    another calibration shape (another build or configuration) are a ValueError."""
    if not parts:
        raise ValueError("no fleet null stats to merge")
    at = max(p.at for p in parts)
    shapes = {p.shape for p in parts}
    if len(shapes) > 1:
        raise ValueError(f"fleet null stats of different shapes (families, levels): {sorted(shapes)}")
    faded = [p.faded(at, budget_half_life_s, calibration_half_life_s) for p in parts]
    if len(faded) == 1:
        return faded[0]
    return NullStats(
        at,
        np.sum([p.budget for p in faded], axis=0),
        np.sum([p.episodes for p in faded], axis=0),
        np.sum([p.exposure for p in faded], axis=0),
        np.sum([p.sustained for p in faded], axis=0),
    )
