"""Score metrics carry the labels PromQL needs to join and filter them."""

from __future__ import annotations

import orjson

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.sources.demo_cluster import DemoCluster, simulate
from tests.unit.wiring import feed


def test_the_cluster_score_is_labelled_with_its_cluster() -> None:
    state, processor = build(Settings(cluster="b200-east"))
    feed(processor, list(simulate(DemoCluster(nodes=4, gpus=8, seed=1)))[:5])
    registry = state.telemetry.registry
    assert registry.get_sample_value("prexid_cluster_fused_score", {"cluster": "b200-east"}) is not None
    assert registry.get_sample_value("prexid_cluster_fused_score") is None  # never unlabelled


def test_gpu_scores_carry_dcgm_identity_labels_in_both_renderings() -> None:
    from prexid.service.http.read_view import ScoresCopy
    from prexid.service.sinks.prometheus import EntityScoreText

    state, processor = build(Settings())
    cluster = DemoCluster(nodes=4, gpus=8, seed=1)
    ticks = list(simulate(cluster))[:5]
    feed(processor, ticks)
    node, gpu = cluster.host(0), 0
    dcgm = next(
        orjson.loads(m)["labels"]
        for m in ticks[0].metrics
        if orjson.loads(m)["name"] == "DCGM_FI_DEV_GPU_TEMP"
        and orjson.loads(m)["labels"]["gpu"] == str(gpu)
        and orjson.loads(m)["labels"]["Hostname"] == node
    )
    identity = {"Hostname": dcgm["Hostname"], "UUID": dcgm["UUID"], "pci_bus_id": dcgm["pci_bus_id"]}
    labels = {"cluster": "default", "node": node, "gpu": str(gpu)} | identity
    assert state.telemetry.registry.get_sample_value("prexid_gpu_fused_score", labels) is not None
    copy = ScoresCopy.of(processor.pipeline)
    text = (
        EntityScoreText().render([(copy.cluster, copy.entities, copy.fused.tolist(), copy.dcgm_of)]).decode()
    )
    head = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
    assert f"prexid_gpu_fused_score{{{head}}}" in text
