"""Prometheus metrics: prexid's own health, and the fused scores dashboards scrape.

Fused scores are read from the pipeline's arrays at scrape time by a custom collector, instead of
keeping a `Gauge.labels()` child per GPU in step with the arrays. The per-entity families are most of
a scrape (18k entities: ~175 ms to collect and format, on the consumer's event loop), so the HTTP
server renders them apart, from a copy of the scores, once per tick at most (`EntityScoreText`,
`service/http/read_view.py`), and collects the rest of the registry `with entity_scores_apart()`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from prexid.detectors.alert_budget import LEVELS
from prexid.detectors.fusion import score01
from prexid.detectors.signals import Family
from prexid.service.pipeline.coverage import series_per_family
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.series_registry import Entity
from prexid.service.schemas import Alert

LEAD_TIME_BUCKETS = (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600)
STATE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)  # checkpoints, restores: ms to a minute

GPU_SCORE = "prexid_gpu_fused_score"
GPU_SCORE_HELP = "Fused anomaly score of a GPU, 0..1; 0.5 is the firing threshold"
NODE_SCORE = "prexid_node_fused_score"
NODE_SCORE_HELP = "Fused anomaly score of a node's own signals, 0..1"

# dcgm-exporter's identity labels on every GPU score, so PromQL can join scores with DCGM series
IDENTITY_LABELS = ("Hostname", "UUID", "pci_bus_id")
Identity = tuple[str, str, str]
NO_IDENTITY: Identity = ("", "", "")  # not learnt (yet): empty labels are absent ones to Prometheus

_float_text: Callable[[float], str] = floatToGoString  # as generate_latest writes a value (untyped)
_entity_scores_apart: ContextVar[bool] = ContextVar("entity_scores_apart", default=False)


@contextlib.contextmanager
def entity_scores_apart() -> Iterator[None]:
    """Collecting the registry within leaves the per-entity score families out: the caller renders
    them itself (`EntityScoreText`)."""
    token = _entity_scores_apart.set(True)
    try:
        yield
    finally:
        _entity_scores_apart.reset(token)


def _label(value: str) -> str:
    """A label value escaped as the text format (and `generate_latest`) escapes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class EntityScoreText:
    """`prexid_gpu_fused_score` and `prexid_node_fused_score` as exposition text, the same lines
    `generate_latest` writes for `FusedScoreCollector`, from plain copies (any thread may render).

    Each entity's label text is kept between renders (entities outlive ticks); the cache is dropped
    when it holds more than twice the entities of a render, so churned entities do not pile up.
    Not safe to render from two threads at once."""

    def __init__(self) -> None:
        self._prefix: dict[str, dict[tuple[Entity, Identity], str]] = {}  # by cluster, then entity

    def render(
        self,
        pipelines: Iterable[tuple[str, Sequence[Entity], Sequence[float], Mapping[int, Identity]]],
    ) -> bytes:
        """`pipelines`: (cluster, entities, 0..1 scores, GPU entity -> DCGM identity) of each; entities
        past the scores are skipped."""
        gpu = [f"# HELP {GPU_SCORE} {GPU_SCORE_HELP}\n# TYPE {GPU_SCORE} gauge\n"]
        node = [f"# HELP {NODE_SCORE} {NODE_SCORE_HELP}\n# TYPE {NODE_SCORE} gauge\n"]
        seen = 0
        for cluster, entities, scores, dcgm_of in pipelines:
            seen += len(scores)
            prefix = self._prefix.setdefault(cluster, {})
            for eid, (ent, score) in enumerate(zip(entities, scores, strict=False)):
                key = (ent, dcgm_of.get(eid, NO_IDENTITY))
                head = prefix.get(key)
                if head is None:
                    head = prefix[key] = self._head(cluster, *key)
                (node if ent.gpu is None else gpu).append(f"{head}{_float_text(score)}\n")
        if sum(map(len, self._prefix.values())) > 2 * seen:
            self._prefix.clear()
        return "".join(gpu + node).encode()

    @staticmethod
    def _head(cluster: str, ent: Entity, identity: Identity) -> str:
        if ent.gpu is None:
            return f'{NODE_SCORE}{{cluster="{_label(cluster)}",node="{_label(ent.node)}"}} '
        hostname, uuid, pci = map(_label, identity)  # labels in generate_latest's (sorted) order
        return (
            f'{GPU_SCORE}{{Hostname="{hostname}",UUID="{uuid}",cluster="{_label(cluster)}",gpu="{ent.gpu}",'
            f'node="{_label(ent.node)}",pci_bus_id="{pci}"}} '
        )


