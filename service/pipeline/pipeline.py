"""The pipeline: decoded samples and Xid events in, alerts out. Synchronous, pure CPU, event-time driven.

Kafka (`prexid.service.sources.kafka`), the embedded demo and file replay all drive this one class, so what a
test replays is exactly what production runs. Samples wait in a reorder buffer until the event-time
watermark (`prexid.detectors.watermark`) passes them, then run through the detectors tick by tick: at every
tick the fusion layer is evaluated and the alert lifecycle advanced, however large the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prexid.detectors import fleet_null_stats
from prexid.detectors.alert_budget import AlertBudget, BudgetConfig
from prexid.detectors.bank import DetectorBank, Evidence
from prexid.detectors.base import Floats, Stored
from prexid.detectors.cooling import is_temperature
from prexid.detectors.fail_slow import is_heat, is_work_rate, work_done_kind
from prexid.detectors.family_calibration import CalibrationConfig, FamilyCalibration
from prexid.detectors.fleet_null_stats import NullStats
from prexid.detectors.fleet_peers import Outside, PeerSketch
from prexid.detectors.fleet_prior import PriorStats
from prexid.detectors.fleet_vote import Summary, Verdict
from prexid.detectors.fusion import Fusion, FusionConfig, score01
from prexid.detectors.lifecycle import Lifecycle, LifecycleConfig, Phase, Transition
from prexid.detectors.peer import PeerGroups
from prexid.detectors.rate_limit import RateLimiter
from prexid.detectors.signals import N_FAMILIES, Family, Kind
from prexid.detectors.watermark import ReorderBuffer, Watermarks
from prexid.service.decode.types import RawSample, Samples
from prexid.service.pipeline.alert_book import AlertBook
from prexid.service.pipeline.cluster_alerts import ClusterAlerts
from prexid.service.pipeline.ledger import Ledger
from prexid.service.pipeline.series_registry import NO_FAMILY, Entity, SeriesBudget, SeriesRegistry
from prexid.service.pipeline.xid_alerts import XidAlerts
from prexid.service.pipeline.xid_field import FIELD, XidField
from prexid.service.schemas import DEFAULT_RUNBOOK_BASE_URL, Alert, AlertKind, Signal, XidEvent

EXPIRY_SWEEP_S = 300.0  # event seconds between sweeps for expired series (a quarter of a shorter TTL)
BOOT_TIME = "node_boot_time_seconds"  # node-exporter's; it moves on when the node reboots
REBOOT_MIN_S = 60.0  # a smaller move is the kernel's boot-time jitter, not a reboot
# Without a boot time, a node none of whose own series reported for this long and that reports again
# rebooted: a GPU server's reboot (shutdown, the board's firmware POST, the OS, the exporter) takes
# minutes; a lost scrape, an exporter restart or one stale series is a sweep or two (up to three
# missed scrapes at Prometheus' default 1 min interval, sixteen at 15 s)
REBOOT_SILENCE_S = 240.0
DECISIVE_P = 1e-3  # a row-remap field's rise this rare in the fleet's history pages alone


def is_boot_time(name: str, gpu: int | None) -> bool:
    """A node's own boot time series: it moves on when the node reboots."""
    return name == BOOT_TIME and gpu is None


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    cluster: str = "default"
    lateness_s: float = 10.0
    future_skew_s: float = 300.0  # a sample dated further ahead of its source is dead-lettered
    late_drop_s: float = 300.0  # a sample dated further behind its source is dropped (a slow clock)
    xid_link_window_s: float = 6 * 3600.0  # a pre_xid fired longer ago than this is not linked
    xid_resolve_after_s: float = 3600.0  # an Xid alert resolves after its burst is quiet this long
    # a kernel line and a DCGM Xid field change this close in event time, same GPU and code, are one Xid
    xid_twin_window_s: float = 300.0
    max_series: int = 2_000_000
    series_ttl_s: float = 3600.0  # a series not seen for this long (event time) expires, its id recycled
    repeat_offender_failures: float = 2.5  # decayed failures: about three within days
    repeat_offender_half_life_s: float = 7 * 86400.0
    # a cluster-wide shift must outlast routine ones: a checkpoint's NFS burst (about three minutes), a
    # job restart reading its checkpoint back (up to eight); an NFS storm lasts a quarter hour and more
    cluster_persist_ticks: int = 40
    max_firings_per_hour: int = 4  # per entity; more is flapping, withheld and counted
    multivariate: bool = False  # river HalfSpaceTrees per node as an extra voter (per-node Python: slow)
    error_counter_warmup_s: float = 1200.0  # event time before error counters call anything rare
    fusion: FusionConfig = field(default_factory=FusionConfig)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    budget: BudgetConfig | None = field(default_factory=BudgetConfig)  # None: the fixed threshold alone
    # None: every family's surprise taken as its p-values say
    calibration: CalibrationConfig | None = field(default_factory=CalibrationConfig)
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL


