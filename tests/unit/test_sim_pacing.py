"""`prexid simulate --realtime`: frames wait for the wall clock, `--speed` times faster; `--out` is
needed only where the simulation is written to files."""

from __future__ import annotations

from pathlib import Path

from prexid.service.app import cli
from prexid.service.offline.sim.command import Pacer, cmd_simulate


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_frames_are_held_until_the_wall_clock_reaches_them_at_the_given_speed() -> None:
    clock = FakeClock()
    pacer = Pacer(start_ts=1000.0, speed=10.0, clock=clock, sleep=clock.sleep)
    pacer.wait_for(1000.0)  # the first frame goes at once
    pacer.wait_for(1150.0)  # 150 simulated s at 10x: 15 s after the start
    clock.now += 20.0  # a slow write: the next frame (due at 130) is already late, and goes at once
    pacer.wait_for(1300.0)
    pacer.wait_for(1400.0)  # due at 140, now 135: no drift carried from the slow write
    assert clock.slept == [15.0, 5.0]


def test_files_need_out_and_kafka_does_not(tmp_path: Path) -> None:
    args = cli.parser().parse_args(["simulate", "--format", "wire", "--days", "0.001"])
    assert cmd_simulate(args) == 2  # a clear refusal, not a crash
    args = cli.parser().parse_args(["simulate", "--format", "kafka", "--realtime", "--speed", "0"])
    assert cmd_simulate(args) == 2
