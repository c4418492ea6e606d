"""Pace surprise: events counted by a counter (fail-slow's scrapes spent behind the peers) arriving
faster than the series' own long-run pace.

Unlike hardware error counters (`error_counter`: episodes judged against the fleet), a count of
scrapes behind is a state that lasts, so it is judged by its pace. The baseline is compound Poisson:
bursts (scrapes that saw events) arrive at a gamma-Poisson rate (a weak prior of `prior_per_day` a day,
forgotten exponentially in event time) and their sizes are geometric with a learned mean (prior: one
event a burst, which makes a clean series' baseline plain Poisson).

Evidence is judged on scrapes that saw new events, over a short decaying window (`window_s` half-life)
and against the baseline learned before that window: the tail probability of the window's events
(compound) and of its bursts (plain Poisson), the smaller of the two, doubled for having looked twice.
Bursts close together add up, so a run of them gathers strength where each alone would not, and does
not teach its own baseline while it is judged. A run of bursts (until the window's count fades below
`RUN_OVER`) under `young_s` old is judged against the history from before it, its own events held out as
the window lets them go, while most of its bursts are of the kind the caller holds out (`update`'s
`held`; fail-slow: scrapes deep behind doing less work, stalls rather than throttling); an older run is a
habit, learned. A drop means the counter restarted from zero.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import bdtr, gammaln, pdtrc

from prexid.detectors.base import ArrayDetector, ByRounds, Floats, Ids, SeriesState, by_rounds

P_FLOOR = 1e-12
_DAY = 86400.0
RUN_OVER = 0.25  # the window's bursts below this (an hour quiet at a 30-min window): the run is over
_MAX_BURSTS = 48  # bursts summed exactly in the compound tail; the rest bounded by the Poisson tail


def compound_tail(k: Floats, mu: Floats, q: Floats) -> Floats:
    """P(total >= k) for Poisson(mu) bursts of geometric size (>= 1, success probability q).

    n bursts reach k errors unless fewer than n of the first k-1 size trials end a burst:
    P(S_n >= k) = P(Binomial(k-1, q) <= n-1). With q = 1 (every burst one error) this is the
    Poisson tail itself.
    """
    n = np.arange(1, _MAX_BURSTS + 1, dtype=np.float64)[None, :]
    k, mu, q = k[:, None], mu[:, None], q[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = n * np.log(mu) - mu - gammaln(n + 1.0)
        reach = np.where(n >= k, 1.0, bdtr(n - 1.0, (k - 1.0).astype(np.int64), q))
    tail = (np.exp(log_pmf) * np.nan_to_num(reach)).sum(axis=1) + pdtrc(_MAX_BURSTS, mu[:, 0])
    return np.asarray(np.clip(tail, 0.0, 1.0), dtype=np.float64)


class PaceSurprise(ByRounds, ArrayDetector):
    """Tail probability of each series' recent events under its own compound-Poisson baseline."""

    name = "pace"
    baseline_of = "last"

    def __init__(
        self,
        prior_per_day: float = 0.5,
        prior_days: float = 1 / 24,
        forget_half_life_s: float = 7 * _DAY,
        window_s: float = 300.0,
        young_s: float = 7200.0,
    ) -> None:
        self.young_s = young_s
        self.prior_bursts = prior_per_day * prior_days
        self.prior_seconds = prior_days * _DAY
        self.forget_half_life_s = forget_half_life_s
        self.window_s = window_s
        self.state = SeriesState(
            {
                "last": np.nan,
                "last_ts": -np.inf,
                "errors": 0.0,  # long-run errors, forgotten with `forget_half_life_s`
                "bursts": 0.0,  # ... scrapes that saw any
                "exposure": 0.0,  # ... seconds watched
                "recent": 0.0,  # errors of the last minutes (`window_s` half-life)
                "recent_bursts": 0.0,  # ... scrapes that saw them
                "recent_seconds": 0.0,  # ... and seconds watched
                # the run: events until the window's bursts fade below `RUN_OVER`, forgotten as the
                # long-run ones, and when its first came (NaN: no run)
                "run_bursts": 0.0,
                "run_errors": 0.0,
                "run_start": np.nan,
                "run_held": 0.0,  # ... its bursts of the caller's kind to hold out (`update`'s `held`)
            }
        )

    def update(self, ids: Ids, ts: Floats, values: Floats, held: NDArray[np.bool_] | None = None) -> Floats:
        """p of each sample; `held` marks the samples whose new events a young run holds out of the pace
        they are judged by (None: every sample's)."""
        if len(ids) == 0:
            return np.ones(0, dtype=np.float64)
        self.grow(int(ids.max()))
        every = np.ones(len(ids), dtype=bool) if held is None else held
        return by_rounds(self._round, ids, ts, values, every)

    def _round(self, ids: Ids, ts: Floats, x: Floats, held: NDArray[np.bool_]) -> Floats:
        st = self.state
        last, last_ts = st["last"][ids], st["last_ts"][ids]
        errors, bursts, exposure = st["errors"][ids], st["bursts"][ids], st["exposure"][ids]
        ok = np.isfinite(x) & (ts > last_ts)
        seen = ok & np.isfinite(last)
        with np.errstate(invalid="ignore"):
            delta = np.where(x >= last, x - last, x)  # a drop is a reset: counted from zero
        delta = np.where(seen, np.maximum(delta, 0.0), 0.0)
        dt = np.where(seen, ts - last_ts, 0.0)
        fade = np.exp2(-dt / self.window_s)
        was_recent, was_bursts, was_seconds = (
            st["recent"][ids],
            st["recent_bursts"][ids],
            st["recent_seconds"][ids],
        )
        recent, recent_bursts, window = was_recent * fade, was_bursts * fade, was_seconds * fade + dt

        # a run is over once the window's bursts have faded out; its events stay in the history
        over = recent_bursts < RUN_OVER
        run_bursts = np.where(over, 0.0, st["run_bursts"][ids])
        run_errors = np.where(over, 0.0, st["run_errors"][ids])
        run_start = np.where(over, np.nan, st["run_start"][ids])
        run_held = np.where(over, 0.0, st["run_held"][ids])
        p = np.ones(len(ids), dtype=np.float64)
        new = np.flatnonzero(delta > 0)
        if len(new):  # the window against the history before it
            # a young run is judged against the history from before it: its own events, as the window's
            # weight on them fades, must not become the pace they are judged by (a GPU stalling every
            # minute or two taught itself a pace 14x its own within four stalls, wide-s81's Xid 119);
            # an older one is a habit, learned as the window lets it go
            with np.errstate(invalid="ignore"):
                young = ts[new] - run_start[new] < self.young_s
            # ... while most of its bursts so far, this one too, are of the kind held out
            young &= 2.0 * (run_held[new] + held[new]) >= run_bursts[new] + 1.0
            held_bursts = np.where(young, np.maximum(run_bursts[new], recent_bursts[new]), recent_bursts[new])
            held_errors = np.where(young, np.maximum(run_errors[new], recent[new]), recent[new])
            past_bursts = np.maximum(bursts[new] - held_bursts, 0.0)
            past_errors = np.maximum(errors[new] - held_errors, 0.0)
            past_seconds = np.maximum(exposure[new] + dt[new] - window[new], 0.0)
            rate = (self.prior_bursts + past_bursts) / (self.prior_seconds + past_seconds)
            mean_size = (1.0 + past_errors) / (1.0 + past_bursts)
            mu = rate * window[new]
            errors_tail = compound_tail(np.ceil(recent[new] + delta[new]), mu, 1.0 / mean_size)
            bursts_tail = pdtrc(np.ceil(recent_bursts[new]), mu)  # P(N >= recent bursts + this one)
            p[new] = np.maximum(np.minimum(2.0 * np.minimum(errors_tail, bursts_tail), 1.0), P_FLOOR)

        decay = np.exp2(-dt / self.forget_half_life_s)
        burst = (delta > 0).astype(np.float64)
        st["run_bursts"][ids] = np.where(seen, run_bursts * decay + burst, st["run_bursts"][ids])
        st["run_errors"][ids] = np.where(seen, run_errors * decay + delta, st["run_errors"][ids])
        st["run_held"][ids] = np.where(seen, run_held * decay + burst * held, st["run_held"][ids])
        st["run_start"][ids] = np.where(
            seen, np.where((delta > 0) & ~np.isfinite(run_start), ts, run_start), st["run_start"][ids]
        )
        st["errors"][ids] = np.where(seen, errors * decay + delta, errors)
        st["bursts"][ids] = np.where(seen, bursts * decay + burst, bursts)
        st["exposure"][ids] = np.where(seen, exposure * decay + dt, exposure)
        st["recent"][ids] = np.where(seen, recent + delta, was_recent)
        st["recent_bursts"][ids] = np.where(seen, recent_bursts + burst, was_bursts)
        st["recent_seconds"][ids] = np.where(seen, window, was_seconds)
        st["last"][ids] = np.where(ok, x, last)
        st["last_ts"][ids] = np.where(ok, ts, last_ts)
        return p
