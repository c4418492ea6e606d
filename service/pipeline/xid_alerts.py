"""Xid events to `xid` alerts, one per burst (`prexid.detectors.xid_bursts`): a fault that prints 119, 120 and
154 within seconds pages once. The first event of a burst fires the alert; a later one re-sends it
(same fingerprint) only when it changes what the alert says: a new code, a higher severity, the GPU
becoming known, or a lead time. The alert is about the GPU when its PCI id has been learned from DCGM
labels, else about the node, carrying the raw PCI id.

An Xid alert resolves once its burst has been quiet for `resolve_after_s` of event time (an hour by
default), or when its node comes back from a reboot (the node's own series fell silent while it
fired, then report again): the driver reports a fault, not its end, and an alert that never resolves
would be listed as firing for ever and re-sent to Alertmanager by every replica taking it over.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from prexid.detectors.xid_bursts import Burst, XidBursts
from prexid.detectors.xid_catalog import XidInfo, xid_info
from prexid.service.pipeline.alert_book import AlertBook
from prexid.service.pipeline.series_registry import SeriesRegistry, normalise_host
from prexid.service.schemas import Alert, XidEvent

_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True, slots=True)
class _Incident:
    gpu: int | None
    pci_bus_id: str
    lead: float | None
    worst: XidInfo
    codes: tuple[int, ...]


class XidAlerts:
    def __init__(
        self, book: AlertBook, registry: SeriesRegistry, link_window_s: float, resolve_after_s: float = 3600.0
    ) -> None:
        self.book = book
        self.registry = registry
        self.link_window_s = link_window_s  # a pre_xid fired longer before the Xid is not linked
        self.resolve_after_s = resolve_after_s
        self.last_event: dict[str, float] = {}  # firing xid alert -> newest event time of its burst
        self.down: set[str] = set()  # nodes with a firing Xid alert whose own series fell silent
        self.back: set[str] = set()  # of those, the ones reporting again: resolved at the next tick
        self.bursts = XidBursts()
        self.incidents: dict[tuple[str, float], _Incident] = {}

    def observe(self, ev: XidEvent) -> Alert | None:
        node = normalise_host(ev.node)
        for quiet in self.bursts.close_quiet(ev.ts):
            self.incidents.pop((quiet.node, quiet.opened_ts), None)
        burst, _ = self.bursts.observe(node, ev.ts, ev.code)
        key = (node, burst.opened_ts)
        fp = self.book.fingerprint("xid", node, burst.opened_ts)
        if fp in self.last_event:
            self.last_event[fp] = max(self.last_event[fp], burst.last_ts)
        before = self.incidents.get(key)
        now = self._merge(before, ev, node, burst.codes)
        if now == before:
            return None
        self.incidents[key] = now
        return self._alert(node, burst, now)

    def firing_nodes(self) -> set[str]:
        return {a.node for fp in self.last_event if (a := self.book.active.get(fp)) is not None}

    def went_silent(self, nodes: set[str]) -> None:
        """These nodes' own series stopped reporting (a reboot, or a node down)."""
        self.down |= nodes & self.firing_nodes()

    def reporting(self, nodes: set[str]) -> None:
        """These nodes' own series report: those that had gone silent are back from a reboot."""
        self.back |= nodes & self.down

    def resolve_quiet(self, now: float) -> list[Alert]:
        """Resolve the Xid alerts whose burst has been quiet for `resolve_after_s` at event time `now`,
        and those of nodes back from a reboot."""
        rebooted, self.back = self.back, set()
        self.down -= rebooted
        quiet = [
            fp
            for fp, last in self.last_event.items()
            if now - last >= self.resolve_after_s or (rebooted and self._node(fp) in rebooted)
        ]
        resolved = [a for fp in quiet if (a := self.book.resolve(fp, now)) is not None]
        for fp in quiet:
            del self.last_event[fp]
        self.down &= self.firing_nodes()  # a node whose alerts resolved by time is no longer awaited
        return resolved

    def _node(self, fp: str) -> str | None:
        alert = self.book.active.get(fp)
        return None if alert is None else alert.node

    def _merge(self, inc: _Incident | None, ev: XidEvent, node: str, codes: tuple[int, ...]) -> _Incident:
        gpu, lead = self._gpu_and_lead(ev, node)
        info = xid_info(ev.code)
        if inc is None:
            return _Incident(gpu, ev.pci_bus_id, lead, info, codes)
        worst = info if _RANK[info.severity] > _RANK[inc.worst.severity] else inc.worst
        if inc.gpu is None and gpu is not None:  # the GPU became known: the alert is about it now
            return _Incident(gpu, ev.pci_bus_id, lead, worst, codes)
        same_gpu = gpu is not None and gpu == inc.gpu
        lead = inc.lead if inc.lead is not None or not same_gpu else lead
        return _Incident(inc.gpu, inc.pci_bus_id, lead, worst, codes)

    def _gpu_and_lead(self, ev: XidEvent, node: str) -> tuple[int | None, float | None]:
        eid = self.registry.gpu_for_pci(node, ev.pci_bus_id)
        if eid is None:
            return None, None
        return self.registry.entities[eid].gpu, self.book.pre_xid_lead(eid, ev.ts, self.link_window_s)

    def _alert(self, node: str, burst: Burst, inc: _Incident) -> Alert:
        info = inc.worst
        where = f"GPU {inc.gpu} on {node}" if inc.gpu is not None else f"PCI {inc.pci_bus_id} on {node}"
        lead_text = f"; prexid warned {inc.lead:.0f} s before" if inc.lead is not None else ""
        more = f"; burst codes {', '.join(map(str, burst.codes))}" if len(burst.codes) > 1 else ""
        fp = self.book.fingerprint("xid", node, burst.opened_ts)
        self.last_event[fp] = max(self.last_event.get(fp, burst.last_ts), burst.last_ts)
        return self.book.record(
            fp,
            "xid",
            severity=info.severity,
            node=node,
            gpu=inc.gpu,
            starts_at=burst.first_ts,
            ended_at=None,
            score=1.0,
            summary=f"Xid {info.code} ({info.mnemonic}) on {where}{lead_text}{more}",
            xid_code=info.code,
            xid_codes=list(burst.codes),
            lead_time_seconds=inc.lead,
            recommended_action=info.action,
            pci_bus_id=inc.pci_bus_id,
        )

    def snapshot_meta(self) -> dict[str, Any]:
        return {
            "xid_last_event": self.last_event,
            "xid_down": sorted(self.down),
            "xid_back": sorted(self.back),
            "xid_bursts": [dataclasses.asdict(b) for b in self.bursts.open.values()],
            "xid_incidents": [
                [node, ts, {**dataclasses.asdict(i), "worst": i.worst.code}]
                for (node, ts), i in self.incidents.items()
            ],
        }

    def restore_meta(self, meta: dict[str, Any]) -> None:
        self.last_event = {str(fp): float(ts) for fp, ts in meta["xid_last_event"].items()}
        self.down = {str(node) for node in meta["xid_down"]}
        self.back = {str(node) for node in meta["xid_back"]}
        self.bursts.open = {b["node"]: Burst(**{**b, "codes": tuple(b["codes"])}) for b in meta["xid_bursts"]}
        self.incidents = {
            (node, float(ts)): _Incident(**{**i, "codes": tuple(i["codes"]), "worst": xid_info(i["worst"])})
            for node, ts, i in meta["xid_incidents"]
        }
