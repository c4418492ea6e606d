"""The simulated node-exporter exports `node_boot_time_seconds`, as the real one does: a node's reboot
moves it, an exporter restart does not, a node that is down exports nothing, and every other series is
what it was before the boot time existed. Before, the simulator exported none, so replays only ever
exercised the pipeline's silence fallback for reboots."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from rich.console import Console

from prexid.service.app import cli
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.offline.replay import AlertWriter, replay_columnar
from prexid.service.offline.sim.boot import BOOT_TIME
from prexid.service.offline.sim.command import cmd_simulate
from prexid.service.offline.sim.config import SimConfig
from prexid.service.offline.sim.engine import ClusterSim
from prexid.service.offline.sim.physics import Exporters, Physics, Scrape
from prexid.service.offline.sim.variants import resolve
from prexid.service.pipeline.pipeline import Pipeline

SMALL = SimConfig(nodes=4, gpus=2, days=0.2, failures_per_day=40.0, warmup_s=3600.0, seed=3)
# every value but the boot times, SMALL at seed 3, simulated by main at 79a44b8 (before the boot time)
MAIN = {
    "default": "e2a11950ee82f5ea900035ff41d51b579476f7a51036731df905947e3ed125cf",
    "wide": "4e6666e93d765e53a324868ee75c8b973d964cafd4ed743edbd333f5d5e3b530",
    "noisy-exporters": "01f058bf20634b0d3633ab1a4dcf0ea524acfacfa4a309fc578c396c48513090",
    "bursty-counters": "cc6f2e27d5e1b856b5c59b1b5925e8658f70d511c37fb0f753f37875e0a478e7",
}
# node-00 of seed 3: a planned drain (reboot back at tick 218), a fatal Xid 119 at tick 317 whose repair
# drain reboots it (back at 458), another planned drain (back at 750)
REBOOTS = SimConfig(
    nodes=3, gpus=2, days=0.15, failures_per_day=40.0, drains_per_day=8.0, warmup_s=1800.0, seed=3
)
QUIET = SimConfig(
    nodes=3, gpus=2, days=0.25, failures_per_day=0.0, drains_per_day=0.0, warmup_s=600.0, seed=8
)
RESTARTS = Physics(
    name="restarts",
    exporters=Exporters(
        dcgm_restarts_per_day=30.0, reset_share=1.0, node_restarts_per_day=20.0, nic_resets_per_day=10.0
    ),
)


def values(sim: ClusterSim) -> np.ndarray:
    return np.vstack([f.values for f in sim.frames()])


def boot_columns(sim: ClusterSim) -> list[int]:
    cols = [i for i, (name, _) in enumerate(sim.series) if name == BOOT_TIME]
    assert [sim.series[i][1]["instance"] for i in cols] == [
        f"node-{n:02d}:9100" for n in range(sim.cfg.nodes)
    ]
    return cols


def column(sim: ClusterSim, name: str, node: int) -> int:
    (hit,) = [
        i
        for i, (n, lab) in enumerate(sim.series)
        if n == name and lab.get("instance") == f"node-{node:02d}:9100"
    ]
    return hit


def test_every_node_exports_a_whole_second_boot_time_before_the_run() -> None:
    sim = ClusterSim(QUIET)
    boot = values(sim)[:, boot_columns(sim)]
    assert not np.isnan(boot).any()
    assert (boot == boot[0]).all()  # nothing rebooted: it never moves
    assert (boot[0] < QUIET.start).all() and (boot[0] > QUIET.start - 91 * 86400).all()
    assert np.array_equal(boot[0], np.round(boot[0]))


@pytest.mark.parametrize("variant", list(MAIN))
def test_every_other_series_is_byte_identical_to_the_simulator_without_it(variant: str) -> None:
    sim = ClusterSim(SMALL, resolve(variant, 3))
    measured = np.array([name != BOOT_TIME for name, _ in sim.series])
    digest = hashlib.sha256()
    for frame in sim.frames():
        digest.update(frame.values[measured].tobytes())
    assert digest.hexdigest() == MAIN[variant]
    assert measured[-sim.cfg.nodes :].sum() == 0  # the boot times are the last columns


def test_a_reboot_moves_the_boot_time_to_the_new_boot_and_a_down_node_exports_nothing() -> None:
    sim = ClusterSim(REBOOTS)
    vals, cols = values(sim), boot_columns(sim)
    reboots = sorted(sim.schedule.reboot_ticks)
    assert [k for k, n in reboots if n == 0] == [218, 458, 750]
    for n, col in enumerate(cols):
        boot, cpu = vals[:, col], vals[:, column(sim, "node_cpu_seconds_total", n)]
        assert np.array_equal(np.isnan(boot), np.isnan(cpu))  # down: no series at all, boot time neither
        assert np.isnan(boot).sum() == 20 * sum(1 for _, m in reboots if m == n)  # five minutes a reboot
        seen = boot[~np.isnan(boot)]
        moves = np.flatnonzero(np.diff(seen))
        back = [k for k, m in reboots if m == n]
        assert len(moves) == len(back)  # it moves once a reboot, never otherwise
        for k in back:
            assert np.isnan(boot[k - 1]) and not np.isnan(boot[k])
            assert REBOOTS.ts(k) - 150 <= boot[k] <= REBOOTS.ts(k) - 45  # the kernel started minutes ago
            assert boot[k] > REBOOTS.ts(k - 20)  # after the node went down


def test_an_exporter_restart_or_a_nic_reset_does_not_move_it() -> None:
    sim = ClusterSim(QUIET, RESTARTS)
    vals, cols = values(sim), boot_columns(sim)
    kinds = {e.type for e in sim.schedule.events}
    assert {"node_exporter_restart", "exporter_restart", "counter_reset", "nic_reset"} <= kinds
    gaps = 0
    for n, col in enumerate(cols):
        boot, load = vals[:, col], vals[:, column(sim, "node_load1", n)]
        assert np.array_equal(np.isnan(boot), np.isnan(load))  # node-exporter restarting: neither
        gaps += int(np.isnan(boot).sum())
        assert len(set(boot[~np.isnan(boot)].tolist())) == 1
    assert gaps > 0


def test_a_lagging_node_exporter_shows_its_boot_time_as_late_as_its_other_series() -> None:
    lagging = Physics(name="lagging", scrape=Scrape(node_lag_share=1.0))
    sim = ClusterSim(REBOOTS, lagging)
    vals, cols = values(sim), boot_columns(sim)
    for n, col in enumerate(cols):
        assert np.array_equal(np.isnan(vals[:, col]), np.isnan(vals[:, column(sim, "node_load1", n)]))
    assert (218, 0) in sim.schedule.reboot_ticks  # node-00 down 198-217, back at 218: shown a scrape late
    assert np.isnan(vals[199:219, cols[0]]).all() and vals[219, cols[0]] > vals[198, cols[0]]


def replay(data: Path) -> tuple[list[dict[str, Any]], Pipeline]:
    """A simulated directory through one pipeline, as `prexid replay` runs it: its alerts (with the
    event time each was emitted at) and the pipeline, for its ledger."""
    _, processor = build(Settings())
    out = io.BytesIO()
    replay_columnar(data, [processor], AlertWriter(out, io.BytesIO()), Console(file=io.StringIO()), None)
    return [orjson.loads(line) for line in out.getvalue().splitlines()], processor.pipeline


def test_a_simulated_reboot_resolves_its_nodes_xid_alert_by_the_boot_time(tmp_path: Path) -> None:
    """node-00's Xid 119 alert resolves at the first scrape of its new boot, read from the boot time
    (so the silence fallback, which only serves nodes without one, is not what resolved it), and the
    ledger books each of its three reboots there, the planned drains' too. Without the boot time the
    fallback resolved the alert at the same scrape but booked only that one reboot."""
    size = ["--nodes", "3", "--gpus", "2", "--days", "0.15", "--seed", "3", "--failures-per-day", "40"]
    args = cli.parser().parse_args(["simulate", "--out", str(tmp_path), *size])
    assert cmd_simulate(args, drains_per_day=8.0, warmup_s=1800.0) == 0
    alerts, pipeline = replay(tmp_path)
    assert pipeline.boot_nodes == {"node-00", "node-01", "node-02"}
    xid = next(a for a in alerts if a["kind"] == "xid" and a["node"] == "node-00")
    assert xid["xid_code"] == 119 and xid["emitted_at"] == REBOOTS.ts(318)
    (resolved,) = [a for a in alerts if a["fingerprint"] == xid["fingerprint"] and a["status"] == "resolved"]
    assert resolved["emitted_at"] == REBOOTS.ts(459)  # tick 458, the first scrape back, once it is closed
    booked = [e.ts for e in pipeline.ledger.nodes["node-00"].events if e.kind == "reboot"]
    assert booked == [REBOOTS.ts(218), REBOOTS.ts(458), REBOOTS.ts(750)]
