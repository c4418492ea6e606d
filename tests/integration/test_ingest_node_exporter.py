"""A real prometheus-node-exporter scrape decodes with every sample accounted for.

The exporter (Debian `prometheus-node-exporter`) runs on 127.0.0.1 with a free port, reading this
machine's /proc and /sys plus a textfile with the awkward values (NaN, ±Inf, escaped label values).
The count and the samples are checked against prometheus_client's own text parser.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from prexid.service.decode import prom_text
from prexid.service.pipeline.processor import Message
from tests.integration.kafka_broker import free_ports
from tests.unit import wiring

pytestmark = pytest.mark.integration

TEXTFILE = """# HELP prexid_test_odd Odd values a scrape may carry.
# TYPE prexid_test_odd gauge
prexid_test_odd{case="nan"} NaN
prexid_test_odd{case="pinf"} +Inf
prexid_test_odd{case="ninf"} -Inf
prexid_test_odd{case="quote \\"q\\" and backslash \\\\"} 1.5e-07
"""


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bytes]:
    binary = shutil.which("prometheus-node-exporter")
    if binary is None:
        pytest.fail("prometheus-node-exporter is not installed (Debian package, see .ci/apt-packages.txt)")
    textdir = tmp_path_factory.mktemp("textfile")
    (textdir / "odd.prom").write_text(TEXTFILE)
    [port] = free_ports(1)
    proc = subprocess.Popen(
        [
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.mountstats",
            f"--collector.textfile.directory={textdir}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield _first_scrape(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        proc.terminate()
        proc.wait(10)


def _first_scrape(url: str, proc: subprocess.Popen[bytes]) -> bytes:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"node-exporter exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            return httpx.get(url, timeout=5).content
        except httpx.TransportError:
            time.sleep(0.2)
    pytest.fail("node-exporter did not answer within 20 s")


def _key(name: str, labels: dict[str, str], value: float) -> tuple[str, tuple[tuple[str, str], ...], str]:
    return name, tuple(sorted(labels.items())), "nan" if math.isnan(value) else repr(float(value))


def test_every_sample_of_a_real_scrape_is_decoded(scrape: bytes) -> None:
    reference = Counter(
        _key(s.name, s.labels, s.value)
        for fam in text_string_to_metric_families(scrape.decode())
        for s in fam.samples
    )
    decoded = prom_text.decode(scrape, time.time(), "node-x")
    ours = Counter(
        _key(r.name, {k: v for k, v in r.labels.items() if k != "host"}, r.value) for r in decoded.rows()
    )
    assert sum(reference.values()) > 200  # a real scrape, not an empty page
    assert len(decoded) == sum(reference.values())
    assert ours == reference
    assert {lab["host"] for lab in decoded.labels} == {"node-x"}


def test_the_scrape_through_the_processor_counts_every_sample(scrape: bytes) -> None:
    registry = CollectorRegistry()
    processor = wiring.processor(metrics=registry)
    out = processor.process([Message(scrape, time.time(), "scrapes", 0, 0, key=b"node-x")], [], backlogged=())
    expected = sum(len(f.samples) for f in text_string_to_metric_families(scrape.decode()))
    assert out.dead_letters == []
    assert registry.get_sample_value("prexid_samples_total") == expected
    assert registry.get_sample_value("prexid_messages_decoded_total", {"stream": "metrics"}) == 1.0
    assert {e.node for e in processor.pipeline.registry.entities} == {"node-x"}


def test_the_textfile_odd_values_arrive_intact(scrape: bytes) -> None:
    odd = {
        r.labels["case"]: r.value
        for r in prom_text.decode(scrape, 0.0, "n").rows()
        if r.name == "prexid_test_odd"
    }
    assert math.isnan(odd.pop("nan"))
    assert odd == {"pinf": math.inf, "ninf": -math.inf, 'quote "q" and backslash \\': 1.5e-07}
    assert Path("/proc/self/mountstats").exists()  # the mountstats collector read a real file
