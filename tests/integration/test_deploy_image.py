"""What the Dockerfile's steps do, run for real outside Docker: the build stage's wheel carries the
dashboard's static files, and the HEALTHCHECK command passes on a live prexid and fails on a dead one."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from tests.integration.demo_process import demo_server
from tests.integration.kafka_broker import free_ports

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def healthcheck_command() -> list[str]:
    check = next(
        i["value"]
        for i in DockerfileParser(str(ROOT / "Dockerfile")).structure
        if i["instruction"] == "HEALTHCHECK"
    )
    command = json.loads(check[check.index("CMD") + 3 :])
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def test_the_build_stage_wheel_contains_prexid_and_its_dashboard_assets(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    (wheel,) = tmp_path.glob("prexid-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "prexid/service/http/static/index.html",
        "prexid/service/http/static/dashboard.js",
        "prexid/service/http/dashboard.py",
        "prexid/detectors/fusion.py",
    } <= names
    # one installed package: nothing generic like `service` or `detectors` at the top of site-packages
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"prexid"}


def test_the_healthcheck_passes_against_a_live_prexid(tmp_path: Path) -> None:
    with demo_server(tmp_path / "prexid.log") as base:
        port = base.rsplit(":", 1)[1]
        run = subprocess.run(
            healthcheck_command(), env={"PREXID_HTTP_PORT": port}, capture_output=True, timeout=30
        )
    assert run.returncode == 0, run.stderr


def test_the_healthcheck_fails_when_nothing_answers() -> None:
    run = subprocess.run(
        healthcheck_command(),
        env={"PREXID_HTTP_PORT": str(free_ports(1)[0])},
        capture_output=True,
        timeout=30,
    )
    assert run.returncode != 0
