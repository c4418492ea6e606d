"""The example Alertmanager config under Debian's amtool and a real Alertmanager: routing by `kind`,
and an Xid inhibiting the pre_xid alert of the same GPU (and only that GPU)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.kafka_broker import free_ports

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy/alertmanager/alertmanager.yml"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"

pytestmark = pytest.mark.integration


def tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.fail(f"{name} is missing: apt-get install prometheus-alertmanager (in .ci/apt-packages.txt)")
    return exe


def test_config_passes_amtool_check_config() -> None:
    run = subprocess.run([tool("amtool"), "check-config", str(CONFIG)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 inhibit rules" in run.stdout


@pytest.mark.parametrize(
    ("kind", "receiver"),
    [
        ("pre_xid", "gpu-oncall"),
        ("xid", "gpu-oncall-page"),
        ("node", "node-oncall"),
        ("cluster", "cluster-oncall-page"),
        ("prexid", "prexid-platform"),
        ("repeat_offender", "fleet-tickets"),
        ("quarantine", "cluster-oncall-page"),
        ("something-else", "prexid-default"),
    ],
)
def test_alerts_are_routed_by_their_kind(kind: str, receiver: str) -> None:
    run = subprocess.run(
        [tool("amtool"), "config", "routes", "test", f"--config.file={CONFIG}", f"kind={kind}"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == receiver


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = tool(ALERTMANAGER)
    [port], data = free_ports(1), tmp_path_factory.mktemp("alertmanager")
    args = [
        exe,
        f"--config.file={CONFIG}",
        f"--storage.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with (data / "log").open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"alertmanager did not start:\n{(data / 'log').read_text()}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def alert(kind: str, node: str, gpu: str) -> dict[str, object]:
    return {
        "labels": {"alertname": f"Prexid-{kind}", "kind": kind, "cluster": "c1", "node": node, "gpu": gpu}
    }


def test_an_xid_inhibits_the_pre_xid_alert_of_the_same_gpu_only(alertmanager: str) -> None:
    posted = [
        alert("pre_xid", "node-03", "5"),
        alert("pre_xid", "node-03", "4"),
        alert("xid", "node-03", "5"),
    ]
    assert httpx.post(f"{alertmanager}/api/v2/alerts", json=posted).status_code == 200
    deadline = time.monotonic() + 20
    while True:  # inhibition is evaluated when alerts are listed; give ingestion a moment
        listed = httpx.get(f"{alertmanager}/api/v2/alerts").json()
        state = {(a["labels"]["kind"], a["labels"]["gpu"]): a["status"] for a in listed}
        if len(state) == 3 and state[("pre_xid", "5")]["state"] == "suppressed":
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    assert state[("pre_xid", "5")]["inhibitedBy"] != []
    assert state[("pre_xid", "4")]["state"] == "active"
    assert state[("xid", "5")]["state"] == "active"
