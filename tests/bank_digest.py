"""Digests of every output of the detector bank on two seeded streams, to show a speed-up changed no bit.

Run it on two trees and compare the lines (a `git archive` of the older one on PYTHONPATH):

    mkdir -p /tmp/old/prexid && git archive main | tar -x -C /tmp/old/prexid
    PYTHONPATH=/tmp/old .venv/bin/python -m tests.bank_digest > old.txt
    .venv/bin/python -m tests.bank_digest > new.txt && diff old.txt new.txt

Each detector's p per batch, the bank's evidence (p, rising, fail-slow, cooling), the sweeps, the
baselines and the final snapshot's bytes; a 15-s stream of 2,000 series past every warm-up but the
2-day ones, and a 60-s stream of 400 cyclic series over 2.5 days (the seasonal and trend detectors
judge). Batches in registry order, jittered, shuffled, gapped and with repeated series; planted level
shifts, variance, drift, flatlines, NaN and Inf. stderr says which share of p each detector gave below 1.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.bank import DetectorBank
from prexid.detectors.signals import Kind

GROUP = 8


class Digests:
    """A running sha256 per output stream, and how often each detector's p was below 1."""

    def __init__(self) -> None:
        self.sums: dict[str, Any] = {}
        self.active: dict[str, list[int]] = {}

    def feed(self, name: str, arr: NDArray[Any]) -> None:
        h = self.sums.setdefault(name, hashlib.sha256())
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype} {a.shape}".encode())
        h.update(a.tobytes())

    def watch(self, obj: Any, name: str) -> None:
        """Record every p `obj.update` returns."""
        f: Callable[..., NDArray[np.float64]] = obj.update

        def update(ids: NDArray[np.int64], ts: NDArray[np.float64], v: NDArray[np.float64]) -> Any:
            p = f(ids, ts, v)
            self.feed(name, p)
            seen = self.active.setdefault(name, [0, 0])
            seen[0] += int((p < 1).sum())
            seen[1] += len(p)
            return p

        obj.update = update


def make_bank(n: int, rec: str, out: Digests) -> DetectorBank:
    bank = DetectorBank()
    ids = np.arange(n, dtype=np.int64)
    bank.set_kinds(ids, np.full(n, Kind.GAUGE, dtype=np.uint8))
    bank.set_groups(ids, ids // GROUP, ids // GROUP)
    bank.watch_temperature(ids[: n // 4], ids[: n // 4] // GROUP)
    bank.watch_work_rate(ids[n // 4 : n // 4 + n // 16], ids[: n // 16])
    for d in bank.detectors[Kind.GAUGE]:
        out.watch(d, f"{rec}:{d.name}")
    out.watch(bank.peer.residuals, f"{rec}:peer.residuals")
    return bank


def stream(out: Digests, rec: str, n: int, scrapes: int, step: float, seed: int, cycle: float = 0.0) -> None:
    rng = np.random.default_rng(seed)
    bank = make_bank(n, rec, out)
    offsets = rng.normal(0, 1, n)
    ids = np.arange(n, dtype=np.int64)
    fault = ids % 97
    for t in range(scrapes):
        now = t * step
        x = np.round(60 + offsets + rng.normal(0, 0.4, n) + cycle * np.sin(2 * np.pi * now / 86400.0), 2)
        x[fault == 1] += 3.0 * (t > scrapes // 2)  # a level shift
        x[fault == 2] += rng.normal(0, 2.0, (fault == 2).sum()) * (t > scrapes // 3)  # more spread
        x[fault == 3] += (t / scrapes) * 4.0  # a drift
        if t > scrapes // 2:
            x[fault == 4] = 61.0  # stuck
        x[fault == 5] = np.where(rng.random((fault == 5).sum()) < 0.1, np.nan, x[fault == 5])
        x[fault == 6] = np.where(rng.random((fault == 6).sum()) < 0.01, np.inf, x[fault == 6])
        ts = np.full(n, float(now))
        bi, bts, bx = ids, ts, x
        kind = t % 11
        if kind == 3:  # jittered times
            bts = ts + rng.uniform(-2, 2, n)
        elif kind == 5:  # random order
            o = rng.permutation(n)
            bi, bts, bx = ids[o], ts[o], x[o]
        elif kind == 7:  # a subset (gaps)
            keep = rng.random(n) > 0.2
            bi, bts, bx = ids[keep], ts[keep], x[keep]
        elif kind == 9 and t % 3 == 0:  # some series twice, the later sample 5 s on
            d = rng.choice(n, n // 10, replace=False)
            bi, bts, bx = np.r_[ids, ids[d]], np.r_[ts, ts[d] + 5.0], np.r_[x, x[d] + 0.1]
        if 200 <= t % 400 < 230:  # two nodes silent for a while (staleness)
            m = bi >= n - 2 * GROUP
            bi, bts, bx = bi[~m], bts[~m], bx[~m]
        ev = bank.update(bi, bts, bx)
        for k in ("p", "rising", "fail_slow_p", "cooling_p"):
            v = getattr(ev, k)
            if v is not None:
                out.feed(f"{rec}:ev.{k}", v)
        out.feed(f"{rec}:ev.up", ev.up())
        silent, p = bank.sweep(float(now))
        out.feed(f"{rec}:sweep.ids", silent)
        out.feed(f"{rec}:sweep.p", p)
        if t % 200 == 199:
            out.feed(f"{rec}:baseline", bank.baseline(ids))
    snapshot = b"".join(bytes(piece) for piece in bank.snapshot())
    out.feed(f"{rec}:snapshot", np.frombuffer(snapshot, dtype=np.uint8))


def main() -> None:
    print(
        "detectors from",
        DetectorBank.__module__,
        sys.modules[DetectorBank.__module__].__file__,
        file=sys.stderr,
    )
    out = Digests()
    stream(out, "a15", 2000, 1600, 15.0, 1)
    stream(out, "b60", 400, 3600, 60.0, 2, cycle=3.0)
    for k in sorted(out.sums):
        print(k, out.sums[k].hexdigest()[:16])
    for k in sorted(out.active):
        print(k, "p<1 share", round(out.active[k][0] / out.active[k][1], 4), file=sys.stderr)


if __name__ == "__main__":
    main()
