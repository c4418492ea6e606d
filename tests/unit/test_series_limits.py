"""Cardinality limits that mean what they say: one limit for the process, however many partitions it
owns, and a bound on the series one message may create."""

from __future__ import annotations

import gc

from prexid.service.app.settings import DetectionSettings, Settings
from prexid.service.app.wiring import build
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.processor import Message

NOW = 1_764_756_000.0


def series(n: int, node: str) -> list[RawSample]:
    return [RawSample("DCGM_FI_DEV_GPU_TEMP", {"Hostname": node, "gpu": str(i)}, NOW, 60.0) for i in range(n)]


def test_the_series_limit_holds_for_the_process_not_for_each_partition() -> None:
    settings = Settings(detection=DetectionSettings(max_series=10))
    state, first = build(settings)
    second = build(settings, state)[1]  # another partition of the same replica
    first.pipeline.ingest_samples(series(8, "node-1"))
    second.pipeline.ingest_samples(series(8, "node-2"))
    assert len(first.pipeline.registry) + len(second.pipeline.registry) == 10
    assert second.pipeline.registry.refused == 6
    state.shards = {0: first.pipeline, 1: second.pipeline}  # as the Kafka runner publishes them
    sample = state.telemetry.registry.get_sample_value
    assert sample("prexid_series") == 10.0


def test_refused_series_stay_counted_once_their_partition_is_handed_off() -> None:
    settings = Settings(detection=DetectionSettings(max_series=3), topic_formats={"scrapes": "prom_text"})
    state, shard = build(settings)
    shard.process([Message(scrape(10), NOW, "scrapes", 0, 0, b"node-1")], [], ())
    state.shards = {0: shard.pipeline}
    sample = state.telemetry.registry.get_sample_value
    assert sample("prexid_series_refused_total") == 7.0
    state.shards = {}  # revoked: its pipeline and registry are gone, the refusals happened all the same
    assert sample("prexid_series_refused_total") == 7.0


def test_a_partition_handed_off_gives_its_share_back() -> None:
    settings = Settings(detection=DetectionSettings(max_series=10))
    state, _ = build(settings)
    shard = build(settings, state)[1]
    shard.pipeline.ingest_samples(series(10, "node-1"))
    del shard
    gc.collect()
    other = build(settings, state)[1]
    other.pipeline.ingest_samples(series(5, "node-2"))
    assert len(other.pipeline.registry) == 5 and other.pipeline.registry.refused == 0


def scrape(n: int) -> bytes:
    return "".join(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i}"}} 60\n' for i in range(n)).encode()


def test_one_message_may_create_only_so_many_series() -> None:
    settings = Settings(max_new_series_per_message=20, topic_formats={"scrapes": "prom_text"})
    _, processor = build(settings)
    out = processor.process([Message(scrape(50), NOW, "scrapes", 0, 4, b"node-1")], [], ())
    assert [(d.reason, d.message.offset) for d in out.dead_letters] == [("too_many_series", 4)]
    assert len(processor.pipeline.registry) <= 21  # what was made before the cut stays, bounded
    out = processor.process([Message(scrape(15), NOW + 15, "scrapes", 0, 5, b"node-1")], [], ())
    assert out.dead_letters == []


def test_a_large_scrape_of_known_series_is_no_new_series() -> None:
    settings = Settings(max_new_series_per_message=20, topic_formats={"scrapes": "prom_text"})
    _, processor = build(settings)
    for k in range(4):  # 60 series learnt 15 at a time, then scraped 60 at once
        processor.process([Message(scrape(15 * (k + 1)), NOW + k, "scrapes", 0, k, b"node-1")], [], ())
    out = processor.process([Message(scrape(60), NOW + 30, "scrapes", 0, 9, b"node-1")], [], ())
    assert out.dead_letters == [] and len(processor.pipeline.registry) == 60
