"""The error counters' fleet prior over a whole fleet, from per-partition sufficient statistics that merge.

`ErrorCounterSurprise` judges a part's error episodes against a gamma prior of its field's episode rate
and the field's typical episode and burst sizes (`FleetPrior`: empirical Bayes, method of moments over
every part of the field). A partition's pipeline holds only its own nodes, so fitted on its own parts the
prior was a partition's, not the fleet's: a partition of clean GPUs never learned that the fleet's leaky parts
tick, and a replay split into partitions saw slightly other p than one process. So each partition
reduces its parts to sums per field (`PriorStats`: nine sums, whatever its node count, and its parts'
typical episode sizes as at most `CAP` order statistics), the partitions' stats are merged
(`merge`), and every partition fits the same prior from the merge (`FleetPrior.fit`).

Fields are matched across processes by a stable 32-bit key of the metric name (`field_key`). The wire
form (`to_wire`) is versioned base64; anything else is a ValueError, never a crash.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    Floats,
    Ids,
    Packed,
    Stored,
    order_statistics,
    pack_arrays,
    read_versioned,
    unpack_arrays,
)

CAP = 16  # typical episode sizes kept per field and partition (order statistics beyond); <= 255
WIRE_VERSION = 3  # v2: a part's bursts an episode are its excess over its own chaining (h22g); v3: its
# errors column is errors a burst, not an episode (h23e)
_DAY = 86400.0
# per field: series watched, parts with an episode over, parts with a warm-up episode running, exposure,
# exposure squared, episodes (decayed), episodes^2 / exposure, and the same two with running ones added
SUMS = ("count", "over", "live", "e", "e2", "n", "n2e", "nl", "nl2e")
_HEAD = np.dtype([("version", "u1"), ("fields", "<u4"), ("at", "<f8"), ("started", "<f8")])


def field_key(name: str) -> int:
    """A metric name's field key, the same 32-bit integer in every process."""
    return zlib.crc32(b"field:" + name.encode())


