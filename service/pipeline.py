"""The pipeline: decoded samples and Xid events in, alerts out. Synchronous, pure CPU, event-time driven.

Kafka (`service.kafka_runner`), the embedded demo and file replay all drive this one class, so what a
test replays is exactly what production runs. The watermark is the newest sample time minus an allowed
lateness; each time it passes a tick the fusion layer is evaluated and the alert lifecycle advanced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from detectors.bank import DetectorBank, Evidence
from detectors.fusion import Fusion, FusionConfig, score01
from detectors.lifecycle import Lifecycle, LifecycleConfig, Transition
from detectors.signals import Family
from service.decode.types import RawSample, Samples
from service.models import Alert, Signal, XidEvent, rfc3339
from service.series import NO_FAMILY, SeriesRegistry
from service.xid_alerts import XidAlerts


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    cluster: str = "default"
    lateness_s: float = 10.0
    xid_link_window_s: float = 6 * 3600.0  # a pre_xid fired longer ago than this is not linked
    max_series: int = 2_000_000
    fusion: FusionConfig = field(default_factory=FusionConfig)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)


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
        self.xid_alerts = XidAlerts(self, fingerprint)

    # -- metrics -------------------------------------------------------------------------------------
    def ingest_samples(self, samples: Samples | Sequence[RawSample]) -> list[Alert]:
        """Decoded samples (columns, or rows for convenience) in; alerts out."""
        if not isinstance(samples, Samples):
            samples = Samples.of(samples)
        if not len(samples):
            return []
        reg = self.registry
        before = len(reg)
        ids = reg.intern_many(samples.names, samples.labels)
        ts = np.array(samples.ts, dtype=np.float64)
        values = np.array(samples.values, dtype=np.float64)
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
        """One `xid` alert per burst: the event opening it fires it, later ones update it if it changes."""
        return [a for ev in events if (a := self.xid_alerts.observe(ev)) is not None]
