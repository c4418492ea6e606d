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
- that it has grown this large: bursts per episode and errors per burst are geometric with means
  learned from the part's own past episodes, shrunk to the fleet's (so a fleet whose counters tick in
  bursts of five does not page for the next five; a fleet whose episodes are single errors does). The
  fleet's bursts are its clustering beyond what each part's own pace strings together by chance
  (`excess`, `chaining`), times the judged part's own chaining: leaky parts' Poisson drips minutes
  apart make most of a fleet's episodes two bursts long, which says nothing of a clean part's SBEs
  minutes apart (wide-s19's xid63 precursor: each burst was only 3x rarer than the last). An
  episode's errors are then geometric too, with mean bursts an episode times errors a burst (a
  geometric number of geometric bursts): judged by its past episodes' errors instead, a leaky part
  whose single SBEs had never chained (mean 1.002 an episode) found six chained by chance at its pace
  1e-14 and paged (wide-s94, wide-s98), though its bursts tail said 1e-3.

p = 2 x P(start) x min(P(bursts >= k), P(errors >= e)), two tails looked at, once the episode has a
second burst. One burst is one event however many errors it booked (a link retrain replays hundreds of
packets at once, a scrub pass finds a row's errors together): it is as rare as an episode starting at
all. Judging its errors against the fleet's typical episode made a clean part's first jump of thirty
replays p 1e-12 in a fleet that had seen none yet; an episode that rare is never learned, so every later
jump of that part, and of the fleet (its sizes learned from episodes learned), stayed as rare, and a
leaky link paged three times in an afternoon.

Episodes less than about an hour apart form a run (a count of episodes begun, decaying with
`run_half_life_s`; the run is over when it falls below `RUN_OVER`). While a run is under `young_run_s`
old, the episodes it taught the part are left out of the history it is judged by (rate and sizes) if
one of them was notable (p < `notable_p`, not escalated): a failing part's first episode, ordinary
enough to be learned (three SBEs in five minutes, p 2e-6), made its next episode's bursts three long as
usual, so the ramp that followed took twenty bursts to look rare. A leaky part's ordinary episodes are
never notable (its drips teach it that its episodes are single errors, so a burst after them is rarer
for it, not less), and any run is learned once older. A run that got rarer than `escalated_p` within
`young_run_s` is taken back out of what the part learned once it is over, as an escalated episode never
goes in; a longer one is kept (hours of ordinary ticking after one rare episode are a leaky part's new
habit). Scoring the run's count itself (a negative binomial tail against the part's rate from before
it) was tried and dropped: a part taking up a leaky habit was never learned and stayed rare for hours.

