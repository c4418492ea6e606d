"""Named simulator variants, `random` and `wide`, which draw every knob of `physics.Physics` from its range.

Each named variant bends a few groups far from today's physics, the ways an independent generator or
a real fleet differs (issue 16). `random` is deterministic per seed: its knobs come from their own
generator, seeded from the simulation seed, so the same seed gives the same physics and telemetry.
`wide` draws from the same ranges on another stream: the tuning set's random physics, never equal to
a report-set `random` draw at any seed.
"""

from __future__ import annotations

import math
import typing
from typing import Any

import numpy as np
from annotated_types import Ge, Le
from pydantic import BaseModel

from prexid.service.offline.sim.physics import (
    GROUPS,
    Benign,
    Counters,
    Exporters,
    Fields,
    Knobs,
    Noise,
    Offsets,
    Physics,
    Precursors,
    Scrape,
    Thermal,
    Workload,
)

NAMED: dict[str, Physics] = {
    "default": Physics(),
    # the missed failure: a handful of SBEs before a row-remap Xid, on a fleet that leaks SBEs
    "weak-precursors": Physics(
        name="weak-precursors",
        counters=Counters(leaky_share=0.06, leaky_lo=1e-3, leaky_hi=8e-3),
        precursors=Precursors(strength=0.25, length_scale=0.35, ramp_power=3.0, row_remap="weak"),
        benign=Benign(per_node_day=4.0),
    ),
    # error counters tick in bursts and a tenth of the GPUs leak: single-family pre_xid false alerts
    "bursty-counters": Physics(
        name="bursty-counters",
        counters=Counters(leaky_share=0.1, leaky_hi=1e-2, burst_p=0.08, burst_all=True, node_leaky_share=0.3),
        exporters=Exporters(reset_share=0.5, nic_resets_per_day=1.0),
        benign=Benign(per_node_day=6.0),
    ),
    # bursty request-driven load, no checkpoints to speak of, long idle stretches between bursts
    "inference-fleet": Physics(
        name="inference-fleet",
        workload=Workload(
            mix="inference", checkpoint_every_s=7200.0, checkpoint_s=60.0, restarts_per_day=3.0
        ),
        thermal=Thermal(lag_s=240.0, coupling=0.035, ambient=24.0),
        offsets=Offsets(temp_sd=4.0, power_sd=30.0, clock_sd=20.0),
        benign=Benign(per_node_day=6.0),
    ),
    # flaky exporters: noise, coarse readings, stale and missing samples, restarts that reset counters
    "noisy-exporters": Physics(
        name="noisy-exporters",
        noise=Noise(gauge_scale=3.0, power_decimals=0, ratio_decimals=2),
        scrape=Scrape(stale_p=0.03, miss_p=0.01, node_lag_share=0.5),
        exporters=Exporters(dcgm_restarts_per_day=20.0, reset_share=0.8, node_restarts_per_day=8.0),
        benign=Benign(per_node_day=3.0),
    ),
    # what a stock dcgm-exporter ships (no SBE/DBE, no NVLink CRC, no violations) beside a full node-exporter
    "stock-exporters": Physics(
        name="stock-exporters",
        fields=Fields(dcgm_set="default-counters", extra_dcgm=True, node_extra=300),
        exporters=Exporters(nic_resets_per_day=0.5),
        benign=Benign(per_node_day=3.0),
    ),
    # a slow-cooled, idle-heavy fleet with mixed jobs and strong per-GPU differences
    "idle-mixed": Physics(
        name="idle-mixed",
        workload=Workload(mix="mixed", checkpoint_every_s=1200.0, checkpoint_s=300.0, idle_gap_scale=6.0),
        thermal=Thermal(lag_s=420.0, coupling=0.065, ambient=32.0),
        offsets=Offsets(temp_sd=5.0, power_sd=35.0, clock_sd=30.0),
        precursors=Precursors(strength=0.5, length_scale=0.5),
        benign=Benign(per_node_day=5.0),
    ),
}

_GROUP_MODELS: dict[str, type[Knobs]] = {
    "noise": Noise,
    "counters": Counters,
    "thermal": Thermal,
    "offsets": Offsets,
    "scrape": Scrape,
    "exporters": Exporters,
    "fields": Fields,
    "workload": Workload,
    "precursors": Precursors,
    "benign": Benign,
}
DRAWN: dict[str, int] = {"random": 16, "wide": 17}  # variant -> the stream its knobs are drawn on
NAMES: tuple[str, ...] = (*NAMED, *DRAWN)


def bounds(model: type[BaseModel], field: str) -> tuple[float, float] | None:
    """A numeric knob's declared (ge, le) range, or None for choices and flags."""
    lo = hi = None
    for m in model.model_fields[field].metadata:
        if isinstance(m, Ge):
            lo = float(m.ge)  # type: ignore[arg-type]
        if isinstance(m, Le):
            hi = float(m.le)  # type: ignore[arg-type]
    return None if lo is None or hi is None else (lo, hi)


def choices(model: type[BaseModel], field: str) -> tuple[Any, ...]:
    """The values a Literal or bool knob can take."""
    ann = model.model_fields[field].annotation
    return (False, True) if ann is bool else typing.get_args(ann)


def draw(rng: np.random.Generator, model: type[Knobs]) -> Knobs:
    """Every knob of one group from its range: log-uniform over rates spanning decades, else uniform."""
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        rng_ = bounds(model, name)
        if rng_ is None:
            opts = choices(model, name)
            values[name] = opts[int(rng.integers(len(opts)))]
            continue
        lo, hi = rng_
        if info.annotation is int:
            values[name] = int(rng.integers(int(lo), int(hi) + 1))
        elif lo > 0 and hi / lo >= 20:
            values[name] = float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        else:
            values[name] = float(rng.uniform(lo, hi))
    return model(**values)


def random_physics(seed: int, name: str = "random") -> Physics:
    """`--variant random` or `wide`: the knobs' own generator, so they do not shift the telemetry's stream."""
    rng = np.random.default_rng([seed, DRAWN[name]])
    groups = {g: draw(rng, _GROUP_MODELS[g]) for g in GROUPS}
    return Physics.model_validate({"name": name, **groups})


def resolve(name: str, seed: int) -> Physics:
    if name in DRAWN:
        return random_physics(seed, name)
    if name not in NAMED:
        raise SystemExit(f"unknown variant {name!r}; choose from {', '.join(NAMES)}")
    return NAMED[name]
