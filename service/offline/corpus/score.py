"""Score the generic corpus NAB-style: prexid's own decisions, and a windowed Gaussian at its best threshold.

As NAB does over its corpus: raw scores are summed over every file and normalised once (null detector 0,
perfect 100), detections in a file's probationary first 15% are not counted. prexid is judged on its
own decisions (fixed threshold and cooldown, one configuration for all series), and its score column
as NAB's optimiser reads it: swept, at the best threshold in hindsight for each profile. The windowed
Gaussian (NAB's simplest baseline: |x - mean| / std over the preceding points) is given the best
threshold in hindsight too, so it is an upper bound of itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.service.offline.corpus.generate import PROBATION, Series
from prexid.service.offline.evaluate.nab import PROFILES, Profile, Totals, totals

Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]
GAUSS_WINDOW = 6400  # NAB's windowed Gaussian: its window, in points


def file_totals(s: Series, fired: Bools, p: Profile) -> Totals:
    counted = fired & (s.ts >= s.ts[0] + PROBATION * (s.ts[-1] - s.ts[0]))
    hits = s.ts[counted].tolist()  # only detections move the score: NAB's loop over them alone
    return totals(hits, [True] * len(hits), s.windows, p)


def corpus_score(series: list[Series], fired: list[Bools], p: Profile) -> Totals:
    total = Totals(0.0, 0.0, 0.0)
    for s, f in zip(series, fired, strict=True):
        total = total + file_totals(s, f, p)
    return total


def windowed_gaussian(values: Floats) -> Floats:
    """|z| of each point against the mean and std of up to GAUSS_WINDOW points before it (online)."""
    x = np.nan_to_num(values, nan=0.0)
    n = np.arange(len(x), dtype=np.float64)
    c1, c2 = np.concatenate([[0.0], np.cumsum(x)]), np.concatenate([[0.0], np.cumsum(x * x)])
    lo = np.maximum(np.arange(len(x)) - GAUSS_WINDOW, 0)
    k = n - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (c1[:-1] - c1[lo]) / k
        var = (c2[:-1] - c2[lo]) / k - mean**2
        z = np.abs(x - mean) / np.sqrt(np.maximum(var, 1e-12))
    return np.where(k >= 30, z, 0.0)


def best_threshold(series: list[Series], scores: list[Floats], p: Profile) -> tuple[float, float]:
    """(threshold, normalised score) maximising the corpus score: hindsight, as NAB's optimiser."""
    grid = np.quantile(np.concatenate(scores), np.linspace(0.9, 1.0, 201)[:-1])
    best = (float("inf"), 0.0)
    for th in np.unique(grid):
        got = corpus_score(series, [s >= th for s in scores], p).normalised
        if got > best[1]:
            best = (float(th), got)
    return best


def per_kind(series: list[Series], fired: list[Bools], p: Profile) -> dict[str, float]:
    """Normalised score per kind (kind `none`: false detections after probation, a count)."""
    out: dict[str, float] = {}
    for kind in dict.fromkeys(s.kind for s in series):
        pairs = [(s, f) for s, f in zip(series, fired, strict=True) if s.kind == kind]
        if kind == "none":
            out[kind] = -float(sum(file_totals(s, f, p).raw for s, f in pairs) / p.fp)
        else:
            out[kind] = corpus_score([s for s, _ in pairs], [f for _, f in pairs], p).normalised
    return out


Scorer = Callable[[list[tuple[Floats, Floats]]], list[tuple[Floats, Bools]]]


@dataclass(frozen=True, slots=True)
class CorpusResult:
    """Normalised scores per profile, prexid's per kind, and how well its scores rank points."""

    files: int
    windows: int
    detections: int
    prexid: dict[str, float]
    prexid_swept: dict[str, float]
    windowed_gaussian_best: dict[str, float]
    prexid_by_kind: dict[str, float]
    share_at_max_score: float
    distinct_score_share: float

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def evaluate(series: list[Series], scorer: Scorer) -> CorpusResult:
    """prexid's decisions', its swept score column's and the baseline's scores per profile, prexid's per
    kind, and its score saturation."""
    scored = scorer([(s.ts, s.values) for s in series])
    scores, fired = [sc for sc, _ in scored], [f for _, f in scored]
    allsc = np.concatenate(scores)
    top = float(np.nanmax(allsc))
    gauss = [windowed_gaussian(s.values) for s in series]
    return CorpusResult(
        files=len(series),
        windows=sum(len(s.windows) for s in series),
        detections=int(sum(int(f.sum()) for f in fired)),
        prexid={name: corpus_score(series, fired, p).normalised for name, p in PROFILES.items()},
        prexid_swept={name: best_threshold(series, scores, p)[1] for name, p in PROFILES.items()},
        windowed_gaussian_best={name: best_threshold(series, gauss, p)[1] for name, p in PROFILES.items()},
        prexid_by_kind=per_kind(series, fired, PROFILES["standard"]),
        share_at_max_score=float(np.mean(allsc >= top)),
        distinct_score_share=float(len(np.unique(allsc)) / len(allsc)),
    )
