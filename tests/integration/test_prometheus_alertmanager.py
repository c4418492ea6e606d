"""prexid with a real Prometheus scraping it and a real Alertmanager receiving its alerts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.http.server import serve
from prexid.service.sources.demo_cluster import DemoCluster, simulate
from tests.integration.kafka_broker import free_ports
from tests.integration.promstack import Server, start_alertmanager, start_prometheus
from tests.unit import wiring

pytestmark = pytest.mark.integration
FIRING_SCORE = 0.5  # score01 at the firing threshold; the rules in deploy/prometheus use the same


class Webhook:
    """Collects Alertmanager webhook notifications on loopback."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def statuses(self, alertname: str) -> list[str]:
        return [
            a["status"] for n in self.received for a in n["alerts"] if a["labels"]["alertname"] == alertname
        ]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Webhook, Server, Callable[[str], Server]]]:
    hook = Webhook()
    servers: list[Server] = [start_alertmanager(tmp_path, hook.url)]

    def prometheus(target: str) -> Server:
        servers.append(start_prometheus(tmp_path, target))
        return servers[-1]

    try:
        yield hook, servers[0], prometheus
    finally:
        for s in servers:
            s.stop()
        hook.server.shutdown()


async def wait_for(check: Callable[[], Any], what: str, limit_s: float = 45.0) -> Any:
    async with asyncio.timeout(limit_s):
        while not (found := await asyncio.to_thread(check)):  # noqa: ASYNC110 - polls another process
            await asyncio.sleep(0.5)
    assert found, what
    return found


async def test_prometheus_scrapes_the_fault_and_alertmanager_gets_the_pre_xid_then_its_resolution(
    stack: tuple[Webhook, Server, Callable[[str], Server]],
) -> None:
    hook, am, start_prom = stack
    [port] = free_ports(1)
    settings = Settings(http_port=port, alertmanager_urls=[am.url], alertmanager_resend_s=2.0)
    state, processor = build(settings)
    prom = start_prom(f"127.0.0.1:{port}")
    fired, carry_on = asyncio.Event(), asyncio.Event()

    async def feed() -> None:
        state.ready = True
        # ten minutes past the demo's end: its warning resolves 10 min (`keep_firing_for_s`) after the
        # evidence of the GPU fallen off the bus has faded, 15 min after the Xid
        for tick in simulate(DemoCluster(duration_s=3000.0)):
            out = wiring.step(processor, tick, backlogged=())  # live: caught up, an Xid pages at once
            if any(a.kind == "pre_xid" and a.status == "firing" for a in out.alerts):
                fired.set()
                await carry_on.wait()  # hold the fault's score up while Prometheus and Alertmanager look
            await asyncio.sleep(0)

    server = asyncio.create_task(serve(state, feed(), settings.http_host, port, duration=None))
    try:
        await asyncio.wait_for(fired.wait(), 60)

        def fused_score() -> float:
            query = 'prexid_gpu_fused_score{node="node-03",gpu="5"}'
            result = httpx.get(f"{prom.url}/api/v1/query", params={"query": query}).json()["data"]["result"]
            return float(result[0]["value"][1]) if result else 0.0

        score = await wait_for(
            lambda: (s := fused_score()) > FIRING_SCORE and s, "fused score above threshold"
        )
        assert score > FIRING_SCORE

        def am_alerts() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = httpx.get(f"{am.url}/api/v2/alerts").json()
            return [a for a in found if a["labels"]["alertname"] == "PrexidPreXid"]

        [listed] = await wait_for(am_alerts, "pre_xid alert listed by Alertmanager")
        assert listed["labels"]["node"] == "node-03"
        assert listed["labels"]["gpu"] == "5"
        assert listed["status"]["state"] == "active"
        assert float(listed["annotations"]["score"]) >= FIRING_SCORE
        await wait_for(lambda: "firing" in hook.statuses("PrexidPreXid"), "firing notification")

        carry_on.set()  # the GPU falls off the bus; its pre_xid alert resolves when its evidence fades
        await wait_for(lambda: "resolved" in hook.statuses("PrexidPreXid"), "resolved notification")
        await wait_for(lambda: am_alerts() == [], "the resolved alert is no longer listed as active")
        assert "firing" in hook.statuses("PrexidXid")
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


async def test_alerts_reach_an_alertmanager_that_was_down_when_they_fired(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from prexid.service.sinks.alertmanager import AlertmanagerSink
    from tests.unit.test_alertmanager_sink import alert

    [port] = free_ports(1)
    sink = AlertmanagerSink(
        [f"http://127.0.0.1:{port}"],
        CollectorRegistry(),
        resend_interval_s=5.0,
        max_backoff_s=2.0,
        external_url="https://prexid.example.com",
    )
    sink.submit([alert()])
    task = asyncio.create_task(sink.run())
    hook = Webhook()
    try:
        await asyncio.sleep(3.0)  # Alertmanager is down: the sink fails and backs off
        assert sink.targets[0].failures >= 2
        am = start_alertmanager(tmp_path, hook.url, port=port)
        try:

            def listed() -> list[Any]:
                return [
                    a for a in httpx.get(f"{am.url}/api/v2/alerts").json() if a["labels"].get("gpu") == "5"
                ]

            [found] = await wait_for(listed, "the alert, delivered once Alertmanager is back")
            assert found["labels"]["alertname"] == "PrexidPreXid"
            # Alertmanager's "Source" link: the dashboard's drill-down of that GPU
            assert found["generatorURL"] == "https://prexid.example.com/#node=node-03&gpu=5"
            assert sink.targets[0].failures == 0
        finally:
            am.stop()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        hook.server.shutdown()
