"""Every detector prexid ships, by name, with the fault shape it exists for.

The conformance suite (tests/unit/test_detector_conformance.py) runs every entry here through the same
checks, so a detector added to this table is checked without anyone remembering to. A detector that needs
to know the cluster's layout learns it through the methods it has of `set_groups(ids, groups)` (peer
groups), `set_nodes(ids, nodes)` and `watch(ids)` (the series it reads), called at registration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prexid.detectors.base import Detector
from prexid.detectors.cooling import CoolingDrift
from prexid.detectors.counter_rate import CounterRate
from prexid.detectors.drift import DriftCusum
from prexid.detectors.error_counter import ErrorCounterSurprise
from prexid.detectors.fail_slow import FailSlow
from prexid.detectors.flatline import Flatline
from prexid.detectors.multivariate import RiverNodeAnomaly
from prexid.detectors.peer import PeerDeviation
from prexid.detectors.robust import RobustDeviation
from prexid.detectors.seasonal import SeasonalDeviation
from prexid.detectors.signals import Kind
from prexid.detectors.staleness import Staleness
from prexid.detectors.trend import TrendShift
from prexid.detectors.variance import VarianceShift


@dataclass(frozen=True, slots=True)
class Registered:
    make: Callable[[], Detector]
    finds: str  # the fault shape it exists for
    reads: Kind = Kind.GAUGE  # the kind of series it is meant for
    cheap: bool = True  # pure numpy over arrays (False: per-node Python, optional)


REGISTRY: dict[str, Registered] = {
    RobustDeviation.name: Registered(RobustDeviation, "level shift or spike against its own baseline"),
    DriftCusum.name: Registered(DriftCusum, "slow creep: temperature, clocks, a growing rate"),
    Flatline.name: Registered(Flatline, "a value stuck at one reading"),
    VarianceShift.name: Registered(VarianceShift, "the spread grows while the level holds"),
    SeasonalDeviation.name: Registered(SeasonalDeviation, "a departure from the series' own daily cycle"),
    TrendShift.name: Registered(TrendShift, "a slow slope appearing, a few hundredths of the noise a point"),
    Staleness.name: Registered(Staleness, "a series or a whole exporter stops reporting"),
    PeerDeviation.name: Registered(PeerDeviation, "a GPU or node that departs from its peers"),
    CounterRate.name: Registered(CounterRate, "a throughput counter's rate shifts", Kind.COUNTER),
    ErrorCounterSurprise.name: Registered(
        ErrorCounterSurprise, "error counter grows faster than usual", Kind.ERROR_COUNTER
    ),
    RiverNodeAnomaly.name: Registered(RiverNodeAnomaly, "a node's joint metric vector is new", cheap=False),
    # over a peer detector of its own here; the bank's reads the bank's (`DetectorBank.fail_slow`)
    FailSlow.name: Registered(
        FailSlow, "a GPU working slower than its node's other GPUs, scrape after scrape"
    ),
    CoolingDrift.name: Registered(
        CoolingDrift, "a GPU creeping warmer than its node's other GPUs than it usually runs (cooling)"
    ),
}