class PipelinesCollector(Collector):
    """A collector over the pipelines this process runs now (one per owned partition under `prexid
    run`), read at each scrape unless `busy` (a batch is changing them in the worker thread,
    `batch_gate.py`): then the families read last time are served again."""

    def __init__(
        self, pipelines: Callable[[], list[Pipeline]], busy: Callable[[], bool] = lambda: False
    ) -> None:
        self.pipelines = pipelines
        self.busy = busy
        self._last: dict[bool, list[Metric]] = {}  # by `entity_scores_apart`: what it collects differs

    def collect(self) -> Iterator[Metric]:
        apart = _entity_scores_apart.get()
        if not self.busy():
            self._last[apart] = list(self.families())
        return iter(self._last.get(apart, []))

    def families(self) -> Iterator[Metric]:
        raise NotImplementedError


def while_quiet(read: Callable[[], float], busy: Callable[[], bool]) -> Callable[[], float]:
    """`read()`, or while `busy` the value it gave last (a gauge's function over the pipelines)."""
    last = [0.0]

    def value() -> float:
        if not busy():
            last[0] = read()
        return last[0]

    return value


class FusedScoreCollector(PipelinesCollector):
    """`prexid_gpu_fused_score`, `prexid_node_fused_score` (0..1; 0.5 = firing threshold) and the
    cluster score, over every pipeline this process runs (one per owned partition under `prexid run`)."""

    def families(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        pipelines = self.pipelines()
        if not _entity_scores_apart.get():
            yield from self._entity_scores(pipelines)
        cluster = GaugeMetricFamily(
            "prexid_cluster_fused_score",
            "Cluster-wide fault score, 0..1; 0.5 is the firing threshold (max over owned partitions)",
            labels=["cluster"],
        )
        by_cluster: dict[str, float] = {}
        for p in pipelines:
            score = float(score01(np.array([p.cluster_alerts.score]), p.config.lifecycle.fire)[0])
            by_cluster[p.config.cluster] = max(score, by_cluster.get(p.config.cluster, 0.0))
        for name, score in sorted(by_cluster.items()):
            cluster.add_metric([name], score)
        yield cluster
        yield CounterMetricFamily(
            "prexid_alerts_rate_limited",
            "Alert firings withheld because their entity exceeded its hourly cap",
            value=sum(p.rate_limit.withheld for p in pipelines),
        )

    @staticmethod
    def _entity_scores(pipelines: list[Pipeline]) -> Iterator[GaugeMetricFamily]:
        gpu = GaugeMetricFamily(
            GPU_SCORE, GPU_SCORE_HELP, labels=["cluster", "node", "gpu", *IDENTITY_LABELS]
        )
        node = GaugeMetricFamily(NODE_SCORE, NODE_SCORE_HELP, labels=["cluster", "node"])
        for p in pipelines:
            cluster = p.config.cluster
            scores = score01(p.fused_scores, p.config.lifecycle.fire)
            for eid, score in enumerate(np.asarray(scores).tolist()):
                ent = p.registry.entities[eid]
                if ent.gpu is None:
                    node.add_metric([cluster, ent.node], score)
                else:
                    identity = p.registry.dcgm_of.get(eid, NO_IDENTITY)
                    gpu.add_metric([cluster, ent.node, str(ent.gpu), *identity], score)
        yield gpu
        yield node


class FamilyCoverageCollector(PipelinesCollector):
    """`prexid_family_series{family}`: series per signal family over every pipeline; 0 is a family
    prexid is blind to (its exporter field is not enabled)."""

    def families(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "prexid_family_series",
            "Series per signal family (0: no data, the family's faults go undetected)",
            labels=["family"],
        )
        totals: dict[str, int] = {}
        for p in self.pipelines():
            for f, n in series_per_family(p).items():
                totals[f.label] = totals.get(f.label, 0) + n
        for label, n in sorted(totals.items()):
            family.add_metric([label], n)
        yield family


class BudgetCollector(PipelinesCollector):
    """The false-alert budget of every owned partition: `prexid_fire_threshold{level}` (where it holds
    the firing threshold; the highest over partitions), `prexid_false_alert_null_rate{level}` (false
    pages a node-day the fleet's null predicts there) and `prexid_false_alert_realised_rate{level}`
    (pages a node-day no Xid followed, over every partition's nodes), beside `prexid_false_alert_budget`;
    and what the family calibration takes off each family's votes, `prexid_family_calibration_shift`."""

    def families(self) -> Iterator[GaugeMetricFamily]:
        fire = GaugeMetricFamily(
            "prexid_fire_threshold",
            "Fused surprise that fires a page, as the false-alert budget holds it, by level (gpu, node)",
            labels=["cluster", "level"],
        )
        null = GaugeMetricFamily(
            "prexid_false_alert_null_rate",
            "False pages per node-day the fleet's own null predicts at that threshold, by level",
            labels=["cluster", "level"],
        )
        realised = GaugeMetricFamily(
            "prexid_false_alert_realised_rate",
            "Pages per node-day that no Xid followed within the confirmation window, by level",
            labels=["cluster", "level"],
        )
        budget = GaugeMetricFamily(
            "prexid_false_alert_budget", "False pages per node-day the thresholds hold", labels=["cluster"]
        )
        shift = GaugeMetricFamily(
            "prexid_family_calibration_shift",
            "Surprise (-log10 p) the family calibration takes off a family's votes (path=vote) or off its "
            "sustained hard-error evidence (path=sustained), by level and family",
            labels=["cluster", "level", "family", "path"],
        )
        highest: dict[tuple[str, str], tuple[float, float]] = {}
        paged: dict[tuple[str, str], tuple[float, float]] = {}  # pages, node-days
        budgets: dict[str, float] = {}
        shifts: dict[tuple[str, str, str, str], float] = {}
        for p in self.pipelines():
            cluster = p.config.cluster
            if p.calibration is not None:
                for path, table in (
                    ("vote", p.calibration.shift),
                    ("sustained", p.calibration.sustained_shift),
                ):
                    for (i, f), lowered in np.ndenumerate(table):
                        key = (cluster, LEVELS[i], Family(f).label, path)
                        shifts[key] = max(float(lowered), shifts.get(key, 0.0))
            if p.budget is None:
                continue
            budgets[cluster] = p.budget.config.pages_per_node_day
            rates = p.budget.null_rate()
            days = p.budget.node_seconds / 86400.0
            for i, level in enumerate(LEVELS):
                now = (float(p.budget.thresholds[i]), float(rates[i]))
                highest[cluster, level] = max(now, highest.get((cluster, level), now))
                pages, before = float(p.budget.paged[i]), paged.get((cluster, level), (0.0, 0.0))
                paged[cluster, level] = (before[0] + pages, before[1] + days)
        for (cluster, level), (threshold, rate) in sorted(highest.items()):
            fire.add_metric([cluster, level], threshold)
            null.add_metric([cluster, level], rate)
        for (cluster, level), (pages, days) in sorted(paged.items()):
            realised.add_metric([cluster, level], pages / max(days, 1e-9))
        for cluster, value in sorted(budgets.items()):
            budget.add_metric([cluster], value)
        for labels, value in sorted(shifts.items()):
            shift.add_metric(list(labels), value)
        yield fire
        yield null
        yield realised
        yield budget
        yield shift


class LedgerCollector(PipelinesCollector):
    """The node reliability ledger of every owned partition: `prexid_node_failures_total{node,kind}`
    (Xids, pages, reboots, drains; a node's counts move with its partition's snapshot) and
    `prexid_node_repeat_offender_score{node}` (1 or more: a repeat offender)."""

    def families(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        events = CounterMetricFamily(
            "prexid_node_failures",
            "What the ledger booked per node: Xid failures, pages, reboots and drains, by kind",
            labels=["cluster", "node", "kind"],
        )
        score = GaugeMetricFamily(
            "prexid_node_repeat_offender_score",
            "Failures decayed by their age over the repeat-offender threshold; 1 or more: RMA or burn-in",
            labels=["cluster", "node"],
        )
        for p in self.pipelines():
            cluster = p.config.cluster
            for node, rec in p.ledger.nodes.items():
                for kind, n in sorted(rec.counts.items()):
                    events.add_metric([cluster, node, kind], n)
                score.add_metric([cluster, node], p.ledger.score(node))
        yield events
        yield score


class Telemetry:
    """prexid's own metrics on an injected registry (tests get a fresh one each)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        pipelines: Callable[[], list[Pipeline]],
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        """`busy`: the pipelines are being changed off the event loop (`batch_gate.py`), and what is
        read of them is served as read last."""
        self.registry = registry
        self.samples = Counter("prexid_samples", "Metric samples decoded", registry=registry)
        self.kernel_lines = Counter("prexid_kernel_lines", "Kernel log lines decoded", registry=registry)
        self.messages = Counter(
            "prexid_messages", "Messages consumed, by stream", ["stream"], registry=registry
        )
        self.dead_letters = Counter(
            "prexid_dead_letters",
            "Messages that could not be decoded, by reason",
            ["reason"],
            registry=registry,
        )
        # decoded + dead-lettered = consumed (prexid_messages_total), per stream
        self.messages_decoded = Counter(
            "prexid_messages_decoded",
            "Messages decoded to at least one record (or only to OTLP points of kinds prexid skips)",
            ["stream"],
            registry=registry,
        )
        self.points_skipped = Counter(
            "prexid_points_skipped",
            "Data points of kinds prexid does not read, by reason (OTLP histograms and summaries, "
            "remote-write native histograms and stale markers, ...)",
            ["reason"],
            registry=registry,
        )
        self.remote_write_requests = Counter(
            "prexid_remote_write_requests",
            "POST /api/v1/write requests, by outcome (ok, invalid, unauthorized, too_large, "
            "unsupported, throttled, unavailable)",
            ["outcome"],
            registry=registry,
        )
        self.remote_write_samples = Counter(
            "prexid_remote_write_samples",
            "Samples of the POST /api/v1/write requests accepted (204)",
            registry=registry,
        )
        self.log_lines_not_kernel = Counter(
            "prexid_log_lines_not_kernel",
            "Log lines whose envelope says they are not from the kernel (never searched for events)",
            registry=registry,
        )
        self.log_lines = Counter(
            "prexid_log_lines",
            "Log lines decoded, by outcome: kernel (searched for GPU events), not_kernel (the envelope "
            "names another source), untrusted (a kernel claim refused: a tag or ident against a non-kernel "
            "facility, or no facility on a topic not declared kernel-only)",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("kernel", "not_kernel", "untrusted"):
            self.log_lines.labels(outcome)
        self.kernel_events = Counter(
            "prexid_kernel_events", "GPU events found in kernel lines, by kind", ["kind"], registry=registry
        )
        self.kernel_fragments = Counter(
            "prexid_kernel_fragments",
            "Kernel lines split across a host's records, by outcome: joined (a continuation appended), "
            "expired (let go unjoined, its events read as they stand), incomplete (let go with its Xid "
            "head cut short: a dead letter, kernel_line_incomplete)",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("joined", "expired", "incomplete"):
            self.kernel_fragments.labels(outcome)
        self.future_samples = Counter(
            "prexid_future_samples",
            "Metric samples dropped as dated too far ahead of their source, by source",
            ["source"],
            registry=registry,
        )
        self.late_samples = Counter(
            "prexid_late_samples",
            "Metric samples dropped as dated too far behind their source (a slow clock), by source",
            ["source"],
            registry=registry,
        )
        self.xid_holds_expired = Counter(
            "prexid_xid_holds_expired",
            "Xids paged after waiting the longest hold for a metric partition that still looked behind",
            registry=registry,
        )
        self.key_placement_mismatches = Counter(
            "prexid_key_placement_mismatches",
            "Record keys found on a different partition index than the same key on another input topic",
            ["topic"],
            registry=registry,
        )
        self.alerts = Counter(
            "prexid_alerts", "Alert messages emitted", ["kind", "status"], registry=registry
        )
        self.xid_events = Counter(
            "prexid_xid_events",
            "Xid events, by code and whether a pre_xid alert preceded them",
            ["code", "preceded"],
            registry=registry,
        )
        self.lead_time = Histogram(
            "prexid_pre_xid_lead_time_seconds",
            "Time from a pre_xid alert firing to the Xid it warned of",
            buckets=LEAD_TIME_BUCKETS,
            registry=registry,
        )
        self.series = Gauge("prexid_series", "Series known to this process", registry=registry)
        self.series.set_function(while_quiet(lambda: sum(len(p.registry) for p in pipelines()), busy))
        self.series_refused = Counter(  # counted as refused, not summed over shards (they come and go)
            "prexid_series_refused",
            "New series refused by the cardinality limit",
            registry=registry,
        )
        self.series_expired = Counter(
            "prexid_series_expired",
            "Series dropped after PREXID_DETECTION__SERIES_TTL_S of event time without a sample",
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "prexid_batch_duration_seconds", "Time to process one consumed batch", registry=registry
        )
        self.watermark = Gauge(
            "prexid_event_time_watermark_seconds", "Event-time watermark of the pipeline", registry=registry
        )
        self.watermark.set_function(  # the slowest partition's
            while_quiet(
                lambda: min((p.watermark for p in pipelines() if np.isfinite(p.watermark)), default=0.0),
                busy,
            )
        )
        # `prexid run`'s partition state: what a takeover would resume from, and how takeovers went
        self.partitions = Gauge(
            "prexid_partitions_owned",
            "Partition indexes this replica owns (a pipeline each)",
            registry=registry,
        )
        self.checkpoints = Counter(
            "prexid_checkpoints",
            "Checkpoints (snapshots to the state topic, then offsets committed), by outcome",
            ["outcome"],
            registry=registry,
        )
        self.checkpoint_seconds = Histogram(
            "prexid_checkpoint_duration_seconds",
            "Time to checkpoint the partitions being checkpointed",
            buckets=STATE_BUCKETS,
            registry=registry,
        )
        self.last_checkpoint = Gauge(
            "prexid_last_checkpoint_timestamp_seconds",
            "Wall-clock time of the last checkpoint that succeeded (0: none yet)",
            registry=registry,
        )
        self.takeovers = Counter(
            "prexid_takeovers",
            "Partitions taken over: from their snapshot, or cold (no snapshot, or one refused)",
            ["how"],
            registry=registry,
        )
        self.restore_seconds = Histogram(
            "prexid_restore_duration_seconds",
            "Time to read a partition's snapshot back on takeover",
            buckets=STATE_BUCKETS,
            registry=registry,
        )
        # the fleet vote (`prexid run` with fleet_vote): the summaries topic and the elected aggregator
        self.fleet_summaries = Counter(
            "prexid_fleet_summaries",
            "Records of the summaries topic: published by this replica's shards, read, or unreadable",
            ["outcome"],
            registry=registry,
        )
        self.fleet_summary_bytes = Counter(
            "prexid_fleet_published_bytes",
            "Bytes of summaries this replica published (compare with the metric topics' bytes in)",
            registry=registry,
        )
        self.fleet_degraded_ticks = Counter(
            "prexid_fleet_degraded_ticks",
            "Shard ticks judged with some partition's summary missing or too late (left out of the vote)",
            registry=registry,
        )
        self.fleet_partitions_missing = Gauge(
            "prexid_fleet_partitions_missing",
            "Partitions this replica's shards left out of their last tick's vote (most of any shard)",
            registry=registry,
        )
        self.fleet_late_summaries = Counter(
            "prexid_fleet_late_summaries",
            "Summaries the aggregator read for ticks it had already judged",
            registry=registry,
        )
        self.fleet_aggregator = Gauge(
            "prexid_fleet_aggregator",
            "1 while this replica holds the aggregator role (exactly one replica should)",
            registry=registry,
        )
        self.fleet_aggregated_tick = Gauge(
            "prexid_fleet_aggregated_tick_timestamp_seconds",
            "Event time of the last tick the aggregator judged (0: not the aggregator, or none yet)",
            registry=registry,
        )
        for outcome in ("published", "read", "unreadable"):
            self.fleet_summaries.labels(outcome)
        for outcome in ("ok", "failed"):
            self.checkpoints.labels(outcome)
        for how in ("snapshot", "no_snapshot", "refused"):
            self.takeovers.labels(how)
        registry.register(FusedScoreCollector(pipelines, busy))
        registry.register(FamilyCoverageCollector(pipelines, busy))
        registry.register(LedgerCollector(pipelines, busy))
        registry.register(BudgetCollector(pipelines, busy))

    def observe_alerts(self, alerts: list[Alert]) -> None:
        for a in alerts:
            self.alerts.labels(a.kind, a.status).inc()
            if a.kind == "xid":
                preceded = a.lead_time_seconds is not None
                self.xid_events.labels(str(a.xid_code), "true" if preceded else "false").inc()
                if a.lead_time_seconds is not None:
                    self.lead_time.observe(a.lead_time_seconds)
