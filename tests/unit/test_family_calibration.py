"""The family calibration lowers the votes of a family whose healthy entities cross surprise levels more
often than its p-values promise, leaves a family whose p-values hold alone, keeps failures' and alerts'
episodes out of the null, and survives a snapshot."""

from __future__ import annotations

import numpy as np
import pytest

from prexid.detectors.family_calibration import FamilyCalibration
from prexid.detectors.fleet_vote import Verdict
from prexid.detectors.fusion import Fusion
from prexid.detectors.signals import N_FAMILIES, Family

STEP = 15.0
GPUS = 64
BURSTY, CLEAN = Family.NVLINK, Family.THERMAL


class Fleet:
    """64 GPUs. The clean family's evidence is -log10 of a uniform p-value every tick (what a calibrated
    detector gives); the bursty family's is as clean, but each GPU also bursts to surprise 7 for a minute
    about every 3 h (a counter that ticks in bursts, scored as Poisson)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.present = np.zeros((GPUS, N_FAMILIES), dtype=bool)
        self.present[:, [BURSTY, CLEAN]] = True
        self.is_gpu = np.ones(GPUS, dtype=bool)
        self.burst_at = self.rng.uniform(0, 3 * 3600.0, GPUS)

    def evidence(self, t: float) -> np.ndarray:
        ev = np.zeros((GPUS, N_FAMILIES))
        ev[:, CLEAN] = -np.log10(self.rng.uniform(size=GPUS))
        ev[:, BURSTY] = -np.log10(self.rng.uniform(size=GPUS))
        bursting = (t - self.burst_at) % (3 * 3600.0) < 60.0
        ev[bursting, BURSTY] = 7.0
        return ev

    def run(
        self, cal: FamilyCalibration, hours: float, start: float = 0.0, alerting: np.ndarray | None = None
    ) -> None:
        quiet = np.zeros(GPUS, dtype=bool) if alerting is None else alerting
        for i in range(int(hours * 240)):
            t = start + i * STEP
            cal.fit()  # as the pipeline does before each tick
            cal.observe(t, self.evidence(t), self.present, self.is_gpu, quiet)
        cal.fit()


def test_a_family_burstier_than_its_p_values_is_lowered_and_a_clean_one_is_not() -> None:
    cal = FamilyCalibration(N_FAMILIES)
    Fleet().run(cal, hours=12)
    assert cal.shift[0, BURSTY] > 1.5  # ~64 x 4 bursts over 6 in 32 GPU-days, 0.006 a GPU-day promised
    assert cal.shift[0, CLEAN] < 0.02  # chance: its p-values hold
    assert (cal.shift[1] == 0.0).all()  # no node entities: nothing learnt for nodes
    assert cal.per_entity(np.ones(3, dtype=bool))[0][:, BURSTY] == pytest.approx(cal.shift[0, BURSTY])
    assert (cal.sustained_shift == 0.0).all()  # nothing sustained was shown


def test_a_cold_start_lowers_nothing_and_a_few_episodes_lower_nothing() -> None:
    cal = FamilyCalibration(N_FAMILIES)
    fleet = Fleet()
    cal.observe(0.0, fleet.evidence(0.0), fleet.present, fleet.is_gpu, np.zeros(GPUS, dtype=bool))
    assert (cal.shift == 0.0).all()
    fleet.burst_at[4:] = 1e9  # four GPUs burst once each: no evidence against the family yet
    fleet.run(cal, hours=1)
    assert cal.episodes[0, BURSTY, -1] == pytest.approx(4.0, rel=0.01)
    assert (cal.shift == 0.0).all()


def test_episodes_of_gpus_whose_node_had_an_xid_are_not_the_null() -> None:
    cal = FamilyCalibration(N_FAMILIES)
    fleet = Fleet()
    for hour in range(12):  # every GPU's node has an Xid each hour: every episode is a failure's
        fleet.run(cal, hours=1, start=hour * 3600.0)
        cal.failed(np.arange(GPUS, dtype=np.int64), hour * 3600.0 + 3599.0)
        cal.fit()  # the next tick's
        assert cal.episodes.sum() == pytest.approx(0.0, abs=1e-9)
    assert cal.shift[0, BURSTY] == 0.0


def test_episodes_of_paging_entities_are_not_the_null() -> None:
    cal = FamilyCalibration(N_FAMILIES)
    Fleet().run(cal, hours=12, alerting=np.ones(GPUS, dtype=bool))
    assert cal.episodes.sum() == 0.0
    assert (cal.shift == 0.0).all()


def test_a_restored_calibration_continues_as_an_uninterrupted_one() -> None:
    whole, first = FamilyCalibration(N_FAMILIES), FamilyCalibration(N_FAMILIES)
    Fleet(seed=3).run(whole, hours=6)
    Fleet(seed=3).run(first, hours=3)
    second = FamilyCalibration(N_FAMILIES)
    second.restore_arrays({k: np.array(v, copy=True) for k, v in first.snapshot_arrays().items()})
    rest = Fleet(seed=3)
    rest.run(FamilyCalibration(N_FAMILIES), hours=3)  # the same random stream up to the cut
    rest.run(second, hours=3, start=3 * 3600.0)
    assert second.shift[0, BURSTY] > 0.0
    np.testing.assert_allclose(second.shift, whole.shift)
    np.testing.assert_allclose(second.episodes, whole.episodes)
    np.testing.assert_allclose(second.exposure, whole.exposure)


def _two_gpus(
    shift_bursty: float, sustained_shift: float = 0.0, ramp: float = 12.0
) -> tuple[Fusion, np.ndarray]:
    """GPU 0: thermal and NVLink at a family's cap (a two-family page). GPU 1: NVLink errors ramping,
    sustained, at `ramp` (a single-family page)."""
    fusion = Fusion()
    fusion.ensure(3)
    fusion.parent[:] = [2, 2, -1]
    fusion.present[:2, [CLEAN, BURSTY]] = True
    fusion.n_series[:2, [CLEAN, BURSTY]] = 1
    fusion.held[0, [CLEAN, BURSTY]] = 8.0
    fusion.held[1, BURSTY] = ramp
    fusion.streak[1, BURSTY] = 10
    fusion.fresh[1, BURSTY] = ramp
    shift, sustained = np.zeros((3, N_FAMILIES)), np.zeros((3, N_FAMILIES))
    shift[:2, BURSTY] = shift_bursty
    sustained[:2, BURSTY] = sustained_shift
    quiet = tuple(0.0 for _ in range(N_FAMILIES))
    verdict = Verdict(0.0, tuple(tuple(False for _ in range(N_FAMILIES)) for _ in range(2)), quiet, quiet)
    return fusion, fusion.apply(0.0, verdict, (shift, sustained))


def test_a_shift_lowers_a_family_s_vote_but_not_a_sustained_ramp_of_errors() -> None:
    _, before = _two_gpus(0.0)
    fusion, after = _two_gpus(2.0)
    assert before[0] == pytest.approx(12.0) and after[0] == pytest.approx(10.0)
    assert before[1] == after[1] == pytest.approx(10.0)  # the hard-error cap, as it was
    assert fusion.alone[1] == pytest.approx(10.0) and fusion.alone[0] == 0.0


def test_a_sustained_shift_spends_the_headroom_above_the_hard_error_cap_first() -> None:
    _, saturated = _two_gpus(0.0, sustained_shift=1.5, ramp=12.0)
    _, weak = _two_gpus(0.0, sustained_shift=1.5, ramp=9.5)
    assert saturated[1] == pytest.approx(10.0)  # 12 - 1.5 is still over the cap
    assert weak[1] == pytest.approx(8.0)  # below the firing threshold


class Ramps(Fleet):
    """As Fleet, and every `every_h` hours one GPU in turn ramps: its bursty family sustained at 8 for
    five minutes."""

    def __init__(self, every_h: float) -> None:
        super().__init__()
        self.every_s = every_h * 3600.0
        self.sustained = np.zeros((GPUS, N_FAMILIES), dtype=bool)

    def ramp(self, t: float) -> int | None:
        k, into = divmod(t, self.every_s)
        return int(k) % GPUS if into < 300.0 else None

    def run(
        self, cal: FamilyCalibration, hours: float, start: float = 0.0, alerting: np.ndarray | None = None
    ) -> None:
        quiet = np.zeros(GPUS, dtype=bool)
        for i in range(int(hours * 240)):
            t = start + i * STEP
            ev, sus = self.evidence(t), self.sustained.copy()
            if (g := self.ramp(t)) is not None:
                ev[g, BURSTY], sus[g, BURSTY] = 8.0, True
            cal.fit()
            cal.observe(t, ev, self.present, self.is_gpu, quiet, sus)
        cal.fit()


def test_a_family_whose_healthy_gpus_ramp_often_has_its_hard_error_path_lowered() -> None:
    cal = FamilyCalibration(N_FAMILIES)
    Ramps(every_h=0.5).run(cal, hours=24)  # ~36 confirmed ramps on healthy GPUs in a day
    assert cal.sustained_shift[0, BURSTY] > 1.0
    assert cal.sustained_shift[0, CLEAN] == 0.0


def test_a_failing_gpu_s_ramp_is_never_the_null_of_the_hard_error_path() -> None:
    cal = FamilyCalibration(N_FAMILIES)
    fleet = Ramps(every_h=0.5)
    for hour in range(24):  # each ramping GPU's node has an Xid within the hour: every ramp a failure's
        fleet.run(cal, hours=1, start=hour * 3600.0)
        cal.failed(np.arange(GPUS, dtype=np.int64), hour * 3600.0 + 3599.0)
        cal.fit()
        assert (cal.sustained_shift == 0.0).all()
    assert cal.sustained_episodes.sum() == 0.0
