"""Real Prometheus and Alertmanager (Debian packages) on loopback, started and stopped by tests.

A missing binary or a server that never gets ready fails the test that asked for it: these
integration tests never skip.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.integration.kafka_broker import free_ports

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (Debian package; .ci/apt-packages.txt lists it)", pytrace=False)
    return path


def start(name: str, args: list[str], url: str, workdir: Path, ready_path: str = "/-/ready") -> Server:
    log = workdir / f"{Path(name).name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary(name), *args], stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    server = Server(name, url, proc, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(url + ready_path, timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    pytest.fail(f"{name} did not get ready:\n{log.read_text()[-3000:]}", pytrace=False)


def start_alertmanager(workdir: Path, webhook_url: str, port: int | None = None) -> Server:
    port = port or free_ports(1)[0]
    [cluster_port] = free_ports(1)
    config = workdir / "alertmanager.yml"
    config.write_text(
        "route:\n"
        "  receiver: hook\n"
        "  group_by: [alertname, cluster, node, gpu]\n"
        "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
        "receivers:\n"
        "- name: hook\n"
        f"  webhook_configs: [{{url: '{webhook_url}', send_resolved: true}}]\n"
    )
    args = [
        f"--config.file={config}",
        f"--storage.path={workdir / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--cluster.listen-address=127.0.0.1:{cluster_port}",
    ]
    return start(ALERTMANAGER, args, f"http://127.0.0.1:{port}", workdir)


def start_prometheus(workdir: Path, target: str, rule_files: list[Path] | None = None) -> Server:
    [port] = free_ports(1)
    config = workdir / "prometheus.yml"
    rules = "".join(f"  - {p}\n" for p in rule_files or [])
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + f"scrape_configs:\n- job_name: prexid\n  static_configs: [{{targets: ['{target}']}}]\n"
    )
    args = [
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return start(PROMETHEUS, args, f"http://127.0.0.1:{port}", workdir)
