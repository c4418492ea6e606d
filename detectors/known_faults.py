"""Faults an Xid has already named: on that GPU, the error family that reports them is not news.

A degraded NVLink lane keeps throwing CRC errors after its Xid 74 until the part is repaired, and a
node's reboot (which resolves the Xid alert) resets the GPU but does not mend the lane. So a GPU's Xid
marks the families whose counters report that fault (`EXPLAINED_FAMILIES`), and a later warning on the
GPU carried by those families alone is the known fault's, not a warning of a new one. The mark lasts
until every marked family has been quiet on the GPU (held surprise below `quiet_surprise`) for
`quiet_s` of event time: a part that stopped erroring was repaired or reset, and errors after that
are news again. A warning with any other family voting is never held: a new failure of another kind
on a repaired GPU still pages.

A mark holds from its Xid's event time on, not from when its line was read: the tick a warning is
judged at may be evaluated after the Xid's kernel line arrived (the line is read as it comes, the tick
once the scrapes past it are in), and a warning of that earlier tick is a warning before the Xid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.signals import Family

# The family whose series report the fault each Xid names (NVIDIA's Xid catalog): NVLink errors for
# the NVLink Xids, ECC and row-remap counters for the memory ones, PCIe replays for a GPU off the bus,
# and the stalls (fail-slow) of firmware that stops answering for GSP timeouts.
EXPLAINED_FAMILIES: dict[int, frozenset[Family]] = {
    **{code: frozenset({Family.NVLINK}) for code in (74, 144, 145, 146, 147, 148, 149, 150)},
    **{code: frozenset({Family.MEMORY_ECC}) for code in (48, 63, 64, 92, 94, 95, 140)},
    79: frozenset({Family.PCIE}),
    **{code: frozenset({Family.FAIL_SLOW}) for code in (119, 120)},
}


@dataclass
class KnownFaults:
    quiet_s: float = 7200.0  # a marked family quiet this long on its GPU is news again
    quiet_surprise: float = 3.0  # held surprise (-log10 p) under which a family counts as quiet
    loud_at: dict[tuple[int, int], float] = field(default_factory=dict)  # (GPU entity, family) -> last loud
    since: dict[tuple[int, int], float] = field(default_factory=dict)  # ... -> the Xid that marked it

    def record(self, entity: int, code: int, at: float) -> None:
        """An Xid of `code` on this GPU entity at event time `at`."""
        for fam in EXPLAINED_FAMILIES.get(code, ()):
            key = (entity, int(fam))
            self.loud_at[key] = max(self.loud_at.get(key, at), at)
            self.since[key] = min(self.since.get(key, at), at)

    def observe(self, tick: float, surprise: NDArray[np.float64]) -> None:
        """Each marked family's evidence at this tick (`surprise[entity, family]`, what fusion voted with):
        loud keeps the mark, quiet for `quiet_s` lifts it."""
        for key, last in list(self.loud_at.items()):
            entity, fam = key
            if entity < len(surprise) and surprise[entity, fam] >= self.quiet_surprise:
                self.loud_at[key] = max(last, tick)
            elif tick - last >= self.quiet_s:
                del self.loud_at[key]
                self.since.pop(key, None)

    def explains(self, entity: int, families: list[int], at: float) -> bool:
        """Whether every one of these voting families is a marked one of this GPU's at event time `at`."""
        return bool(families) and all(self.since.get((entity, fam), np.inf) <= at for fam in families)

    def snapshot_meta(self) -> dict[str, Any]:
        return {"known_faults": [[e, f, t, self.since[(e, f)]] for (e, f), t in self.loud_at.items()]}

    def restore_meta(self, meta: dict[str, Any]) -> None:
        rows = meta["known_faults"]
        self.loud_at = {(int(e), int(f)): float(t) for e, f, t, _ in rows}
        self.since = {(int(e), int(f)): float(s) for e, f, _, s in rows}