@dataclass(frozen=True, slots=True, eq=False)
class PriorStats:
    """One partition's (or a merged fleet's) sufficient statistics per field, fields in key order.

    `sizes`: per field, its parts' mean bursts an episode (beyond their own pace's chaining: the
    caller's `bursts`) and errors a burst (columns 0, 1) for parts with an episode over, or, where it
    has none, the running warm-up episodes' so far; sorted per column, CSR by `starts`.
    `stand_for` is how many parts each field's sizes stand for (more than are stored when capped at
    `CAP`)."""

    at: float  # event time the stats are as of (the refit they were taken for)
    started: float  # the first error-counter sample's refit period (warm-up), the earliest seen
    keys: NDArray[np.int64]
    sums: Floats  # (fields, len(SUMS))
    starts: NDArray[np.int64]
    sizes: Floats  # (stored, 2)

    @property
    def stand_for(self) -> Floats:
        s = self.sums
        return np.where(s[:, 1] > 0, s[:, 1], s[:, 2])

    @classmethod
    def empty(cls, at: float = -np.inf, started: float = np.inf) -> PriorStats:
        none = np.zeros(0, np.int64)
        return cls(at, started, none, np.zeros((0, len(SUMS))), np.zeros(1, np.int64), np.zeros((0, 2)))

    @classmethod
    def of(
        cls,
        at: float,
        started: float,
        key: Ids,
        episodes: Floats,
        exposure: Floats,
        bursts: Floats,
        per_burst: Floats,
        running: tuple[Floats, Floats, Floats],
    ) -> PriorStats:
        """Stats of parts given by their field's key (< 0: none), decayed episode counts, exposures, their
        episodes' bursts, their errors a burst, and their running episodes (begun in the warm-up: 1, else
        0; their bursts so far and errors a burst). Uncapped: `capped` before the wire."""
        known = (key >= 0) & (exposure > 0)
        if not known.any():
            return cls.empty(at, started)
        uniq, f = np.unique(key[known], return_inverse=True)
        k = len(uniq)
        n, e = episodes[known], exposure[known]
        live_n, live_b, live_e = (r[known] for r in running)
        parts, live = n >= 0.5, live_n >= 0.5
        nl = n + live
        weights = (np.ones(len(f)), parts, live, e, e * e, n, n * n / e, nl, nl * nl / e)
        sums = np.stack([np.bincount(f, w, k) for w in weights], axis=1).astype(np.float64)
        has_over = sums[:, 1] > 0
        use = np.where(has_over[f], parts, live)  # a field's sizes: its parts' over, else its running ones
        safe_n = np.where(parts, n, 1.0)
        b = np.where(parts, bursts[known] / safe_n, live_b)
        r = np.where(parts, per_burst[known], live_e)
        return cls.grouped(at, started, uniq.astype(np.int64), sums, f[use].astype(np.int64), b[use], r[use])

    @classmethod
    def grouped(
        cls, at: float, started: float, keys: Ids, sums: Floats, field: Ids, b: Floats, r: Floats
    ) -> PriorStats:
        ob, orr = np.lexsort((b, field)), np.lexsort((r, field))
        counts = np.bincount(field, minlength=len(keys))
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(at, started, keys, sums, starts, np.stack([b[ob], r[orr]], axis=1).reshape(-1, 2))

    def capped(self, cap: int = CAP) -> PriorStats:
        """At most `cap` sizes a field: evenly spaced order statistics, the ends included."""
        sizes = np.diff(self.starts)
        if not len(sizes) or int(sizes.max()) <= cap:
            return self
        kept = []
        for lo, hi in zip(self.starts[:-1].tolist(), self.starts[1:].tolist(), strict=True):
            block = self.sizes[lo:hi]
            if hi - lo > cap:
                block = order_statistics(block, cap)
            kept.append(block)
        starts = np.concatenate([[0], np.cumsum([len(b) for b in kept])]).astype(np.int64)
        return PriorStats(self.at, self.started, self.keys, self.sums, starts, np.concatenate(kept))

    def spread(self) -> list[Floats]:
        """Each field's sizes, a capped field's spread back over the parts it stands for."""
        out = []
        for i, (lo, hi) in enumerate(zip(self.starts[:-1].tolist(), self.starts[1:].tolist(), strict=True)):
            block, n = self.sizes[lo:hi], round(float(self.stand_for[i]))
            if 0 < hi - lo < n:
                block = order_statistics(block, n)
            out.append(block)
        return out

    def to_wire(self) -> str:
        """Versioned base64: head (version, fields, at, started), keys (u4), sums (f8), sizes stored per
        field (u1), the sizes (f8 pairs). Capped at `CAP` first."""
        s = self.capped()
        head = np.array([(WIRE_VERSION, len(s.keys), s.at, s.started)], dtype=_HEAD).tobytes()
        body = (
            s.keys.astype("<u4").tobytes()
            + s.sums.astype("<f8").tobytes()
            + np.diff(s.starts).astype("u1").tobytes()
            + s.sizes.astype("<f8").tobytes()
        )
        return base64.b64encode(head + body).decode()

    @classmethod
    def from_wire(cls, text: str) -> PriorStats:
        """`to_wire` read back; ValueError on anything else (another version, truncated, impossible)."""
        raw, head = read_versioned(text, _HEAD, WIRE_VERSION, "error-counter prior stats")
        k, at = int(head["fields"]), _HEAD.itemsize
        width = 4 * k + 8 * k * len(SUMS) + k
        if len(raw) < at + width:
            raise ValueError("error-counter prior stats truncated")
        keys = np.frombuffer(raw[at : at + 4 * k], dtype="<u4").astype(np.int64)
        at += 4 * k
        sums = np.frombuffer(raw[at : at + 8 * k * len(SUMS)], dtype="<f8").reshape(k, len(SUMS)).copy()
        at += 8 * k * len(SUMS)
        stored = np.frombuffer(raw[at : at + k], dtype="u1").astype(np.int64)
        tail = raw[at + k :]
        if len(tail) != 16 * int(stored.sum()):
            raise ValueError("error-counter prior stats truncated or malformed")
        sizes = np.frombuffer(tail, dtype="<f8").copy()
        stats = cls(
            float(head["at"]),
            float(head["started"]),
            keys,
            sums,
            np.concatenate([[0], np.cumsum(stored)]).astype(np.int64),
            sizes.reshape(-1, 2),
        )
        if not (np.isfinite(sums).all() and (sums >= 0).all() and np.isfinite(sizes).all()):
            raise ValueError("error-counter prior stats hold negative or non-finite sums")
        if bool((np.diff(keys) <= 0).any()) or bool((stored > stats.stand_for + 0.5).any()):
            raise ValueError("error-counter prior stats out of order or storing more sizes than parts")
        return stats


