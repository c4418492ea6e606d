"""Every message prexid reads or writes, as versioned pydantic models (one schema on Kafka and HTTP)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1

# `quarantine`: the quarantine action's circuit breaker tripped (service/actions/quarantine.py)
AlertKind = Literal["pre_xid", "xid", "node", "cluster", "quarantine"]
AlertStatus = Literal["firing", "resolved"]
Severity = Literal["critical", "warning", "info"]

# Where docs/runbooks/ is published; override with PREXID_RUNBOOK_BASE_URL (and in the alert rules).
DEFAULT_RUNBOOK_BASE_URL = "https://github.com/prexid/prexid/blob/main/docs/runbooks"


def runbook_url(kind: str, base_url: str = DEFAULT_RUNBOOK_BASE_URL) -> str:
    """One runbook page per alert kind, so whoever is paged lands on what to do."""
    return f"{base_url.rstrip('/')}/{kind}.md"


def rfc3339(ts: float) -> str:
    """Event time (epoch seconds) as RFC3339 UTC with milliseconds."""
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Signal(BaseModel):
    """One metric that contributed to an alert, with what it read and what it usually reads."""

    model_config = ConfigDict(frozen=True)

    family: str
    metric: str
    labels: dict[str, str]
    value: float | None
    baseline: float | None
    surprise: float = Field(description="-log10 of the tail probability the detector gave this value")


class Alert(BaseModel):
    """An alert instance; `fingerprint` is stable across its firing and resolved messages."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    fingerprint: str
    status: AlertStatus
    kind: AlertKind
    severity: Severity
    cluster: str
    node: str
    gpu: int | None
    starts_at: str
    ends_at: str | None
    score: float = Field(ge=0.0, le=1.0)
    signals: list[Signal]
    summary: str
    xid_code: int | None = None
    xid_codes: list[int] | None = Field(None, description="every Xid code of the burst, in order seen")
    lead_time_seconds: float | None = None
    recommended_action: str | None = None
    pci_bus_id: str | None = None
    runbook_url: str = Field("", description="the runbook page for this kind; derived from kind if unset")

    @model_validator(mode="before")
    @classmethod
    def _default_runbook_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("runbook_url") and "kind" in data:
            return {**data, "runbook_url": runbook_url(data["kind"])}
        return data


class XidEvent(BaseModel):
    """One NVIDIA Xid reported by the driver in a kernel log line, or read from DCGM's Xid field (then
    `message` is `DCGM_FI_DEV_XID_ERRORS=CODE`, `pid` and `process` None)."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    kind: Literal["xid"] = "xid"
    ts: float
    node: str
    pci_bus_id: str
    code: int
    pid: int | None
    process: str | None
    message: str


class SxidEvent(BaseModel):
    """One NVSwitch SXid: the driver prints a head line (`Fatal, Link 12 ...`) and then `Severity ...`
    and `Data {...}` lines with the same code; together they are one event. Belongs to the node's
    fabric, not to one GPU.
    """

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    kind: Literal["sxid"] = "sxid"
    ts: float
    node: str
    switch: int = Field(description="N of nvidia-nvswitchN")
    pci_bus_id: str
    code: int
    fatal: bool | None = Field(description="None when the head line was not seen")
    link: int | None
    message: str
    details: list[str] = Field(default_factory=list, description="the Severity and Data lines")


class GpuOffBusEvent(BaseModel):
    """`NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.`, which can appear without an Xid 79 line."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    kind: Literal["gpu_off_bus"] = "gpu_off_bus"
    ts: float
    node: str
    pci_bus_id: str
    message: str


GpuResetAction = Literal["reset_required", "reboot_required", "reset", "recovery", "init_failed"]


class GpuResetEvent(BaseModel):
    """A driver line about resetting or recovering a GPU (or failing to bring it back)."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    kind: Literal["gpu_reset"] = "gpu_reset"
    ts: float
    node: str
    pci_bus_id: str
    action: GpuResetAction
    message: str


KernelEvent = XidEvent | SxidEvent | GpuOffBusEvent | GpuResetEvent
