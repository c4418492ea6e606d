"""Every message prexid reads or writes, as versioned pydantic models (one schema on Kafka and HTTP)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

AlertKind = Literal["pre_xid", "xid", "node", "cluster"]
AlertStatus = Literal["firing", "resolved"]
Severity = Literal["critical", "warning", "info"]


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
    lead_time_seconds: float | None = None
    recommended_action: str | None = None
    pci_bus_id: str | None = None


class XidEvent(BaseModel):
    """One NVIDIA Xid reported by the driver in a kernel log line."""

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
