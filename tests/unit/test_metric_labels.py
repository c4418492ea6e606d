"""Score metrics carry the labels PromQL needs to join and filter them."""

from __future__ import annotations

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