def merge(parts: Sequence[PriorStats]) -> PriorStats:
    """The fleet's stats: sums added per field key; a field's sizes those of the partitions with parts
    over (each capped one spread back over its parts), or, where no partition has any, the running
    episodes' of them all."""
    parts = [p for p in parts if len(p.keys)]
    at = max((p.at for p in parts), default=-np.inf)
    started = min((p.started for p in parts), default=np.inf)
    if not parts:
        return PriorStats.empty(at, started)
    if len(parts) == 1:
        return parts[0]
    keys = np.unique(np.concatenate([p.keys for p in parts]))
    sums = np.zeros((len(keys), len(SUMS)))
    for p in parts:
        sums[np.searchsorted(keys, p.keys)] += p.sums
    has_over = sums[:, 1] > 0
    fields, b, r = [], [], []
    for p in parts:
        slot = np.searchsorted(keys, p.keys)
        for i, block in enumerate(p.spread()):
            if len(block) and (p.sums[i, 1] > 0) == has_over[slot[i]]:
                fields.append(np.full(len(block), slot[i], dtype=np.int64))
                b.append(block[:, 0])
                r.append(block[:, 1])
    if not fields:
        return PriorStats(at, started, keys, sums, np.zeros(len(keys) + 1, np.int64), np.zeros((0, 2)))
    field, bursts, errors = np.concatenate(fields), np.concatenate(b), np.concatenate(r)
    return PriorStats.grouped(at, started, keys, sums, field, bursts, errors)


