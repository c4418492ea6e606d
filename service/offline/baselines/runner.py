"""Runs every baseline beside the replay over the same scrapes, then writes `alerts-<name>.jsonl`."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol

import numpy as np
import orjson
from numpy.typing import NDArray

from prexid.service.offline.baselines.episodes import Layout
from prexid.service.offline.baselines.static_rules import StaticRules
from prexid.service.offline.baselines.zscore import ZScore

# river is an extra (`prexid[river]`): without it the HalfSpaceTrees baseline is left out, and said so
HST_AVAILABLE = importlib.util.find_spec("river") is not None


class Baseline(Protocol):
    name: str

    def observe(self, ts: float, row: NDArray[np.float64]) -> None: ...

    def alerts(self) -> list[dict[str, object]]: ...


class BaselineRunner:
    def __init__(self, data: Path, out_dir: Path) -> None:
        series = [orjson.loads(x) for x in (data / "series.jsonl").read_bytes().splitlines()]
        layout = Layout.from_series(series)
        self.out_dir = out_dir
        self.baselines: list[Baseline] = [StaticRules(layout), ZScore(layout)]
        if HST_AVAILABLE:
            from prexid.service.offline.baselines.hst import NodeHST

            self.baselines.append(NodeHST(layout))

    def observe(self, ts: float, row: NDArray[np.float64]) -> None:
        for b in self.baselines:
            b.observe(ts, row)

    def close(self) -> list[Path]:
        paths = []
        for b in self.baselines:
            path = self.out_dir / f"alerts-{b.name}.jsonl"
            path.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in b.alerts()))
            paths.append(path)
        return paths
