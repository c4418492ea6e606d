"""A slow sink stalls consumption instead of filling memory: the backlog waits in Kafka, as lag."""

from __future__ import annotations

import asyncio
import resource

import pytest

from prexid.service.pipeline.processor import Output
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.sources.kafka import KafkaRunner
from tests.integration.traffic import Replica, eventually, produce, samples_held, settings_for

pytestmark = [pytest.mark.integration, pytest.mark.topics(partitions=2)]

BUSY = DemoCluster(nodes=6, gpus=8, duration_s=3600.0, fault=DemoFault(node=0, gpu=0, xid_at_s=10**9))
SINK_DELAY_S = 0.5


class SlowSinkRunner(KafkaRunner):
    """Every publish takes half a second, as a struggling downstream would."""

    slow = True

    async def _publish(self, out: Output) -> None:
        if self.slow:
            await asyncio.sleep(SINK_DELAY_S)
        await super()._publish(out)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


async def test_a_slow_sink_holds_memory_bounded_and_loses_nothing_once_it_recovers(
    kafka_bootstrap: str, topics: dict[str, str], kafka_group: str
) -> None:
    ticks = list(simulate(BUSY))
    total = await produce(kafka_bootstrap, topics["metrics"], topics["logs"], ticks)
    backlog_mib = sum(len(m) for t in ticks for m in t.metrics) / 2**20
    settings = settings_for(kafka_bootstrap, topics, kafka_group, batch_max_records=2000)
    replica = Replica(settings, SlowSinkRunner)
    runner = replica.runner
    assert isinstance(runner, SlowSinkRunner)
    try:
        await replica.assigned()
        baseline = rss_mib()
        peak = baseline
        for _ in range(60):  # 6 s of a stalled sink
            await asyncio.sleep(0.1)
            peak = max(peak, rss_mib())
        stalled_at = samples_held(runner)
        runner.slow = False
        await eventually(lambda: samples_held(runner) == total, limit_s=40, what="the backlog drained")
    finally:
        await replica.stop()

    print(
        f"slow sink: backlog {backlog_mib:.0f} MiB, {stalled_at}/{total} read while stalled, "
        f"RSS +{peak - baseline:.0f} MiB"
    )
    # at most one batch per sink call was taken in: the rest stayed in Kafka
    assert stalled_at <= (6.0 / SINK_DELAY_S + 2) * settings.batch_max_records
    assert stalled_at < total / 4
    assert peak - baseline < backlog_mib / 2  # memory did not follow the backlog
