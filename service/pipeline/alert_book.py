"""The alert book: every alert a pipeline raises is built here, and what fires is kept here.

Alerts come from two places, the fusion lifecycle (`pre_xid`, `node`, `cluster`) and Xid bursts
(`xid`), but one book gives each its fingerprint, status, end time and runbook link, and keeps the
firing ones (the HTTP API, Alertmanager re-sends and snapshots read them) and when each GPU's
`pre_xid` fired (an Xid on that GPU links to it for its lead time).
"""

from __future__ import annotations

import hashlib
from typing import Any

from prexid.service.schemas import Alert, AlertKind, Severity, Signal, rfc3339, runbook_url


def fingerprint(*parts: object) -> str:
    """Stable across an alert's firing and resolved messages, and across restarts."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


class AlertBook:
    def __init__(self, cluster: str, runbook_base_url: str) -> None:
        self.cluster = cluster
        self.runbook_base_url = runbook_base_url
        self.active: dict[str, Alert] = {}  # firing alerts by fingerprint
        self.pre_xid_fired: dict[int, tuple[float, str]] = {}  # gpu entity -> (fired at, fingerprint)

    def fingerprint(self, kind: AlertKind, *parts: object) -> str:
        return fingerprint(self.cluster, kind, *parts)

    def record(
        self,
        fp: str,
        kind: AlertKind,
        *,
        node: str,
        gpu: int | None,
        starts_at: float,
        ended_at: float | None,
        score: float,
        summary: str,
        severity: Severity = "warning",
        signals: list[Signal] | None = None,
        xid_code: int | None = None,
        xid_codes: list[int] | None = None,
        lead_time_seconds: float | None = None,
        recommended_action: str | None = None,
        pci_bus_id: str | None = None,
    ) -> Alert:
        """The alert as it stands now (resolved when `ended_at` is set), kept among the active ones
        while it fires."""
        alert = Alert(
            fingerprint=fp,
            status="firing" if ended_at is None else "resolved",
            kind=kind,
            severity=severity,
            cluster=self.cluster,
            node=node,
            gpu=gpu,
            starts_at=rfc3339(starts_at),
            ends_at=None if ended_at is None else rfc3339(ended_at),
            score=score,
            signals=signals or [],
            summary=summary,
            xid_code=xid_code,
            xid_codes=xid_codes,
            lead_time_seconds=lead_time_seconds,
            recommended_action=recommended_action,
            pci_bus_id=pci_bus_id,
            runbook_url=runbook_url(kind, self.runbook_base_url),
        )
        if ended_at is None:
            self.active[fp] = alert
        else:
            self.active.pop(fp, None)
        return alert

    def resolve(self, fp: str, at: float) -> Alert | None:
        """The firing alert `fp` as resolved at event time `at` (None if it is not firing)."""
        alert = self.active.pop(fp, None)
        if alert is None:
            return None
        return alert.model_copy(update={"status": "resolved", "ends_at": rfc3339(max(at, 0.0))})

    def pre_xid_lead(self, entity: int, xid_ts: float, window_s: float) -> float | None:
        """How long before `xid_ts` this GPU's pre_xid fired, if it did within `window_s`."""
        fired = self.pre_xid_fired.get(entity)
        if fired is None or not 0.0 <= xid_ts - fired[0] <= window_s:
            return None
        return xid_ts - fired[0]

    def snapshot_meta(self) -> dict[str, Any]:
        return {
            "active": [a.model_dump(mode="json") for a in self.active.values()],
            "pre_xid_fired": [[e, at, fp] for e, (at, fp) in self.pre_xid_fired.items()],
        }

    def restore_meta(self, meta: dict[str, Any]) -> None:
        self.active = {a["fingerprint"]: Alert.model_validate(a) for a in meta["active"]}
        self.pre_xid_fired = {int(e): (float(at), str(fp)) for e, at, fp in meta["pre_xid_fired"]}
