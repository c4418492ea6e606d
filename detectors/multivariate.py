"""Optional multivariate voter: river's HalfSpaceTrees over each node's vector of latest values.

The per-series detectors see one metric at a time; a node whose metrics are each within range but
whose *combination* is new (hot yet idle, busy yet cold) needs a joint model. One river pipeline
(MinMaxScaler | HalfSpaceTrees) per node learns the node's latest-value vector once per batch; its
score, as -log(1 - score) since HST's scores crowd just below 1, is calibrated per node like every
other. The evidence is attributed to the node's sample
that moved most since its previous value, so it lands in one signal family, not in all of them.

This runs Python per node per batch (river is per-sample by design), which is why it is off by
default (`PREXID_DETECTION__MULTIVARIATE=true` turns it on) and never on the cheap path.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from prexid.detectors.base import (
    ArrayState,
    Floats,
    Ids,
    Packed,
    SeriesState,
    Stored,
    leaf,
    pack_blobs,
    unique_rounds,
    unpack_blobs,
)
from prexid.detectors.calibration import TailCalibrator


class RiverNodeAnomaly(ArrayState):
    """HalfSpaceTrees per node over the node's latest values, calibrated per node."""

    name = "river_hst"
    nested = ("calibrator",)

    def __init__(self, n_trees: int = 25, height: int = 8, window_size: int = 100, seed: int = 7) -> None:
        self.n_trees, self.height, self.window_size, self.seed = n_trees, height, window_size, seed
        self.warmup = 2 * window_size  # HST scores nothing useful before its first reference window
        self.state = SeriesState({"node": -1.0, "last": np.nan})
        self.models: dict[int, Any] = {}
        self.features: dict[int, dict[int, float]] = {}
        self.learned: dict[int, int] = {}
        self.calibrator = TailCalibrator(threshold=3.0, prior_rate=0.1, prior_mean_excess=0.3)

    def set_nodes(self, ids: Ids, nodes: Ids) -> None:
        if len(ids):
            self.state.ensure(int(ids.max()))
            self.state["node"][ids] = nodes

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        p = np.ones(len(ids), dtype=np.float64)
        if len(ids) == 0:
            return p
        self.state.ensure(int(ids.max()))
        self.calibrator.ensure(int(self.state["node"].max()) + 1)
        for idx in unique_rounds(ids, ts):
            p[idx] = self._update_round(ids[idx], values[idx])
        return p

    def _update_round(self, ids: Ids, x: Floats) -> Floats:
        node = self.state["node"][ids].astype(np.int64)
        prev = self.state["last"][ids]
        ok = np.isfinite(x) & (node >= 0)
        self.state["last"][ids[ok]] = x[ok]
        with np.errstate(invalid="ignore", divide="ignore"):
            moved = np.where(ok, np.abs(x - prev) / np.maximum(np.abs(prev), 1e-9), -1.0)
        moved = np.nan_to_num(moved, nan=-1.0, posinf=1e300)
        nodes = np.unique(node[ok])
        raw = np.array([self._score_node(int(n), ids, x, ok & (node == n)) for n in nodes])
        p = np.ones(len(ids))
        if len(nodes):
            p_node = self.calibrator.score(nodes, raw)
            for n, pn in zip(nodes, p_node, strict=True):
                mine = np.flatnonzero(ok & (node == n))
                p[mine[np.argmax(moved[mine])]] = pn
        return p

    def _score_node(self, n: int, ids: Ids, x: Floats, mine: Any) -> float:
        feats = self.features.setdefault(n, {})
        feats.update(zip(ids[mine].tolist(), x[mine].tolist(), strict=True))
        model = self.models.get(n)
        if model is None:
            from river import anomaly, preprocessing  # here: importing river (and scipy.stats) takes ~1 s

            model = self.models[n] = preprocessing.MinMaxScaler() | anomaly.HalfSpaceTrees(
                n_trees=self.n_trees, height=self.height, window_size=self.window_size, seed=self.seed
            )
        named = {str(k): v for k, v in feats.items()}
        score = -np.log1p(-min(float(model.score_one(named)), 1.0 - 1e-12))  # HST saturates near 1
        model.learn_one(named)
        self.learned[n] = self.learned.get(n, 0) + 1
        return score if self.learned[n] > self.warmup else float("nan")

    def baseline(self, ids: Ids) -> Floats:
        return np.full(len(ids), np.nan)

    def bytes_per_series(self) -> int:
        """Array state plus the pickled river models shared out over the series that feed them (the
        calibrator's state is per node, not per series)."""
        fed = max(int((self.state["node"] >= 0).sum()), 1)
        return self.state.nbytes_per_series() + len(pickle.dumps(self.models)) // fed

    def forget(self, ids: Ids) -> None:
        """These series leave their node's features (a node's model and calibrator stay: per node)."""
        ids = ids[ids < self.state.capacity]
        for sid, node in zip(ids.tolist(), self.state["node"][ids].tolist(), strict=True):
            self.features.get(int(node), {}).pop(sid, None)
        self.state.reset(ids)

    def snapshot(self) -> Packed:
        """The state and the calibrator, then the river models as one more blob (a pickle)."""
        river_state = pickle.dumps((self.models, self.features, self.learned))
        return Packed([*super().snapshot(), *pack_blobs(river_state)])

    def restore(self, data: Stored) -> None:
        *arrays, river_state = unpack_blobs(data)
        super().restore(arrays)
        self.models, self.features, self.learned = pickle.loads(leaf(river_state))  # our own snapshot
