"""`prexid run` reads what the OpenTelemetry Collector's Kafka exporter sends by default (`otlp_proto`:
one protobuf `ExportMetricsServiceRequest` per record, keyed by node) from the real broker, and a
cluster that ships no kernel logs still pages its Xid, from DCGM's Xid field.

The demo cluster's incident (a GPU heating and replaying PCIe for ten minutes, then an Xid) is turned
into one request per node per scrape, each with a histogram beside (skipped and counted), plus one
record that is no request (a dead letter). No kernel line is produced: the Xid is only in
`DCGM_FI_DEV_XID_ERRORS`, which changes from 0 to its code one scrape after the fault.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from prexid.service.decode import formats
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.series_registry import node_of
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, Tick, simulate
from tests.integration.kafka_broker import free_ports
from tests.integration.traffic import ProcessReplica, alert_docs, read_until, settings_for
from tests.otlp_requests import request

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=2)]

FAULT = DemoFault(node=1, gpu=2, xid_at_s=1800.0, xid_code=48)
INCIDENT = DemoCluster(nodes=2, gpus=4, duration_s=2100.0, fault=FAULT)
NOT_A_REQUEST = b"\xff\xfe not protobuf"


def xid_field(tick: Tick, gpus: dict[tuple[str, str], dict[str, str]]) -> list[RawSample]:
    """dcgm-exporter's last-Xid gauge of every GPU in this scrape: 0, and the fault's code from the
    first DCGM poll after it (its GPU's other fields stop; the field is DCGM's last word on it)."""
    shows = tick.ts >= INCIDENT.start + FAULT.xid_at_s + INCIDENT.step_s
    faulty = (INCIDENT.host(FAULT.node), str(FAULT.gpu))
    return [
        RawSample(
            "DCGM_FI_DEV_XID_ERRORS", labels, tick.ts, FAULT.xid_code if shows and key == faulty else 0.0
        )
        for key, labels in gpus.items()
    ]


def collector_records(ticks: list[Tick]) -> list[tuple[bytes, bytes, int]]:
    """(key, value, timestamp ms) of what the Collector would produce: a request per node per scrape."""
    first = [r for m in ticks[0].metrics for r in formats.decode_metrics_auto(m, ticks[0].ts).rows()]
    gpus = {(node_of(r.labels), r.labels["gpu"]): r.labels for r in first if "gpu" in r.labels}
    out = []
    for tick in ticks:
        rows = [r for m in tick.metrics for r in formats.decode_metrics_auto(m, tick.ts).rows()]
        by_node: dict[str, list[RawSample]] = {}
        for row in [*rows, *xid_field(tick, gpus)]:
            by_node.setdefault(node_of(row.labels), []).append(row)
        for node, node_rows in sorted(by_node.items()):
            req = request(node_rows)
            hist = (
                req.resource_metrics[0].scope_metrics[0].metrics.add(name="prometheus_http_request_duration")
            )
            hist.histogram.data_points.add(time_unix_nano=int(tick.ts * 1e9), count=1, bucket_counts=[1])
            out.append((node.encode(), req.SerializeToString(), int(tick.ts * 1000)))
    return out


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        for key, value, ms in records:
            await producer.send(topic, value, key=key, timestamp_ms=ms)
        await producer.send(topic, NOT_A_REQUEST, key=b"node-00", timestamp_ms=records[-1][2])
        await producer.flush()
    finally:
        await producer.stop()


def samples_of(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


async def test_run_scores_otlp_protobuf_and_pages_an_xid_shown_only_by_the_dcgm_field(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    records = collector_records(list(simulate(INCIDENT)))
    await produce(kafka_bootstrap, topics["metrics"], records)
    settings = settings_for(kafka_bootstrap, topics, kafka_group)
    [port] = free_ports(1)
    replica = await ProcessReplica.start(
        settings, PREXID_METRICS_FORMAT="otlp_proto", PREXID_HTTP_PORT=str(port), PREXID_HTTP_HOST="127.0.0.1"
    )
    try:
        alerts = await read_until(
            kafka_bootstrap,
            topics["alerts"],
            until=lambda rs: {"pre_xid", "xid"} <= {d["kind"] for d in alert_docs(rs)},
            limit_s=90.0,
        )
        dead = await read_until(kafka_bootstrap, topics["dead"], until=lambda rs: len(rs) >= 1)
        exposition = await asyncio.to_thread(
            lambda: httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        )
    except BaseException:
        print(replica.log_tail())
        raise
    finally:
        await replica.terminate()

    firing = [d for d in alert_docs(alerts) if d["status"] == "firing"]
    assert [(d["kind"], d["node"], d["gpu"]) for d in firing] == [
        ("pre_xid", "node-01", 2),
        ("xid", "node-01", 2),
    ]
    xid = firing[1]
    assert xid["xid_code"] == 48 and "DCGM's Xid field" in xid["summary"]
    assert xid["lead_time_seconds"] >= 300  # the pre_xid warned well before the field showed the Xid

    [dl] = dead
    assert dl.value == NOT_A_REQUEST and dict(dl.headers)["prexid.reason"] == b"invalid_protobuf"

    samples = samples_of(exposition.text)
    scored = {(lab["node"], lab["gpu"]) for lab, _ in samples["prexid_gpu_fused_score"]}
    produced = {(INCIDENT.host(n), str(g)) for n in range(INCIDENT.nodes) for g in range(INCIDENT.gpus)}
    assert scored >= produced  # every produced GPU is scored, under its DCGM identity
    uuids = {lab["UUID"] for lab, _ in samples["prexid_gpu_fused_score"]}
    assert all(u.startswith("GPU-") for u in uuids)
    skipped = {lab["reason"]: v for lab, v in samples["prexid_points_skipped_total"]}
    assert skipped == {"histogram": len(records)}  # one histogram point per request, none lost unseen
    decoded = {lab["stream"]: v for lab, v in samples["prexid_messages_decoded_total"]}
    assert decoded["metrics"] == len(records)