class Pipeline:
    def __init__(self, config: PipelineConfig | None = None, budget: SeriesBudget | None = None) -> None:
        """`budget`: the cardinality limit this pipeline shares with the process's other shards."""
        self.config = config or PipelineConfig()
        self.registry = SeriesRegistry(max_series=self.config.max_series, budget=budget)
        self.bank = DetectorBank(
            multivariate=self.config.multivariate,
            error_counter_warmup_s=self.config.error_counter_warmup_s,
        )
        self.peer_groups = PeerGroups()
        self.fusion = Fusion(self.config.fusion)
        self.lifecycle = Lifecycle(self.config.lifecycle)
        self.rate_limit = RateLimiter(self.config.max_firings_per_hour)
        limits = self.config.budget
        self.budget = None if limits is None else AlertBudget(limits, self.config.lifecycle.fire)
        calibration = self.config.calibration
        self.calibration = None if calibration is None else FamilyCalibration(N_FAMILIES, calibration)
        self.watermarks = Watermarks(
            self.config.lateness_s, self.config.future_skew_s, late_drop_s=self.config.late_drop_s
        )
        self.buffer = ReorderBuffer()
        self.next_tick = -np.inf
        self.alert_book = AlertBook(self.config.cluster, self.config.runbook_base_url)
        self.cluster_alerts = ClusterAlerts(
            self.alert_book, self.config.lifecycle, self.config.cluster_persist_ticks
        )
        self.fused_scores = np.zeros(0)
        # one partition of several raises the fleet's cluster alert (or the fleet's aggregator does)
        self.raises_cluster_alerts = True
        # the verdict each tick's counts are judged to: None, this pipeline's own (`Fusion.judge`); or
        # the fleet's, its counts merged with the other partitions' (`fleet_judge.FleetJudge`)
        self.judge: Callable[[Summary], Verdict] | None = None
        # node peer groups: None, this pipeline's nodes alone; or the fleet's, this partition's sketch
        # of each tick answered with the other partitions' values (`fleet_judge.FleetJudge.peers`)
        self.fleet_peers: Callable[[PeerSketch], Outside | None] | None = None
        # the error counters' fleet prior: None, fitted on this pipeline's series alone; or the fleet's,
        # the other partitions' statistics for a refit time (`fleet.Fleet`, `fleet_judge.FleetJudge.prior`)
        self.fleet_prior: Callable[[float], PriorStats | None] | None = None
        # the budget's and the calibration's null: None, this pipeline's entities alone; or the fleet's,
        # every partition's statistics for a tick, this one's given (`fleet.Fleet`, `FleetJudge.null`)
        self.fleet_null: Callable[[float, NullStats], NullStats] | None = None
        self.null_stats: tuple[float, NullStats] | None = None  # own, as taken at the last refit (tick)
        self._released = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))  # by `release`
        self._start, self._released_to = 0, -np.inf  # first not yet scored; event time released to
        self.samples_seen = 0
        self.next_expiry = -np.inf  # event time of the next sweep for expired series
        self.xid_alerts = XidAlerts(
            self.alert_book,
            self.registry,
            self.config.xid_link_window_s,
            self.config.xid_resolve_after_s,
            self.config.xid_twin_window_s,
        )
        self.xid_field = XidField()
        self.ledger = Ledger(self.config.repeat_offender_half_life_s, self.config.repeat_offender_failures)
        self.boot_time = np.zeros(0, dtype=bool)  # series that are a node's boot time (reboots)
        self.boot_last = np.zeros(0)  # their last value
        self.watches_boot = False
        self.boot_nodes: set[str] = set()  # nodes exporting their boot time: their reboots read from it
        self.heard = np.zeros(0)  # per entity: newest event time any of its series reported
        # called after each fusion tick with (tick, fused scores, per-family surprise); e.g. score history
        self.tick_listeners: list[Callable[[float, np.ndarray, np.ndarray], None]] = []

    # -- metrics -------------------------------------------------------------------------------------
    @property
    def watermark(self) -> float:
        """Event time up to which every sample has been scored."""
        return self.watermarks.value

    def ingest_samples(self, samples: Samples | Sequence[RawSample], source: str = "default") -> list[Alert]:
        """Add one source's samples, then score whatever the watermark has released."""
        self.add_samples(samples, source)
        return self.advance()

    def add_samples(self, samples: Samples | Sequence[RawSample], source: str) -> None:
        """Intern and buffer samples (columns, or rows for convenience); `source` is where they came
        from (a Kafka topic partition)."""
        if not isinstance(samples, Samples):
            samples = Samples.of(samples)
        if len(samples):
            ids = self.registry.intern_many(samples.names, samples.labels)
            self.add_series(ids, np.array(samples.ts, dtype=np.float64), np.array(samples.values), source)

    def add_series(
        self, ids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64], source: str
    ) -> None:
        """Buffer samples of series already interned in `registry` (-1: refused by the cardinality
        limit, dropped). Series interned since the last call are registered with the detectors here,
        so callers may intern one at a time and hand over whole columns."""
        reg = self.registry
        self._register_new()
        if len(ids):
            kept = ids >= 0
            reg.touch(ids[kept], ts[kept])  # buffered: not expired before it is scored
            self.buffer.add(ids[kept], ts[kept], values[kept])
            self.watermarks.observe(source, float(np.nanmax(ts)) if np.isfinite(ts).any() else np.nan)

    def _register_new(self) -> None:
        """Tell the detectors and fusion about the series interned since the last call."""
        reg = self.registry
        if reg.placed:
            new = reg.take_placed()
            self.bank.set_kinds(new, reg.kind_of[new])
            self._set_groups(new)
            self.fusion.ensure(len(reg.entities))
            self.fusion.parent[: len(reg.entities)] = reg.parent_of
            self.fusion.add_series(reg.entity_of[new], reg.family_of[new])
            reg.touch(new, np.full(len(new), self.watermark))  # interned now, whether or not a sample stays

    def advance(self, drain: bool = False) -> list[Alert]:
        """Score released samples in event-time order, evaluating every tick the watermark passed, the
        shared-cause vote judged on this pipeline's own entities.

        `drain` (end of a replay) releases everything buffered, as if no more samples could come.
        `prexid.service.pipeline.fleet` steps several partitions' pipelines through the same phases
        under one fleet-wide verdict instead; under `prexid run` `judge` merges the other partitions'
        published counts.
        """
        self.release(drain)
        alerts: list[Alert] = []
        judge = self.judge or self.fusion.judge
        while self.due() is not None:
            if self.fleet_peers is not None:
                self.join_peers(self.fleet_peers(self.peer_sketch()))
            scored, summary = self.summarise_tick()
            alerts += scored + self.conclude_tick(judge(summary))
        alerts += self.settle()
        self.ledger.observe(alerts)
        return alerts

    def release(self, drain: bool = False) -> None:
        """Take the samples the watermark (or `drain`) releases; `due` ticks then score them in order."""
        wm = self.watermark + self.config.lateness_s if drain else self.watermark
        ids, ts, values = self.buffer.release(wm)
        self.samples_seen += len(ids)
        step = self.config.fusion.step_s
        if not np.isfinite(self.next_tick) and len(ts) and np.isfinite(ts[0]):
            self.next_tick = float(np.floor(ts[0] / step) * step + step)
        self._released, self._start, self._released_to = (ids, ts, values), 0, wm

    def due(self) -> float | None:
        """The next tick to evaluate, if the released event time has passed it."""
        if np.isfinite(self.next_tick) and self.next_tick <= self._released_to:
            return self.next_tick
        return None

    def peer_sketch(self, settling: bool = False) -> PeerSketch:
        """This partition's node values per node peer group as they will be at the `due` tick (or, when
        `settling`, after the samples past it), once scored: what it tells the fleet's node peer groups
        (`detectors/fleet_peers`)."""
        ids, ts, values = self._released
        end = len(ts) if settling else int(np.searchsorted(ts, self.next_tick, side="right"))
        ids, ts, values = ids[self._start : end], ts[self._start : end], values[self._start : end]
        now = float(ts.max()) if settling and len(ts) else self.next_tick
        keys = self.peer_groups.fleet_keys()
        gauge = self.bank.kinds[ids] == Kind.GAUGE  # the peer detector's kind
        groups, vals = self.bank.peer.fresh_values(
            ids[gauge], ts[gauge], values[gauge], now, np.flatnonzero(keys >= 0)
        )
        return PeerSketch.of(now, keys[groups], vals)

    def unsettled(self) -> bool:
        """Whether released samples past the last due tick wait for `settle`."""
        return self._start < len(self._released[1])

    def join_peers(self, outside: Outside | None) -> None:
        """Judge node peer groups with the other partitions' values from now on (None: own nodes only)."""
        if outside is None:
            self.bank.peer.set_outside(None)
        else:
            self.bank.peer.set_outside(*outside.for_groups(self.peer_groups.fleet_keys()))

    def summarise_tick(self) -> tuple[list[Alert], Summary]:
        """First half of the `due` tick: score the released samples up to it, then count what the
        shared-cause and cluster votes need (`Fusion.summarise`)."""
        ids, ts, values = self._released
        end = int(np.searchsorted(ts, self.next_tick, side="right"))
        alerts = self._score(ids[self._start : end], ts[self._start : end], values[self._start : end])
        self._start = end
        n = len(self.registry.entities)
        self.fusion.ensure(n)  # parents are set when series register (`add_series`), not every tick
        self._ingest_silence(self.next_tick)
        return alerts, self.fusion.summarise(self.next_tick)

    def conclude_tick(self, verdict: Verdict) -> list[Alert]:
        """Second half: fuse under `verdict` (own or fleet-wide) and step the lifecycles; then on to the
        next tick, jumping over ticks with no data (the fusion layer ages held evidence across the gap)."""
        alerts = self._evaluate(self.next_tick, verdict)
        if self.next_tick >= self.next_expiry:
            self.expire(self.next_tick - self.config.series_ttl_s)
            self.next_expiry = self.next_tick + min(EXPIRY_SWEEP_S, self.config.series_ttl_s / 4)
        ts, step = self._released[1], self.config.fusion.step_s
        upcoming = ts[self._start] if self._start < len(ts) else self._released_to
        self.next_tick = max(self.next_tick + step, float(np.floor(upcoming / step) * step))
        return alerts

    def settle(self) -> list[Alert]:
        """Score the released samples past the last due tick (they count towards the next one)."""
        ids, ts, values = self._released
        alerts = self._score(ids[self._start :], ts[self._start :], values[self._start :])
        self._released, self._start, self._released_to = (ids[:0], ts[:0], values[:0]), 0, -np.inf
        return alerts

    def _score(self, ids: np.ndarray, ts: np.ndarray, values: np.ndarray) -> list[Alert]:
        """Detectors and fusion take the samples; Xids read from DCGM's Xid field are alerted on."""
        if not len(ids):
            return []
        if self.fleet_prior is not None:
            self._join_prior(ids, ts)
        ev = self.bank.update(ids, ts, values)
        self._hear(ids, ts)
        if self.watches_boot:
            self._watch_reboots(ids, ts, values)
        if self.xid_alerts.down:  # silent long enough to be a reboot: their Xid alerts resolve next tick
            self.xid_alerts.reporting(self._nodes_of(ids))
        fam = self.registry.family_of[ids]
        field = fam == Family.XID
        alerts = self._field_xids(ids[field], ts[field], values[field]) if field.any() else []
        scored = fam != NO_FAMILY
        self.fusion.ensure(len(self.registry.entities))
        up = ev.up()[scored] ^ self.registry.falls_with_load[ids[scored]]  # "busier", "worse"
        self.fusion.ingest(
            Evidence(ids[scored], ts[scored], values[scored], ev.p[scored], up),
            self.registry.entity_of[ids[scored]],
            fam[scored],
            self.registry.kind_of[ids[scored]] == Kind.ERROR_COUNTER,
        )
        self._latch_decisive(ids, ts, ev.p)
        if ev.fail_slow_p is not None and (behind := ev.fail_slow_p < 1.0).any():
            n = int(behind.sum())
            self.fusion.ingest(
                Evidence(
                    ids[behind], ts[behind], values[behind], ev.fail_slow_p[behind], np.zeros(n, dtype=bool)
                ),
                self.registry.entity_of[ids[behind]],
                np.full(n, Family.FAIL_SLOW, dtype=np.uint8),
            )
        if ev.cooling_p is not None:
            self._ingest_cooling(ids, ts, values, ev.cooling_p)
        return alerts

    def _join_prior(self, ids: NDArray[np.int64], ts: NDArray[np.float64]) -> None:
        """Before the error counters refit their prior, the other partitions' statistics for that refit."""
        counters = self.bank.kinds[ids] == Kind.ERROR_COUNTER
        if counters.any():
            det = self.bank.error_counter
            at = det.due(float(ts[counters].max()))
            if at is not None:
                det.set_outside(self.fleet_prior(at) if self.fleet_prior is not None else None)

    def _ingest_cooling(
        self, ids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64], p: Floats
    ) -> None:
        """The cooling detector's evidence, in its own family on the temperature's GPU: every watched
        sample (p=1 marks the family present there, for the shared-cause shares), warmer ones voting."""
        heat = self.bank.cooling.watches(ids)
        if not heat.any():
            return
        n = int(heat.sum())
        self.fusion.ingest(
            Evidence(ids[heat], ts[heat], values[heat], p[heat], np.ones(n, dtype=bool)),
            self.registry.entity_of[ids[heat]],
            np.full(n, Family.COOLING, dtype=np.uint8),
        )

    def expire(self, cutoff: float) -> NDArray[np.int64]:
        """Expire the series last seen before event time `cutoff` (`SeriesRegistry.expiring`) and reset
        everything kept per series id, so the ids go to new series clean: the detectors' rows (the
        bank's `forget`), fusion's series counts and top series, DCGM's Xid field state and the
        boot-time watch, their peer groups' membership. Their samples are all scored: a buffered sample
        keeps its series seen."""
        self._register_new()  # interned, not yet registered: registered first, then judged like any
        reg, fusion = self.registry, self.fusion
        gone = reg.expiring(cutoff)
        if not len(gone):
            return gone
        ent, fam = reg.entity_of[gone], reg.family_of[gone]  # before the registry forgets the family
        reg.expire(gone)
        self.peer_groups.release(
            np.nan_to_num(self.bank.peer.state.read("group", gone), nan=-1.0).astype(np.int64)
        )
        self.bank.forget(gone)
        fusion.add_series(ent, fam, -1)
        known = fam < fusion.present.shape[1]
        empty = fusion.n_series[ent[known], fam[known]] <= 0
        fusion.present[ent[known][empty], fam[known][empty]] = False  # no series of the family left there
        top = fusion.top_series
        top[np.isin(top, gone)] = -1
        self.xid_field.forget(gone)
        inside = gone[gone < len(self.boot_time)]
        self.boot_time[inside], self.boot_last[inside] = False, np.nan
        return gone

    def _latch_decisive(self, ids: np.ndarray, ts: np.ndarray, p: np.ndarray) -> None:
        """Row remaps pending or failed, that the fleet does not routinely show (p <= DECISIVE_P): each
        pages alone (`Fusion.latch`)."""
        reg = self.registry
        hit = (ids < len(reg.decisive)) & (p <= DECISIVE_P)
        if not hit.any():
            return
        hit[hit] = reg.decisive[ids[hit]]
        if hit.any():
            self.fusion.latch(reg.entity_of[ids[hit]], reg.family_of[ids[hit]], ts[hit])

    def _field_xids(self, ids: np.ndarray, ts: np.ndarray, values: np.ndarray) -> list[Alert]:
        """The Xids DCGM's Xid field shows (`xid_field.py`), as the kernel's are: one alert per burst,
        a kernel line for the same Xid its twin."""
        alerts = []
        reg = self.registry
        for sid, at, code in zip(*(a.tolist() for a in self.xid_field.changes(ids, ts, values)), strict=True):
            eid = int(reg.entity_of[sid])
            ent, labels = reg.entities[eid], reg.series(sid)[1]
            pci = labels.get("pci_bus_id") or reg.dcgm_of.get(eid, ("", "", ""))[2]
            xid = XidEvent(
                ts=at,
                node=ent.node,
                pci_bus_id=pci,
                code=code,
                pid=None,
                process=None,
                message=f"{FIELD}={code}",
            )
            alert = self.xid_alerts.observe(xid, "dcgm_field", eid if ent.gpu is not None else None)
            if alert is not None:
                alerts.append(alert)
        if len(ts):
            self._failed(alerts, float(ts.max()))
        return alerts

    def _set_groups(self, new: np.ndarray) -> None:
        """Tell the bank each new series' peer group and node, and which are a GPU's work rate (fail-slow
        watches them), a GPU's temperature or work done (tell fail-slow heat throttling from a degrading
        part) or a node's boot time (reboots): registration time, not per sample, one decode of each
        series' key."""
        reg, groups = self.registry, self.peer_groups
        peer, node = np.full(len(new), -1, dtype=np.int64), np.zeros(len(new), dtype=np.int64)
        field = np.zeros(len(new), dtype=np.int64)
        work_rate, boot = np.zeros(len(new), dtype=bool), np.zeros(len(new), dtype=bool)
        heat, temperature = np.zeros(len(new), dtype=bool), np.zeros(len(new), dtype=bool)
        work = np.full(len(new), -1, dtype=np.int64)
        for i, sid in enumerate(new.tolist()):
            ent = reg.entities[int(reg.entity_of[sid])]
            name, labels = reg.series(sid)
            peer[i] = groups.group_of(name, labels, ent.node, ent.gpu)
            node[i] = groups.node_of(ent.node)
            field[i] = groups.field_of(name)
            work_rate[i] = is_work_rate(name, ent.gpu)
            heat[i] = is_heat(name, ent.gpu)
            work[i] = work_done_kind(name, ent.gpu)
            temperature[i] = is_temperature(name, ent.gpu)
            boot[i] = is_boot_time(name, ent.gpu)
        self.bank.set_groups(new, peer, node, field, groups.field_keys())
        entity = reg.entity_of[new].astype(np.int64)
        self.bank.watch_work_rate(new[work_rate], entity[work_rate])
        self.bank.watch_temperature(new[temperature], peer[temperature])
        self.bank.watch_heat(new[heat], entity[heat])
        self.bank.watch_work(new[work >= 0], entity[work >= 0], work[work >= 0])
        self._set_boot_time(new, boot)

    def _set_boot_time(self, ids: NDArray[np.int64], boot: NDArray[np.bool_]) -> None:
        """Which of these series are a node's boot time, their last value not seen yet."""
        n = self.registry.id_space()
        if n > len(self.boot_time):
            grow = n - len(self.boot_time)
            self.boot_time = np.concatenate([self.boot_time, np.zeros(grow, dtype=bool)])
            self.boot_last = np.concatenate([self.boot_last, np.full(grow, np.nan)])
        self.boot_time[ids], self.boot_last[ids] = boot, np.nan
        self.watches_boot = self.watches_boot or bool(boot.any())
        reg = self.registry
        self.boot_nodes |= {reg.entities[int(reg.entity_of[s])].node for s in ids[boot].tolist()}

    def _watch_reboots(
        self, ids: NDArray[np.int64], ts: NDArray[np.float64], values: NDArray[np.float64]
    ) -> None:
        """A node's boot time moving on (by more than clock jitter) is a reboot: booked in the ledger, and
        the node's Xid alerts resolve at the next tick."""
        mine = self.boot_time[ids]
        if not mine.any():
            return
        sids, at, boot = ids[mine], ts[mine], values[mine]
        before = self.boot_last[sids]
        moved = np.isfinite(before) & (boot - before > REBOOT_MIN_S)
        self.boot_last[sids] = boot
        for sid, t in zip(sids[moved].tolist(), at[moved].tolist(), strict=True):
            node = self.registry.entities[int(self.registry.entity_of[sid])].node
            self.ledger.record_reboot(node, t)
            self.xid_alerts.rebooted(node)

    def _hear(self, ids: NDArray[np.int64], ts: NDArray[np.float64]) -> None:
        """Each entity's newest report: how long a node has been silent, when it exports no boot time."""
        n = len(self.registry.entities)
        if n > len(self.heard):
            self.heard = np.concatenate([self.heard, np.full(n - len(self.heard), -np.inf)])
        np.maximum.at(self.heard, self.registry.entity_of[ids], ts)

    def _silent_nodes(self, tick: float) -> set[str]:
        """Nodes with a firing Xid alert and no boot time, none of whose own series has reported for
        `REBOOT_SILENCE_S` of event time: if they report again, they rebooted."""
        reg, out = self.registry, set()
        for node in self.xid_alerts.firing_nodes() - self.boot_nodes:
            eid = reg.entity_ids.get(Entity(node, None))
            silent = tick - self.heard[eid] if eid is not None and eid < len(self.heard) else np.inf
            if REBOOT_SILENCE_S <= silent < np.inf:  # never heard: no metrics, nothing to come back
                out.add(node)
        return out

    def _ingest_silence(self, tick: float) -> None:
        """Staleness evidence for series that stopped reporting, in the liveness family of their entity."""
        if self.xid_alerts.last_event:  # a node down while an Xid alert on it fires: rebooting?
            self.xid_alerts.went_silent(self._silent_nodes(tick))
        ids, p = self.bank.sweep(tick)
        if len(ids) == 0:
            return
        fam = np.full(len(ids), Family.LIVENESS, dtype=np.uint8)
        self.fusion.ingest(
            Evidence(ids, np.full(len(ids), tick), np.full(len(ids), np.nan), p),
            self.registry.entity_of[ids],
            fam,
        )

    def own_null_stats(self) -> NullStats:
        """The budget's and the calibration's sums as they stand (`detectors/fleet_null_stats`)."""
        budget, calibration = self.budget, self.calibration
        clock = budget if budget is not None else calibration
        return NullStats.of(
            -np.inf if clock is None else clock.last_tick,
            None if budget is None else budget.stats(),
            None if calibration is None else calibration.stats(),
        )

    def null_stats_at(self, at: float) -> NullStats:
        """The null's sums as of the refit at tick `at`, for another partition's fit: those taken at this
        pipeline's own refit there (or a later one), else its sums now (it has not reached `at`)."""
        own = self.null_stats
        return own[1] if own is not None and own[0] >= at else self.own_null_stats()

    def merge_nulls(self, parts: Sequence[NullStats]) -> NullStats:
        """Partitions' null sums added, each faded by its null's half-life to the newest one's time."""
        budget = self.budget.config.half_life_s if self.budget is not None else 1.0
        calibration = self.calibration.config.half_life_s if self.calibration is not None else 1.0
        return fleet_null_stats.merge(parts, budget, calibration)

    def _refit_nulls(self, tick: float) -> None:
        """Before a tick is folded in, the budget's thresholds and the calibration's shifts from the
        fleet's null: this pipeline's sums alone, or every partition's (`fleet_null`), so shards agree."""
        budget, calibration = self.budget, self.calibration
        if budget is None and calibration is None:
            return
        if self.fleet_null is None:
            if budget is not None:
                budget.fit()
            if calibration is not None:
                calibration.fit()
            return
        own = self.own_null_stats()
        self.null_stats = (tick, own)
        fleet = self.fleet_null(tick, own)
        if budget is not None:
            budget.fit(fleet.budget)
        if calibration is not None:
            calibration.fit((fleet.episodes, fleet.exposure, fleet.sustained))

    def _evaluate(self, tick: float, verdict: Verdict) -> list[Alert]:
        self._refit_nulls(tick)
        fusion, calibration = self.fusion, self.calibration
        is_gpu = fusion.parent >= 0
        shift = None if calibration is None else calibration.per_entity(is_gpu)
        fused = fusion.apply(tick, verdict, shift)
        self.fused_scores = fused
        for listener in self.tick_listeners:
            listener(tick, fused, fusion.at_tick)
        fire = None if self.budget is None else self._fire_thresholds(self.budget, tick, fused, is_gpu)
        if calibration is not None:
            self.lifecycle.ensure(len(fused))
            alerting = self.lifecycle.phase[: len(fused)] == Phase.FIRING
            calibration.observe(tick, fusion.at_tick, fusion.present, is_gpu, alerting, fusion.sustained)
        self.xid_alerts.known.observe(tick, fusion.at_tick)
        alerts = [
            self._transition_alert(t)
            for t in self.lifecycle.step(fused, tick, fire, fusion.confirmed(self.config.lifecycle.fire))
            if self._allowed(t)
        ]
        alerts += self.cluster_alerts.step(self.fusion, tick, self.raises_cluster_alerts)
        for node in self.xid_alerts.back:  # rebooted while its Xid fired (once, if the boot time told)
            self.ledger.record_reboot(node, tick)
        return alerts + self.xid_alerts.resolve_quiet(tick)

    def _allowed(self, tr: Transition) -> bool:
        """Whether a transition pages: not a GPU's warning while its own Xid alert fires (the fault is
        known and paged; the errors, heat or slowness that go on until its repair are that fault's, not
        a warning of another), nor after it resolved while only families its Xid explains vote
        (`known_faults`), and not past the entity's hourly cap. Any withholds the episode's resolve too."""
        if not tr.firing:
            return self.rate_limit.allow_resolve(tr.entity)
        ent = self.registry.entities[tr.entity]
        known = self.xid_alerts.known.explains(tr.entity, self.fusion.voting_families(tr.entity), tr.at)
        if known or (ent.gpu is not None and (ent.node, ent.gpu) in self.xid_alerts.firing_gpus(tr.at)):
            self.rate_limit.mute(tr.entity)
            return False
        return self.rate_limit.allow_firing(tr.entity, tr.at)

    def _fire_thresholds(
        self, budget: AlertBudget, tick: float, fused: NDArray[np.float64], is_gpu: NDArray[np.bool_]
    ) -> NDArray[np.float64]:
        """Each entity's firing threshold: the budget's for its level, but the configured one where a
        single sustained hard-error (or fail-slow) family carries the score to it alone. That path is
        held to its family's own episode rate (the family calibration), so a threshold the budget raised
        above the hard-error cap does not silence the single-family warnings that carry most pre-XID
        leads."""
        fire = budget.observe(tick, fused, is_gpu)
        configured = self.config.lifecycle.fire
        return np.where(self.fusion.alone >= configured, np.minimum(fire, configured), fire)

    def _nodes_of(self, ids: NDArray[np.int64]) -> set[str]:
        """The nodes whose own (host-level) series are among `ids`."""
        reg = self.registry
        entities = np.unique(reg.entity_of[ids])
        return {reg.entities[e].node for e in entities.tolist() if reg.parent_of[e] < 0}

    def _transition_alert(self, tr: Transition) -> Alert:
        ent = self.registry.entities[tr.entity]
        kind: AlertKind = "pre_xid" if ent.gpu is not None else "node"
        book = self.alert_book
        fp = book.fingerprint(kind, ent.node, ent.gpu, tr.starts_at)
        what = f"GPU {ent.gpu} on {ent.node}" if ent.gpu is not None else f"node {ent.node}"
        signals = self._signals(tr.entity)
        families = ", ".join(dict.fromkeys(s.family for s in signals)) or "no family"
        if not tr.firing:
            summary = f"{what} no longer shows anomalous signals"
        elif kind == "pre_xid":
            summary = f"{what} is degrading ahead of a likely Xid ({families})"
        else:
            summary = f"{what} is anomalous ({families})"
        if tr.firing and ent.gpu is not None:
            book.pre_xid_fired[tr.entity] = (tr.at, fp)
        return book.record(
            fp,
            kind,
            node=ent.node,
            gpu=ent.gpu,
            starts_at=tr.starts_at,
            ended_at=None if tr.firing else tr.at,
            score=self._score01(tr.fused),
            signals=signals,
            summary=summary,
        )

    def _score01(self, fused: float) -> float:
        return float(score01(np.array([fused]), self.config.lifecycle.fire)[0])

    def _signals(self, entity: int) -> list[Signal]:
        out = []
        for fam in self.fusion.voting_families(entity):
            sid = int(self.fusion.top_series[entity, fam])
            if sid < 0:
                continue
            value = float(self.fusion.top_value[entity, fam])
            base = float(self.bank.baseline(np.array([sid]))[0])
            metric, labels = self.registry.series(sid)
            out.append(
                Signal(
                    family=Family(fam).label,
                    metric=metric,
                    labels=labels,
                    value=value if np.isfinite(value) else None,
                    baseline=base if np.isfinite(base) else None,
                    surprise=round(float(self.fusion.at_tick[entity, fam]), 3),
                )
            )
        return out

    # -- state ---------------------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, Any], dict[str, NDArray[np.generic]]]:
        """Everything the pipeline is but the series keys and the bank (written as pieces of their own):
        JSON-able metadata, and named arrays that are views of the live ones."""
        meta = {
            "registry": self.registry.snapshot_meta(),
            **self.watermarks.snapshot_meta(),
            **self.alert_book.snapshot_meta(),
            "samples_seen": self.samples_seen,
            **self.cluster_alerts.snapshot_meta(),
            **self.peer_groups.snapshot_meta(),
            "rate_limit": self.rate_limit.snapshot_meta(),
            **self.xid_alerts.snapshot_meta(),
            **self.ledger.snapshot_meta(),
        }
        parts = {
            "reg": self.registry.snapshot_arrays(),
            "fusion": self.fusion.snapshot_arrays(),
            "lifecycle": self.lifecycle.snapshot_arrays(),
            "cluster": self.cluster_alerts.snapshot_arrays(),
            "buffer": self.buffer.snapshot_arrays(),
            "xidfield": self.xid_field.snapshot_arrays(),
            **({} if self.budget is None else {"budget": self.budget.snapshot_arrays()}),
            **({} if self.calibration is None else {"calib": self.calibration.snapshot_arrays()}),
        }
        arrays = {f"{part}_{k}": v for part, named in parts.items() for k, v in named.items()}
        arrays |= {  # scalars that may be infinite travel here, not in JSON
            "fused_scores": self.fused_scores,
            "next_tick": np.array([self.next_tick]),
            "next_expiry": np.array([self.next_expiry]),
            "cluster_score": np.array([self.cluster_alerts.score]),
        }
        return meta, arrays

    def restore(
        self, meta: dict[str, Any], arrays: dict[str, NDArray[np.generic]], keys: memoryview, bank: Stored
    ) -> None:
        """Into a fresh pipeline of the same config, from `snapshot`, the keys end to end and the bank's
        own snapshot."""

        def part(prefix: str) -> dict[str, NDArray[np.generic]]:
            return {k[len(prefix) + 1 :]: v for k, v in arrays.items() if k.startswith(prefix + "_")}

        self.registry.restore(meta["registry"], part("reg"), keys)
        self.bank.restore(bank)
        self.fusion.restore_arrays(part("fusion"))
        self.lifecycle.restore_arrays(part("lifecycle"))
        self.cluster_alerts.restore(meta, part("cluster"))
        self.buffer.restore_arrays(part("buffer"))
        self.xid_field.restore_arrays(part("xidfield"))
        if self.budget is not None:
            self.budget.restore_arrays(part("budget"))
        if self.calibration is not None:
            self.calibration.restore_arrays(part("calib"))
        self.fused_scores = arrays["fused_scores"].astype(np.float64, copy=False)
        self.next_tick = float(arrays["next_tick"][0])
        self.next_expiry = float(arrays["next_expiry"][0])
        self.cluster_alerts.score = float(arrays["cluster_score"][0])
        self.watermarks.restore_meta(meta)
        self.alert_book.restore_meta(meta)
        self.samples_seen = int(meta["samples_seen"])
        self.peer_groups.restore_meta(meta)
        self.rate_limit.restore_meta(meta["rate_limit"])
        self.xid_alerts.restore_meta(meta)
        self.ledger.restore_meta(meta)
        self.boot_time, self.boot_last, self.watches_boot = np.zeros(0, dtype=bool), np.zeros(0), False
        self.boot_nodes = set()
        reg = self.registry  # the bank's snapshot carries groups, not which series are boot times
        live = np.array([s for s, key in enumerate(reg.keys) if key], dtype=np.int64)
        gpu_of = [reg.entities[int(reg.entity_of[s])].gpu for s in live.tolist()]
        boot = [is_boot_time(reg.series(s)[0], gpu) for s, gpu in zip(live.tolist(), gpu_of, strict=True)]
        self._set_boot_time(live, np.array(boot, dtype=bool))
        last = self.bank.staleness.state  # each entity's newest report, from its series' (scored ones)
        last.ensure(int(live.max(initial=0)))
        self.heard = np.full(len(reg.entities), -np.inf)
        np.maximum.at(self.heard, reg.entity_of[live], last["last_ts"][live])

    # -- kernel events -------------------------------------------------------------------------------
    def ingest_xids(self, events: Sequence[XidEvent]) -> list[Alert]:
        """One `xid` alert per burst: the event opening it fires it, later ones update it if it changes."""
        alerts = [a for ev in events if (a := self.xid_alerts.observe(ev)) is not None]
        if events:  # a cluster shipping kernel logs but no metrics has no ticks to resolve them at
            alerts += self.xid_alerts.resolve_quiet(max(ev.ts for ev in events))
        self.ledger.observe(alerts)
        if events:
            self._failed(alerts, max(ev.ts for ev in events))
        return alerts

    def _failed(self, alerts: Sequence[Alert], at: float) -> None:
        """Tell the false-alert budget and the family calibration of each node with a firing Xid alert:
        its recent episodes (and its GPUs') were a failure's, not the null's."""
        if self.budget is None and self.calibration is None:
            return
        reg = self.registry
        failed = {Entity(a.node, None) for a in alerts if a.kind == "xid" and a.status == "firing"}
        nodes = [eid for ent in failed if (eid := reg.entity_ids.get(ent)) is not None]
        if not nodes:
            return
        parents = np.asarray(reg.parent_of, dtype=np.int64)
        mine = np.flatnonzero(np.isin(parents, nodes))  # their GPUs
        entities = np.r_[nodes, mine].astype(np.int64)
        if self.budget is not None:
            self.budget.ensure(len(reg.entities))
            self.budget.failed(entities, at)
        if self.calibration is not None:
            self.calibration.failed(entities, at)
