"""Where `POST /api/v1/write` hands accepted requests: the intake, and the local one that feeds a pipeline.

The HTTP side answers Prometheus as soon as an intake has taken a request, so what an intake promises
decides what a 204 means. `LocalIntake` (`remote_write = "local"`, and `prexid demo`) queues each
request for this process's processor, which scores them in a worker thread (`app/batch_gate.py`, so
probes are answered meanwhile): a bounded queue, so a pipeline that falls behind makes Prometheus wait
and retry (429) instead of making prexid hold its backlog in memory; and drained on shutdown, so a
request answered 204 is processed even when a restart follows. The Kafka intake
(`sinks/kafka_republish.py`) answers once the broker has the samples.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import SecretStr

from prexid.service.app.batch_gate import BatchGate
from prexid.service.decode.types import Samples
from prexid.service.pipeline.processor import Message, Output, Processor, runs

log = logging.getLogger(__name__)
TOPIC = "prometheus.remote_write"  # the source name local requests are consumed under (`TOPIC:0`)
FORMAT = "prometheus_remote_write"


class IntakeFull(Exception):
    """No room for the request now: 429, and Prometheus retries after `retry_after_s`."""

    def __init__(self, retry_after_s: int = 1) -> None:
        super().__init__(f"intake full, retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class IntakeUnavailable(Exception):
    """The intake cannot take requests (stopping, Kafka away): 503, and Prometheus retries."""


class Intake(Protocol):
    def room(self, admitted: int) -> None:
        """Raise `IntakeFull` or `IntakeUnavailable` if `offer` would refuse one more request now, with
        `admitted` requests already let in and not yet offered: checked before a body is decoded, so
        that a request to be refused costs no decoding."""
        ...

    async def offer(self, body: bytes, samples: Samples) -> None:
        """Take one request (`body` as received, `samples` what it decoded to) or raise `IntakeFull` or
        `IntakeUnavailable`; returning means the request is as safe as this intake makes it. The
        request takes its place (what `room` counts) before the first `await`."""
        ...


@dataclass(frozen=True, slots=True)
class RemoteWriteEndpoint:
    """What the HTTP route needs: where requests go, the token they must carry, the body limit."""

    intake: Intake
    token: SecretStr | None = None
    max_body_bytes: int = 8 * 2**20


def record_time(samples: Samples) -> float:
    """A request's record time: its oldest sample, never later than now. Samples are judged late
    against it (and their source's progress), so it must not be the receipt time: a backlog that
    Prometheus retries after an outage is old, not late. Capped at now, so a request dated ahead of
    the clock is still judged against the clock."""
    now = time.time()
    return min(min(samples.ts, default=now), now)


class LocalIntake:
    """Requests queued for one processor, processed in batches by `run` in the worker thread of the
    state's batch gate (the feed of `prexid run` in `local` mode, or a second feed in `prexid demo`):
    meanwhile the loop answers probes and scrapes, and takes requests into the queue until it is full."""

    def __init__(self, max_requests: int, gate: BatchGate, max_batch: int = 16) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue(max_requests)
        self.gate = gate
        self.max_batch = max_batch
        self.closed = False
        self.offset = 0  # each request's offset in the `TOPIC:0` stream, for dead letters and logs

    def room(self, admitted: int) -> None:
        if self.closed:
            raise IntakeUnavailable("prexid is stopping")
        if self.queue.qsize() + admitted >= self.queue.maxsize:
            raise IntakeFull(1)

    async def offer(self, body: bytes, samples: Samples) -> None:
        self.room(0)  # stopping, or no place left: refused before it is queued
        self.queue.put_nowait(Message(body, record_time(samples), TOPIC, 0, self.offset))
        self.offset += 1

    async def run(self, processor: Processor, on_output: Callable[[Output], None] | None = None) -> None:
        """Process queued requests until cancelled; then refuse new ones and process what was queued
        (each was answered 204: Prometheus will not send it again). A batch the cancellation finds in
        the thread runs to its end, and its alerts still reach the listeners (`BatchGate.process`)."""
        try:
            while True:
                batch = [await self.queue.get()]
                while len(batch) < self.max_batch and not self.queue.empty():
                    batch.append(self.queue.get_nowait())
                await self._process(processor, batch, on_output)
        finally:
            self.closed = True
            left = [self.queue.get_nowait() for _ in range(self.queue.qsize())]
            if left:
                await self._process(processor, left, on_output)
                log.info("processed %d remote_write requests queued at shutdown", len(left))

    async def _process(
        self, processor: Processor, batch: list[Message], on_output: Callable[[Output], None] | None
    ) -> None:
        out = await self.gate.process(processor, functools.partial(_score, processor, batch, time.time()))
        if on_output is not None:
            on_output(out)


def _score(processor: Processor, batch: list[Message], now: float) -> Output:
    """In the worker thread: one batch of requests through `processor`, its dead letters and alerts
    logged (no dead-letter topic without Kafka: the log has them)."""
    with processor.telemetry.batch_seconds.time():
        out = processor.process_isolating(runs(batch), [], backlogged=(), now=now)
    for dl in out.dead_letters:
        m = dl.message
        log.warning(
            "remote_write request %s@%d dead-lettered: %s %s", m.topic, m.offset, dl.reason, dl.detail
        )
    for a in out.alerts:
        log.info("alert %s %s %s/%s %s", a.status, a.kind, a.node, a.gpu, a.summary)
    return out
