"""The node reliability ledger: each node's Xids, pages and reboots are booked once, ranked by a
repeat-offender score that decays with age, kept across a takeover, and served at `/api/v1/nodes`
and on `/metrics`, so the few nodes behind most failures stand out."""

from __future__ import annotations

import httpx
from prometheus_client import generate_latest

from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.decode.types import RawSample
from prexid.service.http.api import create_app
from prexid.service.offline.evaluate.match import Label
from prexid.service.offline.evaluate.reliability import reliability_table
from prexid.service.pipeline.ledger import Ledger, gini, top_share
from prexid.service.pipeline.processor import Processor
from prexid.service.schemas import XidEvent
from prexid.service.state import snapshot

T0 = 1_764_756_000.0
HOUR = 3600.0


def xid(ts: float, node: str, code: int = 79) -> XidEvent:
    return XidEvent(ts=ts, node=node, pci_bus_id="0000:3b:00", code=code, pid=None, process=None, message="")


def fail(processor: Processor, node: str, times: int, start: float = T0) -> None:
    """`times` Xid bursts on `node`, each two hours after the last (one burst each)."""
    for i in range(times):
        processor.pipeline.ingest_xids([xid(start + 2 * i * HOUR, node)])


def test_a_node_failing_again_and_again_ranks_first_and_crosses_the_threshold() -> None:
    _, processor = build(Settings())
    fail(processor, "node-7", 3)
    fail(processor, "node-2", 1)
    ranking = processor.pipeline.ledger.ranking()
    assert [s.node for s in ranking] == ["node-7", "node-2"]
    assert ranking[0].score >= 1.0 > ranking[1].score
    assert ranking[0].counts == {"xid": 3} and ranking[0].failures_30d == 3


def test_a_burst_re_sent_with_a_new_code_is_booked_once() -> None:
    _, processor = build(Settings())
    alerts = processor.pipeline.ingest_xids([xid(T0, "node-7", 79), xid(T0 + 2, "node-7", 154)])
    assert len(alerts) == 2 and len({a.fingerprint for a in alerts}) == 1  # one burst, updated
    assert processor.pipeline.ledger.nodes["node-7"].counts == {"xid": 1}


def test_a_failure_a_half_life_ago_counts_half() -> None:
    ledger = Ledger(half_life_s=7 * 86400.0, threshold=1.0)
    ledger.record("node-1", "xid", T0)
    assert ledger.score("node-1", T0 + 7 * 86400.0) == 0.5
    ledger.record("node-1", "reboot", T0 + 7 * 86400.0)  # reboots are booked, not failures
    assert ledger.score("node-1", T0 + 7 * 86400.0) == 0.5


def boot(processor: Processor, node: str, start: float, end: float, booted: float) -> None:
    rows = [
        RawSample("node_boot_time_seconds", {"instance": f"{node}:9100", "Hostname": node}, float(ts), booted)
        for ts in range(int(start), int(end), 15)
    ]
    for row in rows:
        processor.pipeline.ingest_samples([row])


def test_a_reboot_is_booked_once_when_the_boot_time_moves_on_and_not_for_jitter() -> None:
    _, processor = build(Settings())
    boot(processor, "node-3", T0, T0 + 600, T0 - 86400.0)
    boot(processor, "node-3", T0 + 600, T0 + 900, T0 - 86400.0 + 1.0)  # the kernel's rounding
    assert "node-3" not in processor.pipeline.ledger.nodes
    boot(processor, "node-3", T0 + 900, T0 + 1500, T0 + 880.0)  # rebooted at T0 + 880
    assert processor.pipeline.ledger.nodes["node-3"].counts == {"reboot": 1}


def test_the_ledger_survives_a_takeover_and_keeps_booking_each_alert_once() -> None:
    _, processor = build(Settings())
    fail(processor, "node-7", 2)
    _, taker = build(Settings())
    snapshot.load(snapshot.dump(processor, {}), taker)
    assert taker.pipeline.ledger.nodes["node-7"].counts == {"xid": 2}
    taker.pipeline.ledger.observe(processor.pipeline.alert_book.active.values())  # re-sent on takeover
    fail(taker, "node-7", 1, start=T0 + 10 * HOUR)
    assert taker.pipeline.ledger.nodes["node-7"].counts == {"xid": 3}
    assert taker.pipeline.ledger.score("node-7") >= 1.0


def test_three_of_ten_nodes_causing_most_failures_show_in_the_share_and_the_gini() -> None:
    ledger = Ledger()
    for i in range(10):
        for k in range(6 if i < 3 else 1):
            ledger.record(f"node-{i}", "xid", T0 + k * HOUR)
    standings = ledger.ranking()
    assert top_share(s.failures_30d for s in standings) == 18 / 25
    assert gini([s.failures_30d for s in standings]) > 0.4
    assert gini([1.0] * 10) == 0.0


async def test_the_ranking_is_served_worst_first_and_exported_as_metrics() -> None:
    state, processor = build(Settings())
    fail(processor, "node-7", 3)
    fail(processor, "node-2", 1)
    body = await get(state, "/api/v1/nodes")
    assert [n["node"] for n in body["nodes"]] == ["node-7", "node-2"]
    assert body["top3_share_30d"] == 1.0
    assert body["nodes"][0]["recent"][0]["kind"] == "xid" and body["nodes"][0]["recent"][0]["detail"] == "79"
    text = generate_latest(state.telemetry.registry).decode()
    assert 'prexid_node_failures_total{cluster="default",kind="xid",node="node-7"} 3.0' in text
    assert 'prexid_node_repeat_offender_score{cluster="default",node="node-2"}' in text


async def get(state: ServiceState, path: str) -> dict[str, object]:
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://prexid") as client:
        response = await client.get(path)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_the_evaluation_report_shows_the_ledger_booking_the_labelled_concentration() -> None:
    _, processor = build(Settings())
    events = [xid(T0 + 2 * i * HOUR, "node-7") for i in range(3)] + [xid(T0, "node-2")]
    alerts = [a.model_dump(mode="json") for ev in events for a in processor.pipeline.ingest_xids([ev])]
    labels = [
        Label(f"f{i}", "xid", node, None, T0 + i, T0 + i, 79, False, T0 + i + 60)
        for i, node in enumerate(["node-7"] * 3 + ["node-2"])
    ]
    table = reliability_table(labels, alerts, nodes=20)
    truth, booked = (row for row in table.splitlines() if row.startswith(("| labels", "| prexid")))
    assert truth.split("|")[2:6] == booked.split("|")[2:6] == [" 4 ", " 2 ", " 100% ", " 0.93 "]
    assert "Repeat offenders by the ledger (score >= 1): node-7." in table


def test_a_drain_is_a_failure_unless_it_follows_an_xid_already_booked() -> None:
    ledger = Ledger(half_life_s=7 * 86400.0, threshold=1.0)
    ledger.record("node-1", "xid", T0)
    ledger.record_drain("node-1", T0, 3, "xid", 79)  # the Xid's own drain: one failure, not two
    ledger.record_drain("node-2", T0, 5, "pre_xid", None)  # drained before any Xid: a failure
    assert ledger.score("node-1", T0) == 1.0 and ledger.score("node-2", T0) == 1.0
    assert [(s.node, s.failures_30d, s.counts) for s in ledger.ranking(T0)] == [
        ("node-1", 1, {"xid": 1, "drain": 1}),
        ("node-2", 1, {"drain": 1}),
    ]
    restored = Ledger(half_life_s=7 * 86400.0, threshold=1.0)
    restored.restore_meta(ledger.snapshot_meta())
    assert restored.ranking(T0) == ledger.ranking(T0)
