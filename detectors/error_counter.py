"""Error-counter surprise: growth of a counter that should stay flat, against a Poisson baseline.

ECC, row-remap, PCIe-replay and NVLink error counters sit still on healthy hardware; what matters is how
surprising *this* increment is given the series' own long-run error rate. The rate is a gamma-Poisson
posterior (a weak prior of `prior_per_day` events a day) with exponential forgetting in event time, and
each increment's tail probability P(N >= delta | rate * dt) is the evidence.

Counter resets (driver reload, exporter restart) follow Prometheus: a drop means the counter restarted
from zero, so the increment is the new value itself.
"""

from __future__ import annotations

import numpy as np
from scipy.special import pdtrc

from detectors.base import Floats, Ids, SeriesState, unique_rounds

P_FLOOR = 1e-12
_DAY = 86400.0


class ErrorCounterSurprise:
    """Tail probability of each counter increment under the series' own Poisson error rate."""

    name = "error_counter"

    def __init__(
        self, prior_per_day: float = 0.5, prior_days: float = 1 / 24, forget_half_life_s: float = 7 * _DAY
    ) -> None:
        self.prior_events = prior_per_day * prior_days
        self.prior_seconds = prior_days * _DAY
        self.forget_half_life_s = forget_half_life_s
        self.state = SeriesState({"last": np.nan, "last_ts": -np.inf, "events": 0.0, "exposure": 0.0})

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        p = np.ones(len(ids), dtype=np.float64)
        if len(ids) == 0:
            return p
        self.state.ensure(int(ids.max()))
        for idx in unique_rounds(ids, ts):
            p[idx] = self._update_round(ids[idx], ts[idx], values[idx])
        return p

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st = self.state
        last, last_ts = st["last"][ids], st["last_ts"][ids]
        events, exposure = st["events"][ids], st["exposure"][ids]
        ok = np.isfinite(x) & (ts > last_ts)
        seen = ok & np.isfinite(last)
        with np.errstate(invalid="ignore"):
            delta = np.where(x >= last, x - last, x)  # a drop is a reset: counted from zero
        delta = np.where(seen, np.maximum(delta, 0.0), 0.0)
        dt = np.where(seen, ts - last_ts, 0.0)

        rate = (self.prior_events + events) / (self.prior_seconds + exposure)
        k = np.ceil(delta)
        with np.errstate(invalid="ignore"):
            tail = pdtrc(k - 1.0, rate * np.maximum(dt, 1e-9))
        p = np.where(k >= 1.0, np.maximum(tail, P_FLOOR), 1.0)

        decay = np.exp2(-dt / self.forget_half_life_s)
        st["events"][ids] = np.where(seen, events * decay + delta, events)
        st["exposure"][ids] = np.where(seen, exposure * decay + dt, exposure)
        st["last"][ids] = np.where(ok, x, last)
        st["last_ts"][ids] = np.where(ok, ts, last_ts)
        return p

    def baseline(self, ids: Ids) -> Floats:
        return self.state.read("last", ids)

    def bytes_per_series(self) -> int:
        return self.state.nbytes_per_series()

    def snapshot(self) -> bytes:
        return self.state.to_bytes()

    def restore(self, data: bytes) -> None:
        self.state.load_bytes(data)
