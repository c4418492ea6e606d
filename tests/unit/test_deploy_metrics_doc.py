"""docs/metrics.md documents every metric prexid exports, with its type and labels."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from prexid.service.app.settings import QuarantineSettings, Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import Message
from prexid.service.sources.demo_cluster import DemoCluster, simulate
from tests.unit import wiring

DOC = Path(__file__).resolve().parents[2] / "docs/metrics.md"


def documented() -> dict[str, tuple[str, set[str]]]:
    """metric -> (type, label names) from the doc's table rows."""
    rows = re.findall(r"^\| `(prexid_\w+)` \| (\w+) \| ([^|]*) \|", DOC.read_text(), flags=re.MULTILINE)
    return {
        name: (kind, set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", labels))))
        for name, kind, labels in rows
    }


def exported() -> dict[str, tuple[str, set[str]]]:
    """metric family -> (type, label names seen) from a replayed demo's exposition."""
    # an Alertmanager URL registers the sink's counters too (nothing is sent: the sink never runs here),
    # and the quarantine action (Slurm: nothing to connect to) its own
    quarantine = QuarantineSettings(enabled=True, backend="slurm")
    state, processor = build(Settings(alertmanager_urls=["http://127.0.0.1:9"], quarantine=quarantine))
    wiring.feed(processor, simulate(DemoCluster(nodes=4, gpus=8, duration_s=600.0)))
    processor.process([Message(b"not json", 0.0, "metrics", 0)], [], (), drain=True)  # a dead letter
    out = {}
    for fam in text_string_to_metric_families(generate_latest(state.telemetry.registry).decode()):
        if fam.name.endswith("_created"):  # the creation time the client adds to counters and histograms
            continue
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out[name] = (fam.type, {k for s in fam.samples for k in s.labels})
    return out


def test_every_exported_metric_is_documented_with_its_type_and_labels() -> None:
    docs, metrics = documented(), exported()
    assert set(metrics) == set(docs)
    assert metrics["prexid_dead_letters_total"][1] == {"reason"}  # the labelled families were exercised
    for name, (kind, labels) in metrics.items():
        assert docs[name][0] == kind, name
        assert labels <= docs[name][1], name
