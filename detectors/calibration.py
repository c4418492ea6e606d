"""Per-series tail calibration: a raw anomaly score becomes a tail probability under that series' history.

Peaks over threshold: scores above a fixed threshold `u` are excesses, and their distribution is a
generalised Pareto (GPD) whose scale and shape come from the decayed first two moments of the excesses
(method of moments, so the fit is three array updates, not an optimiser). The shape is kept in
[0, 0.45]: a heavier tail than exponential is learned (Student-t noise), a bounded one is never assumed
(a spurious upper end point would turn the next large healthy score into p=0).

p(s) = rate_u * (1 + xi * (s - u) / sigma) ** (-1 / xi) above u, and linear from 1 (s=0) to rate_u (s=u)
below it: only the tail matters to fusion. A weak prior (a Gaussian |z| tail by default) makes a new
series usable at once; the series' own excesses take over within a few hundred samples.

Each score is judged *before* it is learned, and excesses are learned by episode: consecutive scores
above `u` are held aside and folded in only when the episode ends, and only if none of them had p below
`learn_gate`. Healthy data loses a ~1e-4 sliver of its tail (a negligible bias); a fault, whose scores
stay high for many samples in a row (a CUSUM height, a residual), is judged against the tail as it was
before the fault, however slowly it builds, and never calibrates itself away.
"""

from __future__ import annotations

import numpy as np

from detectors.base import Floats, Ids, SeriesState

P_FLOOR = 1e-12
_XI_MAX = 0.45


class TailCalibrator:
    """Decayed peaks-over-threshold GPD fit per series id."""

    def __init__(
        self,
        threshold: float = 2.0,
        prior_rate: float = 0.0455,
        prior_mean_excess: float = 0.373,
        prior_weight: float = 10.0,
        window: float = 10_000.0,
        learn_gate: float = 1e-4,
    ) -> None:
        self.threshold = threshold
        self.learn_gate = learn_gate
        self.keep = 1.0 - 1.0 / window
        k0 = prior_weight
        self.state = SeriesState(
            {
                "n": k0 / prior_rate,  # decayed sample count
                "k": k0,  # decayed exceedance count
                "m1": k0 * prior_mean_excess,  # decayed sum of excesses
                "m2": k0 * 2.0 * prior_mean_excess**2,  # and of their squares (exponential prior)
                "ek": 0.0,  # the open episode: its count, sums and smallest p
                "em1": 0.0,
                "em2": 0.0,
                "emin": 1.0,
            }
        )

    def _gpd(self, ids: Ids) -> tuple[Floats, Floats, Floats]:
        st = self.state
        k = st["k"][ids]
        rate = np.clip(k / st["n"][ids], 1e-9, 1.0)
        mean = st["m1"][ids] / k
        var = np.maximum(st["m2"][ids] / k - mean**2, 1e-12)
        xi = np.clip(0.5 * (1.0 - mean**2 / var), 0.0, _XI_MAX)
        sigma = np.maximum(mean * (1.0 - xi), 1e-9)
        return rate, xi, sigma

    def tail(self, ids: Ids, scores: Floats) -> Floats:
        """P(score >= s) for each series under its fitted tail; 1 where the score is not finite."""
        rate, xi, sigma = self._gpd(ids)
        u = self.threshold
        excess = np.maximum(scores - u, 0.0)
        safe_xi = np.maximum(xi, 1e-6)
        log_tail = np.where(xi > 1e-6, -np.log1p(safe_xi * excess / sigma) / safe_xi, -excess / sigma)
        above = rate * np.exp(log_tail)
        below = rate + (1.0 - rate) * (1.0 - np.clip(scores, 0.0, u) / u)
        p = np.where(scores > u, above, below)
        return np.where(np.isfinite(scores), np.clip(p, P_FLOOR, 1.0), 1.0)

    def learn(self, ids: Ids, scores: Floats, p: Floats) -> None:
        """Fold one score per series (ids unique) into its decayed tail moments; NaN scores are skipped."""
        ok = np.isfinite(scores)
        if not ok.any():
            return
        st, ids, scores, p = self.state, ids[ok], scores[ok], p[ok]
        above = scores > self.threshold
        excess = np.where(above, scores - self.threshold, 0.0)
        ek = st["ek"][ids] + above
        em1 = st["em1"][ids] + excess
        em2 = st["em2"][ids] + excess**2
        emin = np.where(above, np.minimum(st["emin"][ids], p), st["emin"][ids])
        commit = np.where(~above & (emin >= self.learn_gate), 1.0, 0.0)
        keep = self.keep
        st["n"][ids] = keep * st["n"][ids] + 1.0
        st["k"][ids] = keep * st["k"][ids] + commit * ek
        st["m1"][ids] = keep * st["m1"][ids] + commit * em1
        st["m2"][ids] = keep * st["m2"][ids] + commit * em2
        st["ek"][ids] = np.where(above, ek, 0.0)
        st["em1"][ids] = np.where(above, em1, 0.0)
        st["em2"][ids] = np.where(above, em2, 0.0)
        st["emin"][ids] = np.where(above, emin, 1.0)

    def score(self, ids: Ids, scores: Floats) -> Floats:
        """Judge the scores (NaN: no judgement, p=1), then learn them."""
        p = self.tail(ids, scores)
        self.learn(ids, scores, p)
        return p

    def ensure(self, max_id: int) -> None:
        self.state.ensure(max_id)

    def bytes_per_series(self) -> int:
        return self.state.nbytes_per_series()

    def snapshot(self) -> bytes:
        return self.state.to_bytes()

    def restore(self, data: bytes) -> None:
        self.state.load_bytes(data)
