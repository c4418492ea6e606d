"""`prexid demo` serves POST /api/v1/write too, into a pipeline of its own: its simulated clock (100x
from 2026-12-01) and the wall-clock times received samples carry never meet."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.integration.demo_process import demo_server
from tests.unit.test_decode_remote_write import body, series
from tests.unit.test_remote_write_receiver import HEADERS

pytestmark = pytest.mark.integration


def test_the_demo_takes_remote_write_samples_beside_its_simulated_cluster(tmp_path: Path) -> None:
    with demo_server(tmp_path / "demo.log", nodes=2) as base:
        before = httpx.get(f"{base}/metrics").text
        t = int(time.time() * 1000)
        gpu = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": "rw-node", "gpu": "0"}
        for k in range(3):
            payload = body(series(gpu, (60.0 + k, t + 1000 * k)))
            response = httpx.post(f"{base}/api/v1/write", content=payload, headers=HEADERS)
            assert response.status_code == 204, response.text
        deadline = time.monotonic() + 10
        while httpx.get(f"{base}/api/v1/entities/rw-node").status_code != 200:
            assert time.monotonic() < deadline, "the received series never reached a pipeline"
            time.sleep(0.2)
        [gpu0] = [e for e in httpx.get(f"{base}/api/v1/entities/rw-node").json() if e["gpu"] == 0]
        assert gpu0["node"] == "rw-node"
        assert httpx.get(f"{base}/api/v1/entities/node-01").status_code == 200  # the demo's, still there
        assert any(a["kind"] == "xid" for a in httpx.get(f"{base}/api/v1/alerts").json())
        assert "prexid_remote_write_samples_total 0.0" in before
        assert "prexid_remote_write_samples_total 3.0" in httpx.get(f"{base}/metrics").text
        assert "dead letter" not in (tmp_path / "demo.log").read_text()
