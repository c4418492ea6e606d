"""Lines produced into the real broker by `kcat` (Debian package) are decoded by the running service.

Each format travels as a real producer sends it: NDJSON one record per line, a whole Prometheus scrape
as one message keyed by its host, a dmesg line whose host is a Kafka header. Bad messages come back on
the dead-letter topic with their reason and origin, and decoded + dead-lettered = produced.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from typing import Any

import orjson
import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.traffic import read_until

pytestmark = pytest.mark.integration

DCGM = (
    b'{"timestamp":"2026-12-02T09:59:00Z","value":"%d","name":"DCGM_FI_DEV_GPU_TEMP",'
    b'"labels":{"gpu":"5","UUID":"GPU-5","Hostname":"node-3","pci_bus_id":"00000000:3B:00.0"}}'
)
SCRAPE = b'# TYPE node_load1 gauge\nnode_load1 0.5\nnode_network_up{device="eth0"} 1\n'
BAD_METRIC = b"{this is not json"
LOGS = [
    b"Dec  2 10:00:05 node-3 kernel: [ 5123.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, "
    b"GPU has fallen off the bus.",
    b"<3>1 2026-12-02T10:00:06.000001+00:00 node-3 kernel - - - NVRM: Xid (PCI:0000:3b:00): 45, pid=1, "
    b"name=python3, Ch 00000010",
    b'{"_HOSTNAME":"node-5","_TRANSPORT":"kernel","__REALTIME_TIMESTAMP":"1796205610000000",'
    b'"MESSAGE":"NVRM: Xid (PCI:0000:cc:00): 119, pid=2020, name=python3, Timeout after 6s"}',
    b"Dec  2 10:00:11 node-9 kernel: nvidia-nvswitch1: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 12 LTSSM Fault Up",
]
DMESG = b"[ 51234.118202] NVRM: Xid (PCI:0000:19:00): 48, pid=7, name=x, An uncorrectable double bit error"
BAD_LOG = b"!! not a log line"


def kcat(bootstrap: str, topic: str, data: bytes, *extra: str) -> None:
    binary = shutil.which("kcat")
    if binary is None:
        pytest.fail("kcat is not installed (Debian package, see .ci/apt-packages.txt)")
    done = subprocess.run(
        [binary, "-b", bootstrap, "-t", topic, "-P", *extra],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()


def produce_with_kcat(bootstrap: str, topics: dict[str, str]) -> int:
    """Every producer shape; returns how many messages were produced."""
    ndjson = b"\n".join([DCGM % 40, DCGM % 41, BAD_METRIC]) + b"\n"
    kcat(bootstrap, topics["metrics"], ndjson)  # one message per line
    kcat(bootstrap, topics["metrics"], SCRAPE, "-k", "node-7", "-D", "\x1e")  # whole scrape, host as key
    kcat(bootstrap, topics["logs"], b"\n".join([*LOGS, BAD_LOG]) + b"\n")
    kcat(bootstrap, topics["logs"], DMESG + b"\n", "-H", "host=node-4")  # dmesg names no host: a header does
    return 3 + 1 + len(LOGS) + 1 + 1


async def test_kcat_produced_lines_are_decoded_by_the_running_service(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    produced = await asyncio.to_thread(produce_with_kcat, kafka_bootstrap, topics)
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        group_id=kafka_group,
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
    try:
        alerts = await read_until(
            kafka_bootstrap,
            topics["alerts"],
            until=lambda rs: _xid_nodes(rs) >= {"node-3", "node-4", "node-5"},
        )
        dead = await read_until(kafka_bootstrap, topics["dead"], until=lambda rs: len(rs) >= 2)
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)

    xids = [orjson.loads(r.value) for r in alerts if b'"kind":"xid"' in r.value]
    node3 = [a for a in xids if a["node"] == "node-3"]
    assert {a["fingerprint"] for a in node3} == {node3[0]["fingerprint"]}  # one burst, one alert
    assert (node3[-1]["gpu"], node3[-1]["xid_codes"], node3[-1]["pci_bus_id"]) == (5, [79, 45], "0000:3b:00")
    node4 = next(a for a in xids if a["node"] == "node-4")
    assert (node4["gpu"], node4["xid_code"], node4["pci_bus_id"]) == (None, 48, "0000:19:00")

    reasons = {bytes(dict(r.headers)["prexid.reason"]): r.value for r in dead}
    assert reasons == {b"invalid_json": BAD_METRIC, b"unknown_format": BAD_LOG}
    assert {dict(r.headers)["prexid.source.topic"] for r in dead} == {
        topics["metrics"].encode(),
        topics["logs"].encode(),
    }

    t = state.telemetry.registry
    decoded = sum(
        t.get_sample_value("prexid_messages_decoded_total", {"stream": s}) or 0.0 for s in ("metrics", "logs")
    )
    assert decoded + len(dead) == produced
    assert t.get_sample_value("prexid_kernel_events_total", {"kind": "sxid"}) == 1.0
    shards = state.shards.values()  # `prexid run` keeps one pipeline per partition
    assert {e.node for p in shards for e in p.registry.entities} >= {"node-3", "node-7"}


def _xid_nodes(records: list[Any]) -> set[str]:
    return {orjson.loads(r.value)["node"] for r in records if b'"kind":"xid"' in r.value}
