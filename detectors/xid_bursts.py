"""Group a node's Xid events into incidents: one fault prints a burst (94 then 45, 119 then 120 then 154),
and it should page once. An incident stays open until `silence_s` of event time passes without an
event on that node (NVIDIA's fleet tooling uses three minutes).

Pure and event-time driven: the caller passes each event's own time, never the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

DEFAULT_SILENCE_S = 180.0


@dataclass(frozen=True, slots=True)
class Burst:
    """One incident: `opened_ts` (the first event's time) identifies it and never changes."""

    node: str
    opened_ts: float
    first_ts: float  # earliest event time seen (a late event may precede the opener)
    last_ts: float
    codes: tuple[int, ...]  # in order of first appearance
    events: int


@dataclass
class XidBursts:
    silence_s: float = DEFAULT_SILENCE_S
    open: dict[str, Burst] = field(default_factory=dict)

    def observe(self, node: str, ts: float, code: int) -> tuple[Burst, bool]:
        """The burst this event belongs to after adding it, and whether the event opened it."""
        burst = self.open.get(node)
        if burst is None or not self._inside(burst, ts):
            burst = Burst(node, ts, ts, ts, (code,), 1)
            self.open[node] = burst
            return burst, True
        burst = replace(
            burst,
            first_ts=min(burst.first_ts, ts),
            last_ts=max(burst.last_ts, ts),
            codes=burst.codes if code in burst.codes else (*burst.codes, code),
            events=burst.events + 1,
        )
        self.open[node] = burst
        return burst, False

    def close_quiet(self, now: float) -> list[Burst]:
        """Forget bursts silent for longer than `silence_s` at event time `now`; returns them."""
        done = [b for b in self.open.values() if now - b.last_ts > self.silence_s]
        for b in done:
            del self.open[b.node]
        return done

    def _inside(self, burst: Burst, ts: float) -> bool:
        return burst.first_ts - self.silence_s <= ts <= burst.last_ts + self.silence_s
