"""Shapes shared by all decoders."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class RawSample(NamedTuple):
    """One decoded metric sample, before the series registry interns it."""

    name: str
    labels: dict[str, str]
    ts: float  # event time, epoch seconds
    value: float


class KernelLine(NamedTuple):
    """One kernel log message with the host and event time its envelope carried."""

    ts: float
    host: str
    message: str


class DecodeError(Exception):
    """A message that cannot be decoded; `reason` is a short, bounded label for metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


MetricDecoder = Callable[[bytes, float], list[RawSample]]
LogDecoder = Callable[[bytes, float], list[KernelLine]]
