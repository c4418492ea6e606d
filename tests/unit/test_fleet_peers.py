"""Node-vs-node peer groups are the fleet's, whatever the split into partitions.

16 nodes, dealt round robin to 4 partitions. Each partition's nodes run at their own level (the jobs of
a partition differ), so a node's peers within its partition and across the fleet disagree: judged
against the fleet, a node of the hottest partition deviates; against its partition-mates it does not.
And one node deviates only against its partition-mates. Both must be judged at N=4 as at N=1.
"""

from __future__ import annotations

import numpy as np
import pytest

from prexid.detectors.fleet_peers import CAP, Outside, PeerSketch, fleet_key, outside
from prexid.detectors.fleet_vote import Summary
from prexid.detectors.signals import N_FAMILIES
from prexid.service.decode.types import RawSample
from prexid.service.pipeline.fleet import Fleet
from prexid.service.pipeline.fleet_judge import FleetBoard, FleetJudge
from prexid.service.pipeline.fleet_summary import PartitionSummary, SummaryError
from prexid.service.pipeline.pipeline import Pipeline

NODES = 16
START = 1_796_205_600.0
METRIC = "node_load1"


def level(n: int, t: int) -> float:
    """Partition n % 4 runs at 20 + 6 x (n % 4); node 6 leaves its partition-mates' level at t = 60 for
    the fleet's median (it deviates only against its partition)."""
    base = 20.0 + 6.0 * (n % 4)
    return 29.0 if n == 6 and t >= 60 else base


def scrape(t: int, rng: np.random.Generator) -> list[RawSample]:
    ts = START + 15.0 * t
    return [
        RawSample(METRIC, {"instance": f"node-{n:02d}:9100"}, ts, level(n, t) + rng.normal(0, 0.3))
        for n in range(NODES)
    ]


def residuals(pipelines: list[Pipeline], partition_of: list[int]) -> np.ndarray:
    """Each node's last residual against its peers' median, read from the pipeline holding it."""
    out = np.full(NODES, np.nan)
    for n in range(NODES):
        pipe = pipelines[partition_of[n]]
        sid = pipe.registry.intern_many([METRIC], [{"instance": f"node-{n:02d}:9100"}])
        out[n] = pipe.bank.peer.shortfall(sid)[0]
    return out


def run(partitions: int, fleet: bool) -> np.ndarray:
    """Every node's residual at every tick: (ticks, nodes)."""
    rng = np.random.default_rng(11)
    pipelines = [Pipeline() for _ in range(partitions)]
    together = Fleet(pipelines) if fleet else None
    partition_of = [n % partitions for n in range(NODES)]
    history = []
    for t in range(120):
        samples = scrape(t, rng)
        for p, pipe in enumerate(pipelines):
            pipe.add_samples([s for s, q in zip(samples, partition_of, strict=True) if q == p], "metrics:0")
        if together is not None:
            together.advance()
        else:
            for pipe in pipelines:
                pipe.advance()
        history.append(residuals(pipelines, partition_of))
    return np.array(history)


def test_a_node_is_judged_against_the_whole_fleet_at_n4_as_at_n1() -> None:
    one, four = run(1, fleet=True), run(4, fleet=True)
    scored = np.isfinite(one)
    assert scored[1:].all()  # from the first scrape released on
    assert np.array_equal(np.isfinite(four), scored)
    np.testing.assert_allclose(four[scored], one[scored], rtol=1e-5, atol=1e-6)  # float32 on the way
    # the hottest partition's nodes deviate against the fleet (about +0.35 of the median), not their own
    assert (one[10:, 3] > 0.25).all()
    # node 6 deviates against its partition-mates (level 32) only from t = 60, not against the fleet
    assert abs(one[100, 6]) < 0.05


def test_judged_apart_the_partitions_disagree_with_the_fleet() -> None:
    """What the fleet's groups fix: each partition judging its nodes against its own four."""
    one, apart = run(1, fleet=True), run(4, fleet=False)
    assert np.abs(apart[10:, 3]).max() < 0.05  # the hot node is ordinary among its partition-mates
    assert (apart[100, 6] < -0.05) and abs(one[100, 6]) < 0.05


