"""One `prexid run` in `local` mode beside a real Prometheus: scrape, remote_write, pre_xid, no Kafka;
and one kept busy by a batch, which answers its probes while Prometheus retries what it refused.

Debian's `prometheus` scrapes the real `prometheus-node-exporter` (relabelled as node-01's) and a
simulated dcgm-exporter (the demo cluster's GPU series, one tick per wall second, with its fault:
node-01's GPU 5 heats up and replays PCIe before it falls off the bus), and remote_writes everything
to prexid. Halfway prexid is stopped and started again: Prometheus retries what the stopped process
refused, so nothing is lost, and the restarted process still sees the precursor and pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import remote_write_feed
from prexid.service.http.server import serve
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.integration.kafka_broker import free_ports
from tests.integration.promstack import PROMETHEUS, Server, binary, start
from tests.integration.test_http_during_batch import HOLD_LIMIT_S, Hold
from tests.integration.traffic import eventually

pytestmark = pytest.mark.integration
STEP_S = 1.0  # scrape interval and fusion tick: the demo's 15 s compressed, so the test is short
FAULT = DemoFault(node=1, gpu=5, xid_at_s=110.0, precursor_s=50.0)  # the precursor from 60 s on
TEST_LIMIT_S = 170.0


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class DcgmExporter:
    """The demo cluster's DCGM series as a dcgm-exporter `/metrics` page on loopback: the tick is the
    wall seconds since start, the samples carry no timestamp (Prometheus stamps them at scrape)."""

    def __init__(self) -> None:
        cluster = DemoCluster(nodes=2, gpus=8, step_s=STEP_S, duration_s=FAULT.xid_at_s + 60, fault=FAULT)
        self.pages = [self._page(tick.metrics) for tick in simulate(cluster)]
        self.t0 = time.monotonic()
        pages, t0 = self.pages, self.t0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = pages[min(int((time.monotonic() - t0) / STEP_S), len(pages) - 1)]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _page(records: list[bytes]) -> bytes:
        lines = []
        for raw in records:
            doc = orjson.loads(raw)
            if not doc["name"].startswith("DCGM_"):  # node series come from the real node-exporter
                continue
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(doc["labels"].items()))
            lines.append(f"{doc['name']}{{{labels}}} {doc['value']}\n")
        return "".join(lines).encode()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


@pytest.fixture
def node_exporter() -> Iterator[str]:
    [port] = free_ports(1)
    proc = subprocess.Popen(
        [binary("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


class Prexid:
    """`prexid run` with `PREXID_REMOTE_WRITE=local` as a child process: started, stopped, started."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.url = f"http://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "PREXID_HTTP_HOST": "127.0.0.1",
            "PREXID_REMOTE_WRITE": "local",
            "PREXID_DETECTION__STEP_S": str(STEP_S),
            # the whole run is three minutes of event time (1 s ticks), inside the 20 minutes the error
            # counters wait before calling a burst rare (their warm-up); this test is about the
            # remote_write path across a restart, so the counters are trusted from the first scrape
            "PREXID_DETECTION__ERROR_COUNTER_WARMUP_S": "0",
            "PREXID_KAFKA_BOOTSTRAP": "127.0.0.1:9",  # nothing listens: local mode must not try it
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "prexid.service.app.cli", "run", "-v", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        pytest.fail(f"prexid did not get ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def metric(self, name: str, **labels: str) -> float:
        return _sample(httpx.get(f"{self.url}/metrics", timeout=5).text, name, labels)

    def alerts(self, kind: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = httpx.get(f"{self.url}/api/v1/alerts", params={"kind": kind}).json()
        return found


def _sample(text: str, name: str, labels: dict[str, str], required: bool = False) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 if none, unless `required`)."""
    found = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]
    assert found or not required, f"no {name} in the exposition"
    return sum(found)


def start_prometheus(workdir: Path, dcgm: str, node: str, write_url: str) -> Server:
    [port] = free_ports(1)
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {STEP_S:g}s, evaluation_interval: {STEP_S:g}s}}\n"
        "scrape_configs:\n"
        f"- job_name: dcgm\n  static_configs: [{{targets: ['{dcgm}']}}]\n"
        f"- job_name: node\n  static_configs: [{{targets: ['{node}'], labels: {{instance: 'node-01:9100'}}}}]\n"
        "remote_write:\n"
        f"- url: {write_url}\n"
        "  queue_config: {batch_send_deadline: 1s, min_backoff: 50ms, max_backoff: 1s, "
        "retry_on_http_429: true}\n"
    )
    args = [
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return start(PROMETHEUS, args, f"http://127.0.0.1:{port}", workdir)


def wait_for(check: Callable[[], Any], what: str, until: float) -> Any:
    while time.monotonic() < until:
        try:
            if found := check():
                return found
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def test_prometheus_remote_writes_to_prexid_which_pages_the_precursor_across_a_restart(
    tmp_path: Path, node_exporter: str
) -> None:
    deadline = time.monotonic() + TEST_LIMIT_S
    [port] = free_ports(1)
    prexid = Prexid(port, tmp_path / "prexid.log")
    prexid.start()
    dcgm = DcgmExporter()
    prom = start_prometheus(tmp_path, dcgm.target, node_exporter, f"{prexid.url}/api/v1/write")
    try:
        wait_for(
            lambda: prexid.metric("prexid_samples_total") > 500, "samples through the pipeline", deadline
        )
        assert prexid.metric("prexid_remote_write_requests_total", outcome="ok") > 0
        assert prexid.metric("prexid_dead_letters_total") == 0
        entities = httpx.get(f"{prexid.url}/api/v1/entities/node-01").json()
        assert {e["gpu"] for e in entities} >= {None, 5}  # node-exporter's node series, DCGM's GPU

        wait_for(lambda: dcgm.elapsed() > 25, "25 s of scrapes", deadline)
        assert prexid.stop() == 0  # SIGTERM: what it answered 204 to is processed before it exits
        time.sleep(4.0)  # Prometheus's sends fail meanwhile: it keeps them and retries
        prexid.start()

        [alert] = wait_for(lambda: prexid.alerts("pre_xid"), "a pre_xid alert", deadline)
        print(
            f"pre_xid at {dcgm.elapsed():.0f} s, the precursor from {FAULT.xid_at_s - FAULT.precursor_s:g} s"
        )
        assert (alert["node"], alert["gpu"], alert["status"]) == ("node-01", 5, "firing")
        assert dcgm.elapsed() < FAULT.xid_at_s  # a warning, ahead of the Xid

        def prom_metric(name: str) -> float:
            return _sample(httpx.get(f"{prom.url}/metrics", timeout=5).text, name, {}, required=True)

        assert prom_metric("prometheus_remote_storage_samples_retried_total") > 0  # the restart was seen
        newest = prom_metric("prometheus_remote_storage_highest_timestamp_in_seconds")  # appended
        wait_for(  # sent: the retried backlog and everything after it, up to what was appended then
            lambda: prom_metric("prometheus_remote_storage_queue_highest_sent_timestamp_seconds") >= newest,
            "Prometheus's remote_write queue caught up",
            deadline,
        )
        assert prom_metric("prometheus_remote_storage_samples_failed_total") == 0  # none given up on
        assert prom_metric("prometheus_remote_storage_samples_dropped_total") == 0
        assert prexid.metric("prexid_dead_letters_total") == 0
    finally:
        prom.stop()
        dcgm.server.shutdown()
        if prexid.proc is not None and prexid.proc.poll() is None:
            prexid.stop()


HELD_S = 6.0  # the first batch is held this long: several of Prometheus's 1 s sends arrive meanwhile


async def test_a_busy_prexid_answers_its_probes_and_prometheus_retries_what_its_full_queue_refused(
    tmp_path: Path, node_exporter: str
) -> None:
    """`prexid run` in `local` mode (in this process, the real server on 127.0.0.1) with a queue of
    two requests, its first batch held in the worker thread for `HELD_S` (a batch of seconds): the
    loop answers `/healthz` meanwhile, queues two of Prometheus's requests and answers the rest 429;
    once the batch is let go the queue drains, Prometheus's retries catch up, and nothing is lost."""
    [port] = free_ports(1)
    settings = Settings(
        remote_write="local",
        remote_write_queue_requests=2,
        http_host="127.0.0.1",
        http_port=port,
        detection={"step_s": STEP_S},  # type: ignore[arg-type]
    )
    state, intake, processor = remote_write_feed(settings)
    state.ready = True  # as `prexid run` has it: requests are the feed
    hold = Hold(limit_s=HOLD_LIMIT_S)
    hold.around(processor)
    url = f"http://127.0.0.1:{port}"
    server = asyncio.create_task(serve(state, intake.run(processor), "127.0.0.1", port, duration=None))
    dcgm = DcgmExporter()
    prom = await asyncio.to_thread(
        start_prometheus, tmp_path, dcgm.target, node_exporter, f"{url}/api/v1/write"
    )

    def count(name: str, **labels: str) -> float:
        return state.telemetry.registry.get_sample_value(name, labels) or 0.0

    async def prom_metric(http: httpx.AsyncClient, name: str) -> float:
        return _sample((await http.get(f"{prom.url}/metrics")).text, name, {}, required=True)

    try:
        async with httpx.AsyncClient(timeout=5.0) as http:
            await eventually(hold.entered.is_set, limit_s=30, what="a batch of Prometheus's samples")
            held_at, healthz = time.monotonic(), []
            while time.monotonic() - held_at < HELD_S:
                healthz.append((await http.get(f"{url}/healthz")).status_code)
                await asyncio.sleep(0.5)
            assert not hold.release.is_set()  # every /healthz above was answered while it was held
            assert set(healthz) == {200} and len(healthz) >= HELD_S / 0.5 - 2
            assert (
                intake.queue.full() and count("prexid_remote_write_requests_total", outcome="throttled") > 0
            )
            hold.release.set()

            await eventually(lambda: count("prexid_samples_total") > 1000, limit_s=30, what="samples scored")
            newest = await prom_metric(http, "prometheus_remote_storage_highest_timestamp_in_seconds")
            sent = "prometheus_remote_storage_queue_highest_sent_timestamp_seconds"
            for _ in range(60):  # sent: the backlog refused while held, and what came after it
                if await prom_metric(http, sent) >= newest:
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError("Prometheus's remote_write queue did not catch up")
            assert await prom_metric(http, "prometheus_remote_storage_samples_retried_total") > 0
            assert await prom_metric(http, "prometheus_remote_storage_samples_failed_total") == 0
            assert await prom_metric(http, "prometheus_remote_storage_samples_dropped_total") == 0
            assert count("prexid_dead_letters_total") == 0
            assert threading.current_thread() not in hold.ran_on  # scored in the worker thread
    finally:
        hold.release.set()
        await asyncio.to_thread(prom.stop)
        dcgm.server.shutdown()
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
