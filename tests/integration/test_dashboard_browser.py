"""The live dashboard in real headless Chromium (Debian's), against a real `prexid demo` process and a
real `prexid run` on the real broker.

The page must load from the service alone (no CDN), draw one heatmap cell per node and GPU with the
scores the JSON API reports, list the active alerts, and open a drill-down for the degrading GPU.
A screenshot is written to artifacts/ for people to look at.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.integration.demo_process import demo_server, wait_for_xid
from tests.integration.kafka_broker import free_ports
from tests.integration.traffic import create_service_topics, env_for, produce, settings_for

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

pytestmark = pytest.mark.integration
T = TypeVar("T")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with demo_server(tmp_path_factory.mktemp("demo") / "prexid.log") as base:
        yield base


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (listed in .ci/apt-packages.txt)")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        outside: list[str] = []
        context.on("request", lambda r: outside.append(r.url) if "127.0.0.1" not in r.url else None)
        yield context.new_page()
        context.close()
        assert outside == [], f"the dashboard fetched from outside the service: {outside}"


def heatmap_cells(page: Page) -> dict[tuple[str, str], str]:
    cells = page.eval_on_selector_all(
        "#heatmap td.cell[data-node]",
        "tds => tds.map(td => [td.dataset.node, td.dataset.gpu, td.dataset.score])",
    )
    return {(node, gpu): score for node, gpu, score in cells}


def api_cells(base: str) -> dict[tuple[str, str], str]:
    scores = httpx.get(f"{base}/api/v1/scores").json()
    out: dict[tuple[str, str], str] = {}
    for n in scores["nodes"]:
        out[(n["node"], "node")] = "" if n["score"] is None else str(n["score"])
        for g in n["gpus"]:
            out[(n["node"], str(g["gpu"]))] = "" if g["score"] is None else str(g["score"])
    return out


def test_heatmap_cells_match_the_scores_api_and_the_degrading_gpu_is_marked_firing(
    server: str, page: Page
) -> None:
    page.goto(server + "/")
    page.wait_for_selector("body[data-loaded=true]", timeout=15_000)
    cells = heatmap_cells(page)
    assert len(cells) == 4 * (8 + 1)
    assert {k: float(v) if v else None for k, v in cells.items()} == {
        k: float(v) if v else None for k, v in api_cells(server).items()
    }
    firing = page.eval_on_selector_all(
        "#heatmap td.cell.firing", "tds => tds.map(td => td.dataset.node + '/' + td.dataset.gpu)"
    )
    api_firing = [f"{n}/{g}" for (n, g), s in api_cells(server).items() if s and float(s) >= 0.5]
    assert sorted(firing) == sorted(api_firing)


def test_alert_list_shows_the_active_alerts_with_their_runbook_links(server: str, page: Page) -> None:
    page.goto(server + "/")
    page.wait_for_selector("body[data-loaded=true]", timeout=15_000)
    api = httpx.get(f"{server}/api/v1/alerts").json()
    shown = page.eval_on_selector_all(
        "#alerts li", "lis => lis.map(li => [li.dataset.fingerprint, li.querySelector('a').href])"
    )
    assert [[a["fingerprint"], a["runbook_url"]] for a in api] == shown
    assert page.text_content("#alert-count") == str(len(api))
    assert {a["kind"] for a in api} >= {"xid"}


def test_clicking_the_xid_alert_opens_the_gpu_drill_down_and_a_screenshot_is_written(
    server: str, page: Page
) -> None:
    page.goto(server + "/")
    page.wait_for_selector("body[data-loaded=true]", timeout=15_000)
    page.click("#alerts li[data-kind=xid] .kind")
    page.wait_for_selector("#detail:not([hidden]) .family", timeout=15_000)
    assert page.text_content("#detail-title") == "Drill-down: GPU 5 on node-03"
    families = page.eval_on_selector_all("#detail .family", "els => els.map(e => e.dataset.family)")
    assert "pcie" in families
    evidence = httpx.get(f"{server}/api/v1/entities/node-03/gpus/5").json()
    shown = page.eval_on_selector_all(
        "#evidence tbody tr[data-family]", "trs => trs.map(tr => tr.dataset.family)"
    )
    assert shown == [f["family"] for f in evidence["families"]]
    points = page.get_attribute("#detail-score polyline", "points") or ""
    assert len(points.split()) > 10
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


# `prexid run` on the real broker: two partitions, so the node's data live in a shard's pipeline, not
# in the first pipeline `build` makes (which under `run` never gets data).
RUN_CLUSTER = DemoCluster(nodes=4, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))


def in_own_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a loop of its own thread (pytest-asyncio's session loop owns this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="module")
def run_server(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The replica's own address, and its fleet view's."""
    topics = in_own_loop(create_service_topics(kafka_bootstrap, 2))
    settings = settings_for(kafka_bootstrap, topics, f"dash-{uuid.uuid4().hex[:8]}")
    in_own_loop(produce(kafka_bootstrap, topics["metrics"], topics["logs"], simulate(RUN_CLUSTER)))
    port, fleet_port = free_ports(2)
    env = {
        **os.environ,
        **env_for(settings),
        "PREXID_HTTP_PORT": str(port),
        "PREXID_HTTP_HOST": "127.0.0.1",
        "PREXID_FLEET_HTTP_PORT": str(fleet_port),
    }
    log_path = tmp_path_factory.mktemp("run") / "prexid.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prexid.service.app.cli", "run"], env=env, stdout=log, stderr=log
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_xid(base, proc, log_path)
        yield base, f"http://127.0.0.1:{fleet_port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_under_prexid_run_the_drill_down_has_history_evidence_and_labelled_axes(
    run_server: tuple[str, str], page: Page
) -> None:
    run_server, _ = run_server
    node, gpu = RUN_CLUSTER.host(1), 2
    history = httpx.get(f"{run_server}/api/v1/history/{node}", params={"gpu": gpu})
    assert history.status_code == 200, history.text  # was 404 for every entity under `prexid run`
    assert len(history.json()["ticks"]) > 10
    page.goto(run_server + f"/#node={node}&gpu={gpu}")
    page.wait_for_selector("#detail:not([hidden]) .family", timeout=20_000)
    points = page.get_attribute("#detail-score polyline", "points") or ""
    assert len(points.split()) > 10
    assert page.eval_on_selector_all("#evidence tbody tr[data-family]", "trs => trs.length") > 0
    y_labels = page.eval_on_selector_all("#detail-score .tick-label", "ts => ts.map(t => t.textContent)")
    assert {"0", "0.5", "1"} <= set(y_labels)  # the score axis
    times = [t for t in y_labels if ":" in t]  # and event times (HH:MM) on the x axis
    assert len(times) >= 2 and times == sorted(times)
    spark_axes = page.eval_on_selector_all(
        "#detail .family svg .axis-title", "ts => ts.map(t => t.textContent)"
    )
    assert "-log10 p" in spark_axes
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-run.png"), full_page=True)


def test_the_header_says_which_view_a_page_shows_and_the_fleet_view_draws_every_node(
    run_server: tuple[str, str], page: Page
) -> None:
    own, fleet = run_server
    page.goto(own + "/")
    # `expect` polls through the selector engine: a string predicate (`wait_for_function`) is evaluated
    # as script, which the page's CSP (script-src 'self') refuses once it has to poll
    expect(page.locator("#view")).not_to_be_empty(timeout=20_000)
    assert page.text_content("#view") == "replica-local view: partitions 0, 1"
    page.goto(fleet + "/")
    expect(page.locator("#view")).to_have_text(re.compile("^fleet view"), timeout=20_000)
    assert page.text_content("#view") == "fleet view: 2 partitions"
    rows = page.eval_on_selector_all("#heatmap th[scope=row]", "ths => ths.map(t => t.textContent)")
    assert rows == [RUN_CLUSTER.host(n) for n in range(RUN_CLUSTER.nodes)]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-fleet.png"), full_page=True)
