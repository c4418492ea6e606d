"""The fleet's aggregator: every partition's summaries merged per tick, judged once, one cluster alert.

One replica holds the role at a time (Kafka's group protocol elects it: `sources/aggregator_role.py`).
It reads the summaries topic in order and judges tick by tick in event time: a tick is judged once
every partition heard from within `lateness_s` of the newest has reported it (a watermark over
partitions). A partition further behind than that (its replica dead, a takeover replaying) does not
hold the others back: it is left out of the tick's merge and counted (`missing`); a summary arriving
for a tick already judged is counted `late` and only updates that partition's latest counts. A
partition with no record at a judged tick counts with its last one (a gap in its data).

The judgement is the pipeline's own: `fleet_vote.merge`, `Fusion.judge` and `Fusion.apply` on a fusion
layer with no entities (it holds the verdict the cluster vote reads), then `ClusterAlerts` (the same
lifecycle and alert builder a single process uses). Its state (the lifecycle, hysteresis, each
partition's latest counts, the firing alert) is a small JSON document (`snapshot`) the role publishes
with every verdict, so the next aggregator resumes from the last verdict and re-reads the summaries
after it: its transitions, and so the alert's fingerprint, are the ones the old one would have made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from prexid.detectors.fleet_vote import Summary, merge
from prexid.detectors.fusion import Fusion
from prexid.service.pipeline.alert_book import AlertBook
from prexid.service.pipeline.cluster_alerts import ClusterAlerts
from prexid.service.pipeline.fleet_summary import PartitionSummary
from prexid.service.pipeline.pipeline import PipelineConfig
from prexid.service.schemas import Alert

FORGET_S = 3600.0  # event seconds after which a silent partition is no longer counted missing
FIRST_HEARD_S = 60.0  # event seconds a first aggregator waits for the partitions it has not heard yet


@dataclass(frozen=True, slots=True)
class Judged:
    """One tick the aggregator judged: the cluster score and shares, and which partitions were left out."""

    tick: float
    score: float
    shared: tuple[tuple[bool, ...], ...]
    rising_share: tuple[float, ...]
    partitions: int
    missing: tuple[int, ...]


class Aggregator:
    def __init__(self, config: PipelineConfig, lateness_s: float) -> None:
        self.config = config
        self.lateness_s = lateness_s
        self.fusion = Fusion(config.fusion)  # no entities: the verdict state the cluster vote reads
        self.book = AlertBook(config.cluster, config.runbook_base_url)
        self.cluster = ClusterAlerts(self.book, config.lifecycle, config.cluster_persist_ticks)
        self.last: dict[int, Summary] = {}  # per partition: its counts at the newest tick judged or read
        self.pending: dict[int, dict[float, tuple[Summary, int]]] = {}  # ticks not judged: (counts, offset)
        self.judged_to = -np.inf
        self.late = 0  # summaries for ticks already judged
        self.missing_ticks = 0  # partition-ticks left out of a judgement
        self.replaying_to = -1  # offsets below this were read before a takeover: not late, re-read

    def observe(self, s: PartitionSummary, offset: int = -1) -> None:
        """Take one record of the summaries topic (at `offset`, where it was read)."""
        if s.tick <= self.judged_to:
            if offset >= self.replaying_to:
                self.late += 1
            held = self.last.get(s.partition)
            if held is None or s.tick >= held.tick:
                self.last[s.partition] = s.counts
            return
        self.pending.setdefault(s.partition, {})[s.tick] = (s.counts, offset)

    def resume_offset(self, next_offset: int) -> int:
        """Where a successor must read from to see every summary not yet judged."""
        offsets = [off for ticks in self.pending.values() for _, off in ticks.values() if off >= 0]
        return min(offsets, default=next_offset)

    def advance(self) -> tuple[list[Alert], list[Judged]]:
        """Judge every tick the watermark over partitions has passed; the alerts raised and the ticks."""
        alerts: list[Alert] = []
        judged: list[Judged] = []
        while (tick := self._next_tick()) is not None:
            j, raised = self._judge(tick)
            judged.append(j)
            alerts += raised
        return alerts, judged

    def _heard(self) -> dict[int, float]:
        """Each partition's newest tick, read or judged."""
        out = {p: s.tick for p, s in self.last.items()}
        for p, ticks in self.pending.items():
            if ticks:
                out[p] = max(out.get(p, -np.inf), max(ticks))
        return out

    def _next_tick(self) -> float | None:
        heard = self._heard()
        waiting = sorted({t for ticks in self.pending.values() for t in ticks})
        if not waiting:
            return None
        newest = max(heard.values())
        live = [t for t in heard.values() if t >= newest - self.lateness_s]
        watermark = min(live)
        if not np.isfinite(self.judged_to):  # a first aggregator gives every partition a moment to be heard
            watermark = min(watermark, newest - min(self.lateness_s, FIRST_HEARD_S))
        return waiting[0] if waiting[0] <= watermark else None

    def _judge(self, tick: float) -> tuple[Judged, list[Alert]]:
        heard = self._heard()
        counts, missing = [], []
        for p in sorted(heard):
            mine = self.pending.get(p, {})
            if tick in mine:
                self.last[p] = mine.pop(tick)[0]
            held = self.last.get(p)
            if held is None or held.tick < tick - self.lateness_s:
                missing.append(p)
                continue
            counts.append(held)
        self.missing_ticks += len(missing)
        for p in [p for p, held in self.last.items() if held.tick < tick - FORGET_S]:
            del self.last[p]  # a partition silent this long has left the cluster (no nodes left in it)
        self.judged_to = tick
        fusion = self.fusion
        verdict = fusion.judge(merge(counts))
        fusion.apply(tick, verdict)
        alerts = self.cluster.step(fusion, tick)
        judged = Judged(
            tick, self.cluster.score, verdict.shared, verdict.rising_share, len(counts), tuple(missing)
        )
        return judged, alerts

    # -- state: published with every verdict, restored by the next aggregator -------------------------
    def snapshot(self) -> dict[str, Any]:
        f = self.fusion
        return {
            "judged_to": self.judged_to if np.isfinite(self.judged_to) else None,
            "last": {
                str(p): [s.tick, s.votes, s.rising, s.carriers, s.stalled] for p, s in self.last.items()
            },
            "shared": f.shared_levels.tolist(),
            "workload_shift_at": f.workload_shift_at if np.isfinite(f.workload_shift_at) else None,
            "job_io": {
                k: [None if np.isnan(x) else x for x in np.asarray(v, dtype=np.float64).tolist()]
                for k, v in f.job_io.snapshot_arrays().items()
            },
            "lifecycle": {k: v.tolist() for k, v in self.cluster.snapshot_arrays().items()},
            **self.cluster.snapshot_meta(),
            **self.book.snapshot_meta(),
            "late": self.late,
            "missing_ticks": self.missing_ticks,
        }

    def restore(self, doc: dict[str, Any]) -> None:
        self.judged_to = -np.inf if doc["judged_to"] is None else float(doc["judged_to"])
        self.last = {
            int(p): Summary(float(t), _counts(v), _counts(r), _counts(c), stalled=_counts(s[0]) if s else ())
            for p, (t, v, r, c, *s) in doc["last"].items()
        }
        f = self.fusion
        f.shared_levels = np.asarray(doc["shared"], dtype=bool)
        f.workload_shift_at = -np.inf if doc["workload_shift_at"] is None else float(doc["workload_shift_at"])
        if "job_io" in doc:  # a verdict from before the job's storage bursts were timed starts afresh
            f.job_io.restore_arrays(
                {
                    k: np.array([np.nan if x is None else x for x in v], dtype=np.float64)
                    for k, v in doc["job_io"].items()
                }
            )
        lifecycle = doc["lifecycle"]
        self.cluster.restore(
            doc,
            {
                "phase": np.asarray(lifecycle["phase"], dtype=np.int8),
                "run": np.asarray(lifecycle["run"], dtype=np.int32),
                "since": np.asarray(lifecycle["since"], dtype=np.float64),
                # a verdict from before alerts were held: a quiet run starts over at the next tick
                "quiet_from": np.array(
                    [
                        np.nan if x is None else x
                        for x in lifecycle.get("quiet_from", [None] * len(lifecycle["phase"]))
                    ],
                    dtype=np.float64,
                ),
            },
        )
        self.book.restore_meta(doc)
        self.late, self.missing_ticks = int(doc["late"]), int(doc["missing_ticks"])


def _counts(table: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(c) for c in row) for row in table)
