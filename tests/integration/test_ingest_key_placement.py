"""Keys placed by two producers that hash differently are caught on the real broker.

kcat is librdkafka, whose default partitioner is CRC32 (`consistent_random`), while the Java client
and aiokafka use murmur2. Metrics keyed by node through one and kernel lines through the other put
most nodes on different partition indexes, so their Xids never meet their metrics. prexid counts
such keys per topic (`prexid_key_placement_mismatches_total`); with librdkafka told
`partitioner=murmur2_random`, as deploy/shippers/ do, there are none.
"""

from __future__ import annotations

import asyncio

import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.test_ingest_kcat import kcat

pytestmark = pytest.mark.integration

NODES = [f"node-{n:02d}" for n in range(24)]
METRIC = (
    '{"timestamp":"2026-12-02T10:00:00Z","value":"40","name":"DCGM_FI_DEV_GPU_TEMP",'
    '"labels":{"gpu":"0","Hostname":"%s"}}'
)
LINE = "Dec  2 10:00:05 %s kernel: [ 5123.1] usb 1-1: new high-speed USB device"


def keyed(template: str) -> bytes:
    return "".join(f"{n}\t{template % n}\n" for n in NODES).encode()


async def consume_all(bootstrap: str, topics: dict[str, str], group: str) -> tuple[float, float, str]:
    """Run prexid over what was produced: (metric-topic mismatches, log-topic mismatches, log partitioner)."""
    settings = Settings(
        kafka_bootstrap=bootstrap,
        group_id=group,
        metrics_topics=[topics["metrics"]],
        logs_topics=[topics["logs"]],
        alerts_topic=topics["alerts"],
        dead_letter_topic=topics["dead"],
        metrics_format="auto",
        logs_format="auto",
    )
    state, _ = build(settings)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    task = asyncio.create_task(runner.run())
    registry = state.telemetry.registry

    def consumed() -> float:
        return sum(
            registry.get_sample_value("prexid_messages_total", {"stream": s}) or 0
            for s in ("metrics", "logs")
        )

    try:
        for _ in range(600):
            if consumed() >= 2 * len(NODES) or task.done():
                break
            await asyncio.sleep(0.1)
        assert consumed() == 2 * len(NODES), "prexid did not consume every record"
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)
    mismatches = [
        registry.get_sample_value("prexid_key_placement_mismatches_total", {"topic": topics[t]}) or 0.0
        for t in ("metrics", "logs")
    ]
    return mismatches[0], mismatches[1], runner.placement.partitioner(topics["logs"])


@pytest.mark.topics(partitions=8)
async def test_logs_hashed_by_librdkafkas_default_are_reported_against_murmur2_metrics(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    await asyncio.to_thread(
        kcat,
        kafka_bootstrap,
        topics["metrics"],
        keyed(METRIC),
        "-K",
        "\t",
        "-X",
        "topic.partitioner=murmur2_random",
    )
    await asyncio.to_thread(kcat, kafka_bootstrap, topics["logs"], keyed(LINE), "-K", "\t")  # CRC32
    on_metrics, on_logs, partitioner = await consume_all(kafka_bootstrap, topics, kafka_group)
    assert on_metrics + on_logs >= len(NODES) // 2  # 7 in 8 keys land elsewhere; not all, by chance
    assert partitioner == "crc32"


@pytest.mark.topics(partitions=8)
async def test_every_shipper_on_murmur2_places_each_node_on_one_partition_index(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    for topic, template in (("metrics", METRIC), ("logs", LINE)):
        await asyncio.to_thread(
            kcat,
            kafka_bootstrap,
            topics[topic],
            keyed(template),
            "-K",
            "\t",
            "-X",
            "topic.partitioner=murmur2_random",
        )
    on_metrics, on_logs, partitioner = await consume_all(kafka_bootstrap, topics, kafka_group)
    assert (on_metrics, on_logs) == (0.0, 0.0)
    assert partitioner == "murmur2"
