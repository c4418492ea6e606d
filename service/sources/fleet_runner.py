"""`prexid run` with the fleet vote: the Kafka runner, its shards judged with every partition's counts.

Beside the consumer loop of `kafka.KafkaRunner`, a replica runs two more clients: the summary feed,
reading every partition's summaries into this replica's `FleetBoard`, and the aggregator role's
consumer, one group member of `<group_id>.aggregator` (the elected one raises the cluster alerts).
Each shard's pipeline gets a `FleetJudge` when it is restored, and its summaries are published with
the batch's alerts and dead letters, all acknowledged before the shard's offsets move on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiokafka import TopicPartition

from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import Settings
from prexid.service.pipeline.aggregator import Aggregator
from prexid.service.pipeline.fleet_judge import FleetBoard, FleetJudge
from prexid.service.pipeline.processor import Output, Processor
from prexid.service.sources import summaries
from prexid.service.sources.aggregator_role import AggregatorRole
from prexid.service.sources.kafka import KafkaRunner

log = logging.getLogger(__name__)
RETRY_S = 1.0


def runner_class(settings: Settings) -> type[KafkaRunner]:
    """The runner `prexid run` uses: the fleet vote's unless `fleet_vote` is off."""
    return FleetRunner if settings.fleet_vote else KafkaRunner


class FleetRunner(KafkaRunner):
    role: AggregatorRole | None = None

    def __init__(
        self, settings: Settings, state: ServiceState, new_processor: Callable[[], Processor]
    ) -> None:
        super().__init__(settings, state, new_processor)
        self.board = FleetBoard()
        state.fleet_board = self.board  # the fleet view reads it

    def _make_clients(self) -> None:
        super()._make_clients()
        s = self.settings
        config = s.detection.pipeline_config(s.cluster, s.runbook_base_url)
        self.role = AggregatorRole(
            s,
            lambda: Aggregator(config, s.fleet_lateness_s),
            self.sink,
            self.state.telemetry,
            self.state.alert_listeners,
            self.state.alert_forgetters,
        )

    async def _loop(self) -> None:
        await summaries.ensure_topics(self.settings)
        assert self.role is not None
        feed = summaries.SummaryFeed(self.settings, self.board, self.state.telemetry, self.state.gate)
        tasks = [
            asyncio.create_task(_kept_running("summary feed", feed.run)),
            asyncio.create_task(_kept_running("aggregator role", self.role.run)),
        ]
        try:
            await super()._loop()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _restore(self, index: int, tps: list[TopicPartition]) -> None:
        await super()._restore(index, tps)
        s = self.settings
        FleetJudge(
            self.shards[index].processor.pipeline,
            index,
            self.board,
            s.fleet_lateness_s,
            s.summary_every_ticks,
        )

    async def _publish(self, out: Output) -> None:
        """The batch's alerts and dead letters, and its shards' summaries, all acknowledged together."""
        records = []
        missing = 0
        t = self.state.telemetry
        for shard in self.shards.values():
            judge = shard.processor.pipeline.judge
            if isinstance(judge, FleetJudge):
                records += judge.take_outbox()
                t.fleet_degraded_ticks.inc(judge.degraded_ticks)
                judge.degraded_ticks = 0
                missing = max(missing, len(judge.missing))
        t.fleet_partitions_missing.set(missing)
        futures = await summaries.publish(self.sink.producer, self.settings.summaries(), records, t)
        await super()._publish(out)
        await asyncio.gather(*futures)


async def _kept_running(what: str, run: Callable[[], Awaitable[None]]) -> None:
    """A background client restarted after a failure (a broker away), until cancelled."""
    while True:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; restarting in %.0f s", what, RETRY_S)
        await asyncio.sleep(RETRY_S)
