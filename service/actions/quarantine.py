"""The quarantine action: take a paged node out of scheduling, safely.

A page of a configured kind and severity quarantines its node through a backend (Kubernetes: cordon,
taint, NodeCondition, Event; Slurm: a drain command). What makes it safe to turn on:

- it is off by default, and turned on it first runs dry: it logs and counts what it would do;
- a `cluster` alert (a shared cause: storage stall, fabric, cooling) never quarantines anyone;
- a circuit breaker holds at most `max_nodes`, or `max_fraction` of the nodes prexid watches, at once;
  the node that would cross it is refused, and the trip pages (a `quarantine` alert to the alert
  listeners, `prexid_quarantine_breaker_open` for the Prometheus rule);
- undoing is explicit: a human through the admin endpoint, or an optional healthy period; who undid
  it is recorded on the node.

`submit` runs on the consumer's event loop and never waits: it decides, and queues the work. The calls
to the API server (or the command) run in a small thread pool of their own, retried with exponential
backoff; every failed attempt is counted. A carried-out quarantine is booked as a drain in the node's
ledger, and the time from the alert's first sample (event time) to the cordon is a histogram.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from prexid.service.app.settings import QuarantineSettings
from prexid.service.decode.common import parse_rfc3339
from prexid.service.pipeline.alert_book import fingerprint
from prexid.service.pipeline.ledger import Ledger
from prexid.service.schemas import Alert, rfc3339, runbook_url

log = logging.getLogger(__name__)

T = TypeVar("T")
CORDON_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300, 900)
MAX_BACKOFF_S = 30.0
TOP_SIGNALS = 3


class ActionError(Exception):
    """A backend call that failed; `retry` False when trying again cannot help (no such node, forbidden)."""

    def __init__(self, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class InProgress(Exception):
    """The node's quarantine is being carried out right now: undo it once that is done."""


@dataclass(frozen=True, slots=True)
class Order:
    """What to quarantine and why: everything a backend writes on the node."""

    node: str
    kind: str  # the alert's kind (the taint's value)
    fingerprint: str
    gpu: int | None
    xid_code: int | None
    first_sample: float  # event time of the alert's first sample (its starts_at)
    summary: str
    evidence: str  # top signals, Xid code, recommended action: the NodeCondition's message


