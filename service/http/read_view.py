"""What `/metrics` and `/api/v1/scores` serve of the fused scores: a view rendered off the event loop.

The HTTP server shares the event loop with the consumer's fetching and publishing. Rendering every
entity's score for each request (18k entities: `/metrics` 175 ms, `/api/v1/scores` 98 ms) stalled
consumption for as long, once per scrape, so a scrape loop could hold a replica back. Instead:

- the view is rendered again only when a pipeline has changed since (a fusion tick, new entities, a
  shard taken over or handed off), and at most once per `min_interval_s` (default 1 s; requests in
  between get the view rendered last, at most that much older than the newest tick);
- the loop only copies what a render reads (the score arrays and the entity lists: well under a
  millisecond at 18k entities), while no batch is changing the pipelines in the worker thread (while
  one is, the view rendered last is served: `batch_gate.py`), so the copy is consistent; the
  rendering runs in a worker thread of its own while the consumer goes on;
- concurrent requests wait for the one render in progress instead of starting their own, and a
  request that goes away mid-render leaves it to finish;
- only the process's first read waits for a batch (`first_read`, at most `first_wait_s`, 1 s): before
  it there is no last view to serve, and an empty one reads as every series gone (the first look at
  `prexid demo` while it replays). A batch longer than that (a replica started into a backlog) gets
  the empty view, as a scrape must not wait seconds.

`renders` counts the renders, the expensive recomputations.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np
import orjson
from numpy.typing import NDArray

from prexid.detectors.fusion import score01
from prexid.service.app.service_state import ServiceState
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.series_registry import Entity
from prexid.service.schemas import rfc3339
from prexid.service.sinks.prometheus import EntityScoreText

FIRING_SCORE = 0.5  # score01 maps the fire threshold to exactly 0.5


@dataclass(frozen=True, slots=True)
class ScoresCopy:
    """What a render reads of one pipeline, copied on the event loop."""

    cluster: str
    fire: float
    last_tick: float
    entities: list[Entity]
    fused: NDArray[np.float64]
    dcgm_of: dict[int, tuple[str, str, str]]  # GPU entity -> (Hostname, UUID, pci_bus_id)

    @classmethod
    def of(cls, p: Pipeline) -> ScoresCopy:
        return cls(
            p.config.cluster,
            p.config.lifecycle.fire,
            p.fusion.last_tick,
            list(p.registry.entities),
            np.array(p.fused_scores, dtype=np.float64),  # a copy: the next tick may reuse the array
            dict(p.registry.dcgm_of),
        )


@dataclass(frozen=True, slots=True)
class View:
    metrics: bytes  # the per-entity score families, exposition text
    scores: bytes  # the `/api/v1/scores` body (JSON of `dashboard.Scores`)


def version(p: Pipeline) -> Hashable:
    """Changes whenever what a render reads of `p` may have: each tick sets `last_tick` and the scores,
    new entities only extend the list, a restore replaces the arrays (the weak reference tells a new
    pipeline from a dead one at the same address)."""
    return (weakref.ref(p), p.fusion.last_tick, len(p.registry.entities), id(p.fused_scores))


class ReadView:
    def __init__(
        self,
        state: ServiceState,
        min_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        first_wait_s: float = 1.0,
    ) -> None:
        self.state = state
        self.min_interval_s = min_interval_s
        self.first_wait_s = first_wait_s
        self.clock = clock
        self.renders = 0
        self._view: View | None = None
        self._key: Hashable = None
        self._rendered_at = -np.inf
        self._rendering: asyncio.Task[View] | None = None
        self._text = EntityScoreText()  # one render at a time uses it

    def _current_key(self) -> Hashable:
        return (self.state.pipeline.config.cluster, tuple(version(p) for p in self.state.pipelines()))

    def _fresh(self) -> View | None:
        """The view rendered last, if it may still be served: also whenever a batch is changing the
        pipelines in the worker thread (`batch_gate.py`), so only the first scrape waits (`first_read`)."""
        if self._view is None:
            return None
        if self.state.gate.busy:
            return self._view
        if self._key == self._current_key() or self.clock() - self._rendered_at < self.min_interval_s:
            return self._view
        return None

    async def first_read(self) -> None:
        """Before the first view, wait for a batch in the thread to end, `first_wait_s` at most; the
        caller reads before its next `await` (`BatchGate.quiet`). After it, return at once."""
        if self._view is None and self.state.gate.busy:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.first_wait_s):
                    await self.state.gate.quiet()

    async def current(self) -> View:
        if (view := self._fresh()) is not None:
            return view
        if self._rendering is None or self._rendering.done():
            self._rendering = asyncio.create_task(self._render_now())
        # shielded: a request that goes away leaves the render to finish for the next, never two at once
        return await asyncio.shield(self._rendering)

    async def _render_now(self) -> View:
        """A view of the pipelines as they are now; while a batch is changing them, the last view, or
        before any, once `first_read` gave up (a batch longer than `first_wait_s`), one of no
        entities, rendered again once the gate is open."""
        cluster = self.state.pipeline.config.cluster
        await self.first_read()
        if self.state.gate.busy:
            if self._view is None:
                self._view, self._key = await asyncio.to_thread(self._render, cluster, []), None
            return self._view
        key, copies = self._current_key(), [ScoresCopy.of(p) for p in self.state.pipelines()]
        self._rendered_at = self.clock()
        view = await asyncio.to_thread(self._render, cluster, copies)
        self._view, self._key = view, key
        self.renders += 1
        return view

    def _render(self, cluster: str, copies: list[ScoresCopy]) -> View:
        scores = [score01(c.fused, c.fire).tolist() for c in copies]
        metrics = self._text.render(
            (c.cluster, c.entities, s, c.dcgm_of) for c, s in zip(copies, scores, strict=True)
        )
        return View(metrics, scores_json(cluster, copies, scores))


def scores_json(cluster: str, copies: list[ScoresCopy], scores: list[list[float]]) -> bytes:
    """`dashboard.Scores` as JSON: every entity of every pipeline by node, GPUs in index order; a score
    not yet computed (an entity newer than the last tick) is null.

    Written as text, not built as dicts to dump: 18k dicts per render set off the garbage collector,
    whose full passes over the process (~70 ms) stall the event loop whichever thread allocates."""
    own: dict[str, str] = {}
    gpus: dict[str, dict[int, str]] = {}
    for c, values in zip(copies, scores, strict=True):
        n = len(values)
        for eid, ent in enumerate(c.entities):
            v = values[eid] if eid < n else np.nan
            score = repr(round(v, 4)) if np.isfinite(v) else "null"
            if ent.gpu is None:
                own[ent.node] = score
            else:
                gpus.setdefault(ent.node, {})[ent.gpu] = score
    last_tick = max((c.last_tick for c in copies), default=-np.inf)
    tick = f'"{rfc3339(last_tick)}"' if np.isfinite(last_tick) else "null"
    nodes = [
        f'{{"node":{_json_str(node)},"score":{own.get(node, "null")},"gpus":['
        + ",".join(f'{{"gpu":{g},"score":{score}}}' for g, score in sorted(gpus.get(node, {}).items()))
        + "]}"
        for node in sorted(own.keys() | gpus.keys())
    ]
    head = f'{{"cluster":{_json_str(cluster)},"tick":{tick},"threshold":{FIRING_SCORE!r},"nodes":['
    return (head + ",".join(nodes) + "]}").encode()


def _json_str(text: str) -> str:
    return orjson.dumps(text).decode()
