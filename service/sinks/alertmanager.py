"""Alertmanager API v2 sink: push alerts to every Alertmanager, re-send active ones, resolve explicitly.

Alertmanager expects producers to re-send active alerts periodically with `endsAt` a few intervals
ahead (an alert not re-sent expires by itself, so a dead prexid cannot leave stale pages), and to send
`endsAt` = resolve time to resolve. HA Alertmanagers do not replicate received alerts reliably, so every
URL gets everything. A failing URL is retried with exponential backoff; resolved alerts are kept until
each URL has taken them. Labels are stable (no scores or times); scores go in annotations.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlencode

import httpx
from prometheus_client import CollectorRegistry, Counter

from prexid.service.schemas import Alert

log = logging.getLogger(__name__)

ALERTNAMES = {
    "pre_xid": "PrexidPreXid",
    "xid": "PrexidXid",
    "node": "PrexidNodeAnomaly",
    "cluster": "PrexidClusterAnomaly",
    "quarantine": "PrexidQuarantineBreakerTripped",
}


def am_labels(alert: Alert) -> dict[str, str]:
    labels = {
        "alertname": ALERTNAMES[alert.kind],
        "kind": alert.kind,
        "severity": alert.severity,
        "cluster": alert.cluster,
        "source": "prexid",
    }
    if alert.node:
        labels["node"] = alert.node
    if alert.gpu is not None:
        labels["gpu"] = str(alert.gpu)
    if alert.xid_code is not None:
        labels["xid_code"] = str(alert.xid_code)
    return labels


def am_annotations(alert: Alert) -> dict[str, str]:
    notes = {"summary": alert.summary, "score": f"{alert.score:.3f}", "fingerprint": alert.fingerprint}
    if alert.signals:
        notes["description"] = "; ".join(
            f"{s.family}: {s.metric}={s.value} (baseline {s.baseline})" for s in alert.signals
        )
    if alert.lead_time_seconds is not None:
        notes["lead_time_seconds"] = f"{alert.lead_time_seconds:.0f}"
    if alert.recommended_action:
        notes["recommended_action"] = alert.recommended_action
    runbook = getattr(alert, "runbook_url", None)
    if runbook:
        notes["runbook_url"] = str(runbook)
    return notes


def generator_url(alert: Alert, external_url: str) -> str:
    """The dashboard's drill-down of the alert's GPU or node (Alertmanager's "Source" link); the
    cluster view for cluster alerts."""
    base = external_url.rstrip("/") + "/"
    if not alert.node:
        return base
    where = {"node": alert.node} | ({"gpu": str(alert.gpu)} if alert.gpu is not None else {})
    return base + "#" + urlencode(where)


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


@dataclass
class _Target:
    url: str
    failures: int = 0
    next_try: float = 0.0


@dataclass
class AlertmanagerSink:
    urls: list[str]
    registry: CollectorRegistry
    resend_interval_s: float = 60.0
    xid_hold_s: float = 3600.0  # an Xid alert stays active this long (wall time) unless resolved
    timeout_s: float = 5.0
    max_backoff_s: float = 60.0
    max_resolved: int = 10_000
    clock: Callable[[], float] = time.time
    external_url: str = ""  # where users reach prexid's dashboard: each alert's generatorURL
    active: dict[str, tuple[Alert, float]] = field(default_factory=dict)  # fp -> (alert, expires)
    resolved: dict[str, tuple[Alert, set[str]]] = field(default_factory=dict)  # fp -> (alert, urls left)

    def __post_init__(self) -> None:
        self.targets = [_Target(u.rstrip("/")) for u in self.urls]
        self.wake = asyncio.Event()
        self.posts = Counter(
            "prexid_alertmanager_posts",
            "POSTs to Alertmanager, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.dropped = Counter(
            "prexid_alertmanager_dropped_resolved",
            "Resolved alerts dropped undelivered (outbox full)",
            registry=self.registry,
        )

    def submit(self, alerts: list[Alert]) -> None:
        """Take new alert states; never blocks (delivery happens in `run`)."""
        now = self.clock()
        for a in alerts:
            if a.status == "firing":
                hold = self.xid_hold_s if a.kind == "xid" else float("inf")
                self.active[a.fingerprint] = (a, now + hold)
            else:
                self.active.pop(a.fingerprint, None)
                self.resolved[a.fingerprint] = (a, {t.url for t in self.targets})
        while len(self.resolved) > self.max_resolved:
            self.resolved.pop(next(iter(self.resolved)))
            self.dropped.inc()
        if alerts:
            for t in self.targets:
                t.next_try = min(t.next_try, now) if t.failures == 0 else t.next_try
            self.wake.set()

    def forget(self, fingerprints: list[str]) -> None:
        """Stop re-sending these firing alerts, without resolving them: another replica raises them now
        (the aggregator role moved) and re-sends them itself; re-sends from here would re-open them in
        Alertmanager after that replica resolved them."""
        for fp in fingerprints:
            self.active.pop(fp, None)

    def _generator(self, alert: Alert) -> dict[str, object]:
        return {"generatorURL": generator_url(alert, self.external_url)} if self.external_url else {}

    def payload(self, url: str) -> list[dict[str, object]]:
        now = self.clock()
        for fp in [fp for fp, (_, expires) in self.active.items() if expires <= now]:
            del self.active[fp]
        horizon = now + 4 * self.resend_interval_s
        body: list[dict[str, object]] = [
            {
                "labels": am_labels(a),
                "annotations": am_annotations(a),
                "startsAt": a.starts_at,
                "endsAt": _rfc3339(min(horizon, expires)),
            }
            | self._generator(a)
            for a, expires in self.active.values()
        ]
        body += [
            {
                "labels": am_labels(a),
                "annotations": am_annotations(a),
                "startsAt": a.starts_at,
                "endsAt": a.ends_at or _rfc3339(now),
            }
            | self._generator(a)
            for a, left in self.resolved.values()
            if url in left
        ]
        return body

    async def send_due(self, client: httpx.AsyncClient) -> None:
        now = self.clock()
        for target in self.targets:
            if target.next_try > now:
                continue
            body = self.payload(target.url)
            try:
                resp = await client.post(f"{target.url}/api/v2/alerts", json=body, timeout=self.timeout_s)
                resp.raise_for_status()
            except httpx.HTTPError as err:
                target.failures += 1
                target.next_try = now + min(self.max_backoff_s, 2.0 ** (target.failures - 1))
                self.posts.labels("error").inc()
                log.warning("alertmanager %s: %s (retry in %.0fs)", target.url, err, target.next_try - now)
                continue
            target.failures = 0
            target.next_try = now + self.resend_interval_s
            self.posts.labels("ok").inc()
            for fp in [fp for fp, (_, left) in self.resolved.items() if target.url in left]:
                self.resolved[fp][1].discard(target.url)
                if not self.resolved[fp][1]:
                    del self.resolved[fp]

    async def run(self) -> None:
        async with httpx.AsyncClient() as client:
            while True:
                self.wake.clear()  # before sending: a submit during the POST must wake the next round
                await self.send_due(client)
                due = min((t.next_try for t in self.targets), default=self.clock() + self.resend_interval_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout=max(0.05, due - self.clock()))
