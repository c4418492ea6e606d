"""What to simulate: the cluster's shape, its time span, how often things break, and the seed."""

from __future__ import annotations

from dataclasses import dataclass

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class SimConfig:
    nodes: int = 63
    gpus: int = 8
    days: float = 7.0
    step_s: float = 15.0
    start: float = 1_796_205_600.0  # 2026-12-02T10:00:00Z
    seed: int = 1
    failures_per_day: float = 8.0  # GPU/node failures (XID or not); the study's cluster saw fewer
    nfs_saturations_per_day: float = 0.3  # cluster-wide checkpoint storms
    restarts_per_day: float = 0.7  # job restarts from checkpoint not caused by a failure
    drains_per_day: float = 0.5  # planned drains (maintenance), each ends in a reboot
    exporter_restarts_per_day: float = 3.0  # dcgm-exporter restarts: a gap in one node's GPU series
    checkpoint_every_s: float = 2700.0  # the main job's checkpoint cadence
    warmup_s: float = 2 * 3600.0  # no failure starts before this: detectors learn "normal" first
    model: str = "NVIDIA B200"

    @property
    def ticks(self) -> int:
        return int(self.days * DAY // self.step_s)

    def ts(self, k: int) -> float:
        return self.start + k * self.step_s

    def tick_of(self, ts: float) -> int:
        return int((ts - self.start) // self.step_s)
