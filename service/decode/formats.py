"""Decoders by name, so each topic's format is a setting (`PREXID_METRICS_FORMAT`, `PREXID_LOGS_FORMAT`,
or per topic `PREXID_TOPIC_FORMATS`), and `auto`, which recognises each message's format by its shape.
"""

from __future__ import annotations

import re
from typing import Any

from prexid.service.decode import (
    dmesg,
    json_logs,
    otlp,
    otlp_proto,
    prom_kafka_adapter,
    prom_text,
    remote_write,
    rfc5424,
    syslog,
    telegraf,
)
from prexid.service.decode import vector_metric as vector
from prexid.service.decode.common import load_json
from prexid.service.decode.types import DecodeError, KernelLine, LineError, LogDecoder, MetricDecoder, Samples

METRIC_DECODERS: dict[str, MetricDecoder] = {
    "prom_kafka_adapter": prom_kafka_adapter.decode,
    "prom_text": prom_text.decode,
    "vector": vector.decode,
    "telegraf_json": telegraf.decode_json,
    "influx": telegraf.decode_line_protocol,
    "otlp_json": otlp.decode,
    "otlp_proto": otlp_proto.decode,
    "prometheus_remote_write": remote_write.decode,  # what `POST /api/v1/write` receives
}
LOG_DECODERS: dict[str, LogDecoder] = {
    "syslog": syslog.decode,  # RFC3164 and RSYSLOG_ForwardFormat (rsyslog omkafka)
    "rfc5424": rfc5424.decode,
    "dmesg": dmesg.decode_dmesg,
    "kmsg": dmesg.decode_kmsg,
    "journald": json_logs.decode,  # journalctl -o json and Vector's journald source
    "fluentbit": json_logs.decode,
    "rsyslog_json": json_logs.decode,
}

_INFLUX = re.compile(r"^(?:[^\s\\{#]|\\.)+ (?:[^\s=\\]|\\.)+=")
_KMSG = re.compile(rb"^\d+,\d+,\d+,[^;]*;")
_DMESG = re.compile(rb"^(?:[a-z0-9]{1,8} *:[a-z]{1,8} *: )?\[")
_SYSLOG_3164 = re.compile(rb"^(?:<\d{1,3}>)?(?:[A-Z][a-z]{2} [ \d]\d |\d{4}-\d\d-\d\dT)")


def decode_metrics_auto(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    """JSON formats are told apart by their keys, text ones by their first sample line."""
    head = payload.lstrip()[:1]
    if head == b"{":
        return _metrics_json(load_json(payload), ref_ts, host)
    text = payload.decode("utf-8", errors="replace")
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
    if _INFLUX.match(first):
        return telegraf.decode_line_protocol(payload, ref_ts, host)
    return prom_text.decode(payload, ref_ts, host)


def _metrics_json(doc: Any, ref_ts: float, host: str | None) -> Samples:
    if not isinstance(doc, dict):
        raise DecodeError("not_an_object", type(doc).__name__)
    if "resourceMetrics" in doc:
        return otlp.decode_doc(doc, ref_ts, host)
    if "body" in doc:
        return prom_text.decode_envelope(doc, ref_ts, host)
    if "fields" in doc or "metrics" in doc:
        return telegraf.decode_json_doc(doc, ref_ts, host)
    if "labels" in doc and "value" in doc:
        return prom_kafka_adapter.decode_doc(doc, ref_ts, host)
    if "kind" in doc or "tags" in doc:
        return vector.decode_doc(doc, ref_ts, host)
    raise DecodeError("unknown_format", ",".join(sorted(map(str, doc))[:8]))


def decode_otlp(payload: bytes, ref_ts: float, /, host: str | None = None) -> Samples:
    """OTLP in either encoding, told by the first byte alone: JSON's `{`, else protobuf. Not after
    stripping whitespace: a request starts with 0x0a (field 1, `resource_metrics`), a newline too,
    and its length byte may be `{` (123)."""
    if payload[:1] == b"{":
        return otlp.decode(payload, ref_ts, host)
    return otlp_proto.decode(payload, ref_ts, host)


def decode_logs_auto(
    payload: bytes, ref_ts: float, /, host: str | None = None, errors: list[LineError] | None = None
) -> list[KernelLine]:
    """The format is told by the message's first line; every line is read in that format."""
    head = payload.lstrip()
    if head[:1] == b"{":
        return json_logs.decode(payload, ref_ts, host, errors)
    if re.match(rb"^<\d{1,3}>1 ", head):
        return rfc5424.decode(payload, ref_ts, host, errors)
    if _SYSLOG_3164.match(head):
        return syslog.decode(payload, ref_ts, host, errors)
    if _KMSG.match(head):
        return dmesg.decode_kmsg(payload, ref_ts, host, errors)
    if _DMESG.match(head):
        return dmesg.decode_dmesg(payload, ref_ts, host, errors)
    if not head.strip():
        raise DecodeError("empty", "no lines")
    raise DecodeError("unknown_format", head[:80].decode("utf-8", errors="replace"))


METRIC_DECODERS["auto"] = decode_metrics_auto
METRIC_DECODERS["otlp"] = decode_otlp
LOG_DECODERS["auto"] = decode_logs_auto


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