class FleetPrior:
    """Gamma prior of the episode rate, and mean sizes, per fleet field (method of moments).

    Sizes: the median part's bursts an episode and errors a burst (a failing part's long ramp must not
    set the fleet's). Rates: pooled m = (episodes + a0) / (exposure + b0), hyperprior `prior_per_day`
    at `prior_days` weight; the between-part variance
    v = (sum (n_i - m e_i)^2 / e_i - (N - 1) m) / (E - sum e_i^2 / E) (DerSimonian-Laird for Poisson
    counts) gives beta = m / v seconds of exposure, at most `max_weight_s` (so a part's own day
    outweighs the fleet), and alpha = m beta. Fitted from the fleet's sufficient statistics
    (`PriorStats`), so every partition fits the same prior.

    Episodes still running that began in the warm-up stand for a field's episodes, rate and sizes
    while none of its episodes is over (parts whose counters started ticking have shown that they do,
    better evidence than the hyperprior's guess); once one is over they count no more: a running ramp
    (a failing part's, judged against this prior) must not teach the fleet its own size or pace.
    """

    def __init__(
        self, prior_per_day: float, prior_days: float, prior_size: float, max_weight_s: float
    ) -> None:
        self.a0 = prior_per_day * prior_days
        # bursts an episode and errors a burst before any is seen, at one part's weight: the hyperprior's
        # episode of `prior_size` bursts books as many errors (one a burst)
        self.size0 = np.array([prior_size, 1.0])
        self.b0 = prior_days * _DAY
        self.max_weight_s = max_weight_s
        self.alpha = np.zeros(0)
        self.beta = np.zeros(0)
        self.bursts_mean = np.zeros(0)  # bursts per episode, the fleet's
        self.errors_per_burst = np.zeros(0)  # the fleet's
        self.fitted_at = -np.inf  # event time of the last fit
        self.started = np.inf  # refit period of the first sample this prior's detector (or fleet) saw
        self.keys = np.zeros(0, dtype=np.int64)  # each field's fleet key (`field_key`)

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
                "errors_per_burst": self.errors_per_burst,
                "fitted_at": np.array([self.fitted_at]),
                "started": np.array([self.started]),
                "keys": self.keys.astype(np.float64),
            }
        )

    def restore(self, data: Stored) -> None:
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in unpack_arrays(data).items()}
        self.alpha, self.beta = arrays["alpha"], arrays["beta"]
        self.bursts_mean, self.errors_per_burst = arrays["bursts_mean"], arrays["errors_per_burst"]
        self.fitted_at = float(arrays["fitted_at"][0])
        self.started = float(arrays["started"][0])
        keys = arrays["keys"]
        whole = np.isfinite(keys) & (keys == np.trunc(keys)) & (np.abs(keys) < 2.0**63)
        if not whole.all():  # cast to int64 it would be a garbage key, silently
            raise ValueError("fleet prior keys are not whole numbers")
        self.keys = keys.astype(np.int64)

    def default(self) -> tuple[float, float, float, float]:
        """The prior of a field with no data: the hyperprior alone."""
        rate = self.a0 / self.b0
        beta = min(self.b0, self.max_weight_s)
        return rate * beta, beta, float(self.size0[0]), float(self.size0[1])

    def fit(self, stats: PriorStats, keys: Ids) -> None:
        """Refit every local field (field i's fleet key: `keys[i]`) from the fleet's stats (`merge`)."""
        s = stats.sums
        count, per_part, live = s[:, 0], s[:, 1], s[:, 2]
        sum_e, sum_e2 = s[:, 3], s[:, 4]
        none_over = per_part == 0
        sum_n = np.where(none_over, s[:, 7], s[:, 5])  # episodes begun: running ones where none is over
        sq = np.where(none_over, s[:, 8], s[:, 6])
        m = (sum_n + self.a0) / (sum_e + self.b0)
        q = np.maximum(sq - 2.0 * m * sum_n + m * m * sum_e, 0.0)  # sum (n_i - m e_i)^2 / e_i
        spread = sum_e - sum_e2 / np.maximum(sum_e, 1e-9)  # 0 for one part alone
        between = spread > 1e-6 * sum_e
        v = np.where(
            between, np.maximum(q - np.maximum(count - 1, 0) * m, 0.0) / np.where(between, spread, 1.0), 0.0
        )
        with np.errstate(divide="ignore"):
            beta = np.minimum(np.where(v > 0, m / v, np.inf), self.max_weight_s)
        weight = np.where(none_over, live, per_part)
        median = np.array([np.median(b, axis=0) if len(b) else (np.nan, np.nan) for b in stats.spread()])
        median = median.reshape(-1, 2)
        sizes = (self.size0 + weight[:, None] * np.nan_to_num(median)) / (1.0 + weight[:, None])

        # fields of no part watched anywhere: the hyperprior's rate at full weight, its sizes
        pos = np.minimum(np.searchsorted(stats.keys, keys), max(len(stats.keys) - 1, 0))
        hit = (stats.keys[pos] == keys) if len(stats.keys) else np.zeros(len(keys), dtype=bool)
        m0 = self.a0 / self.b0
        self.beta = np.where(hit, beta[pos] if len(beta) else 0.0, self.max_weight_s)
        self.alpha = np.where(hit, (m * beta)[pos] if len(m) else 0.0, m0 * self.max_weight_s)
        self.bursts_mean = np.where(hit, sizes[pos, 0] if len(sizes) else 0.0, self.size0[0])
        self.errors_per_burst = np.where(hit, sizes[pos, 1] if len(sizes) else 0.0, self.size0[1])

    def warm(self, warmup_s: float) -> bool:
        """Whether the prior has been refitted `warmup_s` after the first sample (its warm-up)."""
        return self.fitted_at - self.started >= warmup_s

    def of(self, field: Floats) -> tuple[Floats, Floats, Floats, Floats]:
        """(alpha, beta, bursts an episode, errors a burst) for each series' field (-1 or unfitted: the
        default)."""
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
            pick(self.errors_per_burst, errors0),
        )
