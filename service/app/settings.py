"""All of prexid's settings in one frozen class: environment `PREXID_*`, an optional TOML file, defaults.

Built once in `main` and passed down; nothing reads the environment at import time.
Precedence: explicit arguments > environment > TOML file (`PREXID_CONFIG_FILE` or `--config`) > defaults.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from prexid.detectors.alert_budget import BudgetConfig
from prexid.detectors.family_calibration import CalibrationConfig
from prexid.detectors.fusion import FusionConfig
from prexid.detectors.lifecycle import LifecycleConfig
from prexid.service.pipeline.pipeline import PipelineConfig
from prexid.service.schemas import DEFAULT_RUNBOOK_BASE_URL, AlertKind, Severity

ADMIN_TOKEN_MIN_CHARS = 16
# Formats a topic must have for `remote_write = "kafka"` to republish onto it: prometheus-kafka-adapter
# JSON, one sample per record, is what it writes (the format prexid's consumers read fastest).
REPUBLISH_FORMATS = ("prom_kafka_adapter", "auto")


class DetectionSettings(BaseModel):
    """Detection tunables; defaults are what `prexid evaluate` was tuned on."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a typo is an error, not a default

    step_s: float = Field(15.0, gt=0, description="fusion tick, one scrape interval")
    lateness_s: float = Field(10.0, ge=0, description="how late a sample may arrive and still count")
    future_skew_s: float = Field(
        300.0, gt=0, description="how far ahead of its source's progress a sample may be dated"
    )
    late_drop_s: float = Field(
        300.0, gt=0, description="samples dated further behind their source's progress are dropped"
    )
    fire_threshold: float = Field(9.0, gt=0, description="fused surprise (-log10 p) that starts an alert")
    resolve_threshold: float = Field(4.0, gt=0)
    persist_ticks: int = Field(3, ge=1, description="ticks above fire_threshold before firing")
    clear_ticks: int = Field(4, ge=1, description="ticks below resolve_threshold before resolving")
    keep_firing_for_s: float = Field(
        600.0,
        ge=0,
        description="event seconds an alert stays firing once its score is below resolve_threshold "
        "(Prometheus' keep_firing_for): a part erring in bursts minutes apart is one page, not one a burst",
    )
    false_alert_budget: float = Field(
        0.005,
        ge=0,
        description="false pages per node-day the firing thresholds are raised to hold; 0: fixed threshold",
    )
    error_counter_warmup_s: float = Field(
        1200.0,
        ge=0,
        description="event seconds after the first error-counter sample before the fleet prior calls "
        "anything rarer than 1e-3 (started from nothing, it has not seen the fleet's bursts); 0: at once",
    )
    family_calibration: bool = Field(
        True,
        description="lower the votes of a signal family whose healthy entities cross surprise levels "
        "more often than its p-values promise (bursty counters, noisy sensors); false: p-values as given",
    )
    max_series: int = Field(2_000_000, ge=1, description="cardinality limit per process")
    series_ttl_s: float = Field(
        3600.0,
        ge=60.0,
        description="event seconds without a sample after which a series expires: it leaves the limit, "
        "its id and state are reused by new series (label churn: pod, container)",
    )
    multivariate: bool = Field(False, description="river HalfSpaceTrees per node as an extra (slow) voter")
    xid_resolve_after_s: float = Field(
        3600.0, gt=0, description="event seconds an Xid alert stays firing after its burst's last Xid"
    )
    repeat_offender_failures: float = Field(
        2.5,
        gt=0,
        description="decayed failures (Xids, drains) that make a node a repeat offender (~3 in days)",
    )
    repeat_offender_half_life_s: float = Field(
        7 * 86400.0, gt=0, description="event seconds after which a failure counts half in that score"
    )

    @field_validator("multivariate")
    @classmethod
    def _river_installed(cls, on: bool) -> bool:
        """The voter is river's: say so at start, not at the first tick of the first node."""
        if on and importlib.util.find_spec("river") is None:
            raise ValueError("the multivariate voter needs river: pip install 'prexid[river]'")
        return on

    def pipeline_config(
        self, cluster: str, runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL
    ) -> PipelineConfig:
        return PipelineConfig(
            cluster=cluster,
            runbook_base_url=runbook_base_url,
            lateness_s=self.lateness_s,
            future_skew_s=self.future_skew_s,
            late_drop_s=self.late_drop_s,
            max_series=self.max_series,
            series_ttl_s=self.series_ttl_s,
            xid_resolve_after_s=self.xid_resolve_after_s,
            repeat_offender_failures=self.repeat_offender_failures,
            repeat_offender_half_life_s=self.repeat_offender_half_life_s,
            multivariate=self.multivariate,
            error_counter_warmup_s=self.error_counter_warmup_s,
            fusion=FusionConfig(step_s=self.step_s),
            budget=BudgetConfig(
                pages_per_node_day=self.false_alert_budget,
                floor=self.resolve_threshold,
                persist_ticks=self.persist_ticks,
            )
            if self.false_alert_budget > 0
            else None,
            calibration=CalibrationConfig(step_s=self.step_s) if self.family_calibration else None,
            lifecycle=LifecycleConfig(
                fire=self.fire_threshold,
                resolve=self.resolve_threshold,
                persist_ticks=self.persist_ticks,
                clear_ticks=self.clear_ticks,
                keep_firing_for_s=self.keep_firing_for_s,
            ),
        )


