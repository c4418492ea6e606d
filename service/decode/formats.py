"""Decoders by name, so each topic's format is a setting (`PREXID_METRICS_FORMAT`, `PREXID_LOGS_FORMAT`)."""

from __future__ import annotations

from service.decode import prom_kafka_adapter, syslog
from service.decode.types import LogDecoder, MetricDecoder

METRIC_DECODERS: dict[str, MetricDecoder] = {
    "prom_kafka_adapter": prom_kafka_adapter.decode,
}
LOG_DECODERS: dict[str, LogDecoder] = {
    "syslog": syslog.decode,
}


def metric_decoder(name: str) -> MetricDecoder:
    try:
        return METRIC_DECODERS[name]
    except KeyError:
        raise ValueError(f"unknown metrics format {name!r}; known: {sorted(METRIC_DECODERS)}") from None


def log_decoder(name: str) -> LogDecoder:
    try:
        return LOG_DECODERS[name]
    except KeyError:
        raise ValueError(f"unknown logs format {name!r}; known: {sorted(LOG_DECODERS)}") from None
