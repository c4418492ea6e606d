"""deploy/shippers/rsyslog-prexid.conf passes rsyslogd's own validation (with omkafka loaded), and the
validation is strict enough to catch a mistyped parameter."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CONF = Path(__file__).resolve().parents[2] / "deploy/shippers/rsyslog-prexid.conf"


def validate(conf: Path) -> subprocess.CompletedProcess[str]:
    rsyslogd = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
    if not Path(rsyslogd).exists():
        pytest.fail("rsyslogd is not installed (Debian rsyslog + rsyslog-kafka, see .ci/apt-packages.txt)")
    return subprocess.run([rsyslogd, "-N1", "-f", str(conf)], capture_output=True, text=True, timeout=60)


def test_the_rsyslog_example_validates_with_omkafka() -> None:
    run = validate(CONF)
    assert run.returncode == 0, run.stdout + run.stderr
    text = CONF.read_text()
    assert 'topic="prexid.kernel-logs"' in text and "partitioner=murmur2_random" in text


def test_rsyslogd_validation_rejects_a_mistyped_parameter(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text(CONF.read_text().replace("dynaKey", "dynaKee"))
    run = validate(bad)
    assert run.returncode != 0 and "dynaKee" in run.stdout + run.stderr
