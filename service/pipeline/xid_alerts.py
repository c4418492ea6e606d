"""Xid events to `xid` alerts, one per burst (`prexid.detectors.xid_bursts`): a fault that prints 119, 120 and
154 within seconds pages once. The first event of a burst fires the alert; a later one re-sends it
(same fingerprint) only when it changes what the alert says: a new code, a higher severity, the GPU
becoming known, or a lead time. The alert is about the GPU when its PCI id has been learned from DCGM
labels, else about the node, carrying the raw PCI id.

An Xid alert resolves once its burst has been quiet for `resolve_after_s` of event time (an hour by
default), or when its node reboots: the driver reports a fault, not its end, and an alert that never
resolves would be listed as firing for ever and re-sent to Alertmanager by every replica taking it over.
A reboot is what the telemetry says: the node's `node_boot_time_seconds` moving on (the pipeline's
`_watch_reboots`); only for a node that exports no boot time, all of its own series silent for
`REBOOT_SILENCE_S` (minutes, `pipeline.py`) and reporting again. One stale series, a lost scrape or an
exporter restart is no reboot: on wide-s40 one CPU series missing a sweep resolved an Xid 74 alert
20 minutes before the node's real reboot.

Xids come from kernel lines and from DCGM's Xid field (`xid_field.py`). A kernel line and a field
change naming the same Xid (node, GPU, code) within `twin_window_s` of event time of each other are
one Xid, whichever is read first: the second is dropped (a twin), so a page never doubles; a field
Xid with no kernel line pages on its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from prexid.detectors.known_faults import KnownFaults
from prexid.detectors.xid_bursts import Burst, XidBursts
from prexid.detectors.xid_catalog import XidInfo, xid_info
from prexid.service.decode.common import parse_rfc3339
from prexid.service.decode.xid import normalise_pci
from prexid.service.pipeline.alert_book import AlertBook
from prexid.service.pipeline.series_registry import SeriesRegistry, normalise_host
from prexid.service.schemas import Alert, XidEvent

_RANK = {"info": 0, "warning": 1, "critical": 2}
XidSource = Literal["kernel", "dcgm_field"]


class _Twins:
    """The Xids of the last `window_s` by (node, GPU, code), each with its source and whether an Xid of
    the other source has been matched to it already."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.seen: dict[tuple[str, str, int], list[list[Any]]] = {}  # key -> [[source, ts, matched]]

    def is_twin(self, key: tuple[str, str, int], source: XidSource, ts: float) -> bool:
        """Whether this Xid is one the other source reported within the window (then matched to it);
        else it is remembered, for a twin of it still to come."""
        recent = self.seen.setdefault(key, [])
        for entry in recent:
            if entry[0] != source and not entry[2] and abs(entry[1] - ts) <= self.window_s:
                entry[2] = True
                return True
        recent.append([source, ts, False])
        return False

    def forget_before(self, ts: float) -> None:
        for key in list(self.seen):
            self.seen[key] = [e for e in self.seen[key] if e[1] >= ts]
            if not self.seen[key]:
                del self.seen[key]


@dataclass(frozen=True, slots=True)
class _Incident:
    gpu: int | None
    pci_bus_id: str
    lead: float | None
    worst: XidInfo
    codes: tuple[int, ...]
    sources: tuple[XidSource, ...] = ("kernel",)  # in order of first appearance


