"""deploy/shippers/: each example sends to prexid's topics, keyed by node, in a format prexid decodes,
with the murmur2 partitioner where the shipper has a choice. Parsed here (Vector, Telegraf, Fluent
Bit and the OTel Collector have no validator in Debian or PyPI); rsyslog's is validated by rsyslogd
itself (tests/integration/test_deploy_shippers_rsyslog.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from prexid.service.app.settings import Settings
from prexid.service.decode.formats import LOG_DECODERS, METRIC_DECODERS

SHIPPERS = Path(__file__).resolve().parents[2] / "deploy/shippers"
DEFAULTS = Settings()
METRICS_TOPIC, LOGS_TOPIC = DEFAULTS.metrics_topics[0], DEFAULTS.logs_topics[0]


def test_every_shipper_file_is_covered_here() -> None:
    assert {p.name for p in SHIPPERS.iterdir()} == {
        "vector-metrics.toml",
        "vector-kernel-logs.toml",
        "telegraf.conf",
        "fluent-bit.yaml",
        "otelcol.yaml",
        "rsyslog-prexid.conf",
    }


def vector_sink(name: str) -> dict[str, Any]:
    config = tomllib.loads((SHIPPERS / name).read_text())
    (sink,) = config["sinks"].values()
    transform = config["transforms"][sink["inputs"][0]]
    assert "get_hostname!()" in transform["source"]  # the key is set from the node's own name
    assert sink["type"] == "kafka" and sink["encoding"]["codec"] == "json"
    assert sink["librdkafka_options"]["partitioner"] == "murmur2_random"
    return sink


def test_vector_keys_metrics_and_kernel_logs_by_host_with_murmur2() -> None:
    metrics, logs = vector_sink("vector-metrics.toml"), vector_sink("vector-kernel-logs.toml")
    assert (metrics["topic"], metrics["key_field"]) == (METRICS_TOPIC, "host")
    assert (logs["topic"], logs["key_field"]) == (LOGS_TOPIC, "host")
    assert "vector" in METRIC_DECODERS and "journald" in LOG_DECODERS


def test_telegraf_keys_both_streams_by_host_through_one_client() -> None:
    config = tomllib.loads((SHIPPERS / "telegraf.conf").read_text())
    assert config["agent"]["omit_hostname"] is False
    outputs = {o["topic"]: o for o in config["outputs"]["kafka"]}
    assert set(outputs) == {METRICS_TOPIC, LOGS_TOPIC}  # one client (sarama, FNV-1a) for both streams
    assert all(o["routing_tag"] == "host" and o["required_acks"] == -1 for o in outputs.values())
    assert outputs[METRICS_TOPIC]["data_format"] == "json" and "telegraf_json" in METRIC_DECODERS


def test_fluent_bit_ships_kmsg_keyed_by_host_with_murmur2() -> None:
    config = yaml.safe_load((SHIPPERS / "fluent-bit.yaml").read_text())
    (source,) = config["pipeline"]["inputs"]
    (out,) = config["pipeline"]["outputs"]
    assert source["name"] == "kmsg" and out["topics"] == LOGS_TOPIC
    assert out["message_key_field"] == "host" and out["rdkafka.partitioner"] == "murmur2_random"
    assert "fluentbit" in LOG_DECODERS


def test_otel_collector_keys_metrics_and_logs_by_one_resource_per_node() -> None:
    config = yaml.safe_load((SHIPPERS / "otelcol.yaml").read_text())
    exporters = config["exporters"]
    assert exporters["kafka/metrics"]["metrics"]["topic"] == METRICS_TOPIC
    assert exporters["kafka/metrics"]["partition_metrics_by_resource_attributes"] is True
    assert exporters["kafka/logs"]["logs"]["topic"] == LOGS_TOPIC
    assert exporters["kafka/logs"]["partition_logs_by_resource_attributes"] is True
    pipelines = config["service"]["pipelines"]
    # both streams pass the same resource processors, so a node's key is the same in both
    assert pipelines["metrics"]["processors"] == pipelines["logs"]["processors"]
    assert (
        exporters["kafka/metrics"]["metrics"]["encoding"] == "otlp_proto" and "otlp_proto" in METRIC_DECODERS
    )
