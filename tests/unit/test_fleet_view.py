"""The fleet view: every partition's scores and alerts from the summaries, wherever it is asked."""

from __future__ import annotations

import httpx
import orjson

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.http.api import create_app
from prexid.service.http.fleet_view import create_fleet_app
from prexid.service.pipeline.aggregator import Aggregator
from prexid.service.pipeline.fleet_judge import FleetBoard
from prexid.service.pipeline.fleet_summary import PartitionSummary
from prexid.service.pipeline.pipeline import PipelineConfig
from tests.unit.test_fleet_run import run_fleet


async def get(app: object, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://prexid") as client:
        return await client.get(path)


async def test_the_fleet_view_shows_every_partitions_nodes_and_the_aggregators_cluster_alert() -> None:
    """Four partitions' records on one board, read back mid-stall: every node of all of them in the
    heatmap (their pages held), the cluster alert the aggregator fires in the alerts; the replica's own
    API says it is replica-local."""
    board = FleetBoard()
    aggregator = Aggregator(PipelineConfig(), lateness_s=120.0)
    mid_stall = 1_796_205_600.0 + 15.0 * 130

    def feed(record: PartitionSummary, offset: int) -> None:
        if record.tick > mid_stall:
            return
        board.observe(record)
        aggregator.observe(record, offset)
        aggregator.advance()

    run_fleet(feed)
    board.verdict = orjson.loads(orjson.dumps({"tick": mid_stall, "state": aggregator.snapshot()}))
    state, _ = build(Settings())
    app = create_fleet_app(state, board, 120.0)

    view = (await get(app, "/api/v1/view")).json()
    assert view["view"] == "fleet" and view["partitions"] == [0, 1, 2, 3] and view["missing"] == []
    scores = (await get(app, "/api/v1/scores")).json()
    assert [n["node"] for n in scores["nodes"]] == [f"node-{n:02d}" for n in range(8)]
    assert all([g["gpu"] for g in n["gpus"]] == [0] for n in scores["nodes"])
    assert all(n["score"] < 0.5 for n in scores["nodes"])  # held: no node above the firing threshold
    rows = [row for r in board.latest.values() for row in r.nodes]
    assert len(rows) == 8 and all(row.held for row in rows)
    alerts = (await get(app, "/api/v1/alerts")).json()
    assert [(a["kind"], a["status"]) for a in alerts] == [("cluster", "firing")]

    mine = (await get(create_app(state), "/api/v1/view")).json()
    assert mine == {"view": "replica", "partitions": [], "missing": [], "aggregated_tick": None}
