"""Per-series tail calibration: a raw anomaly score becomes a tail probability under that series' history.

Peaks over threshold: scores above a fixed threshold `u` are excesses, and their distribution is a
generalised Pareto (GPD) whose scale and shape come from the decayed first two moments of the excesses
(method of moments, so the fit is three array updates, not an optimiser). The shape is kept in
[0, 0.45]: a heavier tail than exponential is learned (Student-t noise), a bounded one is never assumed
(a spurious upper end point would turn the next large healthy score into p=0).

p(s) = rate_u * (1 + xi * (s - u) / sigma) ** (-1 / xi) above u, and linear from 1 (s=0) to the prior
rate (s=u) below it: only the tail matters to fusion (a family votes at p <= 0.01), so the body is not
worth a memory access per sample. A weak prior (a Gaussian |z| tail by default) makes a new
series usable at once; the series' own excesses take over within a few hundred samples. With
`young_xi`, the prior's shape is no lighter than `young_xi * prior_n / (prior_n + samples seen)`: a
series seen for minutes has not shown its rare spikes yet (a stale exporter's zero rate), so its far
tail is judged heavy, not Gaussian, until its own history can say otherwise (wide tuning cell seed 1005
paged a GPU 36 minutes in on one such spike).

Each score is judged *before* it is learned, and excesses are learned by episode: consecutive scores
above `u` are held aside and folded in when the episode ends, unless it lasted more than one sample and
one of its scores had p below `learn_gate`. A lone spike is the series' own tail (so a heavy-tailed
series learns how heavy it is); a fault, whose scores stay high for many samples in a row (a level
shift, a CUSUM height, a residual), is judged against the tail as it was before the fault, however
slowly it builds, and never calibrates itself away. A lone spike that was evidence (p below
`learn_gate`) is learned as no larger than the tail's own `learn_gate` point: the moments are not robust,
and one 10-sigma point among the few dozen excesses of a Gaussian |z| set the shape to 0.36 and hid the
series' next spike (p 2e-5: the hourly corpus' `spike` files). A heavy tail's outliers recur, and each
still pushes that point outward.

An episode of several samples that was evidence but no rarer than `count_floor` is counted as one
exceedance at that same point. Left out, the excursions a series' own noise makes past the gate were
never learned, and the fit stayed lighter than the tail the series has: on stationary five-minute
Student-t noise (3 dof) the variance detector's ordinary excursions reached p 1e-9 on 20 of 200 series,
and `replay --csv` made 27 false detections in 100 such files (9 since).
A fault rarer than the floor teaches nothing; counted down to the p floor, a variance change whose
score wavered about the threshold taught the tail one exceedance per wave, and its file's second
onset was ordinary.

Cost: forgetting is applied lazily (the excess sums are decayed by keep**(samples since they were last
touched) when an episode is folded in, and the sample count has a closed form), so a score below `u`
costs one gather and one scatter; the GPD is evaluated only for the few scores above `u`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    ArrayDetector,
    ArrayState,
    ByRounds,
    Floats,
    Ids,
    Index,
    SeriesState,
    decayed_count,
    pick,
    subset,
)

P_FLOOR = 1e-12
_XI_MAX = 0.45


class TailCalibrator(ArrayState):
    """Decayed peaks-over-threshold GPD fit per series id."""

    def __init__(
        self,
        threshold: float = 2.0,
        prior_rate: float = 0.0455,
        prior_mean_excess: float = 0.373,
        prior_weight: float = 10.0,
        window: float = 10_000.0,
        learn_gate: float = 1e-4,
        count_floor: float = 1e-6,
        young_xi: float = 0.0,
        capacity: int = 1024,  # rows to begin with (grown by doubling)
        extra: dict[str, float] | None = None,  # fields a subclass keeps per series beside the tail
    ) -> None:
        self.threshold = threshold
        self.young_xi = young_xi
        self.learn_gate = learn_gate
        self.count_floor = count_floor
        self.keep = 1.0 - 1.0 / window
        self.log2_keep = float(np.log2(self.keep))
        self.prior_n = prior_weight / prior_rate
        self.prior_rate = prior_rate
        k0 = prior_weight
        self.state = SeriesState(
            {
                "count": 0.0,  # samples learned (not decayed: decay is computed from it)
                "k": k0,  # exceedance count, decayed as of sample `at`
                "m1": k0 * prior_mean_excess,  # sum of excesses, ditto
                "m2": k0 * 2.0 * prior_mean_excess**2,  # and of their squares (exponential prior)
                "at": 0.0,
                "ek": 0.0,  # the open episode: its count, sums and smallest p
                "em1": 0.0,
                "em2": 0.0,
                "emin": 1.0,
            }
            | (extra or {}),
            capacity,
        )

    def samples(self, ids: Index) -> Floats:
        """How many finite scores each series has had judged and learned."""
        return self.state["count"][ids]

    def run_length(self, ids: Index) -> Floats:
        """How many scores above the threshold in a row, the last one included, each series' open episode
        holds (0: none open): the run `runs.RunCalibrator` judges."""
        return self.state["ek"][ids]

    def rate(self, ids: Ids) -> Floats:
        """Decayed exceedance rate of each series now."""
        st = self.state
        count = st["count"][ids]
        decay_n = np.exp2(count * self.log2_keep)
        n = decayed_count(self.prior_n, decay_n, self.keep)
        k = st["k"][ids] * np.exp2((count - st["at"][ids]) * self.log2_keep)
        return np.clip(k / n, 1e-9, 1.0)

    def _gpd(self, ids: Ids) -> tuple[Floats, Floats]:
        """Each series' GPD shape and scale, by the moments (they need no decay: ratios)."""
        st = self.state
        k = st["k"][ids]
        mean = st["m1"][ids] / k
        var = np.maximum(st["m2"][ids] / k - mean**2, 1e-12)
        xi = np.clip(0.5 * (1.0 - mean**2 / var), 0.0, _XI_MAX)
        if self.young_xi > 0.0:  # a young series' tail is unknown beyond its few samples: see the doc
            young = self.young_xi * self.prior_n / (self.prior_n + st["count"][ids])
            xi = np.maximum(xi, young)
        return xi, np.maximum(mean * (1.0 - xi), 1e-9)

    def _gpd_tail(self, ids: Ids, excess: Floats) -> Floats:
        """P(excess >= y | exceedance) under each series' GPD."""
        xi, sigma = self._gpd(ids)
        safe_xi = np.maximum(xi, 1e-6)
        log_tail = np.where(xi > 1e-6, -np.log1p(safe_xi * excess / sigma) / safe_xi, -excess / sigma)
        return np.asarray(np.exp(log_tail))

    def _gate_excess(self, ids: Ids) -> Floats:
        """The excess each series' tail gives p = `learn_gate` (the GPD's quantile there; 0 where even
        an exceedance is rarer)."""
        xi, sigma = self._gpd(ids)
        log_ratio = np.log(np.maximum(self.rate(ids) / self.learn_gate, 1.0))
        safe_xi = np.maximum(xi, 1e-6)
        return np.asarray(
            np.where(xi > 1e-6, sigma * np.expm1(safe_xi * log_ratio) / safe_xi, sigma * log_ratio)
        )

    def tail(self, ids: Index, scores: Floats) -> Floats:
        """P(score >= s) for each series under its fitted tail; 1 where the score is not finite."""
        return self._tail(ids, scores, *self._screen(scores))

    def learn(self, ids: Index, scores: Floats, p: Floats) -> None:
        """Count each finite score (ids unique); excesses go through episodes (see the module doc)."""
        self._learn(ids, scores, p, *self._screen(scores))

    def _screen(self, scores: Floats) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """Which scores are finite and which exceed the threshold: judging and learning share them."""
        with np.errstate(invalid="ignore"):
            return np.isfinite(scores), scores > self.threshold

    def _tail(
        self, ids: Index, scores: Floats, finite: NDArray[np.bool_], above: NDArray[np.bool_]
    ) -> Floats:
        u = self.threshold
        with np.errstate(invalid="ignore"):
            p = 1.0 - (1.0 - self.prior_rate) * np.clip(scores, 0.0, u) / u
        high = np.flatnonzero(above)
        if len(high):  # below u, p lies in [prior_rate, 1] already: only the tail needs the floor
            hi_ids = subset(ids, high)
            p[high] = np.clip(self.rate(hi_ids) * self._gpd_tail(hi_ids, scores[high] - u), P_FLOOR, 1.0)
        return pick(finite, p, 1.0)

    def _learn(
        self, ids: Index, scores: Floats, p: Floats, finite: NDArray[np.bool_], above: NDArray[np.bool_]
    ) -> None:
        st = self.state
        every = bool(finite.all())
        st["count"][ids] += 1.0 if every else finite  # the same sums; no cast of the mask
        open_ = above | (st["ek"][ids] > 0.0)
        busy = np.flatnonzero(open_ if every else finite & open_)
        if len(busy):
            self._episodes(subset(ids, busy), scores[busy], p[busy])

    def _episodes(self, ids: Ids, scores: Floats, p: Floats) -> None:
        """Grow open episodes; fold the ended ones (that never looked like a fault) into the tail."""
        st = self.state
        above = scores > self.threshold
        excess = np.where(above, scores - self.threshold, 0.0)
        ek, em1, em2 = st["ek"][ids] + above, st["em1"][ids] + excess, st["em2"][ids] + excess**2
        emin = np.where(above, np.minimum(st["emin"][ids], p), st["emin"][ids])
        st["ek"][ids] = np.where(above, ek, 0.0)
        st["em1"][ids] = np.where(above, em1, 0.0)
        st["em2"][ids] = np.where(above, em2, 0.0)
        st["emin"][ids] = np.where(above, emin, 1.0)
        # lone spikes are the series' tail; an episode that was evidence but no rarer than `count_floor`
        # is counted once (module doc)
        commit = ~above & ((emin >= self.count_floor) | (ek <= 1.0))
        if commit.any():
            c = ids[commit]
            ek, em1, em2 = ek[commit], em1[commit], em2[commit]
            rare = np.flatnonzero(emin[commit] < self.learn_gate)  # ended episodes that were evidence
            if len(rare):  # one exceedance, at most at the tail's own gate point (module doc)
                ek[rare] = np.minimum(ek[rare], 1.0)
                em1[rare] = np.minimum(em1[rare], self._gate_excess(c[rare]))
                em2[rare] = em1[rare] ** 2
            decay = np.exp2((st["count"][c] - st["at"][c]) * self.log2_keep)
            st["k"][c] = st["k"][c] * decay + ek
            st["m1"][c] = st["m1"][c] * decay + em1
            st["m2"][c] = st["m2"][c] * decay + em2
            st["at"][c] = st["count"][c]

    def score(self, ids: Index, scores: Floats) -> Floats:
        """Judge the scores (NaN: no judgement, p=1), then learn them."""
        finite, above = self._screen(scores)
        p = self._tail(ids, scores, finite, above)
        self._learn(ids, scores, p, finite, above)
        return p

    def ensure(self, max_id: int) -> None:
        self.state.ensure(max_id)


class Calibrated(ByRounds, ArrayDetector):
    """A gauge detector whose raw score (a robust |z|, a CUSUM height) is calibrated against each series'
    own history by `calibrator`, saved after the state: the state, the rounds and the calibrator's rows
    are set up once here rather than again in every such detector."""

    nested: ClassVar[tuple[str, ...]] = ("calibrator",)

    def __init__(
        self, fields: dict[str, float], capacity: int = 1024, calibrator: TailCalibrator | None = None
    ) -> None:
        self.state = SeriesState(fields, capacity)
        self.calibrator = TailCalibrator() if calibrator is None else calibrator

    def grow(self, max_id: int) -> None:
        super().grow(max_id)
        self.calibrator.ensure(max_id)
