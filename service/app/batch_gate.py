"""Batches in a worker thread, and the event loop kept off the pipelines while one runs.

Every feed processes its batches (decode, detector bank, fusion, ticks: CPU-bound numpy and Python,
seconds for a backlog's batch) in a worker thread (`run`, `process`), so that the event loop goes on
answering HTTP meanwhile: Kubernetes' probes, Prometheus' scrapes, the consumer group's heartbeats,
remote_write requests (queued, or answered 429 once the queue is full). The feeds: `prexid run`'s
Kafka consumer, one shard's part of a fetched batch at a time; `remote_write = "local"`'s intake; and
`prexid demo`'s simulated cluster beside its own remote_write intake. The pipelines, and what their
ticks write (score histories; a fleet judge reads the fleet board), are then touched by one side at a
time:

- the worker thread while the gate is closed: one batch at a time, whichever feed's (a feed's `run`
  waits for another's batch to end; one gate per service state, as readers read all its pipelines);
- the event loop while it is open. Loop code that reads or writes them and may run while a batch is in
  the thread (HTTP handlers, the summary feed filling the fleet board, the quarantine action booking
  a drain) first `await gate.quiet()`, then reads and writes with no `await` in between: the gate can
  only close on the loop, so that code sees no batch half applied;
- what must answer while a batch runs (`/metrics`) serves instead what it read the last time the gate
  was open (`busy`; at most one shard's batch old); counters are prometheus_client's, thread-safe.
  Only the process's first scrape, with nothing read before, waits for the batch (bounded:
  `ReadView.first_read`).

Readers are not starved by a backlog that keeps the gate closed most of the time: a reader that the
end of a batch woke reads before the next batch can start, as its wake-up is queued before that of
the batch's caller (the gate opens in the first of the thread's done callbacks, and the loop runs
callbacks in the order they were queued). Alerts raised in the thread reach their listeners (loop
objects: Alertmanager's outbox, the quarantine queue) on the loop, after the batch, in order
(`process` hands them on).

The alternative, uvicorn in a thread with a loop of its own, was not taken: every handler would read
pipelines the consumer's loop is changing (a lock around each read, and the consumer holding it for a
whole batch would stall the handlers again), the admin and remote-write endpoints drive loop objects
(the checkpoint, the quarantine queue, the remote-write intake), and the consumer's own heartbeats
and sends would still wait for every batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from prexid.service.pipeline.processor import Output, Processor
    from prexid.service.schemas import Alert

T = TypeVar("T")


class BatchGate:
    def __init__(self) -> None:
        self._busy = False
        self._waiting: list[asyncio.Future[None]] = []

    @property
    def busy(self) -> bool:
        """A batch is in the worker thread: pipelines must not be read or written from the loop."""
        return self._busy

    async def quiet(self) -> None:
        """Return once no batch is in the thread; the caller reads or writes before its next `await`."""
        while self._busy:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            await waiter

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` in a worker thread with the gate closed. Cancelled, it still waits for the thread
        (which cannot be stopped): until that returns, the pipeline is the thread's. Another feed's
        batch in the thread is waited for first."""
        await self.quiet()  # then closed before the next `await`: one batch in the thread at a time
        self._busy = True
        done = asyncio.ensure_future(asyncio.to_thread(work))
        done.add_done_callback(self._open)  # whatever happens to the awaiting caller
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.wait({done})
            raise

    async def process(self, processor: Processor, step: Callable[[], Output]) -> Output:
        """`step()`, a batch through `processor`, in the worker thread (`run`); the alerts it raised are
        handed to `processor.listeners` on the loop once it returns, in the order raised, also when
        it raised or the caller was cancelled meanwhile (the thread ran on: what it raised is sent)."""
        raised: list[list[Alert]] = []
        listeners = processor.listeners

        def work() -> Output:
            processor.listeners = [raised.append]
            try:
                return step()
            finally:
                processor.listeners = listeners

        try:
            return await self.run(work)
        finally:
            for alerts in raised:
                for listener in listeners:
                    listener(alerts)

    def _open(self, _: object = None) -> None:
        self._busy = False
        for waiter in self._waiting:
            if not waiter.done():
                waiter.set_result(None)
        self._waiting.clear()