class XidAlerts:
    def __init__(
        self,
        book: AlertBook,
        registry: SeriesRegistry,
        link_window_s: float,
        resolve_after_s: float = 3600.0,
        twin_window_s: float = 300.0,
    ) -> None:
        self.book = book
        self.registry = registry
        self.link_window_s = link_window_s  # a pre_xid fired longer before the Xid is not linked
        self.resolve_after_s = resolve_after_s
        self.last_event: dict[str, float] = {}  # firing xid alert -> newest event time of its burst
        self.down: set[str] = set()  # nodes with a firing Xid alert silent long enough to be a reboot
        self.back: set[str] = set()  # nodes rebooted while one fired: resolved at the next tick
        self.bursts = XidBursts()
        self.incidents: dict[tuple[str, float], _Incident] = {}
        self.twins = _Twins(twin_window_s)
        self.known = KnownFaults()  # each GPU's Xid-explained families, past the alert's resolve

    def observe(
        self, ev: XidEvent, source: XidSource = "kernel", gpu_entity: int | None = None
    ) -> Alert | None:
        """`gpu_entity`: the GPU's entity when the source names it (the DCGM field), else it is
        looked up by the event's PCI id."""
        node = normalise_host(ev.node)
        if gpu_entity is None:
            gpu_entity = self.registry.gpu_for_pci(node, ev.pci_bus_id)
        where = f"gpu:{gpu_entity}" if gpu_entity is not None else f"pci:{normalise_pci(ev.pci_bus_id)}"
        if self.twins.is_twin((node, where, ev.code), source, ev.ts):
            return None
        if gpu_entity is not None:
            self.known.record(gpu_entity, ev.code, ev.ts)
        for quiet in self.bursts.close_quiet(ev.ts):
            self.incidents.pop((quiet.node, quiet.opened_ts), None)
        burst, _ = self.bursts.observe(node, ev.ts, ev.code)
        key = (node, burst.opened_ts)
        fp = self.book.fingerprint("xid", node, burst.opened_ts)
        if fp in self.last_event:
            self.last_event[fp] = max(self.last_event[fp], burst.last_ts)
        before = self.incidents.get(key)
        now = self._merge(before, ev, node, burst.codes, gpu_entity, source)
        if now == before:
            return None
        self.incidents[key] = now
        return self._alert(node, burst, now)

    def firing_nodes(self) -> set[str]:
        return {a.node for fp in self.last_event if (a := self.book.active.get(fp)) is not None}

    def firing_gpus(self, at: float) -> set[tuple[str, int]]:
        """(node, GPU) of the Xid alerts firing at event time `at` that name their GPU: an Xid whose line
        was read before a tick of earlier event time was evaluated had not happened at that tick."""
        return {
            (a.node, a.gpu)
            for fp in self.last_event
            if (a := self.book.active.get(fp)) is not None
            and a.gpu is not None
            and parse_rfc3339(a.starts_at) <= at
        }

    def went_silent(self, nodes: set[str]) -> None:
        """None of these nodes' own series has reported for as long as a reboot takes (the fallback
        for nodes exporting no boot time)."""
        self.down |= nodes & self.firing_nodes()

    def reporting(self, nodes: set[str]) -> None:
        """These nodes' own series report: those that had gone silent are back from a reboot."""
        self.back |= nodes & self.down

    def rebooted(self, node: str) -> None:
        """The node's boot time moved on: its firing Xid alerts resolve at the next tick."""
        if node in self.firing_nodes():
            self.back.add(node)

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
        self.twins.forget_before(now - 2 * self.twins.window_s)  # older ones can match nothing to come
        resolved = [a for fp in quiet if (a := self.book.resolve(fp, now)) is not None]
        for fp in quiet:
            del self.last_event[fp]
        self.down &= self.firing_nodes()  # a node whose alerts resolved by time is no longer awaited
        return resolved

    def _node(self, fp: str) -> str | None:
        alert = self.book.active.get(fp)
        return None if alert is None else alert.node

    def _merge(
        self,
        inc: _Incident | None,
        ev: XidEvent,
        node: str,
        codes: tuple[int, ...],
        eid: int | None,
        source: XidSource,
    ) -> _Incident:
        gpu, lead = self._gpu_and_lead(ev, eid)
        info = xid_info(ev.code)
        if inc is None:
            return _Incident(gpu, ev.pci_bus_id, lead, info, codes, (source,))
        worst = info if _RANK[info.severity] > _RANK[inc.worst.severity] else inc.worst
        sources = inc.sources if source in inc.sources else (*inc.sources, source)
        if inc.gpu is None and gpu is not None:  # the GPU became known: the alert is about it now
            return _Incident(gpu, ev.pci_bus_id, lead, worst, codes, sources)
        same_gpu = gpu is not None and gpu == inc.gpu
        lead = inc.lead if inc.lead is not None or not same_gpu else lead
        return _Incident(inc.gpu, inc.pci_bus_id, lead, worst, codes, sources)

    def _gpu_and_lead(self, ev: XidEvent, eid: int | None) -> tuple[int | None, float | None]:
        if eid is None:
            return None, None
        return self.registry.entities[eid].gpu, self.book.pre_xid_lead(eid, ev.ts, self.link_window_s)

    def _alert(self, node: str, burst: Burst, inc: _Incident) -> Alert:
        info = inc.worst
        where = f"GPU {inc.gpu} on {node}" if inc.gpu is not None else f"PCI {inc.pci_bus_id} on {node}"
        lead_text = f"; prexid warned {inc.lead:.0f} s before" if inc.lead is not None else ""
        more = f"; burst codes {', '.join(map(str, burst.codes))}" if len(burst.codes) > 1 else ""
        more += "; from DCGM's Xid field (no kernel line seen)" if inc.sources == ("dcgm_field",) else ""
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
            "xid_twins": [[*key, entries] for key, entries in self.twins.seen.items()],
            **self.known.snapshot_meta(),
        }

    def restore_meta(self, meta: dict[str, Any]) -> None:
        self.last_event = {str(fp): float(ts) for fp, ts in meta["xid_last_event"].items()}
        self.down = {str(node) for node in meta["xid_down"]}
        self.back = {str(node) for node in meta["xid_back"]}
        self.bursts.open = {b["node"]: Burst(**{**b, "codes": tuple(b["codes"])}) for b in meta["xid_bursts"]}
        self.incidents = {
            (node, float(ts)): _Incident(
                **{
                    **i,
                    "codes": tuple(i["codes"]),
                    "worst": xid_info(i["worst"]),
                    "sources": tuple(i.get("sources", ("kernel",))),
                }
            )
            for node, ts, i in meta["xid_incidents"]
        }
        self.twins.seen = {  # none in a snapshot from before the DCGM field was a source
            (str(node), str(where), int(code)): [list(e) for e in entries]
            for node, where, code, entries in meta.get("xid_twins", [])
        }
        self.known.restore_meta(meta)
