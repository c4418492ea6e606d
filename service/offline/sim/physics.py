"""The simulator's physics knobs, each with the range `--variant random` draws it from (issue 16).

Every knob's default is today's constant, so `Physics()` is the `default` variant and simulates
byte for byte what the simulator did before knobs existed. The ranges are deliberately wide: a
detector that only holds near the defaults has learnt one simulator, not GPUs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Knobs(BaseModel):
    """A frozen group of knobs; unknown names are refused so a typo is not a silent default."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Noise(Knobs):
    gauge_scale: float = Field(1.0, ge=0.3, le=4.0, description="multiplies every gauge's noise sd")
    temp_decimals: int = Field(0, ge=0, le=1, description="decimals of the temperatures on the wire")
    power_decimals: int = Field(3, ge=0, le=3, description="decimals of the power reading")
    ratio_decimals: int = Field(4, ge=2, le=4, description="decimals of the DCP ratios")


class Counters(Knobs):
    clean_rate: float = Field(2e-5, ge=1e-6, le=2e-4, description="benign errors per scrape, clean GPU")
    leaky_share: float = Field(0.03, ge=0.0, le=0.15, description="share of GPUs leaking per counter")
    leaky_lo: float = Field(5e-4, ge=1e-4, le=2e-3, description="leaky GPU: lowest rate per scrape")
    leaky_hi: float = Field(5e-3, ge=2e-3, le=2e-2, description="leaky GPU: highest rate per scrape")
    burst_p: float = Field(0.3, ge=0.03, le=0.9, description="geometric p of a burst's size (mean 1/p)")
    burst_all: bool = Field(False, description="every error counter ticks in bursts, not only PCIe")
    node_leaky_share: float = Field(0.1, ge=0.0, le=0.4, description="nodes with leaky NIC/EDAC counters")
    node_leaky_rate: float = Field(0.01, ge=1e-3, le=0.05, description="their errors per scrape")


class Thermal(Knobs):
    lag_s: float = Field(90.0, ge=20.0, le=600.0, description="time constant of temperature behind power")
    coupling: float = Field(0.047, ge=0.02, le=0.08, description="degrees C per watt at steady state")
    ambient: float = Field(27.0, ge=18.0, le=35.0, description="inlet temperature, degrees C")


class Offsets(Knobs):
    temp_sd: float = Field(2.0, ge=0.0, le=6.0, description="per-GPU temperature offset sd, degrees C")
    power_sd: float = Field(12.0, ge=0.0, le=40.0, description="per-GPU power offset sd, W")
    clock_sd: float = Field(0.0, ge=0.0, le=40.0, description="per-GPU SM clock offset sd, MHz")


class Scrape(Knobs):
    stale_p: float = Field(0.0, ge=0.0, le=0.05, description="a sample repeats the last scrape's value")
    miss_p: float = Field(0.0, ge=0.0, le=0.02, description="a sample is missing from the scrape")
    node_lag_share: float = Field(
        0.0, ge=0.0, le=1.0, description="nodes whose node-exporter is a scrape late"
    )


class Exporters(Knobs):
    dcgm_restarts_per_day: float = Field(3.0, ge=0.0, le=30.0, description="cluster-wide, gaps in GPU series")
    reset_share: float = Field(0.0, ge=0.0, le=1.0, description="share of dcgm restarts resetting counters")
    node_restarts_per_day: float = Field(0.0, ge=0.0, le=20.0, description="node-exporter restarts")
    nic_resets_per_day: float = Field(0.0, ge=0.0, le=10.0, description="NIC driver reloads: counters to 0")


class Fields(Knobs):
    dcgm_set: Literal["full", "default-counters"] = Field(
        "full", description="default-counters: only what dcgm-exporter's default CSV exports"
    )
    extra_dcgm: bool = Field(False, description="fields beyond today's set (ENC/DEC, FB free, AGG ECC, ...)")
    node_extra: int = Field(0, ge=0, le=400, description="extra node-exporter series per node")


class Workload(Knobs):
    mix: Literal["training", "inference", "idle", "mixed"] = Field("training", description="job mix")
    checkpoint_every_s: float = Field(2700.0, ge=600.0, le=7200.0, description="the main job's cadence")
    checkpoint_s: float = Field(150.0, ge=60.0, le=600.0, description="one checkpoint's length")
    restarts_per_day: float = Field(0.7, ge=0.0, le=6.0, description="job restarts not caused by failures")
    idle_gap_scale: float = Field(1.0, ge=1.0, le=10.0, description="stretches the gaps between jobs")


class Precursors(Knobs):
    strength: float = Field(1.0, ge=0.05, le=1.0, description="scales every precursor's ramp")
    length_scale: float = Field(1.0, ge=0.1, le=1.0, description="scales every precursor's length")
    ramp_power: float = Field(2.0, ge=1.0, le=4.0, description="r = progress ** power: higher is later")
    row_remap: Literal["default", "weak"] = Field(
        "default", description="weak: Xid 63/64 warned only by 1-20 SBEs over 5-30 min on one GPU"
    )


class Benign(Knobs):
    per_node_day: float = Field(0.0, ge=0.0, le=12.0, description="extra benign events per node and day")


class Physics(BaseModel):
    """One variant's physics: the groups above. `Physics()` is today's simulator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    noise: Noise = Noise()
    counters: Counters = Counters()
    thermal: Thermal = Thermal()
    offsets: Offsets = Offsets()
    scrape: Scrape = Scrape()
    exporters: Exporters = Exporters()
    fields: Fields = Fields()
    workload: Workload = Workload()
    precursors: Precursors = Precursors()
    benign: Benign = Benign()

    def knobs(self) -> dict[str, object]:
        """Everything but the name: two variants with equal knobs simulate the same physics."""
        return self.model_dump(exclude={"name"})

    @property
    def is_default(self) -> bool:
        return self.knobs() == Physics().knobs()


GROUPS: tuple[str, ...] = tuple(n for n in Physics.model_fields if n != "name")