class Retrying:
    """Runs one step of a backend (an API call, a command), retrying it with exponential backoff while
    it fails with a retryable `ActionError`; every failed attempt is counted. Steps, not whole
    quarantines, are retried: a cordon that went through is not repeated because its Event failed."""

    def __init__(
        self, retries: int, backoff_s: float, failed: Callable[[], None], sleep: Callable[[float], None]
    ) -> None:
        self.retries, self.backoff_s = retries, backoff_s
        self.failed = failed
        self.sleep = sleep

    def __call__(self, what: str, step: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                return step()
            except ActionError as err:
                self.failed()
                if not err.retry or attempt >= self.retries:
                    raise
                delay = min(MAX_BACKOFF_S, self.backoff_s * 2**attempt)
                log.warning("quarantine: %s failed (%s); retry in %.1fs", what, err, delay)
                attempt += 1
                self.sleep(delay)


class Backend(Protocol):
    """Where a quarantine is carried out. Both calls block (they run in the action's threads), run
    each of their steps through `retrying`, and raise `ActionError` once a step has failed for good."""

    def quarantine(self, order: Order, retrying: Retrying) -> float | None:
        """Quarantine the node; returns the wall time its cordon (drain) took effect, None if this
        alert had quarantined it already (an alert re-sent after a takeover or restart)."""
        ...

    def release(self, node: str, who: str, retrying: Retrying) -> None:
        """Undo a quarantine, recording `who` undid it."""
        ...


def evidence(alert: Alert) -> str:
    """One line for the node: the strongest signals, the Xid code and what to do."""
    top = sorted(alert.signals, key=lambda s: -s.surprise)[:TOP_SIGNALS]
    parts = [alert.summary]
    if top:
        parts.append(
            "signals: " + ", ".join(f"{s.family}/{s.metric}={s.value} (baseline {s.baseline})" for s in top)
        )
    if alert.xid_code is not None:
        parts.append(f"Xid {alert.xid_code}")
    if alert.recommended_action:
        parts.append(f"action: {alert.recommended_action}")
    parts.append(f"alert {alert.fingerprint}")
    return "; ".join(parts)


def order_of(alert: Alert) -> Order:
    return Order(
        node=alert.node,
        kind=alert.kind,
        fingerprint=alert.fingerprint,
        gpu=alert.gpu,
        xid_code=alert.xid_code,
        first_sample=parse_rfc3339(alert.starts_at),
        summary=alert.summary,
        evidence=evidence(alert),
    )


@dataclass(slots=True)
class Held:
    """A node the action holds (or, dry, would hold)."""

    order: Order
    since: float  # wall time
    state: str = "queued"  # queued -> working -> quarantined | failed; dry run: would
    error: str = ""
    cordoned_at: float | None = None  # wall time the backend's cordon (drain) took effect

    def view(self) -> dict[str, Any]:
        o = self.order
        return {
            "node": o.node,
            "state": self.state,
            "kind": o.kind,
            "alert": o.fingerprint,
            "xid_code": o.xid_code,
            "since": rfc3339(self.since),
            "cordoned_at": None if self.cordoned_at is None else rfc3339(self.cordoned_at),
            "evidence": o.evidence,
            "error": self.error or None,
        }


@dataclass
class _Metrics:
    registry: CollectorRegistry
    decisions: Counter = field(init=False)
    held: Gauge = field(init=False)
    breaker_open: Gauge = field(init=False)
    trips: Counter = field(init=False)
    failures: Counter = field(init=False)
    undos: Counter = field(init=False)
    to_cordon: Histogram = field(init=False)

    def __post_init__(self) -> None:
        r = self.registry
        self.decisions = Counter(
            "prexid_quarantine_decisions",
            "Pages the quarantine action took up, by what it did (quarantined, dry_run, already, "
            "breaker, cluster_wide, failed)",
            ["outcome"],
            registry=r,
        )
        self.held = Gauge(
            "prexid_quarantined_nodes", "Nodes the quarantine action holds now, by mode", ["mode"], registry=r
        )
        self.breaker_open = Gauge(
            "prexid_quarantine_breaker_open",
            "1 while the quarantine circuit breaker refuses nodes (enforcing mode)",
            registry=r,
        )
        self.trips = Counter(
            "prexid_quarantine_breaker_trips",
            "Times the circuit breaker tripped, by mode",
            ["mode"],
            registry=r,
        )
        self.failures = Counter(
            "prexid_quarantine_call_failures",
            "Failed attempts to quarantine or release a node (API server or command), by operation",
            ["op"],
            registry=r,
        )
        self.undos = Counter(
            "prexid_quarantine_undos", "Quarantines undone, by how (admin, healthy)", ["how"], registry=r
        )
        self.to_cordon = Histogram(
            "prexid_quarantine_event_to_cordon_seconds",
            "From the event time of an alert's first sample to its node's cordon, by alert kind",
            ["kind"],
            buckets=CORDON_BUCKETS,
            registry=r,
        )


async def _now() -> None:
    """Nothing to wait for: no batch runs beside the loop."""


class QuarantineAction:
    def __init__(
        self,
        settings: QuarantineSettings,
        backend: Backend,
        registry: CollectorRegistry,
        fleet_size: Callable[[], int],
        ledger_of: Callable[[str], Ledger],
        page: Callable[[list[Alert]], None],
        cluster: str,
        runbook_base_url: str,
        clock: Callable[[], float] = time.time,
        quiet: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.fleet_size = fleet_size  # nodes prexid watches: the base of max_fraction
        self.ledger_of = ledger_of
        # awaited before reading or writing pipelines (fleet size, ledgers) after an await: no batch is
        # changing them then (`BatchGate.quiet`, `prexid run`)
        self.quiet = quiet or _now
        self.page = page  # the alert listeners (Alertmanager): where a breaker trip goes
        self.cluster = cluster
        self.runbook_base_url = runbook_base_url
        self.clock = clock
        self.metrics = _Metrics(registry)
        self.mode = "dry_run" if settings.dry_run else "enforce"
        self.held: dict[str, Held] = {}
        self.firing: dict[str, set[str]] = {}  # node -> fingerprints of its firing alerts (any kind)
        self.quiet_since: dict[str, float] = {}  # held node -> wall time its last alert resolved
        self.tripped = False  # the breaker refuses nodes (in either mode)
        self.breaker: Alert | None = None  # its firing page (enforcing mode)
        self.queue: asyncio.Queue[Order] = asyncio.Queue()
        self.pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="prexid-quarantine")
        self.metrics.held.labels(self.mode).set(0)
        self.metrics.breaker_open.set(0)

    # -- decisions, on the event loop ---------------------------------------------------------------
    def limit(self) -> int:
        """Nodes held at once, at most: the smaller of max_nodes and max_fraction of the fleet (>= 1)."""
        share = math.floor(self.settings.max_fraction * self.fleet_size())
        return min(self.settings.max_nodes, max(1, share))

    def submit(self, alerts: list[Alert]) -> None:
        """An alert listener: decide for each alert now, queue the work; never blocks."""
        now = self.clock()
        for a in alerts:
            self._track(a, now)
            if a.status == "firing" and self._wanted(a):
                self._decide(a, now)

    def _track(self, alert: Alert, now: float) -> None:
        if not alert.node:
            return
        fps = self.firing.setdefault(alert.node, set())
        if alert.status == "firing":
            fps.add(alert.fingerprint)
            self.quiet_since.pop(alert.node, None)
        else:
            fps.discard(alert.fingerprint)
            if not fps:
                del self.firing[alert.node]
                if alert.node in self.held:  # the healthy period of a held node begins
                    self.quiet_since[alert.node] = now

    def _wanted(self, alert: Alert) -> bool:
        s = self.settings
        if alert.kind == "cluster":
            self.metrics.decisions.labels("cluster_wide").inc()
            log.info("quarantine: a cluster alert (shared cause) quarantines nobody: %s", alert.summary)
            return False
        return alert.kind in s.kinds and alert.severity in s.severities and bool(alert.node)

    def _decide(self, alert: Alert, now: float) -> None:
        node = alert.node
        if node in self.held:
            self.metrics.decisions.labels("already").inc()
            return
        if len(self.held) >= self.limit():
            self.metrics.decisions.labels("breaker").inc()
            self._trip(alert, now)
            return
        order = order_of(alert)
        if self.settings.dry_run:
            self.held[node] = Held(order, now, "would")
            self.metrics.decisions.labels("dry_run").inc()
            log.warning("quarantine (dry run): would quarantine %s: %s", node, order.evidence)
        else:
            self.held[node] = Held(order, now)
            self.queue.put_nowait(order)
        self.metrics.held.labels(self.mode).set(len(self.held))

    def _trip(self, alert: Alert, now: float) -> None:
        """Refuse `alert`'s node; page once per trip (a dry run only logs and counts)."""
        held = ", ".join(sorted(self.held))
        log.error(
            "quarantine%s: circuit breaker refuses %s (%s): %d nodes held, limit %d (%s)",
            " (dry run)" if self.settings.dry_run else "",
            alert.node,
            alert.kind,
            len(self.held),
            self.limit(),
            held,
        )
        if self.tripped:
            return
        self.tripped = True
        self.metrics.trips.labels(self.mode).inc()
        if self.settings.dry_run:
            return
        self.metrics.breaker_open.set(1)
        fp = fingerprint(self.cluster, "quarantine", now)
        self.breaker = Alert(
            fingerprint=fp,
            status="firing",
            kind="quarantine",
            severity="critical",
            cluster=self.cluster,
            node="",
            gpu=None,
            starts_at=rfc3339(now),
            ends_at=None,
            score=1.0,
            signals=[],
            summary=f"quarantine circuit breaker tripped: {len(self.held)} nodes held (limit "
            f"{self.limit()}: {held}); {alert.node} ({alert.kind}) and any later node are left in service",
            runbook_url=runbook_url("quarantine", self.runbook_base_url),
        )
        self.page([self.breaker])

    def _close_breaker(self, now: float) -> None:
        if not self.tripped or len(self.held) >= self.limit():
            return
        self.tripped = False
        log.warning("quarantine: circuit breaker closed (%d nodes held)", len(self.held))
        if self.breaker is not None:
            resolved = self.breaker.model_copy(update={"status": "resolved", "ends_at": rfc3339(now)})
            self.breaker = None
            self.metrics.breaker_open.set(0)
            self.page([resolved])

    # -- work, off the event loop -------------------------------------------------------------------
    async def _call(self, op: str, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args, retrying)` in the action's threads (its backoff sleeps there too, never on the
        event loop); each failed attempt counted under `op`."""
        s = self.settings
        retrying = Retrying(s.retries, s.backoff_s, self.metrics.failures.labels(op).inc, time.sleep)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, retrying))

    async def _carry_out(self, order: Order) -> None:
        held = self.held.get(order.node)
        if held is None or held.order is not order:  # undone while queued
            return
        held.state = "working"
        try:
            cordoned_at = await self._call("quarantine", self.backend.quarantine, order)
        except ActionError as err:
            held.state, held.error = "failed", str(err)
            self.metrics.decisions.labels("failed").inc()
            log.error("quarantine of %s failed: %s (it stays counted until undone)", order.node, err)
            return
        held.state = "quarantined"
        if cordoned_at is None:
            self.metrics.decisions.labels("already").inc()
            return
        held.cordoned_at = cordoned_at
        self.metrics.decisions.labels("quarantined").inc()
        self.metrics.to_cordon.labels(order.kind).observe(max(0.0, cordoned_at - order.first_sample))
        await self.quiet()
        self.ledger_of(order.node).record_drain(
            order.node, order.first_sample, order.gpu, order.kind, order.xid_code
        )
        log.warning("quarantined %s: %s", order.node, order.evidence)

    async def _worker(self) -> None:
        while True:
            order = await self.queue.get()
            try:
                await self._carry_out(order)
            finally:
                self.queue.task_done()

    async def undo(self, node: str, who: str, how: str = "admin") -> dict[str, Any]:
        """Release `node` and record `who` did. KeyError if the action does not hold it; InProgress
        while its quarantine is being carried out."""
        held = self.held[node]
        if held.state == "working":
            raise InProgress(node)
        if held.state == "would":
            log.warning("quarantine (dry run): %s would be released by %s", node, who)
        elif held.state != "queued":  # a queued one is dropped before it starts
            await self._call("release", self.backend.release, node, who)
        await self.quiet()  # the breaker's limit counts the pipelines' nodes
        if self.held.get(node) is held:
            del self.held[node]
        self.quiet_since.pop(node, None)
        self.metrics.undos.labels(how).inc()
        self.metrics.held.labels(self.mode).set(len(self.held))
        self._close_breaker(self.clock())
        log.warning("quarantine of %s undone by %s", node, who)
        return held.view() | {"undone_by": who}

    async def _sweep_healthy(self, period: float) -> None:
        """Release held nodes whose alerts have all resolved, `period` wall seconds after."""
        while True:
            await asyncio.sleep(min(5.0, period / 4))
            now = self.clock()
            for node, since in list(self.quiet_since.items()):
                if node in self.held and now - since >= period:
                    with contextlib.suppress(ActionError, KeyError, InProgress):
                        await self.undo(node, f"prexid (healthy for {period:g} s)", how="healthy")

    async def run(self) -> None:
        """A background job (`ServiceState.background`): the workers and the healthy-period sweeper."""
        jobs = [self._worker() for _ in range(self.settings.workers)]
        if self.settings.healthy_period_s is not None:
            jobs.append(self._sweep_healthy(self.settings.healthy_period_s))
        try:
            await asyncio.gather(*jobs)
        finally:
            # not waiting keeps the event loop free, and loses no call under way: the interpreter
            # joins executor threads at exit, so a cordon already sent completes; queued ones, not yet
            # started, are dropped with the process
            self.pool.shutdown(wait=False, cancel_futures=True)

    def status(self) -> dict[str, Any]:
        """What `GET /admin/quarantine` serves."""
        return {
            "enabled": True,
            "dry_run": self.settings.dry_run,
            "backend": self.settings.backend,
            "limit": self.limit(),
            "breaker_open": self.tripped,
            "held": [h.view() for _, h in sorted(self.held.items())],
        }
