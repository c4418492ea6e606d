"""Error-counter surprise: episodes of errors on a counter that should stay flat, against the part's own
history and the fleet's.

ECC, row-remap, PCIe-replay and NVLink error counters sit still on healthy hardware, and when they move
they move in episodes: a PCIe link retrains and replays TLPs on a few scrapes in a row, then is quiet
for hours. So errors are judged by episode, not by scrape: bursts (scrapes that saw new errors) less
than `gap_s` apart form one episode (at most `max_episode_s` long, so a part that ticks all the time is
a run of ordinary episodes, not one endless one). A scrape that sees new errors is judged by how rare
its episode is so far:

- that an episode starts at all: episodes arrive at a gamma-Poisson rate, the gamma prior being the
  fleet's (empirical Bayes over every series of the same metric: the pooled rate and the spread between
  parts), so a leaky part's usual drip is expected while a clean part's first burst, in a fleet of
  clean parts, is not;
- that it has grown this large: bursts per episode and errors per episode are geometric with means
  learned from the part's own past episodes, shrunk to the fleet's (so a fleet whose counters tick in
  bursts of five does not page for the next five; a fleet whose episodes are single errors does).

p = 2 x P(start) x min(P(bursts >= k), P(errors >= e)), two tails looked at. Bursts of a ramp add up
in its episode and it teaches the baseline only once it is over, and only if it never got rarer than
`escalated_p`: a part whose episodes keep growing (a weakening HBM row, its SBEs accelerating hour
after hour, each hour-long episode cut by `max_episode_s`) is degrading, not leaky, and its first
paged-strength episode must not make the next one its usual (nor, as the only part with an episode
over, its fleet's). A leaky part's ordinary episodes are learned as before.

For `warmup_s` of event time after its first error-counter sample, until the fleet prior has been
refitted past it, a detector's prior is the hyperprior's guess, not its fleet's: nothing is called
rarer than `warm_floor` then (still a vote, never a page alone). A fleet whose counters tick in bursts
otherwise paged its first bursts before it had seen what its bursts look like. Event time, not pooled
exposure: a shard of a few nodes warms when the whole fleet's one would, so partitions agree.

A counter that goes down was reset (driver reload, GPU reset, exporter restart with another origin):
the new value is a new baseline, not new errors. Errors since the reset are unknown, and the one
scrape's worth missed is cheaper than paging every reset that lands on a nonzero value.
"""

from __future__ import annotations

import numpy as np

from prexid.detectors.base import (
    ArrayDetector,
    ByRounds,
    Floats,
    Ids,
    Packed,
    SeriesState,
    Stored,
    pack_arrays,
    unpack_arrays,
)

P_FLOOR = 1e-12
_DAY = 86400.0


