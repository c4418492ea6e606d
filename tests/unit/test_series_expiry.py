"""Series expire: label churn (`pod`, `container`) neither fills the cardinality limit nor grows the
state, and an id given to a new series carries nothing of the expired one that held it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import orjson
import pytest
from rich.console import Console

from prexid.detectors.bank import DetectorBank
from prexid.detectors.base import ArrayState, SeriesState
from prexid.detectors.signals import Family
from prexid.service.app.settings import DetectionSettings, Settings
from prexid.service.app.wiring import build
from prexid.service.decode.types import RawSample
from prexid.service.offline.replay import AlertWriter, replay_columnar
from prexid.service.pipeline.pipeline import Pipeline, PipelineConfig
from prexid.service.pipeline.processor import Message
from prexid.service.pipeline.series_registry import Entity, canonical_key
from prexid.service.state import snapshot
from tests.unit.test_snapshot import differences

T0 = 1_764_756_000.0
STEP = 15.0
POWER = "DCGM_FI_DEV_POWER_USAGE"


def steady(t: float, n: int = 8) -> list[RawSample]:
    """One scrape of a node's GPU temperatures: series that never churn."""
    return [
        RawSample("DCGM_FI_DEV_GPU_TEMP", {"Hostname": "node-1", "gpu": str(g)}, t, 60.0) for g in range(n)
    ]


def pod_power(t: float, pod: str, watts: float) -> RawSample:
    return RawSample(POWER, {"Hostname": "node-1", "gpu": "0", "pod": pod}, t, watts)


def sid_of(pipe: Pipeline, pod: str) -> int:
    return pipe.registry.ids.get(_key(pod), -1)


def _key(pod: str) -> bytes:
    return canonical_key(POWER, {"Hostname": "node-1", "gpu": "0", "pod": pod})


def series_states(bank: DetectorBank) -> list[SeriesState]:
    """Every per-series state the bank holds, nested parts included (a calibrator, a judge of residuals)."""
    found: list[SeriesState] = []

    def walk(part: object) -> None:
        if isinstance(part, ArrayState):
            found.append(part.state)
            for name in part.nested:
                walk(getattr(part, name))

    for det in [*bank.all_detectors(), bank.staleness]:
        walk(det)
    return found


def node_pod(t: float, pod: str) -> RawSample:
    """A node-level series carrying a pod label: a peer group of its own (node series keep such labels)."""
    return RawSample("node_hwmon_temp_celsius", {"instance": "node-1:9100", "pod": pod}, t, 40.0)


def test_label_churn_for_hours_stays_within_the_limit_and_the_state_stays_bounded() -> None:
    """A new `pod` label every 5 minutes for 12 hours: 144 series in all, never more than ~14 alive."""
    pipe = Pipeline(PipelineConfig(max_series=8 + 40))
    for k in range(int(12 * 3600 / STEP)):
        t = T0 + k * STEP
        pod = f"job-{k // 20}"
        pipe.ingest_samples([*steady(t), pod_power(t, pod, 300.0), node_pod(t, pod)])
    reg = pipe.registry
    assert reg.refused == 0  # without expiry the 21st pod is refused, and every one after it
    assert reg.expired >= 2 * (144 - 15)
    assert len(reg) <= 8 + 2 * (3600 / 300 + 2)  # the pods of the last TTL, and one sweep's delay
    assert reg.id_space() <= 8 + 2 * (3600 / 300 + 3)  # ids are recycled: the arrays do not grow with churn
    assert len(pipe.peer_groups) <= 8 + 2 * (3600 / 300 + 2)  # a node series' pod label: a group each
    assert pipe.peer_groups.id_space() <= 8 + 2 * (3600 / 300 + 3)  # group ids are recycled too
    assert len(reg.ids) == len(reg) and len(reg.aliases) <= len(reg)  # no alias left to an expired series
    live_power = sum(1 for key in reg.keys if key.startswith(b'["' + POWER.encode()))
    gpu0 = reg.entity_ids[reg.entities[int(reg.entity_of[sid_of(pipe, "job-143")])]]
    assert pipe.fusion.n_series[gpu0, Family.POWER] == live_power  # fusion counts the series there are


