"""The detector bank: routes every sample to the detectors for its series' kind, in one vectorised pass.

Each series has a `Kind` (from the signal catalog); the bank keeps it in an array indexed by series id,
splits a batch by kind with boolean masks and hands each detector only its own samples. A kind read by
several detectors gets one p per sample: the smallest, times the number of detectors (Bonferroni), so
running more detectors never makes healthy data look more surprising.

Silence has no samples: `sweep(now)`, called at each fusion tick, returns staleness evidence for the
series that stopped reporting. A series back from a long silence (`RETURN_GAP_S`: a reboot, a repair
drain, a GPU fallen off the bus and reset) at a level its past does not know (`RETURN_JUMP_SIGMAS` off
its level detector's baseline, or off its daily profile where that explains it; a counter whatever its
rate) starts its own history afresh: the GPU that comes back runs another regime (drained, idle,
repaired), and judged against its busy past it paged on its first hour back (wide-s1280: a GPU back
36 min after its Xid 79, on a node drained for repair). One back where it was keeps its past: a
five-minute series through an outage of hours (the generic corpus' `gaps` files) was young again after
every outage, its daily profile gone, and found none of its spikes (standard score 93 -> -1 on seed 1).
What is judged against others stays: its peers, fail-slow, error counters and their fleet prior.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    Detector,
    Floats,
    Ids,
    Packed,
    Stored,
    array_pieces,
    batch_rows,
    load_array,
    pack_blobs,
    rows,
    unpack_blobs,
)
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

RETURN_GAP_S = 600.0  # silent this long, a series comes back afresh (exporter restarts: under a minute)
RETURN_GAP_SCRAPES = 2.0  # ... and this many of its own intervals (an hourly series is not silent hourly)
RETURN_JUMP_SIGMAS = 8.0  # ... when it comes back this far from where it was (a gauge)


@dataclass(frozen=True, slots=True)
class Evidence:
    """Per-sample result of one bank update: tail probability and the value that earned it."""

    ids: Ids
    ts: Floats
    values: Floats
    p: Floats
    rising: NDArray[np.bool_] | None = None  # above the series' baseline (level or rate); None: all
    fail_slow_p: Floats | None = None  # fail-slow evidence of watched series (1 elsewhere)
    cooling_p: Floats | None = None  # cooling evidence of GPU temperatures (1 elsewhere)

    def up(self) -> NDArray[np.bool_]:
        return np.ones(len(self.ids), dtype=bool) if self.rising is None else self.rising


class DetectorBank:
    """Detectors per series kind, state in arrays indexed by series id."""

    def __init__(self, multivariate: bool = False, error_counter_warmup_s: float = 1200.0) -> None:
        self.peer = PeerDeviation()
        self.fail_slow = FailSlow(self.peer)
        self.cooling = CoolingDrift()
        self.error_counter = ErrorCounterSurprise(warmup_s=error_counter_warmup_s)
        self.multivariate = RiverNodeAnomaly() if multivariate else None
        self.seasonal = SeasonalDeviation()
        level, self.drift = RobustDeviation(runs=True), DriftCusum()
        trend = TrendShift(seasonal=self.seasonal, drift=self.drift)  # reads the drift's 5-minute means
        self.acyclic: tuple[Detector, ...] = (level, self.drift)  # their baselines lag a daily cycle
        # (the trend detector's means have the seasonal profile taken out: it judges cyclic series too)
        gauge: list[Detector] = [
            level,
            self.drift,
            trend,
            Flatline(),
            VarianceShift(),
            self.seasonal,
            self.peer,
        ]
        if self.multivariate is not None:
            gauge.append(self.multivariate)
        self.level = level  # where a series back from a silence left its level (`_afresh`)
        rate = CounterRate()
        self.detectors: dict[Kind, list[Detector]] = {
            Kind.GAUGE: gauge,
            Kind.COUNTER: [rate],
            Kind.ERROR_COUNTER: [self.error_counter],
        }
        # each series against its own past: what a long silence voids
        self.own_history: tuple[Detector, ...] = tuple(d for d in (*gauge, rate) if d is not self.peer)
        self.staleness = Staleness()
        self.kinds: NDArray[np.uint8] = np.zeros(1024, dtype=np.uint8)

    def set_kinds(self, ids: Ids, kinds: NDArray[np.uint8]) -> None:
        """Declare the kind of newly registered series (Kind.IGNORED series are never scored)."""
        if len(ids) and int(ids.max()) >= len(self.kinds):
            grown = np.zeros(max(2 * len(self.kinds), int(ids.max()) + 1), dtype=np.uint8)
            grown[: len(self.kinds)] = self.kinds
            self.kinds = grown
        self.kinds[ids] = kinds

    def set_groups(
        self, ids: Ids, peer_groups: Ids, nodes: Ids, fields: Ids | None = None, field_keys: Ids | None = None
    ) -> None:
        """Declare each series' peer group (-1: none), node index and fleet field (its metric; every
        field's fleet key, `fleet_prior.field_key`), for the cross-sectional detectors and the error
        counters' fleet prior."""
        self.peer.set_groups(ids, peer_groups)
        if fields is not None:
            self.error_counter.set_fields(ids, fields, field_keys)
        if self.multivariate is not None:
            self.multivariate.set_nodes(ids, nodes)

    def watch_work_rate(self, ids: Ids, entities: Ids | None = None) -> None:
        """Declare newly registered series that measure how fast a GPU works (fail-slow reads them),
        each with its GPU's entity id (None: not paired with a temperature)."""
        self.fail_slow.watch(ids, entities)

    def watch_temperature(self, ids: Ids, peer_groups: Ids) -> None:
        """Declare newly registered GPU temperatures and their peer groups (the cooling detector's)."""
        self.cooling.set_groups(ids, peer_groups)
        self.cooling.watch(ids)

    def watch_work(self, ids: Ids, entities: Ids, kinds: Ids) -> None:
        """Declare newly registered series that measure how much work a GPU does (power, tensor activity:
        `fail_slow.work_done_kind`), each with its GPU's entity id: fail-slow tells a GPU slowed by heat
        from one doing less work by them."""
        self.fail_slow.watch_work(ids, entities, kinds)

    def watch_heat(self, ids: Ids, entities: Ids) -> None:
        """Declare newly registered GPU die temperatures, each with its GPU's entity id: fail-slow pairs
        it with that GPU's work rate (one per GPU: a memory temperature would replace it)."""
        self.fail_slow.watch_heat(ids, entities)

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Evidence:
        """Score a batch; one of distinct ids in another order is scored in id order, and answered in its own.

        The detectors read and write their state much faster by slice (a run of consecutive ids) or by
        ascending ids than in random order, and a batch's order never changes a score (ids distinct).
        """
        with batch_rows(ids) as at:  # each detector asks: worked out once
            order = None if isinstance(at, slice) else _id_order(ids)
            if order is None:
                return self._update(ids, ts, values)
        in_order = ids[order]
        with batch_rows(in_order):
            ev = self._update(in_order, ts[order], values[order])
        p, rising, slow = np.empty_like(ev.p), np.empty(len(ids), dtype=bool), np.ones(len(ids))
        heat = np.ones(len(ids))
        p[order], rising[order] = ev.p, ev.up()
        if ev.fail_slow_p is not None:
            slow[order] = ev.fail_slow_p
        if ev.cooling_p is not None:
            heat[order] = ev.cooling_p
        return Evidence(ids=ids, ts=ts, values=values, p=p, rising=rising, fail_slow_p=slow, cooling_p=heat)

    def _update(self, ids: Ids, ts: Floats, values: Floats) -> Evidence:
        if len(ids) and int(ids.min()) >= 0 and int(ids.max()) < len(self.kinds):
            kinds = self.kinds[rows(ids)]  # every id registered: the usual case, no masking
        else:
            known = (ids >= 0) & (ids < len(self.kinds))
            kinds = np.where(known, self.kinds[np.where(known, ids, 0)], Kind.IGNORED)
        scored = kinds != Kind.IGNORED
        self._afresh(ids, ts, values, kinds)
        if scored.all():  # a whole batch of one kind is passed on as is, without copies
            self.staleness.update(ids, ts, values)
        elif scored.any():
            self.staleness.update(ids[scored], ts[scored], values[scored])
        p = np.ones(len(ids), dtype=np.float64)
        rising = np.ones(len(ids), dtype=bool)
        for kind, dets in self.detectors.items():
            mask = kinds == kind
            if mask.all():
                rising = self._rising(kind, ids, ts, values)
                p = self._combine(dets, ids, ts, values, rising)
            elif mask.any():
                sub = (ids[mask], ts[mask], values[mask])
                sub_rising = self._rising(kind, *sub)
                p[mask] = self._combine(dets, *sub, sub_rising)
                rising[mask] = sub_rising
        slow = self.fail_slow.update(ids, ts, values)  # after the peer detector saw the same samples
        heat = self.cooling.update(ids, ts, values)
        return Evidence(ids=ids, ts=ts, values=values, p=p, rising=rising, fail_slow_p=slow, cooling_p=heat)

    def _afresh(self, ids: Ids, ts: Floats, values: Floats, kinds: NDArray[np.uint8]) -> None:
        """Series back after `RETURN_GAP_S` of silence, and `RETURN_GAP_SCRAPES` of their own intervals,
        in another regime forget their own past (read before the arrival)."""
        last = self.staleness.state.read("last_ts", ids)
        silent = ts - last  # never heard of (-inf): nothing to forget
        back = (last > -np.inf) & (silent > RETURN_GAP_S)
        if not back.any():  # the usual scrape: the intervals are read only for the few silent this long
            return
        at = np.flatnonzero(back)
        interval = self.staleness.state.read("interval", ids[at])
        with np.errstate(invalid="ignore"):  # an interval not learned yet (NaN): RETURN_GAP_S alone
            at = at[~(silent[at] <= RETURN_GAP_SCRAPES * interval)]
        if not len(at):
            return
        gauge = kinds[at] == Kind.GAUGE
        back_ids, back_ts, back_x = ids[at], ts[at], values[at]
        cyclic = self.seasonal.deviation(back_ids, back_ts, back_x)  # back at another hour of its day
        off = np.where(np.isnan(cyclic), self.level.deviation(back_ids, back_x), cyclic)
        with np.errstate(invalid="ignore"):  # a gauge still in its warm-up (NaN) has no past to keep
            moved = ~(off <= RETURN_JUMP_SIGMAS)
        gone = ids[at[~gauge | moved]]
        if len(gone):
            for det in self.own_history:
                det.forget(gone)

    def _combine(
        self, dets: list[Detector], ids: Ids, ts: Floats, values: Floats, rising: NDArray[np.bool_]
    ) -> Floats:
        """Smallest p of the detectors times their count (Bonferroni), at most 1.

        On a series whose own daily profile explains it (`SeasonalDeviation.explains`, read before this
        sample), the level and drift detectors' evidence is left out: their baselines lag the cycle,
        so what they see is the cycle, and the seasonal detector judges level, spikes and drift
        against it. The count stays the same: it is one configuration whatever the series. Where a
        creep's CUSUM gave the evidence, `rising` is set to the creep's direction: the evidence points
        the way its finder saw."""
        smallest = np.ones(len(ids))
        cyclic = self.seasonal.explains(ids) if self.seasonal in dets else None
        if cyclic is not None and not cyclic.any():
            cyclic = None
        creep = None  # the drift detector's p, where it is among `dets`
        for det in dets:
            p = det.update(ids, ts, values)
            if cyclic is not None and det in self.acyclic:
                p = np.where(cyclic, 1.0, p)
            if det is self.drift:
                creep = p
            np.minimum(smallest, p, out=smallest)
        if creep is not None:
            won = creep <= np.minimum(smallest, 0.5)  # the creep's evidence is the strongest
            if won.any():  # read for every series by slice: cheaper than a gather of the winners
                np.copyto(rising, self.drift.rising(ids), where=won)
        return np.minimum(smallest * len(dets), 1.0)

    def _rising(self, kind: Kind, ids: Ids, ts: Floats, values: Floats) -> NDArray[np.bool_]:
        """Whether each sample lies above its series' baseline, read before the update.

        Fusion uses it to tell a cluster getting hotter or more backlogged (a shared fault) from one
        cooling down or going quiet (a job stop). Error counters only ever rise.
        """
        det = self.detectors[kind][0]
        with np.errstate(invalid="ignore"):
            if isinstance(det, CounterRate):
                return np.asarray(det.rate_of(ids, ts, values) > det.baseline(ids))
            if kind == Kind.GAUGE:
                return np.asarray(values > det.baseline(ids))
        return np.ones(len(ids), dtype=bool)

    def sweep(self, now: float) -> tuple[Ids, Floats]:
        """Series silent at event time `now` (scored kinds only) and the tail probability of the silence."""
        ids, p = self.staleness.sweep(now)
        return ids, p

    def forget(self, ids: Ids) -> None:
        """Expired series: every detector's rows, staleness, fail-slow slots and kinds back to a
        never-seen series' (Kind.IGNORED until its id is registered again), so a recycled id starts clean.
        Walks every `Saved` part the bank holds: a new one is covered by implementing `forget`."""
        if not len(ids):
            return
        for det in self.all_detectors():
            det.forget(ids)
        self.staleness.forget(ids)
        self.fail_slow.forget(ids)  # its own rows; the shared peer detector is among the detectors
        self.cooling.forget(ids)
        self.kinds[ids[ids < len(self.kinds)]] = Kind.IGNORED

    def baseline(self, ids: Ids) -> Floats:
        """What each series is expected to read: the level detector of its kind says."""
        out = np.full(len(ids), np.nan)
        kinds = self.kinds[ids]
        for kind, dets in self.detectors.items():
            mask = kinds == kind
            if mask.any():
                out[mask] = dets[0].baseline(ids[mask])
        return out

    def all_detectors(self) -> list[Detector]:
        return [det for dets in self.detectors.values() for det in dets]

    def bytes_per_series(self, kind: Kind = Kind.GAUGE) -> int:
        """State bytes one series of `kind` costs: its detectors, staleness, its kind byte and its
        fail-slow slot (the watched series' own counters are per GPU, not per series)."""
        dets = self.detectors[kind]
        own = self.kinds.itemsize + self.fail_slow.slot.itemsize
        return sum(d.bytes_per_series() for d in dets) + self.staleness.bytes_per_series() + own

    def snapshot(self) -> Packed:
        parts = [d.snapshot() for d in self.all_detectors()]
        return pack_blobs(
            array_pieces(self.kinds),
            self.staleness.snapshot(),
            self.fail_slow.snapshot(),
            self.cooling.snapshot(),
            *parts,
        )

    def restore(self, data: Stored) -> None:
        kinds, staleness, fail_slow, cooling, *parts = unpack_blobs(data)
        dets = self.all_detectors()
        if len(parts) != len(dets):
            raise ValueError("snapshot does not match this bank's detectors")
        self.kinds = load_array(kinds).astype(np.uint8, copy=False)
        self.staleness.restore(staleness)
        self.fail_slow.restore(fail_slow)
        self.cooling.restore(cooling)
        for det, part in zip(dets, parts, strict=True):
            det.restore(part)


def _id_order(ids: Ids) -> NDArray[np.intp] | None:
    """The permutation that sorts a batch of distinct ids spanning at most twice its length (a scrape
    of registered series), by one scatter rather than a sort; None when already ascending, sparse or
    holding duplicates (those are applied in rounds, in the order given)."""
    n = len(ids)
    if n < 2 or bool((ids[1:] > ids[:-1]).all()):
        return None
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi - lo + 1 > 2 * n:
        return None
    slot = np.full(hi - lo + 1, -1, dtype=np.intp)
    slot[ids - lo] = np.arange(n)
    order = slot[slot >= 0]
    return order if len(order) == n else None
