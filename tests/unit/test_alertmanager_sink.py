"""The Alertmanager sink's promises: stable labels, re-send with endsAt ahead, resolve until delivered."""

from __future__ import annotations

import json

import httpx
from prometheus_client import CollectorRegistry

from prexid.service.schemas import Alert
from prexid.service.sinks.alertmanager import AlertmanagerSink, am_labels, generator_url

NOW = 1_796_205_600.0


def alert(status: str = "firing", score: float = 0.7, kind: str = "pre_xid") -> Alert:
    return Alert(
        fingerprint="fp1",
        status=status,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        severity="warning",
        cluster="c",
        node="node-03",
        gpu=5,
        starts_at="2026-12-02T10:00:00.000Z",
        ends_at=None if status == "firing" else "2026-12-02T10:20:00.000Z",
        score=score,
        signals=[],
        summary="s",
    )


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> float:
        return self.t


def sink_with(
    handler: httpx.MockTransport, urls: list[str], clock: Clock
) -> tuple[AlertmanagerSink, httpx.AsyncClient]:
    sink = AlertmanagerSink(urls, CollectorRegistry(), resend_interval_s=30.0, clock=clock)
    return sink, httpx.AsyncClient(transport=handler)


def test_labels_are_stable_when_the_score_changes() -> None:
    assert am_labels(alert(score=0.6)) == am_labels(alert(score=0.99))
    assert am_labels(alert()) == {
        "alertname": "PrexidPreXid",
        "kind": "pre_xid",
        "severity": "warning",
        "cluster": "c",
        "source": "prexid",
        "node": "node-03",
        "gpu": "5",
    }


async def test_active_alerts_are_sent_with_ends_at_ahead_and_resent_each_interval() -> None:
    bodies: list[list[dict[str, object]]] = []

    def handle(req: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(req.content))
        return httpx.Response(200)

    clock = Clock()
    sink, client = sink_with(httpx.MockTransport(handle), ["http://am1"], clock)
    sink.submit([alert()])
    await sink.send_due(client)
    await sink.send_due(client)  # not due again yet
    clock.t += 31
    await sink.send_due(client)
    assert len(bodies) == 2
    assert bodies[0][0]["endsAt"] == "2026-12-02T10:02:00Z"  # four resend intervals ahead of now
    assert bodies[1][0]["endsAt"] == "2026-12-02T10:02:31Z"


async def test_a_resolve_is_kept_for_each_alertmanager_until_it_takes_it_with_backoff_meanwhile() -> None:
    up = {"http://am1": True, "http://am2": False}
    seen: dict[str, list[str]] = {"http://am1": [], "http://am2": []}

    def handle(req: httpx.Request) -> httpx.Response:
        base = f"http://{req.url.host}"
        if not up[base]:
            raise httpx.ConnectError("down", request=req)
        seen[base] += [a["endsAt"] for a in json.loads(req.content)]
        return httpx.Response(200)

    clock = Clock()
    sink, client = sink_with(httpx.MockTransport(handle), list(up), clock)
    sink.submit([alert()])
    sink.submit([alert("resolved")])
    await sink.send_due(client)
    assert seen["http://am1"] == ["2026-12-02T10:20:00.000Z"]
    assert list(sink.resolved) == ["fp1"]  # am2 has not taken it
    backoffs = []
    for _ in range(4):
        target = sink.targets[1]
        backoffs.append(target.next_try - clock.t)
        clock.t = target.next_try
        await sink.send_due(client)
    assert backoffs == [1.0, 2.0, 4.0, 8.0]
    up["http://am2"] = True
    clock.t = sink.targets[1].next_try
    await sink.send_due(client)
    assert seen["http://am2"] == ["2026-12-02T10:20:00.000Z"]
    assert sink.resolved == {}


async def test_xid_alerts_expire_after_their_hold() -> None:
    clock = Clock()
    sink, _ = sink_with(httpx.MockTransport(lambda r: httpx.Response(200)), ["http://am1"], clock)
    sink.submit([alert(kind="xid")])
    assert len(sink.payload("http://am1")) == 1
    clock.t += sink.xid_hold_s + 1
    assert sink.payload("http://am1") == []


def test_generator_url_is_the_dashboard_drill_down_of_the_alerts_entity() -> None:
    assert generator_url(alert(), "http://prexid:8000/") == "http://prexid:8000/#node=node-03&gpu=5"
    node = alert().model_copy(update={"gpu": None})
    assert generator_url(node, "http://prexid:8000") == "http://prexid:8000/#node=node-03"
    cluster = alert().model_copy(update={"gpu": None, "node": None})
    assert generator_url(cluster, "http://prexid:8000") == "http://prexid:8000/"


def test_every_alert_posted_carries_its_generator_url_when_prexid_knows_its_address() -> None:
    sink = AlertmanagerSink(["http://am"], CollectorRegistry(), clock=Clock(), external_url="http://p:8000")
    sink.submit([alert()])
    (posted,) = sink.payload("http://am")
    assert posted["generatorURL"] == "http://p:8000/#node=node-03&gpu=5"
