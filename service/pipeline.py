"""The pipeline: decoded samples and Xid events in, alerts out. Synchronous, pure CPU, event-time driven.

Kafka (`service.kafka_runner`), the embedded demo and file replay all drive this one class, so what a
test replays is exactly what production runs. The watermark is the newest sample time minus an allowed
lateness; each time it passes a tick the fusion layer is evaluated and the alert lifecycle advanced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from detectors.bank import DetectorBank, Evidence
from detectors.fusion import Fusion, FusionConfig, score01
from detectors.lifecycle import Lifecycle, LifecycleConfig, Transition
from detectors.signals import Family
from detectors.xid_catalog import xid_info
from service.decode.types import RawSample
from service.models import DEFAULT_RUNBOOK_BASE_URL, Alert, Signal, XidEvent, rfc3339, runbook_url
from service.series import NO_FAMILY, SeriesRegistry, normalise_host


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    cluster: str = "default"
    lateness_s: float = 10.0
    xid_link_window_s: float = 6 * 3600.0  # a pre_xid fired longer ago than this is not linked
    max_series: int = 2_000_000
    fusion: FusionConfig = field(default_factory=FusionConfig)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL


def fingerprint(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


class Pipeline:
    def __init__(self, config: PipelineConfig | None = None) -> None:
        self.config = config or PipelineConfig()
        self.registry = SeriesRegistry(max_series=self.config.max_series)
        self.bank = DetectorBank()
        self.fusion = Fusion(self.config.fusion)
        self.lifecycle = Lifecycle(self.config.lifecycle)
        self.watermark = -np.inf
        self.active: dict[str, Alert] = {}  # firing alerts by fingerprint
        self.pre_xid_fired: dict[int, tuple[float, str]] = {}  # gpu entity -> (fired at, fingerprint)
        self.fused_scores = np.zeros(0)
        self.samples_seen = 0
        # called after each fusion tick with (tick, fused scores, per-family surprise); e.g. score history
        self.tick_listeners: list[Callable[[float, np.ndarray, np.ndarray], None]] = []

    # -- metrics -------------------------------------------------------------------------------------
    def ingest_samples(self, samples: Sequence[RawSample]) -> list[Alert]:
        if not samples:
            return []
        reg = self.registry
        before = len(reg)
        ids = np.fromiter((reg.intern(s.name, s.labels) for s in samples), dtype=np.int64, count=len(samples))
        ts = np.fromiter((s.ts for s in samples), dtype=np.float64, count=len(samples))
        values = np.fromiter((s.value for s in samples), dtype=np.float64, count=len(samples))
        if len(reg) > before:
            new = np.arange(before, len(reg), dtype=np.int64)
            self.bank.set_kinds(new, reg.kind_of[new])
        kept = ids >= 0
        if not kept.all():
            ids, ts, values = ids[kept], ts[kept], values[kept]
        self.samples_seen += len(ids)
        return self.ingest_columns(ids, ts, values)

    def ingest_columns(self, ids: np.ndarray, ts: np.ndarray, values: np.ndarray) -> list[Alert]:
        """The vectorised core: score, fuse, and advance the lifecycle for each tick passed."""
        ev = self.bank.update(ids, ts, values)
        fam = self.registry.family_of[ids]
        scored = fam != NO_FAMILY
        self.fusion.ensure(len(self.registry.entities))
        self.fusion.ingest(
            Evidence(ids[scored], ts[scored], values[scored], ev.p[scored]),
            self.registry.entity_of[ids[scored]],
            fam[scored],
        )
        finite = ts[np.isfinite(ts)]
        if len(finite):
            self.watermark = max(self.watermark, float(finite.max()) - self.config.lateness_s)
        return self.advance(self.watermark)

    def advance(self, watermark: float) -> list[Alert]:
        tick = self.fusion.due_tick(watermark)
        if tick is None:
            return []
        fused = self.fusion.evaluate(tick)
        self.fused_scores = fused
        for listener in self.tick_listeners:
            listener(tick, fused, self.fusion.at_tick)
        return [self._transition_alert(t) for t in self.lifecycle.step(fused, tick)]

    def _transition_alert(self, tr: Transition) -> Alert:
        ent = self.registry.entities[tr.entity]
        kind = "pre_xid" if ent.gpu is not None else "node"
        fp = fingerprint(self.config.cluster, kind, ent.node, ent.gpu, tr.starts_at)
        what = f"GPU {ent.gpu} on {ent.node}" if ent.gpu is not None else f"node {ent.node}"
        signals = self._signals(tr.entity)
        families = ", ".join(dict.fromkeys(s.family for s in signals)) or "no family"
        alert = Alert(
            fingerprint=fp,
            status="firing" if tr.firing else "resolved",
            kind=kind,
            severity="warning",
            cluster=self.config.cluster,
            node=ent.node,
            gpu=ent.gpu,
            starts_at=rfc3339(tr.starts_at),
            ends_at=None if tr.firing else rfc3339(tr.at),
            score=float(score01(np.array([tr.fused]), self.config.lifecycle.fire)[0]),
            signals=signals,
            summary=(
                f"{what} is degrading ahead of a likely Xid ({families})"
                if kind == "pre_xid"
                else f"{what} is anomalous ({families})"
            )
            if tr.firing
            else f"{what} no longer shows anomalous signals",
            runbook_url=runbook_url(kind, self.config.runbook_base_url),
        )
        if tr.firing:
            self.active[fp] = alert
            if ent.gpu is not None:
                self.pre_xid_fired[tr.entity] = (tr.at, fp)
        else:
            self.active.pop(fp, None)
        return alert

    def _signals(self, entity: int) -> list[Signal]:
        out = []
        for fam in self.fusion.voting_families(entity):
            sid = int(self.fusion.top_series[entity, fam])
            if sid < 0:
                continue
            value = float(self.fusion.top_value[entity, fam])
            base = float(self.bank.baseline(np.array([sid]))[0])
            out.append(
                Signal(
                    family=Family(fam).label,
                    metric=self.registry.names[sid],
                    labels=self.registry.labels[sid],
                    value=value if np.isfinite(value) else None,
                    baseline=base if np.isfinite(base) else None,
                    surprise=round(float(self.fusion.at_tick[entity, fam]), 3),
                )
            )
        return out

    # -- kernel events -------------------------------------------------------------------------------
    def ingest_xids(self, events: Sequence[XidEvent]) -> list[Alert]:
        return [self._xid_alert(ev) for ev in events]

    def _xid_alert(self, ev: XidEvent) -> Alert:
        info = xid_info(ev.code)
        node = normalise_host(ev.node)
        eid = self.registry.gpu_for_pci(node, ev.pci_bus_id)
        gpu = self.registry.entities[eid].gpu if eid is not None else None
        lead = None
        if eid is not None and eid in self.pre_xid_fired:
            fired_at, _ = self.pre_xid_fired[eid]
            if 0.0 <= ev.ts - fired_at <= self.config.xid_link_window_s:
                lead = ev.ts - fired_at
        where = f"GPU {gpu} on {node}" if gpu is not None else f"PCI {ev.pci_bus_id} on {node}"
        lead_text = f"; prexid warned {lead:.0f} s before" if lead is not None else ""
        alert = Alert(
            fingerprint=fingerprint(self.config.cluster, "xid", node, ev.pci_bus_id, ev.code, ev.ts),
            status="firing",
            kind="xid",
            severity=info.severity,
            cluster=self.config.cluster,
            node=node,
            gpu=gpu,
            starts_at=rfc3339(ev.ts),
            ends_at=None,
            score=1.0,
            signals=[],
            summary=f"Xid {ev.code} ({info.mnemonic}) on {where}{lead_text}",
            xid_code=ev.code,
            lead_time_seconds=lead,
            recommended_action=info.action,
            pci_bus_id=ev.pci_bus_id,
            runbook_url=runbook_url("xid", self.config.runbook_base_url),
        )
        self.active[alert.fingerprint] = alert
        return alert