def test_a_recycled_id_scores_its_new_series_from_a_clean_state() -> None:
    """A pod drawing 600 W for two hours goes; its id goes to a new pod drawing 60 W, which is not
    judged against 600 W (a drop of 90% would be the most surprising reading the GPU ever gave)."""
    pipe = Pipeline(PipelineConfig(series_ttl_s=1200.0))
    surprise: list[float] = []
    t = T0
    for _ in range(int(2 * 3600 / STEP)):
        pipe.ingest_samples([*steady(t), pod_power(t, "old", 600.0 + (t % 60) / 15)])
        t += STEP
    old = sid_of(pipe, "old")
    for _ in range(int(1800 / STEP)):  # the old pod is gone: it expires 1200 s later
        pipe.ingest_samples(steady(t))
        t += STEP
    assert sid_of(pipe, "old") == -1 and old in pipe.registry.free
    for state in series_states(pipe.bank):  # every row of the id back to a never-seen series'
        for name, column in state.arrays.items():
            assert column[old] == state._defaults[name] or (
                np.isnan(column[old]) and np.isnan(state._defaults[name])
            ), name
    assert pipe.bank.fail_slow.slot[old] == -1 if old < len(pipe.bank.fail_slow.slot) else True

    entity = None
    pipe.tick_listeners.append(lambda tick, fused, at_tick: surprise.append(float(at_tick[entity].max())))
    pipe.ingest_samples([*steady(t), pod_power(t, "new", 60.0)])
    new = sid_of(pipe, "new")
    assert new == old  # the free id is given to the next new series
    entity = int(pipe.registry.entity_of[new])
    for _ in range(40):
        t += STEP
        pipe.ingest_samples([*steady(t), pod_power(t, "new", 60.0 + (t % 60) / 15)])
    assert max(surprise) < 2.0  # the old level would make this > 10 (shown by skipping the reset)
    assert not [a for a in pipe.alert_book.active.values() if a.kind != "xid"]


def test_an_expired_series_that_comes_back_is_a_new_series_and_is_not_reported_silent() -> None:
    pipe = Pipeline(PipelineConfig(series_ttl_s=1200.0))  # below staleness' own retirement (1 h)
    t = T0
    for _ in range(80):
        pipe.ingest_samples([*steady(t), pod_power(t, "p", 300.0)])
        t += STEP
    sid = sid_of(pipe, "p")
    for _ in range(int(1600 / STEP)):
        pipe.ingest_samples(steady(t))
        t += STEP
    silent, _ = pipe.bank.sweep(t)
    assert sid not in silent.tolist()  # gone, not silent: without expiry it would still be reported
    assert pipe.registry.expired == 1 and sid_of(pipe, "p") == -1
    gpu0 = pipe.registry.entity_ids[Entity("node-1", 0)]
    assert pipe.fusion.n_series[gpu0, Family.POWER] == 0
    assert not pipe.fusion.present[gpu0, Family.POWER]  # no data for the family there: no carrier of it
    pipe.ingest_samples([*steady(t), pod_power(t, "p", 300.0)])
    pipe.ingest_samples(steady(t + STEP))  # the watermark passes it: scored
    again = sid_of(pipe, "p")
    assert again >= 0 and pipe.bank.staleness.state["n"][again] == 1.0  # one sample: a fresh start
    reg = pipe.registry
    assert len(reg) == 9 and reg.series(again)[1]["pod"] == "p"


def test_a_snapshot_keeps_the_free_ids_and_when_each_series_was_seen() -> None:
    settings = Settings(detection=DetectionSettings(series_ttl_s=600.0))
    _, first = build(settings)
    t = T0
    for k in range(200):
        first.pipeline.ingest_samples([*steady(t), pod_power(t, f"job-{k // 20}", 300.0)])
        t += STEP
    reg = first.pipeline.registry
    assert reg.free and reg.expired
    _, second = build(settings)
    snapshot.load(snapshot.dump(first, {}), second)
    back = second.pipeline.registry
    assert back.free == reg.free and back.expired == reg.expired
    assert np.array_equal(back.last_seen[: reg.id_space()], reg.last_seen[: reg.id_space()])
    assert back.ids == reg.ids
    for pipe in (first.pipeline, second.pipeline):  # both give the same id to the next new series
        pipe.ingest_samples([*steady(t), pod_power(t, "next", 300.0)])
    assert sid_of(first.pipeline, "next") == sid_of(second.pipeline, "next") == reg.ids[_key("next")]