def test_one_pipeline_never_sketches() -> None:
    """N=1 is left exactly as it was: its groups are already the fleet's."""
    pipe = Pipeline()
    fleet = Fleet([pipe])
    rng = np.random.default_rng(1)
    for t in range(10):
        pipe.add_samples(scrape(t, rng), "metrics:0")
        fleet.advance()
    assert fleet.sketches == [None]
    assert pipe.bank.peer._outside is None


def test_a_sketch_is_capped_and_merges_back_to_its_count() -> None:
    rng = np.random.default_rng(3)
    keys = np.repeat(np.array([7, 9], dtype=np.int64), [100, 3])
    values = rng.normal(50.0, 5.0, 103)
    sketch = PeerSketch.of(0.0, keys, values)
    assert list(sketch.counts) == [100, 3] and list(np.diff(sketch.starts)) == [CAP, 3]
    back = PeerSketch.from_wire(0.0, sketch.to_wire())
    assert np.array_equal(back.values, sketch.values) and np.array_equal(back.counts, sketch.counts)
    merged = outside([back])
    assert isinstance(merged, Outside)
    groups, vals = merged.for_groups(np.array([9, -1, 7], dtype=np.int64))
    assert np.bincount(groups).tolist() == [3, 0, 100]
    assert abs(np.median(vals[groups == 2]) - np.median(values[:100])) < 1.0  # order statistics kept


def test_a_malformed_sketch_is_an_unreadable_summary() -> None:
    with pytest.raises(SummaryError):
        PartitionSummary.from_bytes(b'{"v":1,"p":0,"t":1.0,"c":[[[0]],[[0]],[[0]]],"n":[],"pp":"AAAA@@"}')


def test_fleet_keys_are_the_same_in_every_process() -> None:
    assert fleet_key(("node", METRIC, ())) == 2084260176


def test_the_judge_degrades_to_its_own_nodes_without_fresh_sketches() -> None:
    """`prexid run`: other partitions' sketches on the board are used while fresh, else none."""
    board = FleetBoard()
    pipe = Pipeline()
    judge = FleetJudge(pipe, 0, board, lateness_s=120.0)
    mine = PeerSketch.of(1000.0, np.array([5], dtype=np.int64), np.array([1.0]))
    assert judge.peers(mine) is None
    theirs = PeerSketch.of(990.0, np.array([5, 5], dtype=np.int64), np.array([2.0, 3.0]))
    counts = ((0,) * N_FAMILIES, (0,) * N_FAMILIES)
    board.observe(PartitionSummary(1, Summary(990.0, counts, counts, counts), peers=theirs))
    got = judge.peers(mine)
    assert got is not None and list(got.values) == [2.0, 3.0]
    late = PeerSketch.of(1100.0, np.array([5], dtype=np.int64), np.array([1.0]))
    assert judge.peers(late) is None  # 110 s old: not fresh


@pytest.mark.parametrize("nodes", [1, 4, 16, 1000])
def test_a_sketch_costs_4_bytes_a_node_and_group_and_never_more_than_cap(nodes: int) -> None:
    """The size bound the summaries topic's budget rests on: per group 9 bytes (key, count, size) and
    4 a value, at most `CAP` values however many nodes the partition holds; base64 adds a third."""
    groups = 50
    rng = np.random.default_rng(nodes)
    keys = np.repeat(np.arange(groups, dtype=np.int64) * 7919, nodes)
    sketch = PeerSketch.of(0.0, keys, rng.normal(40.0, 3.0, len(keys)))
    raw = 4 + groups * (9 + 4 * min(nodes, CAP))
    assert len(sketch.to_wire()) == 4 * -(-raw // 3)  # base64 of exactly that many bytes


def test_a_recycled_group_id_carries_no_fleet_key_of_the_group_that_held_it() -> None:
    """Series expiry frees empty peer groups and hands their ids out again: a node group's id given to
    a GPU group (one node's GPUs, never spanning partitions) must read as local only."""
    from prexid.detectors.peer import PeerGroups

    groups = PeerGroups()
    node_group = groups.group_of("node_load1", {"instance": "node-a:9100"}, "node-a", None)
    assert groups.fleet_keys()[node_group] >= 0
    groups.release(np.array([node_group]))
    gpu_group = groups.group_of("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0"}, "node-a", 0)
    assert gpu_group == node_group and groups.fleet_keys()[gpu_group] == -1