Bursts of a ramp add up in its episode and it teaches the baseline only once it is over, and only if
it never got rarer than `escalated_p`: a part whose episodes keep growing (a weakening HBM row, its
SBEs accelerating hour after hour, each hour-long episode cut by `max_episode_s`) is degrading, not
leaky, and its first paged-strength episode must not make the next one its usual (nor, as the only
part with an episode over, its fleet's). A leaky part's ordinary episodes are learned as before.

The fleet prior is refitted at fixed event times (multiples of `refit_every_s`, before the first sample
past each) from the fleet's sufficient statistics (`fleet_prior`): this detector's own series', plus,
when a partition's pipeline holds only some of the fleet's nodes, the other partitions' as of the same
refit time (`set_outside`, `stats_at`). So every partition fits the prior one process holding every
node would, and a partition of clean GPUs learns that the fleet's leaky ones tick.

For `warmup_s` of event time after its first error-counter sample's refit period, until the fleet
prior has been refitted past it, a detector's prior is the hyperprior's guess, not its fleet's: nothing
is called rarer than `warm_floor` then (still a vote, never a page alone). A fleet whose counters tick
in bursts otherwise paged its first bursts before it had seen what its bursts look like. Event time,
not pooled exposure: a shard of a few nodes warms when the whole fleet's one would, so partitions
agree.

A counter that goes down was reset (driver reload, GPU reset, exporter restart with another origin):
the new value is a new baseline, not new errors. Errors since the reset are unknown, and the one
scrape's worth missed is cheaper than paging every reset that lands on a nonzero value.
"""

from __future__ import annotations

import numpy as np
from scipy.special import lambertw

from prexid.detectors.base import ArrayDetector, ByRounds, Floats, Ids, SeriesState, by_rounds
from prexid.detectors.fleet_prior import FleetPrior, PriorStats, merge

P_FLOOR = 1e-12
RUN_OVER = 0.25  # a run's decaying episode count below this (two half-lives without one): it is over
_DAY = 86400.0


def geometric_tail(k: Floats, mean: Floats) -> Floats:
    """P(X >= k) for X geometric on 1, 2, ... with this mean (>= 1)."""
    stay = 1.0 - 1.0 / np.maximum(mean, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.exp(np.maximum(k - 1.0, 0.0) * np.log(stay))
    return np.asarray(np.where(k <= 1.0, 1.0, tail), dtype=np.float64)  # 0 * log(0) is NaN, not 1


def per(amount: Floats, over: Floats) -> Floats:
    """`amount / over`, 0 where `over` is 0 (a part with no burst, no exposure yet)."""
    return np.asarray(np.where(over > 0, amount / np.where(over > 0, over, 1.0), 0.0))


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
        run_half_life_s: float = 1800.0,
        young_run_s: float = 7200.0,
        notable_p: float = 1e-4,
    ) -> None:
        self.young_run_s = young_run_s
        self.notable_p = notable_p
        self.escalated_p = escalated_p
        self.run_half_life_s = run_half_life_s
        self.warmup_s = warmup_s
        self.warm_floor = warm_floor
        self.window_s = window_s
        self.gap_s = gap_s
        self.max_episode_s = max_episode_s
        self.fleet_weight = fleet_weight  # the fleet's episode sizes count as this many of the part's own
        self.forget_half_life_s = forget_half_life_s
        self.refit_every_s = refit_every_s
        self.prior = FleetPrior(prior_per_day, prior_days, prior_episode_size, max_prior_weight_s)
        self.outside: PriorStats | None = None  # the other partitions' statistics (`set_outside`)
        self.own_stats: PriorStats | None = None  # this detector's own, as of its last refit
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
                "recent": 0.0,  # episodes begun, forgotten with `run_half_life_s` (the run's count)
                # the run (episodes until `recent` falls below `RUN_OVER`): its episodes over and learned,
                # their bursts and errors (left out of the history it is judged by), its least p
                "run_learned": 0.0,
                "run_bursts": 0.0,
                "run_errors": 0.0,
                "run_p": 1.0,
                "run_learned_p": 1.0,  # the least p of the episodes it taught
                "run_start": np.nan,  # when the run's first episode began
            },
            capacity=64,  # a fleet's error counters are a few of its series: grown as their ids come
        )

    def set_fields(self, ids: Ids, fields: Ids, keys: Ids | None = None) -> None:
        """Declare each series' fleet field: series of one metric across the fleet share a prior.
        `keys`: every field's fleet key (`fleet_prior.field_key`), matching fields across partitions
        (none: a field's key is its id, one process)."""
        if len(ids):
            self.state.ensure(int(ids.max()))
            self.state["field"][ids] = fields
        if keys is not None:
            self.prior.keys = keys.astype(np.int64)

    def _field_keys(self) -> Ids:
        """Fleet keys of every field a series is declared in (a field declared without one: its id)."""
        field = self.state["field"]
        n = int(field.max()) + 1 if len(field) else 0
        keys = self.prior.keys
        return keys[:n] if len(keys) >= n else np.r_[keys, np.arange(len(keys), n, dtype=np.int64)]

    def refit_points(self, ts: Floats) -> Floats:
        """The last refit time before each event time: refits fall on multiples of `refit_every_s`, so
        every partition refits at the same event times, whatever its samples' times."""
        return np.asarray(np.ceil(ts / self.refit_every_s) * self.refit_every_s - self.refit_every_s)

    def due(self, t: float) -> float | None:
        """The refit a sample at `t` would bring about first (None: none)."""
        at = float(self.refit_points(np.array([t]))[0])
        return at if at > self.prior.fitted_at else None

    def stats(self, at: float) -> PriorStats:
        """This detector's sufficient statistics for the fleet prior (`fleet_prior.PriorStats`), now.

        Episodes still running that began in the warm-up count (`FleetPrior.fit`): parts whose
        counters ticked while the fleet was first watched have shown that they do, however long their
        episodes take to end. Counting only episodes over, a fleet whose leaky parts began their first
        (long, bursty) episodes in its first minutes still looked clean when the next one began, and
        paged it. Later episodes wait until they are over: many parts' errors beginning at once (an NFS
        stall's timeouts on every node) must not teach the prior they are ordinary while they last.
        """
        st = self.state
        field = st["field"].astype(np.int64)
        keys = self._field_keys()
        key = np.where(field >= 0, keys[np.maximum(field, 0)] if len(keys) else -1, -1)
        with np.errstate(invalid="ignore"):
            running = (st["cur_start"] <= self.prior.started + self.warmup_s).astype(np.float64)
        return PriorStats.of(
            at,
            self.prior.started,
            key,
            st["episodes"],
            st["exposure"],
            self.excess(st["episodes"], st["bursts"], st["exposure"]),
            per(st["errors"], st["bursts"]),
            (running, st["cur_bursts"], per(st["cur_errors"], st["cur_bursts"])),
        )

    def excess(self, episodes: Floats, bursts: Floats, exposure: Floats) -> Floats:
        """Each part's bursts beyond what its own pace strings together (`chaining`), at least one an
        episode: what the fleet's episode sizes say of clustering (a PCIe retrain's replays on a few
        scrapes in a row), not of how often its leaky parts tick."""
        return np.maximum(bursts / self.chaining(per(episodes, exposure)), episodes)

    def chaining(self, rate: Floats) -> Floats:
        """Mean bursts an episode that Poisson bursts beginning episodes at this `rate` string together
        by chance: bursts at pace m chain while the next comes within `gap_s` (a geometric of mean
        exp(m gap_s)) and begin episodes at rate m exp(-m gap_s); solved for m (Lambert W), the mean is
        m / rate. Judged by episode starts, not bursts: a clustered part's bursts a few scrapes apart
        are not taken for a fast pace. Past 1/e episodes a gap (the most Poisson bursts begin), e."""
        y = np.minimum(rate * self.gap_s, np.exp(-1.0) * (1.0 - 1e-9))
        m = -np.real(lambertw(-y))
        return np.asarray(np.where(y > 0, m / np.where(y > 0, y, 1.0), 1.0), dtype=np.float64)

    def stats_at(self, at: float) -> PriorStats:
        """The statistics as of refit `at`, for another partition's fit: those taken at this detector's
        own refit there (or a later one), else its state now (no error-counter sample past `at` yet)."""
        own = self.own_stats
        return own if own is not None and own.at >= at else self.stats(at)

    def set_outside(self, stats: PriorStats | None) -> None:
        """The other partitions' statistics (merged) the next refit adds to this detector's own."""
        self.outside = stats

    def refit(self, at: float) -> None:
        """Refit the fleet priors at event time `at` from every series' history (every `refit_every_s`)
        and, under partitions, the others' (`set_outside`): one fleet's prior, whatever the split."""
        if self.outside is not None:
            self.prior.started = min(self.prior.started, self.outside.started)
        self.own_stats = self.stats(at)
        fleet = self.own_stats if self.outside is None else merge([self.own_stats, self.outside])
        self.prior.fit(fleet, self._field_keys())
        self.prior.fitted_at = at

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        """`ByRounds.update`, refitting at each refit time the samples pass (before the first past it)."""
        if len(ids) == 0:
            return np.ones(0, dtype=np.float64)
        self.grow(int(ids.max()))
        first = float(ts.min())
        if np.isfinite(first):  # warm-up from the first sample's refit period (every partition's the same)
            period = np.floor(first / self.refit_every_s) * self.refit_every_s
            self.prior.started = min(self.prior.started, float(period))
        at = self.refit_points(ts)
        if not (at > self.prior.fitted_at).any():
            return by_rounds(self._update_round, ids, ts, values)
        p = np.ones(len(ids), dtype=np.float64)
        for point in np.unique(at[np.isfinite(at)]).tolist():
            part = at == point
            if point > self.prior.fitted_at:
                self.refit(point)
            p[part] = by_rounds(self._update_round, ids[part], ts[part], values[part])
        return p

    def _held_out(self, now: Floats | float, run_start: Floats, run_learned_p: Floats) -> Floats:
        """1 where a run's learned episodes are left out of the history that judges it (young, and one
        of them notable), else 0."""
        with np.errstate(invalid="ignore"):
            young = np.asarray(now - run_start < self.young_run_s)
        return (young & (run_learned_p < self.notable_p)).astype(np.float64)

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st = self.state
        last, last_ts = st["last"][ids], st["last_ts"][ids]
        exposure, episodes = st["exposure"][ids], st["episodes"][ids]
        bursts, errors = st["bursts"][ids], st["errors"][ids]
        cur_b, cur_e = st["cur_bursts"][ids], st["cur_errors"][ids]
        cur_start, cur_last = st["cur_start"][ids], st["cur_last"][ids]
        cur_p = st["cur_p"][ids]
        recent, run_p = st["recent"][ids], st["run_p"][ids]
        run_n, run_b, run_e = st["run_learned"][ids], st["run_bursts"][ids], st["run_errors"][ids]
        run_start, run_learned_p = st["run_start"][ids], st["run_learned_p"][ids]
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
        run_n, run_b = run_n + learn, run_b + np.where(learn, cur_b, 0.0)
        run_learned_p = np.where(learn, np.minimum(run_learned_p, cur_p), run_learned_p)
        run_e = run_e + np.where(learn, cur_e, 0.0)
        # a run is over once its count has faded (two half-lives without an episode): a rare one (a
        # degrading part's, not a leaky part's usual) is taken back out of what the part has learned
        recent = recent * np.exp2(-dt / self.run_half_life_s)
        over = (recent < RUN_OVER) & (run_n > 0)
        with np.errstate(invalid="ignore"):
            short = ts - run_start < self.young_run_s  # a long one is a leaky part's habit: kept
        unlearn = over & (run_p < self.escalated_p) & short
        episodes = np.where(unlearn, np.maximum(episodes - run_n, 0.0), episodes)
        bursts = np.where(unlearn, np.maximum(bursts - run_b, 0.0), bursts)
        errors = np.where(unlearn, np.maximum(errors - run_e, 0.0), errors)
        run_n, run_b, run_e = (np.where(over, 0.0, v) for v in (run_n, run_b, run_e))
        run_p = np.where(recent < RUN_OVER, 1.0, run_p)
        run_start = np.where(recent < RUN_OVER, np.nan, run_start)
        run_learned_p = np.where(recent < RUN_OVER, 1.0, run_learned_p)
        cur_p = np.where(close, 1.0, cur_p)
        cur_b, cur_e = np.where(close, 0.0, cur_b), np.where(close, 0.0, cur_e)
        cur_start = np.where(close, np.nan, cur_start)
        cur_last = np.where(close, np.nan, cur_last)

        starts = burst & ~np.isfinite(cur_start)
        cur_start = np.where(starts, ts, cur_start)
        run_start = np.where(starts & ~np.isfinite(run_start), ts, run_start)
        recent = recent + starts
        cur_b, cur_e = cur_b + burst, cur_e + delta
        cur_last = np.where(burst, ts, cur_last)

        p = np.ones(len(ids), dtype=np.float64)
        new = np.flatnonzero(burst)
        if len(new):
            alpha, beta, fleet_bursts, fleet_errors = self.prior.of(st["field"][ids[new]])
            # a young run is judged against the part's history from before it: its ordinary first
            # episodes (learned) must not make its next ones the part's usual
            young = self._held_out(ts[new], run_start[new], run_learned_p[new])
            episodes_h = np.maximum(episodes[new] - young * run_n[new], 0.0)
            bursts_h = np.maximum(bursts[new] - young * run_b[new], 0.0)
            errors_h = np.maximum(errors[new] - young * run_e[new], 0.0)
            rate = (alpha + episodes_h) / (beta + exposure[new])
            p_start = -np.expm1(-rate * self.window_s)
            w = self.fleet_weight
            # at least the bursts the part's own pace strings together by chance (a leaky part's Poisson
            # drips minutes apart are one long episode no rarer than that), and the fleet's clustering
            # beyond its parts' own paces times that: a clean part's bursts minutes apart are not
            # judged by the chaining of the leaky parts that make up most of its fleet's episodes
            chained = self.chaining(rate)
            mean_bursts = np.maximum((w * fleet_bursts * chained + bursts_h) / (w + episodes_h), chained)
            # an episode's errors are its bursts' (a geometric number of geometric bursts is geometric,
            # of the product of the means): a burst's errors are the part's own, shrunk to the fleet's at
            # `fleet_weight` bursts, so a leaky part's single SBEs strung together at its pace are no
            # more errors than its bursts (judged by its episodes' errors, every one a single SBE
            # apart, its six in 40 minutes were p 1e-12: wide-s94)
            mean_errors = mean_bursts * (w * fleet_errors + errors_h) / (w + bursts_h)
            # one burst is one event however many errors it booked (a link retrain replays hundreds of
            # packets at once, a scrub pass finds a row's errors together): its size says nothing yet
            p_size = np.where(
                cur_b[new] > 1,
                np.minimum(
                    geometric_tail(cur_b[new], mean_bursts), geometric_tail(np.ceil(cur_e[new]), mean_errors)
                ),
                1.0,
            )
            floor = P_FLOOR if self.prior.warm(self.warmup_s) else self.warm_floor
            p[new] = np.clip(2.0 * p_start * p_size, floor, 1.0)
            cur_p[new] = np.minimum(cur_p[new], p[new])
            run_p[new] = np.minimum(run_p[new], p[new])

        st["exposure"][ids], st["episodes"][ids] = exposure, episodes
        st["bursts"][ids], st["errors"][ids] = bursts, errors
        st["cur_bursts"][ids], st["cur_errors"][ids] = cur_b, cur_e
        st["cur_start"][ids], st["cur_last"][ids] = cur_start, cur_last
        st["cur_p"][ids] = cur_p
        st["recent"][ids], st["run_p"][ids] = recent, run_p
        st["run_learned"][ids], st["run_bursts"][ids], st["run_errors"][ids] = run_n, run_b, run_e
        st["run_start"][ids], st["run_learned_p"][ids] = run_start, run_learned_p
        st["last"][ids] = np.where(ok, x, last)
        st["last_ts"][ids] = np.where(ok, ts, last_ts)
        return p
