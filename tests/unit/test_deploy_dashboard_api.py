"""The dashboard's JSON API on a replayed demo cluster, the bounded score history, and runbook links."""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest

from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.http.api import create_app
from prexid.service.http.dashboard import STATIC_DIR
from prexid.service.http.history import ScoreHistory
from prexid.service.schemas import Alert
from prexid.service.sources.demo_cluster import DemoCluster, simulate
from tests.unit import wiring


@pytest.fixture(scope="module")
def replayed() -> tuple[ServiceState, list[Alert]]:
    state, processor = build(Settings(history_ticks=40, runbook_base_url="https://runbooks.test/prexid/"))
    return state, wiring.feed(
        processor, simulate(DemoCluster(nodes=4, gpus=8, duration_s=1750.0)), logs=False
    )


async def get(state: ServiceState, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://prexid") as client:
        return await client.get(path)


async def test_scores_api_lists_every_node_with_its_gpus_and_the_pipeline_scores(
    replayed: tuple[ServiceState, list[Alert]],
) -> None:
    state, _ = replayed
    body = (await get(state, "/api/v1/scores")).json()
    assert body["threshold"] == 0.5 and body["tick"] is not None
    assert [n["node"] for n in body["nodes"]] == ["node-00", "node-01", "node-02", "node-03"]
    assert all([g["gpu"] for g in n["gpus"]] == list(range(8)) for n in body["nodes"])
    faulty = next(n for n in body["nodes"] if n["node"] == "node-03")["gpus"][5]["score"]
    healthy = [
        g["score"] for n in body["nodes"] for g in n["gpus"] if (n["node"], g["gpu"]) != ("node-03", 5)
    ]
    assert faulty >= 0.5 > max(healthy)


async def test_history_of_the_degrading_gpu_shows_its_rising_score_and_the_pcie_family(
    replayed: tuple[ServiceState, list[Alert]],
) -> None:
    state, _ = replayed
    body = (await get(state, "/api/v1/history/node-03?gpu=5")).json()
    assert len(body["ticks"]) == len(body["scores"]) == 40  # bounded by history_ticks
    assert body["ticks"] == sorted(body["ticks"])
    assert body["scores"][-1] >= 0.5 > body["scores"][0]
    assert "pcie" in {f["family"] for f in body["families"]}


async def test_history_of_an_unknown_entity_is_a_404(replayed: tuple[ServiceState, list[Alert]]) -> None:
    state, _ = replayed
    assert (await get(state, "/api/v1/history/node-99?gpu=1")).status_code == 404


async def test_root_serves_the_dashboard_page_and_its_local_assets(
    replayed: tuple[ServiceState, list[Alert]],
) -> None:
    state, _ = replayed
    page = await get(state, "/")
    assert page.status_code == 200 and '<table id="heatmap"' in page.text
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from a CDN
    for asset in ("/static/dashboard.js", "/static/dashboard.css"):
        assert (await get(state, asset)).status_code == 200


async def test_no_page_loads_from_a_cdn_and_the_schema_leaves_the_admin_routes_out(
    replayed: tuple[ServiceState, list[Alert]],
) -> None:
    state, _ = replayed
    for page in ("/docs", "/redoc"):  # FastAPI's Swagger UI and ReDoc load their code from a CDN
        assert (await get(state, page)).status_code == 404
    schema = await get(state, "/openapi.json")
    assert schema.status_code == 200 and "/api/v1/scores" in schema.json()["paths"]
    assert not [path for path in schema.json()["paths"] if path.startswith("/admin")]
    for path in ("/", "/static/dashboard.js", "/static/dashboard.css"):
        text = (await get(state, path)).text
        assert "cdn" not in text.lower() and "://" not in text.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.parametrize("path", ["/", "/static/dashboard.js", "/api/v1/scores", "/metrics", "/nope"])
async def test_responses_carry_a_same_origin_csp_and_refuse_framing_and_sniffing(
    replayed: tuple[ServiceState, list[Alert]], path: str
) -> None:
    state, _ = replayed
    headers = (await get(state, path)).headers
    csp = {d.split()[0]: d.split()[1:] for d in headers["content-security-policy"].split("; ")}
    assert csp["default-src"] in (["'self'"], ["'none'"]) and csp["frame-ancestors"] == ["'none'"]
    for directive in ("script-src", "style-src", "connect-src"):
        assert csp.get(directive, csp["default-src"]) in (["'self'"], ["'none'"]), directive  # no inline
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"


def test_the_dashboard_has_no_inline_script_or_style_the_csp_would_block() -> None:
    page = (STATIC_DIR / "index.html").read_text()
    assert "<style" not in page and " style=" not in page and not re.search(r"\son\w+=", page)
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/dashboard.js">']
    script = (STATIC_DIR / "dashboard.js").read_text()
    assert 'setAttribute("style"' not in script and "innerHTML" not in script and "eval(" not in script


def test_alerts_link_the_runbook_of_their_kind_under_the_configured_base(
    replayed: tuple[ServiceState, list[Alert]],
) -> None:
    _, alerts = replayed
    assert alerts
    assert {a.runbook_url for a in alerts} == {"https://runbooks.test/prexid/pre_xid.md"}


def test_an_alert_built_without_a_runbook_url_gets_the_default_page_of_its_kind() -> None:
    alert = Alert(
        fingerprint="f", status="firing", kind="node", severity="warning", cluster="c", node="n",
        gpu=None, starts_at="2026-01-01T00:00:00.000Z", ends_at=None, score=0.6, signals=[], summary="s",
    )  # fmt: skip
    assert alert.runbook_url.endswith("/node.md")
    assert Alert.model_validate_json(alert.model_dump_json()) == alert


def test_score_history_keeps_only_the_newest_ticks_and_pads_late_entities_with_nan() -> None:
    history = ScoreHistory(capacity=3)
    for t in range(5):
        n = 1 if t < 4 else 2  # a second entity appears at the last tick
        history.record(float(t), np.full(n, float(t)), np.full((n, 2), float(t)))
    first, second = history.of(0), history.of(1)
    assert first.ticks.tolist() == [2.0, 3.0, 4.0] and first.fused.tolist() == [2.0, 3.0, 4.0]
    assert np.isnan(second.fused[:2]).all() and second.fused[2] == 4.0
    assert second.families.shape == (3, 2)
