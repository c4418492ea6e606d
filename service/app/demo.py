"""`prexid demo`: the embedded default — a simulated cluster streamed through the real pipeline.

No Kafka needed: the simulator's wire-format messages go through the same `Processor` that
`prexid run` feeds from Kafka, in the same worker thread (`app/batch_gate.py`: the HTTP side stays
answered, and one batch runs at a time, the cluster's or remote_write's). Event time runs `speed`
times faster than the wall clock.
"""

from __future__ import annotations

import asyncio
import functools

from rich.console import Console

from prexid.service.app.service_state import ServiceState
from prexid.service.pipeline.processor import Message, Output, Processor, runs
from prexid.service.sinks.console import print_alerts
from prexid.service.sources.demo_cluster import DemoCluster, simulate


async def stream_demo(
    cluster: DemoCluster, processor: Processor, state: ServiceState, console: Console, speed: float
) -> None:
    """Feed one scrape per `step_s / speed` wall seconds; print alerts as they fire."""
    state.ready = True
    interval = cluster.step_s / speed
    for tick in simulate(cluster):
        metrics = [Message(m, tick.ts, "demo.metrics") for m in tick.metrics]
        logs = [Message(line, tick.ts, "demo.kernel-logs") for line in tick.logs]
        step = functools.partial(processor.process_isolating, runs(metrics), logs, ())  # live: never behind
        print_output(console, await state.gate.process(processor, step))
        await asyncio.sleep(interval)
    console.print(
        f"[dim]simulated {cluster.duration_s / 60:.0f} min of {cluster.nodes}x{cluster.gpus} GPUs[/dim]"
    )


def print_output(console: Console, out: Output) -> None:
    """A batch's alerts and dead letters, as the demo shows them (its own and remote_write's)."""
    print_alerts(console, out.alerts)
    for dl in out.dead_letters:
        console.print(f"[red]dead letter[/red] {dl.reason}: {dl.detail}")