def test_the_sweep_runs_every_few_minutes_of_event_time_not_every_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Expiry is one vectorised comparison over the last-seen column, run every 5 minutes of event time
    (a quarter of a shorter TTL), and touches no series one by one unless some expire."""
    pipe = Pipeline(PipelineConfig())
    cutoffs: list[float] = []
    expiring = pipe.registry.expiring

    def counted(cutoff: float) -> np.ndarray:
        cutoffs.append(cutoff)
        return expiring(cutoff)

    monkeypatch.setattr(pipe.registry, "expiring", counted)
    for k in range(240):  # one hour of ticks
        pipe.ingest_samples(steady(T0 + k * STEP))
    assert 12 <= len(cutoffs) <= 13
    assert np.diff(cutoffs).min() == 300.0


def test_a_ttl_shorter_than_a_minute_is_refused() -> None:
    with pytest.raises(ValueError, match="series_ttl_s"):
        DetectionSettings(series_ttl_s=10.0)


def test_expired_series_are_counted() -> None:
    settings = Settings(
        detection=DetectionSettings(series_ttl_s=60.0), topic_formats={"scrapes": "prom_text"}
    )
    state, processor = build(settings)
    for k in range(40):  # a new pod every minute for ten minutes
        body = (
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="0"}} 60\nDCGM_FI_DEV_POWER_USAGE{{gpu="0",pod="job-{k // 4}"}} 300\n'
        )
        processor.process([Message(body.encode(), T0 + k * STEP, "scrapes", 0, k, b"node-1")], [], ())
    expired = state.telemetry.registry.get_sample_value("prexid_series_expired_total")
    assert expired == processor.pipeline.registry.expired >= 7


def test_a_columnar_replay_keeps_its_series_seen_and_makes_one_that_comes_back_new(tmp_path: Path) -> None:
    """The columnar replay hands rows to the pipeline without decoding: it must mark them seen (else
    every series expires an hour in) and intern a column again when its series expired while silent."""
    names = ["DCGM_FI_DEV_GPU_TEMP"] * 8 + [POWER]
    labels = [{"Hostname": "node-1", "gpu": str(g)} for g in range(8)] + [
        {"Hostname": "node-1", "gpu": "0", "pod": "p"}
    ]
    (tmp_path / "series.jsonl").write_bytes(
        b"".join(
            orjson.dumps({"name": n, "labels": lab}) + b"\n" for n, lab in zip(names, labels, strict=True)
        )
    )
    steps = int(4 * 3600 / STEP)
    ts = T0 + STEP * np.arange(steps)
    values = np.full((steps, 9), 60.0)
    values[:, 8] = 300.0
    values[int(3600 / STEP) : int(3 * 3600 / STEP), 8] = np.nan  # the pod is away two hours
    np.savez(tmp_path / "metrics-000.npz", ts=ts, values=values)
    _, processor = build(Settings())
    writer = AlertWriter(io.BytesIO(), io.BytesIO())
    replay_columnar(tmp_path, [processor], writer, Console(file=io.StringIO()), None)
    reg = processor.pipeline.registry
    assert reg.expired == 1 and len(reg) == 9  # the temperatures never expired; the pod did, once
    sid = reg.ids[_key("p")]
    assert processor.pipeline.bank.staleness.state["n"][sid] == pytest.approx(3600 / STEP, abs=2)


def test_a_restored_pipeline_with_expired_series_equals_the_original() -> None:
    """Free lists (registry, peer groups, fail-slow rows) come back as they were, in their order."""
    settings = Settings(detection=DetectionSettings(series_ttl_s=600.0))
    _, first = build(settings)
    t = T0
    for k in range(200):
        clocks = [
            RawSample(
                "DCGM_FI_DEV_SM_CLOCK",
                {"Hostname": "node-1", "gpu": str(g), "pod": f"job-{k // 40}"},
                t,
                1980.0,
            )
            for g in range(8)
        ]
        first.pipeline.ingest_samples([*steady(t), *clocks, node_pod(t, f"job-{k // 20}")])
        t += STEP
    assert first.pipeline.registry.free and first.pipeline.registry.expired
    _, second = build(settings)
    snapshot.load(snapshot.dump(first, {}), second)
    assert differences(first.pipeline, second.pipeline) == []


def test_an_id_recycled_from_a_row_remap_field_to_another_series_does_not_page_alone() -> None:
    """Row-remap fields page alone on a rare rise (`Pipeline._latch_decisive`), a flag kept per series id:
    the id's next holder must not inherit it, nor a remap field miss it in an id an ordinary series held."""
    pending = "DCGM_FI_DEV_ROW_REMAP_PENDING"
    labels = {"Hostname": "node-1", "gpu": "0", "pod": "a"}
    pipe = Pipeline(PipelineConfig(series_ttl_s=1200.0))
    t = T0
    for _ in range(int(3600 / STEP)):
        pipe.ingest_samples([*steady(t), RawSample(pending, labels, t, 0.0)])
        t += STEP
    remap = pipe.registry.ids[canonical_key(pending, labels)]
    assert pipe.registry.decisive[remap]
    for _ in range(int(1800 / STEP)):  # the field stops reporting: its id is freed
        pipe.ingest_samples(steady(t))
        t += STEP
    assert remap in pipe.registry.free and not pipe.registry.decisive[remap]
    pipe.ingest_samples([*steady(t), pod_power(t, "b", 300.0)])
    assert sid_of(pipe, "b") == remap and not pipe.registry.decisive[remap]
