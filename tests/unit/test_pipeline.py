"""The whole pipeline on the demo cluster: the faulty GPU is warned about before its Xid, nobody else."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import generate_latest

from prexid.detectors.signals import Family
from prexid.service.app.service_state import ServiceState
from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.decode.types import RawSample
from prexid.service.http.api import create_app
from prexid.service.http.evidence import node_evidence
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.processor import Message, Processor
from prexid.service.pipeline.series_registry import SeriesRegistry, normalise_host
from prexid.service.schemas import Alert
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from tests.unit import wiring


def replay(cluster: DemoCluster) -> tuple[list[Alert], ServiceState, Processor]:
    state, processor = build(Settings())
    return wiring.feed(processor, simulate(cluster), drain=True), state, processor


@pytest.fixture(scope="module")
def demo_run() -> tuple[list[Alert], ServiceState, Processor]:
    return replay(DemoCluster())


def test_pre_xid_alert_for_the_faulty_gpu_comes_before_its_xid(
    demo_run: tuple[list[Alert], ServiceState, Processor],
) -> None:
    alerts, _, _ = demo_run
    firing = [a for a in alerts if a.status == "firing"]
    assert [(a.kind, a.node, a.gpu) for a in firing] == [("pre_xid", "node-03", 5), ("xid", "node-03", 5)]
    pre, xid = firing
    assert pre.starts_at < xid.starts_at
    assert xid.xid_code == 79 and xid.severity == "critical"
    assert xid.lead_time_seconds is not None and xid.lead_time_seconds >= 300
    assert {s.family for s in pre.signals} >= {"pcie"}
    assert all(s.baseline is not None for s in pre.signals)


def test_checkpoints_on_a_healthy_cluster_raise_no_alert() -> None:
    quiet = DemoCluster(fault=DemoFault(xid_at_s=10**9), duration_s=3600.0, seed=11)
    alerts, _, _ = replay(quiet)
    assert alerts == []


def test_same_seed_gives_the_same_alerts() -> None:
    a, _, _ = replay(DemoCluster(duration_s=2000.0))
    b, _, _ = replay(DemoCluster(duration_s=2000.0))
    assert a == b and a


def test_metrics_expose_fused_scores_and_lead_time(
    demo_run: tuple[list[Alert], ServiceState, Processor],
) -> None:
    _, state, _ = demo_run
    text = generate_latest(state.telemetry.registry).decode()
    assert 'prexid_xid_events_total{code="79",preceded="true"} 1.0' in text
    assert "prexid_pre_xid_lead_time_seconds_count 1.0" in text
    gpu_lines = [line for line in text.splitlines() if line.startswith("prexid_gpu_fused_score{")]
    assert any('gpu="5"' in line and 'node="node-03"' in line for line in gpu_lines)


async def test_http_serves_health_readiness_metrics_and_alerts(
    demo_run: tuple[list[Alert], ServiceState, Processor],
) -> None:
    _, state, _ = demo_run
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://prexid") as client:
        assert (await client.get("/healthz")).status_code == 200
        state.ready = False
        assert (await client.get("/readyz")).status_code == 503
        state.ready = True
        assert (await client.get("/readyz")).status_code == 200
        assert "prexid_samples_total" in (await client.get("/metrics")).text
        xids = (await client.get("/api/v1/alerts", params={"kind": "xid"})).json()
        assert [(a["node"], a["gpu"], a["xid_code"]) for a in xids] == [("node-03", 5, 79)]
        fp = xids[0]["fingerprint"]
        assert (await client.get(f"/api/v1/alerts/{fp}")).json()["kind"] == "xid"
        assert (await client.get("/api/v1/alerts/nope")).status_code == 404
        node = (await client.get("/api/v1/entities/node-03.cluster.local")).json()
        assert [e["gpu"] for e in node] == [None, 0, 1, 2, 3, 4, 5, 6, 7]
        gpu5 = (await client.get("/api/v1/entities/node-03/gpus/5")).json()
        assert ("xid", 79) in [(a["kind"], a["xid_code"]) for a in gpu5["alerts"]]  # its warning may be held
        assert (await client.get("/api/v1/entities/node-99")).status_code == 404
        assert (await client.get("/api/v1/entities/node-03/gpus/9")).status_code == 404


def test_bad_messages_become_dead_letters_with_their_origin() -> None:
    _, processor = build(Settings())
    out = processor.process(
        [Message(b"{oops", 0.0, "metrics", 2, 41)], [Message(b"\xff\xfe", 0.0, "logs", 0, 7)], ()
    )
    assert [(d.reason, d.message.topic, d.message.offset) for d in out.dead_letters] == [
        ("invalid_json", "metrics", 41),
        ("not_utf8", "logs", 7),
    ]


@pytest.mark.parametrize(
    ("raw", "short"),
    [
        ("node-17", "node-17"),
        ("node-17.cluster.local", "node-17"),
        ("node-17:9100", "node-17"),
        ("NODE-17.example.com:9400", "node-17"),
        ("10.1.2.3:9100", "10.1.2.3"),
    ],
)
def test_host_names_normalise_to_one_node(raw: str, short: str) -> None:
    assert normalise_host(raw) == short


def test_cardinality_limit_refuses_new_series_and_counts_them() -> None:
    reg = SeriesRegistry(max_series=2)
    assert [reg.intern("m", {"i": str(i)}) for i in range(4)] == [0, 1, -1, -1]
    assert reg.intern("m", {"i": "0"}) == 0
    assert reg.refused == 2


def test_a_series_is_one_id_whatever_its_label_order_or_alias() -> None:
    reg = SeriesRegistry()
    sid = reg.intern("m", {"b": "2", "a": "1"})
    assert reg.intern("m", {"a": "1", "b": "2"}) == sid
    assert reg.intern("m", {"a": "1", "b": "2"}, alias=b"raw bytes") == sid
    assert reg.aliases[b"raw bytes"] == sid and reg.intern("m", {"a": "1"}) != sid
    assert reg.series(sid) == ("m", {"a": "1", "b": "2"}) and len(reg) == 2


def test_an_xid_read_before_its_metrics_waits_for_them_and_keeps_its_lead_time() -> None:
    """A consumer catching up on a backlog may read the kernel topic far ahead of the metrics topic."""
    _, processor = build(Settings())
    ticks = list(simulate(DemoCluster()))
    early = processor.process([], [line for t in ticks for line in wiring.scrape(t)[1]], wiring.BACKLOGGED)
    assert early.alerts == []
    alerts = [a for t in ticks for a in wiring.step(processor, t, logs=False).alerts]
    firing = [(a.kind, a.lead_time_seconds is not None) for a in alerts if a.status == "firing"]
    assert firing == [("pre_xid", False), ("xid", True)]


def test_entity_evidence_at_firing_names_the_families_and_series_that_voted() -> None:
    state, processor = build(Settings())
    for tick in simulate(DemoCluster()):
        out = wiring.step(processor, tick, backlogged=(), logs=False)
        if any(a.kind == "pre_xid" for a in out.alerts):
            break
    gpu5 = next(e for e in node_evidence(state.pipeline, "node-03") if e.gpu == 5)
    assert gpu5.score >= 0.5
    voting = {f.family: f for f in gpu5.families if f.votes and not f.common_mode}
    assert voting["pcie"].metric == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    assert voting["pcie"].labels["gpu"] == "5"
    assert [a.kind for a in gpu5.alerts] == ["pre_xid"]
    healthy = next(e for e in node_evidence(state.pipeline, "node-03") if e.gpu == 4)
    assert healthy.score < 0.5


def test_memory_available_rising_reads_as_the_load_falling() -> None:
    """Fusion reads directions as "busier" or "quieter": memory freed is quieter, memory used busier."""
    pipe = Pipeline()
    labels = {"instance": "node-00:9100"}
    for t in range(60):
        free = 1.2e12 + 1e9 * (t % 2) + (8e11 if t == 59 else 0.0)  # the job exits: memory freed
        pipe.ingest_samples(
            [RawSample("node_memory_MemAvailable_bytes", labels, 1_796_205_600.0 + 15 * t, free)]
        )
    pipe.advance(drain=True)
    node = pipe.registry.entity_id("node-00", None)
    assert pipe.fusion.recent_down[node, Family.HOST] >= 2.0
    assert pipe.fusion.recent_up[node, Family.HOST] < 2.0


def _row_remap_fleet(rises: dict[int, list[tuple[int, str]]], hours: float = 6.0) -> list[Alert]:
    """16 GPUs on 2 nodes, each with its SBE counter and the row-remap fields, scraped every 15 s for
    `hours`; `rises` maps a scrape index to the (gpu, metric) counters that step up by one there."""
    fields = ["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING"]
    counts = {(n, g, f): 0.0 for n in range(2) for g in range(8) for f in fields}
    alerts: list[Alert] = []
    pipe = Pipeline()
    for k in range(int(hours * 240)):
        for gpu, metric in rises.get(k, []):
            counts[(gpu // 8, gpu % 8, metric)] += 1.0
        batch = [
            RawSample(f, {"Hostname": f"node-{n}", "gpu": str(g)}, 1_796_205_600.0 + 15 * k, v)
            for (n, g, f), v in counts.items()
        ]
        alerts += pipe.ingest_samples(batch)
    return alerts + pipe.advance(drain=True)


def test_a_row_remap_pending_pages_alone_while_leaky_gpus_sbe_drip_does_not() -> None:
    """Two of 16 GPUs leak an SBE every couple of hours: the fleet prior learns that, so their drip never
    pages; a clean GPU whose ROW_REMAP_PENDING rises (once) pages by itself."""
    sbe, pending = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING"
    rises: dict[int, list[tuple[int, str]]] = {}
    for k in range(100, 1440, 450):
        rises.setdefault(k, []).append((3, sbe))
        rises.setdefault(k + 200, []).append((12, sbe))
    quiet = _row_remap_fleet(rises)
    assert not [a for a in quiet if a.kind == "pre_xid" and a.status == "firing"]
    rises.setdefault(1200, []).append((9, pending))
    paged = [a for a in _row_remap_fleet(rises) if a.kind == "pre_xid" and a.status == "firing"]
    assert [(a.node, a.gpu) for a in paged] == [("node-1", 1)]


def test_the_error_counters_warm_up_is_a_setting() -> None:
    """A lab that knows its counters may trust them from the first scrape; by default the counters are
    watched for 20 minutes first."""
    default, _ = build(Settings())
    trusted, _ = build(Settings(detection={"error_counter_warmup_s": 0}))
    assert default.pipeline.bank.error_counter.warmup_s == 1200.0
    assert trusted.pipeline.bank.error_counter.warmup_s == 0.0
