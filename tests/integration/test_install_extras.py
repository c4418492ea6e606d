"""What `pip install prexid` (no extras, as the image installs it) can do: the offline path works end to
end without matplotlib or river, and says what it left out; the setting that needs river says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding prexid and its core dependencies only."""
    where = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, timeout=120)
    pip = [str(where / "venv" / "bin" / "python"), "-m", "pip", "install", "-q"]
    run = subprocess.run([*pip, str(ROOT)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    return where / "venv" / "bin"


def run(bin_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "prexid"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **(env or {})},
    )


def test_the_install_is_one_prexid_package_with_no_generic_top_level_names(bare_venv: Path) -> None:
    """`service` and `detectors` are folders of the source tree, not names put into site-packages."""
    ok = subprocess.run(
        [str(bare_venv / "python"), "-c", "import prexid.service, prexid.detectors"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert ok.returncode == 0, ok.stderr
    for generic in ("service", "detectors"):
        probe = subprocess.run(
            [str(bare_venv / "python"), "-c", f"import {generic}"], capture_output=True, cwd="/"
        )
        assert probe.returncode != 0, f"`import {generic}` works: a generic top-level package was installed"


def test_the_extras_are_not_installed_without_being_asked_for(bare_venv: Path) -> None:
    for module in ("river", "matplotlib", "kubernetes"):
        probe = subprocess.run([str(bare_venv / "python"), "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} came with the core install"


def test_simulate_replay_and_evaluate_work_without_plot_or_river(bare_venv: Path, tmp_path: Path) -> None:
    data = tmp_path / "run"
    sim = run(bare_venv, "simulate", "--out", str(data), "--nodes", "4", "--days", "0.25")
    assert sim.returncode == 0, sim.stderr
    rep = run(bare_venv, "replay", str(data), "--out", str(data / "alerts.jsonl"), "--baselines")
    assert rep.returncode == 0, rep.stderr
    assert "no hst baseline: river is not installed" in rep.stdout + rep.stderr
    assert {p.name for p in data.glob("alerts-*.jsonl")} == {
        "alerts-static_rules.jsonl",
        "alerts-zscore.jsonl",
    }
    report = tmp_path / "report"
    ev = run(
        bare_venv,
        "evaluate",
        "--alerts",
        str(data / "alerts.jsonl"),
        "--labels",
        str(data / "labels.jsonl"),
        "--report",
        str(report),
    )
    assert ev.returncode == 0, ev.stderr
    assert "no plots: matplotlib is not installed" in ev.stdout + ev.stderr
    text = (report / "report.md").read_text()
    assert "## prexid beside the baselines" in text and "static_rules" in text and "![" not in text
    assert not list(report.glob("*.png"))


def test_the_multivariate_voter_without_river_is_a_one_line_error_naming_the_setting(bare_venv: Path) -> None:
    demo = run(bare_venv, "demo", "--duration", "1", env={"PREXID_DETECTION__MULTIVARIATE": "true"})
    assert demo.returncode != 0
    assert "PREXID_DETECTION__MULTIVARIATE" in demo.stderr and "prexid[river]" in demo.stderr
    assert "Traceback" not in demo.stderr


def test_the_kubernetes_quarantine_without_its_client_is_a_one_line_error(bare_venv: Path) -> None:
    env = {"PREXID_QUARANTINE__ENABLED": "true"}  # the Kubernetes backend, dry run: still needs the client
    demo = run(bare_venv, "demo", "--duration", "1", env=env)
    assert demo.returncode != 0
    assert "PREXID_QUARANTINE" in demo.stderr and "prexid[k8s]" in demo.stderr
    assert "Traceback" not in demo.stderr
    slurm = run(bare_venv, "demo", "--duration", "1", env=env | {"PREXID_QUARANTINE__BACKEND": "slurm"})
    assert "prexid[k8s]" not in slurm.stderr  # the Slurm hook needs no client
