"""`remote_write = "kafka"` on the real broker: POSTed samples land keyed by node, where the consumers
of the same `prexid run` place that node, and are read back through the usual metrics path."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
from aiokafka.partitioner import murmur2

from prexid.service.app.wiring import build, remote_write_republisher
from prexid.service.decode import prom_kafka_adapter
from prexid.service.http.server import serve
from prexid.service.pipeline.series_registry import node_of
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.kafka_broker import free_ports
from tests.integration.traffic import eventually, read_until, settings_for
from tests.unit.test_decode_remote_write import body, series
from tests.unit.test_remote_write_receiver import HEADERS

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=4)]
NODES = [f"node-{n:02d}" for n in range(6)]


def request(t_ms: int) -> bytes:
    """Two GPUs' temperature per node (dcgm-exporter's Hostname) and each node's load (instance)."""
    gpus = [
        series({"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": n, "gpu": str(g)}, (60.0 + g, t_ms))
        for n in NODES
        for g in range(2)
    ]
    load = [series({"__name__": "node_load1", "instance": f"{n}:9100"}, (2.5, t_ms)) for n in NODES]
    return body(*gpus, *load)


async def test_posted_samples_are_republished_by_node_and_consumed_back(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    [port] = free_ports(1)
    settings = settings_for(kafka_bootstrap, topics, kafka_group, remote_write="kafka", http_port=port)
    state, _ = build(settings)
    remote_write_republisher(settings, state)
    runner = KafkaRunner(settings, state, lambda: build(settings, state)[1])
    server = asyncio.create_task(serve(state, runner.run(), "127.0.0.1", port, duration=None))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            t_ms = int(time.time() * 1000) - 10_000  # a little old: records are dated by sample
            codes: list[int] = []
            async with asyncio.timeout(30):
                while not codes or codes[-1] != 204:  # 503 (or no server) until the producer is up
                    with contextlib.suppress(httpx.TransportError):
                        response = await http.post("/api/v1/write", content=request(t_ms), headers=HEADERS)
                        codes.append(response.status_code)
                    await asyncio.sleep(0.2)
            assert set(codes) <= {204, 503}
            for k in range(1, 3):
                response = await http.post("/api/v1/write", content=request(t_ms + 1000 * k), headers=HEADERS)
                assert response.status_code == 204
        per_request = len(NODES) * 3
        records = await read_until(kafka_bootstrap, topics["metrics"], lambda rs: len(rs) >= 3 * per_request)
        assert len(records) == 3 * per_request  # each sample once: a 503'd request wrote nothing
        for r in records:
            [sample] = prom_kafka_adapter.decode(r.value, 0.0).rows()
            assert r.key == node_of(sample.labels).encode()
            assert r.timestamp == round(sample.ts * 1000)  # dated by its sample: a backlog is not late
            assert r.partition == (murmur2(r.key) & 0x7FFFFFFF) % 4  # as the consumers place the node
        assert {r.key.decode() for r in records} == set(NODES)

        def consumed() -> bool:
            value = state.telemetry.registry.get_sample_value("prexid_samples_total") or 0.0
            return value >= 3 * per_request

        await eventually(consumed, 45.0, "the republished samples consumed by the same prexid run")
        nodes = {e.node for p in state.pipelines() for e in p.registry.entities}
        assert nodes >= set(NODES)
        assert (
            state.telemetry.registry.get_sample_value("prexid_remote_write_samples_total") == 3 * per_request
        )
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