class FleetPrior:
    """Gamma prior of the episode rate, and mean episode sizes, per fleet field (method of moments).

    Sizes: the median part's mean episode (a failing part's long ramp must not set the fleet's). Rates:
    pooled m = (episodes + a0) / (exposure + b0), hyperprior `prior_per_day` at `prior_days`
    weight; the between-part variance v = (sum (n_i - m e_i)^2 / e_i - (N - 1) m) / (E - sum e_i^2 / E)
    (DerSimonian-Laird for Poisson counts) gives beta = m / v seconds of exposure, at most
    `max_weight_s` (so a part's own day outweighs the fleet), and alpha = m beta.
    """

    def __init__(
        self, prior_per_day: float, prior_days: float, prior_size: float, max_weight_s: float
    ) -> None:
        self.a0 = prior_per_day * prior_days
        self.size0 = prior_size  # bursts (and errors) per episode before any is seen, at one episode's weight
        self.b0 = prior_days * _DAY
        self.max_weight_s = max_weight_s
        self.alpha = np.zeros(0)
        self.beta = np.zeros(0)
        self.bursts_mean = np.zeros(0)  # bursts per episode, the fleet's
        self.errors_mean = np.zeros(0)  # errors per episode, the fleet's
        self.fitted_at = -np.inf  # event time of the last fit
        self.started = np.inf  # event time of the first sample this prior's detector saw

    def bytes_per_series(self) -> int:
        return 0  # per field, not per series

    def forget(self, ids: Ids) -> None:
        """Nothing per series: a field's prior is its fleet's, refitted from the series there are."""

    def snapshot(self) -> Packed:
        return pack_arrays(
            {
                "alpha": self.alpha,
                "beta": self.beta,
                "bursts_mean": self.bursts_mean,
                "errors_mean": self.errors_mean,
                "fitted_at": np.array([self.fitted_at]),
                "started": np.array([self.started]),
            }
        )

    def restore(self, data: Stored) -> None:
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in unpack_arrays(data).items()}
        self.alpha, self.beta = arrays["alpha"], arrays["beta"]
        self.bursts_mean, self.errors_mean = arrays["bursts_mean"], arrays["errors_mean"]
        self.fitted_at = float(arrays["fitted_at"][0])
        self.started = float(arrays["started"][0])

    def default(self) -> tuple[float, float, float, float]:
        """The prior of a field with no data: the hyperprior alone."""
        rate = self.a0 / self.b0
        beta = min(self.b0, self.max_weight_s)
        return rate * beta, beta, self.size0, self.size0

    def fit(
        self,
        field: Ids,
        episodes: Floats,
        exposure: Floats,
        bursts: Floats,
        errors: Floats,
        running: tuple[Floats, Floats, Floats] | None = None,
    ) -> None:
        """Refit every field's prior from its series' decayed episode counts and exposures.

        `running`: per series, episodes begun and not yet over (0 or 1), their bursts and errors so
        far. In a field none of whose episodes is over yet they stand for its episodes, rate and
        sizes: parts whose counters started ticking have shown that they do, better evidence than the
        hyperprior's guess. Once one is over they count no more: a running ramp (a failing part's,
        judged against this prior) must not teach the fleet its own size or pace.
        """
        n_fields = int(field.max()) + 1 if len(field) else 0
        known = (field >= 0) & (exposure > 0)
        f, n, e = field[known], episodes[known], exposure[known]
        live_n, live_b, live_e = (
            (np.zeros(len(f)),) * 3 if running is None else tuple(r[known] for r in running)
        )
        parts = n >= 0.5  # parts with an episode over: what their episodes are like
        per_part = np.bincount(f[parts], minlength=n_fields).astype(np.float64)
        none_over = per_part == 0
        live = (live_n >= 0.5) & none_over[f]  # ... or, in a field with none over, running ones so far
        begun = n + live
        sum_n = np.bincount(f, begun, n_fields)
        sum_e = np.bincount(f, e, n_fields)
        count = np.bincount(f, minlength=n_fields).astype(np.float64)
        m = (sum_n + self.a0) / (sum_e + self.b0)
        q = np.bincount(f, (begun - m[f] * e) ** 2 / e, n_fields)
        spread = sum_e - np.bincount(f, e * e, n_fields) / np.maximum(sum_e, 1e-9)  # 0 for one part alone
        between = spread > 1e-6 * sum_e
        v = np.where(
            between, np.maximum(q - np.maximum(count - 1, 0) * m, 0.0) / np.where(between, spread, 1.0), 0.0
        )
        with np.errstate(divide="ignore"):
            beta = np.where(v > 0, m / v, np.inf)
        self.beta = np.minimum(beta, self.max_weight_s)
        self.alpha = m * self.beta
        weight = np.where(none_over, np.bincount(f[live], minlength=n_fields), per_part)

        def typical(sizes: Floats, live_sizes: Floats) -> Floats:
            over = grouped_median(f[parts], sizes[known][parts] / n[parts], n_fields)
            now = grouped_median(f[live], live_sizes[live], n_fields)
            return self._shrunk(np.where(none_over, now, over), weight)

        self.bursts_mean = typical(bursts, live_b)
        self.errors_mean = typical(errors, live_e)

    def _shrunk(self, median: Floats, parts: Floats) -> Floats:
        """The fleet's typical episode size, the hyperprior's counting as one part."""
        return (self.size0 + parts * np.nan_to_num(median)) / (1.0 + parts)

    def warm(self, warmup_s: float) -> bool:
        """Whether the prior has been refitted `warmup_s` after the first sample (its warm-up)."""
        return self.fitted_at - self.started >= warmup_s

    def of(self, field: Floats) -> tuple[Floats, Floats, Floats, Floats]:
        """(alpha, beta, bursts mean, errors mean) for each series' field (-1 or unfitted: the default)."""
        f = field.astype(np.int64)
        fitted = (f >= 0) & (f < len(self.alpha))
        alpha0, beta0, bursts0, errors0 = self.default()
        at = np.where(fitted, f, 0)

        def pick(values: Floats, fallback: float) -> Floats:
            return np.where(fitted, values[at], fallback) if len(values) else np.full(len(f), fallback)

        return (
            pick(self.alpha, alpha0),
            pick(self.beta, beta0),
            pick(self.bursts_mean, bursts0),
            pick(self.errors_mean, errors0),
        )


