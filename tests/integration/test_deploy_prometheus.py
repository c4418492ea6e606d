"""prexid's alerting rules under Debian's promtool: syntax, unit tests, one generated source for the
plain-Prometheus and Helm copies, and a lint-clean /metrics from a running service."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.demo_process import demo_server

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/rules.yml"
KINDS = {"pre_xid", "xid", "node", "cluster", "prexid", "repeat_offender", "quarantine"}

pytestmark = pytest.mark.integration


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is missing: apt-get install prometheus (listed in .ci/apt-packages.txt)")
    return subprocess.run(
        [exe, *args], input=stdin.decode() if stdin else None, capture_output=True, text=True, timeout=120
    )


def test_rules_file_passes_promtool_check_rules() -> None:
    run = promtool("check", "rules", str(RULES))
    assert run.returncode == 0, run.stdout + run.stderr
    count = sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert count >= 14 and f"SUCCESS: {count} rules found" in run.stdout


def test_rules_unit_tests_pass_under_promtool() -> None:
    run = promtool("test", "rules", str(ROOT / "deploy/prometheus/rules_test.yml"))
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_broken_expectation_makes_promtool_fail(tmp_path: Path) -> None:
    """Guards the test above: promtool really compares the expected annotations."""
    text = (ROOT / "deploy/prometheus/rules_test.yml").read_text().replace("(fused score 0.70)", "(0.71)")
    broken = tmp_path / "rules_test.yml"
    broken.write_text(text.replace("rule_files: [rules.yml]", f"rule_files: [{RULES}]"))
    assert promtool("test", "rules", str(broken)).returncode != 0


def test_every_rule_has_a_kind_a_severity_and_the_runbook_of_its_kind() -> None:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            kind = rule["labels"]["kind"]
            assert kind in KINDS and rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert rule["annotations"]["runbook_url"].endswith(f"/{kind}.md")
            assert (ROOT / "docs/runbooks" / f"{kind}.md").is_file()


def test_helm_rules_and_plain_rules_are_both_what_the_generator_writes() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "deploy/gen_rules.py"), "--check"], capture_output=True)
    assert run.returncode == 0, run.stderr.decode()
    assert (ROOT / "helm/prexid/files/prometheus-rules.yml").read_text() == RULES.read_text()


def test_the_running_service_metrics_pass_promtool_check_metrics(tmp_path: Path) -> None:
    with demo_server(tmp_path / "prexid.log") as base:
        exposition = httpx.get(f"{base}/metrics").content
    assert (
        b"prexid_gpu_fused_score{" in exposition and b"prexid_pre_xid_lead_time_seconds_bucket" in exposition
    )
    run = promtool("check", "metrics", stdin=exposition)
    assert run.returncode == 0 and run.stdout.strip() == "" and run.stderr.strip() == "", (
        run.stdout + run.stderr
    )
