"""Runs of exceedances: evidence a calibrated score gives by staying high, where no one point is rare.

In heavy-tailed noise a shift of ten sigmas is, point by point, one of the outliers the tail calibrator
has learned (p 1e-3), and the detector's baseline has followed it within an hour; what no heavy tail
gives is such points in a row. The calibrator's open episode is the run (k exceedances of its
threshold in a row), and k in a row are as rare as `rate * stick ** (k - 1)`: its exceedance rate, and
`stick`, how often one of the series' exceedances has followed another (a decayed share, learned at a
running mean's pace while young). A series whose exceedances come in runs by nature (a temperature
wandering for minutes, stick 0.6) would make that geometric model overconfident, so runs count only
where stick is under `max_stick`: where exceedances usually stand alone. The smaller of the point's
and the run's p is the sample's (at most twice too small: two looks).

Once `stick` is settled (taught by as many steps as its window), a run that is evidence (p below the
calibrator's `learn_gate`) teaches it nothing more, as a fault's episode teaches the tail nothing:
taught by its own steps, a held shift of five sigmas in Student-t noise taught stick past `max_stick`
within three or four points and stopped counting before the run was rare enough (the corpus'
`heavy_tail` files). A young stick, still learned at a running mean's pace, is taught by every step:
frozen at its prior, a residual that wanders (AR(1) 0.9) had its first natural runs compound to p 1e-11.
Like a fault's episode, a run that was evidence is not folded into the tail when it ends (one no rarer
than the calibrator's `count_floor` counts as one exceedance: `calibration`).

The level detector judges its robust |z| so (`RobustDeviation(runs=True)`, the bank's), and so does the
seasonal detector its residual's |z| (the level's on a series with a daily cycle): one implementation.

>>> import numpy as np
>>> cal, ids = RunCalibrator(), np.zeros(1, dtype=np.int64)
>>> z = np.abs(np.random.default_rng(0).normal(0.0, 1.0, 2000))
>>> _ = [cal.score(ids, z[i : i + 1]) for i in range(2000)]
>>> p = [float(cal.score(ids, np.array([3.0]))[0]) for _ in range(6)]  # six points of 3 sigma in a row
>>> bool(p[0] > 1e-3), bool(p[-1] < 1e-6)
(True, True)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import Floats, Ids, Index, subset
from prexid.detectors.calibration import P_FLOOR, TailCalibrator


class RunCalibrator(TailCalibrator):
    """A `TailCalibrator` whose open episode is evidence too: each score's p, or its run's where that is
    smaller; it keeps `stick` per series beside the tail."""

    def __init__(
        self,
        young_xi: float = 0.0,
        prior: float = 0.05,
        prior_weight: float = 5.0,
        window: float = 50.0,
        max_stick: float = 0.25,
    ) -> None:
        super().__init__(young_xi=young_xi, extra={"stick": prior})
        self.prior_weight = prior_weight
        self.least_weight = 1.0 / window
        self.max_stick = max_stick

    def score(self, ids: Index, scores: Floats) -> Floats:
        """Judge the scores, point and run (see the module doc), then learn them: a run that was
        evidence is, like any fault's episode, not learned as the series' tail (beyond one exceedance,
        if no rarer than `count_floor`)."""
        finite, above = self._screen(scores)
        p = self._tail(ids, scores, finite, above)
        ran = np.flatnonzero(self.run_length(ids) > 0.0)  # series whose sample before this one exceeded
        if len(ran):  # the usual sample: a few percent of series are in a run; their work alone
            self._runs(subset(ids, ran), ran, p, finite, above)
        self._learn(ids, scores, p, finite, above)
        return p

    def _runs(
        self, at: Ids, ran: NDArray[np.intp], p: Floats, finite: NDArray[np.bool_], above: NDArray[np.bool_]
    ) -> None:
        """Each run's p into `p` where smaller, and what its step teaches `stick`."""
        rate = self.rate(at)  # its exceedance rate, read once for judging and for learning
        k = np.where(above[ran], self.run_length(at) + 1.0, 0.0)  # exceedances in a row, this one included
        stick = self.state["stick"][at]  # judged by what the run's steps before this one taught
        long = (k >= 2.0) & (stick < self.max_stick)  # where exceedances usually stand alone
        step = finite[ran]  # what follows an exceedance teaches how often another does
        weight = np.maximum(self.least_weight, 1.0 / (self.samples(at) * rate + self.prior_weight))
        if long.any():
            run_p = rate[long] * stick[long] ** (k[long] - 1.0)
            p[ran[long]] = np.minimum(p[ran[long]], np.maximum(run_p, P_FLOOR))
            settled = weight[long] <= self.least_weight  # young, every step teaches it (module doc)
            step[np.flatnonzero(long)[settled & (run_p < self.learn_gate)]] = False  # a fault's run
        if step.any():
            w = weight[step]
            self.state["stick"][at[step]] = stick[step] + w * ((k[step] > 0.0) - stick[step])
