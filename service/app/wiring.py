"""How the parts are put together: one pipeline, its processor, the shared live state and the sinks.

The CLI, replay, the bench and the tests all wire through here, so each runs what production runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import Settings
from prexid.service.pipeline.coverage import CoverageLog
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.processor import Processor
from prexid.service.pipeline.series_registry import SeriesBudget
from prexid.service.schemas import Alert
from prexid.service.sinks.prometheus import Telemetry
from prexid.service.sources import remote_write
from prexid.service.sources.remote_write import LocalIntake, RemoteWriteEndpoint

if TYPE_CHECKING:
    from prexid.service.actions.quarantine import Backend, QuarantineAction
    from prexid.service.sinks.kafka_republish import KafkaRepublisher


def processor_of(pipeline: Pipeline, telemetry: Telemetry, settings: Settings) -> Processor:
    """`pipeline`'s processor, decoding the formats `settings` name and counting into `telemetry`: what
    `build` hands out, and what tests wire around a pipeline of their own."""
    processor = Processor(
        pipeline,
        telemetry,
        settings.metrics_format,
        settings.logs_format,
        settings.topic_formats,
        kernel_only_topics=settings.kernel_only_topics,
    )
    processor.xid_max_hold_s = settings.xid_max_hold_s
    processor.max_new_series_per_message = settings.max_new_series_per_message
    return processor


def build(settings: Settings, state: ServiceState | None = None) -> tuple[ServiceState, Processor]:
    """A pipeline and its processor. With `state` (one more partition of `prexid run`), the new
    processor shares that state's telemetry and alert sinks."""
    first = state is None
    budget = SeriesBudget(settings.detection.max_series) if state is None else state.series_budget
    pipeline = Pipeline(
        settings.detection.pipeline_config(settings.cluster, settings.runbook_base_url), budget
    )
    pipeline.tick_listeners.append(CoverageLog(pipeline))
    if state is None:
        state = ServiceState.new(pipeline, settings.history_ticks)
        state.admin_token = settings.admin_token
        state.series_budget = budget
    else:
        state.record_history(pipeline)  # one more partition's pipeline (`prexid run`)
    processor = processor_of(pipeline, state.telemetry, settings)
    if first and settings.alertmanager_urls:
        from prexid.service.sinks.alertmanager import AlertmanagerSink

        sink = AlertmanagerSink(
            settings.alertmanager_urls,
            state.telemetry.registry,
            resend_interval_s=settings.alertmanager_resend_s,
            external_url=settings.dashboard_url(),
        )
        state.alert_listeners.append(sink.submit)
        state.alert_forgetters.append(sink.forget)
        state.background.append(sink.run)
    if first and settings.quarantine.enabled:
        action = quarantine_action(settings, state)
        state.alert_listeners.append(action.submit)
        state.background.append(action.run)
    processor.listeners = state.alert_listeners
    return state, processor


def quarantine_backend(settings: Settings) -> Backend:
    """The backend `settings.quarantine` names: the Kubernetes API server, or the Slurm command hook."""
    q = settings.quarantine
    if q.backend == "slurm":
        from prexid.service.actions.slurm import SlurmHook

        return SlurmHook(q.slurm_drain, q.slurm_resume, q.api_timeout_s)
    from prexid.service.actions.k8s_nodes import KubernetesNodes, api_client

    return KubernetesNodes(api_client(q.kubeconfig), q.taint_key, q.condition_type, q.api_timeout_s)


def quarantine_action(
    settings: Settings, state: ServiceState, backend: Backend | None = None
) -> QuarantineAction:
    """The quarantine action over `state`'s pipelines: breaker base (the nodes they watch), ledgers
    (drains), and the alert listeners (its breaker page). Served at /admin/quarantine."""
    from prexid.service.actions.quarantine import QuarantineAction

    def fleet_size() -> int:
        return len({e.node for p in state.pipelines() for e in p.registry.entities})

    def page(alerts: list[Alert]) -> None:
        for listener in state.alert_listeners:
            listener(alerts)

    action = QuarantineAction(
        settings.quarantine,
        backend or quarantine_backend(settings),
        state.telemetry.registry,
        fleet_size,
        lambda node: state.pipeline_of(node).ledger,
        page,
        settings.cluster,
        settings.runbook_base_url,
        quiet=state.gate.quiet,
    )
    state.quarantine = action
    return action


def remote_write_feed(
    settings: Settings, state: ServiceState | None = None
) -> tuple[ServiceState, LocalIntake, Processor]:
    """A `LocalIntake` and the processor its requests feed (`remote_write = "local"`), served from the
    returned state. Without `state`, the processor is the state's own pipeline's (`prexid run`, which
    then consumes no Kafka); with one, a pipeline of its own beside the state's (`prexid demo`, whose
    simulated event clock must not meet the wall-clock times received samples carry)."""
    if state is None:
        state, processor = build(settings)
    else:
        _, processor = build(settings, state)
        state.others.append(processor.pipeline)
    processor.topic_formats[remote_write.TOPIC] = remote_write.FORMAT
    intake = LocalIntake(settings.remote_write_queue_requests, state.gate)
    state.remote_write = RemoteWriteEndpoint(
        intake, settings.remote_write_token, settings.remote_write_max_body_bytes
    )
    return state, intake, processor


def remote_write_republisher(settings: Settings, state: ServiceState) -> KafkaRepublisher:
    """`remote_write = "kafka"`: POST /api/v1/write served from `state`, its samples republished to
    Kafka by a producer that runs as one of the state's background jobs."""
    from prexid.service.sinks.kafka_republish import KafkaRepublisher

    republisher = KafkaRepublisher(settings, state.telemetry)
    state.background.append(republisher.run)
    state.remote_write = RemoteWriteEndpoint(
        republisher, settings.remote_write_token, settings.remote_write_max_body_bytes
    )
    return republisher
