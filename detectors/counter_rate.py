"""Throughput counters judged by their rate: bytes, CPU seconds and queue-time totals.

A monotonic counter's level means nothing; its per-second rate is a gauge, judged by the robust
detector. The first sample only primes the state. A drop is a restart (reboot, exporter or driver
reload): what follows is a restart transient (boot I/O, caches refilling), so the series is neither
scored nor learnt from for `restart_quiet_s` after it.

A reading equal to the last one, on a counter that moved at its last reading, is a repeated scrape
(an exporter serving its cache: dcgm-exporter collects every 30 s and is scraped every 15 s; a
node-exporter answering late): it is skipped, and the next reading's rate spans both intervals. A
second repeat in a row is a counter that stopped (a stalled mount), scored as a zero rate; the rate of
the reading that moves again spans every interval since the last one that moved. An exporter serving
a stale value for three scrapes, then the fresh one, is a counter that went on counting all along: its
rate over the last 15 s alone read as three times the usual (wide tuning cell seed 21 paged a GPU for
its energy counter's "power" so), while a mount that truly stalled resumes at a rate diluted by its
stall, which its zero rates have reported already.
"""

from __future__ import annotations

import numpy as np

from prexid.detectors.base import ArrayState, ByRounds, Floats, Ids, SeriesState
from prexid.detectors.robust import RobustDeviation


class CounterRate(ByRounds, ArrayState):
    """Per-second rate of each counter, scored by a RobustDeviation over the rates."""

    name = "counter_rate"
    nested = ("rates",)

    def __init__(self, rates: RobustDeviation | None = None, restart_quiet_s: float = 300.0) -> None:
        self.rates = rates or RobustDeviation()
        self.restart_quiet_s = restart_quiet_s
        self.state = SeriesState(
            {"last": np.nan, "last_ts": -np.inf, "quiet_until": -np.inf, "repeated": 0.0}
        )

    def rate_of(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        """The rate these samples would give (NaN for a series' first sample); reads, never writes."""
        out = np.full(len(ids), np.nan)
        known = ids < self.state.capacity
        if known.any():
            k = ids[known]
            last, last_ts = self.state["last"][k], self.state["last_ts"][k]
            with np.errstate(invalid="ignore", divide="ignore"):
                delta = np.where(x[known] >= last, x[known] - last, x[known])
                out[known] = delta / (ts[known] - last_ts)
        return out

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st = self.state
        last, last_ts, quiet = st["last"][ids], st["last_ts"][ids], st["quiet_until"][ids]
        repeated = st["repeated"][ids]
        ok = np.isfinite(x) & (ts > last_ts)
        same = ok & (x == last)
        repeat = same & (repeated == 0.0)  # the first repeat: a cached scrape, not a stall
        st["repeated"][ids] = np.where(ok, same, repeated)
        ok &= ~repeat
        with np.errstate(invalid="ignore", divide="ignore"):
            reset = ok & (x < last)
            rate = (x - last) / (ts - last_ts)
        quiet = np.where(reset, ts + self.restart_quiet_s, quiet)
        seen = ok & np.isfinite(last) & (ts > quiet)
        st["last"][ids] = np.where(ok, x, last)
        st["last_ts"][ids] = np.where(ok & ~same, ts, last_ts)  # a reading that moved: see the module
        st["quiet_until"][ids] = quiet
        p = np.ones(len(ids))
        if seen.any():
            p[seen] = self.rates.update(ids[seen], ts[seen], rate[seen])
        return p

    def baseline(self, ids: Ids) -> Floats:
        return self.rates.baseline(ids)
