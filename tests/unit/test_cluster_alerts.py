"""A storage stall on every node at once is one `cluster` alert, not a page per node."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from prexid.service.decode.types import RawSample
from prexid.service.pipeline.fleet import Fleet
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.schemas import Alert

NODES = 16
START = 1_796_205_600.0


def scrape(
    t: int, rng: np.random.Generator, backlog: np.ndarray, stalled: set[int], read: np.ndarray, reading: bool
) -> list[RawSample]:
    """One 15 s scrape: NFS backlog and bytes read, and a GPU temperature, per node."""
    ts = START + 15.0 * t
    out: list[RawSample] = []
    for n in range(NODES):
        rate = 900.0 if n in stalled else 40.0
        backlog[n] += rng.poisson(rate * 15.0)
        read[n] += (4e9 if reading else 2e7) * 15.0 * (1 + rng.normal(0, 0.02))
        labels = {"instance": f"node-{n:02d}:9100", "export": "nfs:/ckpt"}
        out.append(
            RawSample("node_mountstats_nfs_transport_backlog_queue_total", labels, ts, float(backlog[n]))
        )
        out.append(RawSample("node_mountstats_nfs_read_bytes_total", labels, ts, float(read[n])))
        out.append(RawSample("node_load1", {"instance": f"node-{n:02d}:9100"}, ts, 20.0 + rng.normal()))
        gpu_labels = {"Hostname": f"node-{n:02d}", "gpu": "0", "pci_bus_id": "00000000:18:00.0"}
        out.append(RawSample("DCGM_FI_DEV_GPU_TEMP", gpu_labels, ts, 60.0 + rng.normal(0, 0.3)))
    return out


def run(stalled_at: range, stalled_nodes: set[int], ticks: int = 240, reads: bool = False) -> list[Alert]:
    """`reads`: every node reads a checkpoint back (NFS bytes x200) while its backlog stalls."""
    rng = np.random.default_rng(5)
    backlog, read = np.zeros(NODES), np.zeros(NODES)
    pipeline = Pipeline()
    alerts: list[Alert] = []
    for t in range(ticks):
        now = t in stalled_at
        alerts += pipeline.ingest_samples(
            scrape(t, rng, backlog, stalled_nodes if now else set(), read, reads and now)
        )
    return alerts + pipeline.advance(drain=True)


def test_a_cluster_wide_storage_stall_is_one_cluster_alert_and_no_node_pages() -> None:
    alerts = run(range(120, 160), set(range(NODES)))
    assert [(a.kind, a.status) for a in alerts] == [("cluster", "firing"), ("cluster", "resolved")]
    firing = alerts[0]
    assert firing.signals[0].family == "storage-io"
    assert firing.signals[0].value == 1.0
    assert firing.fingerprint == alerts[1].fingerprint


def test_a_stall_on_one_node_is_not_a_cluster_event() -> None:
    alerts = run(range(120, 160), {3})
    assert [a for a in alerts if a.kind == "cluster"] == []


def test_storage_stalling_everywhere_while_every_node_moves_bytes_is_still_one_cluster_alert() -> None:
    """An NFS storm begins with a checkpoint's traffic: load coupling, which explains a node's own latency
    by its own I/O, must not explain away a stall on every node at once. (The stall is 25 minutes long:
    begun with the job's own reads, a rise is the job's checkpoint until it outlasts the 10-minute prior,
    `detectors/job_io.py`.)"""
    alerts = run(range(120, 220), set(range(NODES)), ticks=300, reads=True)
    assert [(a.kind, a.status) for a in alerts if a.kind == "cluster"] == [
        ("cluster", "firing"),
        ("cluster", "resolved"),
    ]


def run_partitioned(partitions: int, fleet: bool) -> list[Alert]:
    """The whole-cluster stall of `run`, its nodes dealt round robin to `partitions` pipelines, judged
    as one `Fleet` or each partition on its own."""
    rng = np.random.default_rng(5)
    backlog, read = np.zeros(NODES), np.zeros(NODES)
    pipelines = [Pipeline() for _ in range(partitions)]
    together = Fleet(pipelines) if fleet else None
    alerts: list[Alert] = []

    def advance(drain: bool = False) -> None:
        nonlocal alerts
        if together is not None:
            alerts += [a for mine in together.advance(drain) for a in mine]
        else:
            alerts += [a for pipe in pipelines for a in pipe.advance(drain)]

    for t in range(240):
        samples = scrape(t, rng, backlog, set(range(NODES)) if 120 <= t < 160 else set(), read, False)
        for p, pipe in enumerate(pipelines):
            mine = [
                s
                for s in samples
                if int((s.labels.get("instance") or s.labels["Hostname"])[5:7]) % partitions == p
            ]
            pipe.add_samples(mine, "metrics:0")
        advance()
    advance(drain=True)
    return alerts


@pytest.mark.parametrize(("partitions", "firing_apart"), [(4, 4), (8, 0)])
def test_a_stall_over_many_partitions_is_one_cluster_alert_and_no_node_pages(
    partitions: int, firing_apart: int
) -> None:
    """Judged apart, each partition of four nodes raises its own cluster alert, and two nodes a
    partition are too few (three at least) for any to see a shared cause. Judged as one fleet: one
    cluster alert, raised once, and no node pages."""
    apart = run_partitioned(partitions, fleet=False)
    assert sum(a.kind == "cluster" and a.status == "firing" for a in apart) == firing_apart
    alerts = run_partitioned(partitions, fleet=True)
    assert [(a.kind, a.status) for a in alerts] == [("cluster", "firing"), ("cluster", "resolved")]
    assert alerts[0].signals[0].family == "storage-io" and alerts[0].signals[0].value == 1.0


def job_scrape(
    t: int, rng: np.random.Generator, c: dict[str, np.ndarray], job: set[int], stalled: set[int]
) -> list[RawSample]:
    """One 15 s scrape of idle nodes, of which `job` run a job (CPU, load and NFS traffic up, a latency
    level the idle baseline never saw) and `stalled` see NFS stall (backlog x20, major timeouts)."""
    ts = START + 15.0 * t
    out: list[RawSample] = []
    for n in range(NODES):
        running, stall = n in job, n in stalled
        c["cpu"][n] += 224 * (0.3 if running else 0.02) * 15.0 * (1 + rng.normal(0, 0.03))
        c["backlog"][n] += rng.poisson((800.0 if stall else 160.0 if running else 40.0) * 15.0)
        c["read"][n] += (8e7 if running else 2e7) * 15.0 * (1 + rng.normal(0, 0.03))
        c["timeouts"][n] += rng.poisson(0.3) if stall else 0
        labels = {"instance": f"node-{n:02d}:9100", "export": "nfs:/ckpt"}
        host = {"instance": f"node-{n:02d}:9100"}
        out += [
            RawSample(
                "node_mountstats_nfs_transport_backlog_queue_total", labels, ts, float(c["backlog"][n])
            ),
            RawSample("node_mountstats_nfs_read_bytes_total", labels, ts, float(c["read"][n])),
            RawSample(
                "node_mountstats_nfs_operations_major_timeouts_total", labels, ts, float(c["timeouts"][n])
            ),
            RawSample("node_cpu_seconds_total", host, ts, float(c["cpu"][n])),
            RawSample("node_load1", host, ts, (60.0 if running else 4.0) + rng.normal()),
        ]
    return out


def run_job_start(stalled_at: range, job_nodes: int = 6) -> list[Alert]:
    """A job starts on `job_nodes` of 16 idle nodes at tick 240 and runs on; they stall during
    `stalled_at`."""
    rng = np.random.default_rng(7)
    c = {k: np.zeros(NODES) for k in ("cpu", "backlog", "read", "timeouts")}
    pipeline = Pipeline()
    alerts: list[Alert] = []
    job = set(range(job_nodes))
    for t in range(480):
        running = job if t >= 240 else set()
        alerts += pipeline.ingest_samples(job_scrape(t, rng, c, running, job if t in stalled_at else set()))
    return [a for a in alerts + pipeline.advance(drain=True) if a.kind == "cluster"]


def test_a_job_starting_on_idle_nodes_is_not_a_cluster_event() -> None:
    """Its nodes do more I/O than their idle baselines know for as long as those take to learn it, on
    more than the cluster vote's share of the fleet: that is the job's regime (its CPU rose with it)."""
    assert run_job_start(range(0)) == []


def test_storage_stalling_on_nodes_whose_job_just_started_is_still_one_cluster_alert() -> None:
    """NFS timeouts are never the job's: a stall on the job's nodes still raises the cluster alert."""
    alerts = run_job_start(range(300, 380))
    assert [(a.status, a.signals[0].family) for a in alerts] == [
        ("firing", "storage-io"),
        ("resolved", "storage-io"),
    ]


def test_storage_stalling_on_the_only_busy_nodes_of_an_idle_fleet_is_one_cluster_alert() -> None:
    """An idle fleet's one small job (2 of 16 nodes, far under the cluster vote's 30% share) is the
    storage server's only client: when it stalls, its NFS timeouts on both nodes at once are one shared
    stall (wide-s33 and s40 missed theirs, 2 of 8 nodes, on the share alone)."""
    alerts = run_job_start(range(300, 380), job_nodes=2)
    assert [(a.status, a.signals[0].family) for a in alerts] == [
        ("firing", "storage-io"),
        ("resolved", "storage-io"),
    ]


def test_timeouts_on_one_busy_node_are_not_a_cluster_event() -> None:
    """One node's NFS timeouts are that node's (its mount, its link): the stall path needs two."""
    assert run_job_start(range(300, 380), job_nodes=1) == []


def checkpoint_scrape(
    t: int, rng: np.random.Generator, backlog: np.ndarray, read: np.ndarray, writing: bool, job_pauses: bool
) -> list[RawSample]:
    """`scrape` of a training job on every node, with each node's GPU utilisation near 97%: while `writing`
    every node's backlog grows as in a stall, and if `job_pauses` utilisation falls to 14% meanwhile (the
    job waiting on its checkpoint)."""
    out = scrape(t, rng, backlog, set(range(NODES)) if writing else set(), read, False)
    util = 14.0 if writing and job_pauses else 97.0
    for n in range(NODES):
        gpu_labels = {"Hostname": f"node-{n:02d}", "gpu": "0", "pci_bus_id": "00000000:18:00.0"}
        out.append(RawSample("DCGM_FI_DEV_GPU_UTIL", gpu_labels, START + 15.0 * t, util + rng.normal(0, 1.0)))
    return out


def run_checkpoints(writes: list[range], job_pauses: bool = True) -> list[Alert]:
    """Cluster alerts over 8 h of a job that writes its checkpoints over `writes` (tick ranges)."""
    rng = np.random.default_rng(11)
    backlog, read = np.zeros(NODES), np.zeros(NODES)
    pipeline = Pipeline()
    alerts: list[Alert] = []
    for t in range(1920):
        writing = any(t in w for w in writes)
        alerts += pipeline.ingest_samples(checkpoint_scrape(t, rng, backlog, read, writing, job_pauses))
    return [a for a in alerts + pipeline.advance(drain=True) if a.kind == "cluster"]


def test_a_checkpoint_longer_than_the_cluster_persistence_is_not_a_cluster_event() -> None:
    """wide-s1173, s1211, s1220: every node's storage rose for a whole 10-minute checkpoint, as long as
    the cluster alert's persistence, and paged. The job paused for it, so the rise is its own I/O until
    it outlasts the job's checkpoints (the first one: the 10-minute prior)."""
    checkpoint = 44  # ticks: 11 minutes
    writes = [range(s, s + checkpoint) for s in (360, 720, 1080)]
    assert run_checkpoints(writes) == []
    firing = [a for a in run_checkpoints(writes, job_pauses=False) if a.status == "firing"]
    assert [a.signals[0].family for a in firing] == ["storage-io"] * 3  # no phase change: three stalls


def test_a_checkpoint_that_cannot_finish_is_one_cluster_alert() -> None:
    """An NFS storm begins as a checkpoint: once the rise outlasts the job's usual checkpoint (11 minutes
    here) by half again, the cluster alert's own persistence follows, and it pages."""
    writes = [range(s, s + 44) for s in (360, 720, 1080)] + [range(1440, 1440 + 160)]
    alerts = run_checkpoints(writes)
    assert [(a.status, a.signals[0].family) for a in alerts] == [
        ("firing", "storage-io"),
        ("resolved", "storage-io"),
    ]
    began = datetime.fromisoformat(alerts[0].starts_at.replace("Z", "+00:00")).timestamp()
    assert START + 15.0 * (1440 + 1.5 * 43) <= began < START + 15.0 * (1440 + 1.5 * 44 + 4)
