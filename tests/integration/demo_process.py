"""`prexid demo` as a child process on a free loopback port, for the tests that need a live service
(the dashboard in a browser, promtool's lint of /metrics, the image's healthcheck)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.integration.kafka_broker import free_ports


@contextmanager
def demo_server(log_path: Path, nodes: int = 4, gpus: int = 8) -> Iterator[str]:
    """`prexid demo` on a free loopback port, run until its simulated timeline (with its Xid) is over."""
    [port] = free_ports(1)
    env = {**os.environ, "PREXID_HTTP_HOST": "127.0.0.1"}
    args = ["demo", "--port", str(port), "--speed", "3000", "--nodes", str(nodes), "--gpus", str(gpus)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prexid.service.app.cli", *args], env=env, stdout=log, stderr=log
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_xid(base, proc, log_path)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def wait_for_xid(base: str, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prexid demo exited {proc.returncode}:\n{log_path.read_text()}")
        try:
            alerts = httpx.get(f"{base}/api/v1/alerts", timeout=2).json()
        except httpx.TransportError:
            alerts = []
        if any(a["kind"] == "xid" for a in alerts):
            return
        time.sleep(0.2)
    pytest.fail(f"the demo raised no Xid alert within {timeout_s}s:\n{log_path.read_text()}")