class KafkaSecurity(BaseModel):
    """How prexid authenticates to Kafka: SASL (SCRAM) and/or TLS. Secrets are SecretStr: never logged."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a typo is an error, not a default

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = Field(None, description="CA bundle that signed the brokers' certificates")
    ssl_certfile: Path | None = Field(None, description="client certificate, for mutual TLS")
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None


QUARANTINE_KINDS: tuple[AlertKind, ...] = ("xid",)
QUARANTINE_SEVERITIES: tuple[Severity, ...] = ("critical",)
DEFAULT_SLURM_DRAIN = ("scontrol", "update", "nodename={node}", "state=drain", "reason={reason}")
DEFAULT_SLURM_RESUME = ("scontrol", "update", "nodename={node}", "state=resume")


class QuarantineSettings(BaseModel):
    """Taking a paged node out of scheduling (Kubernetes cordon + taint + condition, or a Slurm drain).

    Off by default; turned on, it only logs and counts what it would do (`dry_run`) until that is
    switched off too. A circuit breaker caps how many nodes it holds at once, and a `cluster` alert
    (a shared cause) never quarantines anyone."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a typo is an error, not a default

    enabled: bool = False
    dry_run: bool = Field(True, description="log and count what would be done, change nothing")
    backend: Literal["kubernetes", "slurm"] = "kubernetes"
    kinds: list[AlertKind] = Field(
        default_factory=lambda: list(QUARANTINE_KINDS),
        description="alert kinds that quarantine (never `cluster`)",
    )
    severities: list[Severity] = Field(
        default_factory=lambda: list(QUARANTINE_SEVERITIES), description="alert severities that quarantine"
    )
    max_nodes: int = Field(3, ge=1, description="circuit breaker: nodes quarantined at once, at most")
    max_fraction: float = Field(
        0.05,
        gt=0,
        le=1,
        description="circuit breaker: share of the nodes prexid watches quarantined at once, at most "
        "(at least one node); the smaller of this and max_nodes holds",
    )
    healthy_period_s: float | None = Field(
        None,
        gt=0,
        description="undo a quarantine by itself once the node has had no firing alert for this long "
        "(wall seconds); None: only a human undoes it (POST /admin/quarantine/{node}/undo)",
    )
    taint_key: str = Field("prexid.io/gpu-unhealthy", description="taint key; the value is the alert kind")
    condition_type: str = Field("PrexidGpuUnhealthy", description="NodeCondition type set with the evidence")
    kubeconfig: Path | None = Field(
        None, description="kubeconfig file; None: the pod's in-cluster service account"
    )
    api_timeout_s: float = Field(5.0, gt=0, description="timeout of one API server (or command) call")
    retries: int = Field(5, ge=0, description="retries of a failed call, with exponential backoff")
    backoff_s: float = Field(0.5, gt=0, description="first retry delay; doubles each time, up to 30 s")
    workers: int = Field(4, ge=1, description="quarantines carried out at once (threads off the event loop)")
    slurm_drain: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SLURM_DRAIN),
        description="argv of the Slurm drain hook; {node}, {reason}, {kind}, {xid_code}, {alert} filled in",
    )
    slurm_resume: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SLURM_RESUME),
        description="argv that undoes it; {node}, {who} are filled in",
    )

    @field_validator("kinds")
    @classmethod
    def _never_cluster(cls, kinds: list[AlertKind]) -> list[AlertKind]:
        """A cluster alert has a shared cause (storage, fabric, cooling): quarantining on it would take
        out healthy nodes, so it is refused here and ignored by the action."""
        if "cluster" in kinds or "quarantine" in kinds:
            raise ValueError("`cluster` and `quarantine` alerts never quarantine a node")
        return kinds

    @model_validator(mode="after")
    def _client_installed(self) -> QuarantineSettings:
        """The Kubernetes backend is the official client's: say so at start, not at the first page."""
        if self.enabled and self.backend == "kubernetes" and importlib.util.find_spec("kubernetes") is None:
            raise ValueError("the Kubernetes quarantine needs its client: pip install 'prexid[k8s]'")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PREXID_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    config_file: Path | None = None
    cluster: str = "default"

    kafka_bootstrap: str = "127.0.0.1:9092"
    group_id: str = "prexid"
    metrics_topics: list[str] = ["prexid.metrics"]
    logs_topics: list[str] = ["prexid.kernel-logs"]
    alerts_topic: str = "prexid.alerts"
    dead_letter_topic: str = "prexid.dead-letters"
    metrics_format: str = "prom_kafka_adapter"
    logs_format: str = "syslog"
    topic_formats: dict[str, str] = Field(
        default_factory=dict, description="per-topic format overriding metrics_format/logs_format"
    )
    kernel_only_topics: list[str] | None = Field(
        None,
        description="log topics that carry kernel records only (a relay ships nothing else there): on "
        "them a record without a facility (no syslog PRI, plain dmesg, JSON with no _TRANSPORT or "
        "facility) is believed to come from the kernel; elsewhere its kernel claim (a tag, APP-NAME "
        "or ident any user can set) is refused and counted. None: every log topic; []: none",
    )
    batch_max_records: int = Field(
        40_000,
        ge=1,
        description="records a batch takes at most: a batch costs each owned partition ~1 ms beyond its "
        "records, and 10,000 spread over a replica's shards (about a scrape each) made a replica ~6% "
        "slower; memory holds one batch (~30 MB)",
    )
    batch_timeout_ms: int = Field(200, ge=1)
    kafka_security: KafkaSecurity = KafkaSecurity()
    state_topic: str | None = Field(
        None, description="compacted snapshot changelog; default <group_id>.state"
    )
    state_replication_factor: int = Field(
        1, ge=1, description="replicas of the state topic (3 in production)"
    )
    checkpoint_interval_s: float = Field(30.0, gt=0, description="how often partition state is snapshotted")
    snapshot_chunk_bytes: int = Field(
        4 * 2**20, ge=1024, description="snapshots travel in chunks of this size (broker message limit)"
    )
    session_timeout_ms: int = Field(10_000, ge=1000, description="how soon a dead replica's partitions move")
    max_new_series_per_message: int = Field(
        20_000, ge=1, description="new series one message may create; more and it is a dead letter"
    )
    xid_max_hold_s: float = Field(
        60.0, gt=0, description="wall seconds an Xid waits for a backlogged metric partition before it pages"
    )

    fleet_vote: bool = Field(
        True,
        description="`prexid run`: judge the shared-cause and cluster votes over every partition's counts "
        "(published to `summaries_topic`, one cluster alert raised by an elected aggregator); false: each "
        "partition judges its own nodes alone",
    )
    summaries_topic: str | None = Field(
        None, description="one-partition topic of per-partition summaries; default <group_id>.summaries"
    )
    verdicts_topic: str | None = Field(
        None,
        description="one-partition topic of the aggregator's verdicts and state; default <group_id>.verdicts",
    )
    fleet_lateness_s: float = Field(
        120.0,
        gt=0,
        description="event seconds a partition's summary may lag a tick and still count in its vote; "
        "further behind it is left out (counted), as if the partition were judged alone",
    )
    fleet_http_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="`prexid run` with fleet_vote: serve the fleet view (every partition's scores and "
        "alerts, from the summaries topic) on this port too, on http_host; unset: not served",
    )
    summary_every_ticks: int = Field(1, ge=1, description="ticks between two summaries of a partition")
    summaries_retention_ms: int = Field(
        3_600_000, ge=60_000, description="retention of the summaries and verdicts topics"
    )

    alertmanager_urls: list[str] = Field(default_factory=list, description="Alertmanager base URLs (API v2)")
    alertmanager_resend_s: float = Field(60.0, gt=0, description="re-send interval for active alerts")

    http_host: str = "127.0.0.1"
    http_port: int = Field(8000, ge=0, le=65535)
    admin_token: SecretStr | None = Field(None, description="bearer token the admin HTTP endpoints require")
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL
    external_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="where users reach prexid (its dashboard): each alert's generatorURL links the alert's "
        "GPU there; default http://<http_host>:<http_port>",
    )
    history_ticks: int = Field(120, ge=1, description="fusion ticks of score history kept for the dashboard")

    remote_write: Literal["off", "kafka", "local"] = Field(
        "off",
        description="POST /api/v1/write (Prometheus remote_write 1.0) under `prexid run`: `kafka` "
        "republishes the samples to `remote_write_topic` keyed by node (replicas consume them as usual); "
        "`local` feeds this process's own pipeline and consumes no Kafka (one process beside a Prometheus)",
    )
    remote_write_token: SecretStr | None = Field(
        None, description="bearer token POST /api/v1/write requires (unset: none; bind to loopback then)"
    )
    remote_write_max_body_bytes: int = Field(
        8 * 2**20, ge=1024, description="compressed request bodies larger than this get 413"
    )
    remote_write_queue_requests: int = Field(
        64,
        ge=1,
        description="requests accepted but not yet processed (`local`) or not yet acknowledged by Kafka "
        "(`kafka`); beyond it a request gets 429 and Prometheus retries it later",
    )
    remote_write_topic: str | None = Field(
        None,
        description="`kafka` mode: the metrics topic samples are republished to; default metrics_topics[0]",
    )

    detection: DetectionSettings = DetectionSettings()
    quarantine: QuarantineSettings = QuarantineSettings()

    def dashboard_url(self) -> str:
        return self.external_url or f"http://{self.http_host}:{self.http_port}"

    def summaries(self) -> str:
        return self.summaries_topic or f"{self.group_id}.summaries"

    def verdicts(self) -> str:
        return self.verdicts_topic or f"{self.group_id}.verdicts"

    def aggregator_group(self) -> str:
        """The consumer group whose one member holds the aggregator role."""
        return f"{self.group_id}.aggregator"

    def republish_topic(self) -> str:
        return self.remote_write_topic or self.metrics_topics[0]

    @model_validator(mode="after")
    def _republish_topic_reads_adapter_json(self) -> Settings:
        """`kafka` mode writes adapter JSON: a topic read in another format would dead-letter every
        sample, so that is refused at start."""
        if self.remote_write != "kafka":
            return self
        topic = self.republish_topic()
        fmt = self.topic_formats.get(topic, self.metrics_format)
        if fmt not in REPUBLISH_FORMATS:
            raise ValueError(
                f"remote_write=kafka republishes prometheus-kafka-adapter JSON, but topic {topic!r} is read "
                f"as {fmt!r}: set remote_write_topic to a topic read as one of {REPUBLISH_FORMATS}"
            )
        return self

    @field_validator("admin_token", "remote_write_token")
    @classmethod
    def _token_is_long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        """Only an unset token turns the admin endpoints off (or remote_write's check): an empty one
        (`PREXID_ADMIN_TOKEN=""`) would match an empty bearer token, and a short one can be guessed.
        Both are refused at start."""
        if token is not None and len(token.get_secret_value().strip()) < ADMIN_TOKEN_MIN_CHARS:
            raise ValueError(
                f"must be at least {ADMIN_TOKEN_MIN_CHARS} characters (leave it unset instead: "
                "an empty token is refused, not taken as unset)"
            )
        return token

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _TomlFromSetting(settings_cls, init_settings, env_settings)


class _TomlFromSetting(PydanticBaseSettingsSource):
    """Reads the TOML file named by `config_file` (given as an argument or in the environment)."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
    ) -> None:
        super().__init__(settings_cls)
        self._init, self._env = init_settings, env_settings

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = self._init().get("config_file") or self._env().get("config_file")
        if not path:
            return {}
        return TomlConfigSettingsSource(self.settings_cls, toml_file=Path(path))()