def grouped_median(group: Ids, values: Floats, n_groups: int) -> Floats:
    """Median of `values` per group (NaN for an empty one): a fleet's typical part, not its mean, which
    one failing part's thousand-error ramp would set."""
    out = np.full(n_groups, np.nan)
    if not len(group):
        return out
    order = np.lexsort((values, group))
    g, v = group[order], values[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    ends = np.r_[starts[1:], len(g)]
    lo, hi = starts + (ends - starts - 1) // 2, starts + (ends - starts) // 2
    out[g[starts]] = (v[lo] + v[hi]) / 2.0
    return out


def geometric_tail(k: Floats, mean: Floats) -> Floats:
    """P(X >= k) for X geometric on 1, 2, ... with this mean (>= 1)."""
    stay = 1.0 - 1.0 / np.maximum(mean, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.exp(np.maximum(k - 1.0, 0.0) * np.log(stay))
    return np.asarray(np.where(k <= 1.0, 1.0, tail), dtype=np.float64)  # 0 * log(0) is NaN, not 1


class ErrorCounterSurprise(ByRounds, ArrayDetector):
    """Tail probability of each series' current error episode, against its own and its fleet's."""

    name = "error_counter"
    baseline_of = "last"
    nested = ("prior",)

    def __init__(
        self,
        prior_per_day: float = 0.5,
        prior_days: float = 1 / 24,
        prior_episode_size: float = 1.25,
        forget_half_life_s: float = 7 * _DAY,
        window_s: float = 300.0,
        gap_s: float = 600.0,
        max_episode_s: float = 3600.0,
        fleet_weight: float = 2.0,
        max_prior_weight_s: float = _DAY,
        refit_every_s: float = 600.0,
        warmup_s: float = 1200.0,
        warm_floor: float = 1e-3,
        escalated_p: float = 1e-6,
    ) -> None:
        self.escalated_p = escalated_p
        self.warmup_s = warmup_s
        self.warm_floor = warm_floor
        self.window_s = window_s
        self.gap_s = gap_s
        self.max_episode_s = max_episode_s
        self.fleet_weight = fleet_weight  # the fleet's episode sizes count as this many of the part's own
        self.forget_half_life_s = forget_half_life_s
        self.refit_every_s = refit_every_s
        self.prior = FleetPrior(prior_per_day, prior_days, prior_episode_size, max_prior_weight_s)
        self.state = SeriesState(
            {
                "last": np.nan,
                "last_ts": -np.inf,
                "field": 0.0,  # fleet field (metric) id: series never declared share one; -1: the hyperprior
                "exposure": 0.0,  # seconds watched, forgotten with `forget_half_life_s`
                "episodes": 0.0,  # ... episodes over
                "bursts": 0.0,  # ... their bursts
                "errors": 0.0,  # ... and errors
                "cur_bursts": 0.0,  # the current episode, if any
                "cur_errors": 0.0,
                "cur_start": np.nan,
                "cur_last": np.nan,
                "cur_p": 1.0,  # the current episode's least p so far
            }
        )

    def set_fields(self, ids: Ids, fields: Ids) -> None:
        """Declare each series' fleet field: series of one metric across the fleet share a prior."""
        if len(ids):
            self.state.ensure(int(ids.max()))
            self.state["field"][ids] = fields

    def refit(self) -> None:
        """Refit the fleet priors from every series' history (every `refit_every_s` of event time).

        Episodes still running that began in the warm-up count (`FleetPrior.fit`): parts whose
        counters ticked while the fleet was first watched have shown that they do, however long their
        episodes take to end. Counting only episodes over, a fleet whose leaky parts began their first
        (long, bursty) episodes in its first minutes still looked clean when the next one began, and
        paged it. Later episodes wait until they are over: many parts' errors beginning at once (an NFS
        stall's timeouts on every node) must not teach the prior they are ordinary while they last.
        """
        st = self.state
        with np.errstate(invalid="ignore"):
            running = (st["cur_start"] <= self.prior.started + self.warmup_s).astype(np.float64)
        self.prior.fit(
            st["field"].astype(np.int64),
            st["episodes"],
            st["exposure"],
            st["bursts"],
            st["errors"],
            (running, st["cur_bursts"], st["cur_errors"]),
        )

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        now = float(ts.max())
        self.prior.started = min(self.prior.started, float(ts.min()))
        if now - self.prior.fitted_at >= self.refit_every_s:  # per round: a batch scores as its samples
            self.refit()
            self.prior.fitted_at = now
        st = self.state
        last, last_ts = st["last"][ids], st["last_ts"][ids]
        exposure, episodes = st["exposure"][ids], st["episodes"][ids]
        bursts, errors = st["bursts"][ids], st["errors"][ids]
        cur_b, cur_e = st["cur_bursts"][ids], st["cur_errors"][ids]
        cur_start, cur_last = st["cur_start"][ids], st["cur_last"][ids]
        cur_p = st["cur_p"][ids]
        ok = np.isfinite(x) & (ts > last_ts)
        seen = ok & np.isfinite(last)
        with np.errstate(invalid="ignore"):
            delta = np.where(seen & (x > last), x - last, 0.0)  # a drop is a reset: a new baseline
        dt = np.where(seen, ts - last_ts, 0.0)
        burst = delta > 0

        # an episode is over after `gap_s` without errors, or `max_episode_s` after it began
        with np.errstate(invalid="ignore"):
            close = np.isfinite(cur_last) & (
                (ts - cur_last > self.gap_s) | (ts - cur_start > self.max_episode_s)
            )
        decay = np.exp2(-dt / self.forget_half_life_s)
        exposure = np.where(seen, exposure * decay + dt, exposure)
        learn = close & (cur_p >= self.escalated_p)
        episodes = np.where(seen, episodes * decay, episodes) + learn
        bursts = np.where(seen, bursts * decay, bursts) + np.where(learn, cur_b, 0.0)
        errors = np.where(seen, errors * decay, errors) + np.where(learn, cur_e, 0.0)
        cur_p = np.where(close, 1.0, cur_p)
        cur_b, cur_e = np.where(close, 0.0, cur_b), np.where(close, 0.0, cur_e)
        cur_start = np.where(close, np.nan, cur_start)
        cur_last = np.where(close, np.nan, cur_last)

        starts = burst & ~np.isfinite(cur_start)
        cur_start = np.where(starts, ts, cur_start)
        cur_b, cur_e = cur_b + burst, cur_e + delta
        cur_last = np.where(burst, ts, cur_last)

        p = np.ones(len(ids), dtype=np.float64)
        new = np.flatnonzero(burst)
        if len(new):
            alpha, beta, fleet_bursts, fleet_errors = self.prior.of(st["field"][ids[new]])
            rate = (alpha + episodes[new]) / (beta + exposure[new])
            p_start = -np.expm1(-rate * self.window_s)
            w = self.fleet_weight
            mean_bursts = (w * fleet_bursts + bursts[new]) / (w + episodes[new])
            mean_errors = (w * fleet_errors + errors[new]) / (w + episodes[new])
            p_size = np.minimum(
                geometric_tail(cur_b[new], mean_bursts), geometric_tail(np.ceil(cur_e[new]), mean_errors)
            )
            floor = P_FLOOR if self.prior.warm(self.warmup_s) else self.warm_floor
            p[new] = np.clip(2.0 * p_start * p_size, floor, 1.0)
            cur_p[new] = np.minimum(cur_p[new], p[new])

        st["exposure"][ids], st["episodes"][ids] = exposure, episodes
        st["bursts"][ids], st["errors"][ids] = bursts, errors
        st["cur_bursts"][ids], st["cur_errors"][ids] = cur_b, cur_e
        st["cur_start"][ids], st["cur_last"][ids] = cur_start, cur_last
        st["cur_p"][ids] = cur_p
        st["last"][ids] = np.where(ok, x, last)
        st["last_ts"][ids] = np.where(ok, ts, last_ts)
        return p
