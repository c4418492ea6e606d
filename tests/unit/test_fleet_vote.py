"""The fleet's shared-cause vote: partition counts add up to the whole cluster's, and a cause too thin to
be shared in any one partition is shared once their counts are merged."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter

from prexid.detectors.fleet_vote import Summary, Verdict, judge, merge
from prexid.detectors.signals import N_FAMILIES, Family

NONE_SHARED = np.zeros((2, N_FAMILIES), dtype=bool)


def nodes_voting(n_nodes: int, n_voting: int, family: Family, tick: float = 900.0) -> Summary:
    """`n_nodes` node entities (no GPUs) carrying `family`, the first `n_voting` voting with it rising."""
    present = np.zeros((n_nodes, N_FAMILIES), dtype=bool)
    present[:, family] = True
    voting = np.zeros_like(present)
    voting[:n_voting, family] = True
    return Summary.of(tick, voting, voting.copy(), present, np.zeros(n_nodes, dtype=bool))


def verdict(summary: Summary, previous: np.ndarray = NONE_SHARED) -> Verdict:
    return judge(summary, previous, min_gpu_votes=5, min_node_votes=3, share=0.03)


def test_partition_counts_sum_to_the_counts_of_the_whole_cluster() -> None:
    rng = np.random.default_rng(7)
    present = rng.random((40, N_FAMILIES)) < 0.8
    voting = present & (rng.random((40, N_FAMILIES)) < 0.3)
    rising = rng.random((40, N_FAMILIES)) < 0.5
    is_gpu = np.arange(40) % 5 != 0
    whole = Summary.of(60.0, voting, rising, present, is_gpu)
    parts = [
        Summary.of(60.0, voting[r], rising[r], present[r], is_gpu[r])
        for r in np.array_split(np.arange(40), 3)
    ]
    merged = merge(parts)
    assert (merged.votes, merged.rising, merged.carriers) == (whole.votes, whole.rising, whole.carriers)
    assert merged.partitions == 3 and merge([whole]) == whole


def test_a_stall_too_thin_for_any_partition_is_shared_once_partitions_merge() -> None:
    """Two of four nodes stalled in each of two partitions: below the three-node floor in each, a
    shared cause across the six of eight nodes they are together."""
    part = nodes_voting(4, 2, Family.STORAGE_IO)
    assert not verdict(part).shared_levels()[1, Family.STORAGE_IO]
    fleet = verdict(merge([part, part]))
    assert fleet.shared_levels()[1, Family.STORAGE_IO]
    assert fleet.rising_share[Family.STORAGE_IO] == pytest.approx(0.5)
    assert fleet.partitions == 2


def test_a_shared_family_stays_shared_until_its_votes_fall_below_half_the_entry_bar() -> None:
    was = verdict(nodes_voting(8, 3, Family.NETWORK)).shared_levels()
    assert was[1, Family.NETWORK]
    assert verdict(nodes_voting(8, 2, Family.NETWORK), was).shared_levels()[1, Family.NETWORK]
    assert not verdict(nodes_voting(8, 2, Family.NETWORK)).shared_levels()[1, Family.NETWORK]


def test_per_device_families_are_never_shared() -> None:
    assert not verdict(nodes_voting(8, 8, Family.XID)).shared_levels()[:, Family.XID].any()


def test_summary_and_verdict_travel_as_json_unchanged() -> None:
    """A summaries topic carries them as JSON (pydantic): what is read back is what was sent."""
    summary = merge([nodes_voting(4, 2, Family.STORAGE_IO), nodes_voting(3, 1, Family.THERMAL)])
    for value in (summary, verdict(summary)):
        adapter = TypeAdapter(type(value))
        assert adapter.validate_json(adapter.dump_json(value)) == value


def test_merging_nothing_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        merge([])


def test_one_stalled_node_in_each_of_two_partitions_is_two_stalled_votes_for_the_fleet() -> None:
    """Votes backed by the family's own error counters (NFS timeouts) add across partitions as the
    other counts do: the cluster vote's stall path (`detectors/cluster.py`) reads the fleet's total."""
    present = np.zeros((4, N_FAMILIES), dtype=bool)
    present[:, Family.STORAGE_IO] = True
    voting = np.zeros_like(present)
    voting[0, Family.STORAGE_IO] = True
    erring = voting.copy()
    part = Summary.of(900.0, voting, voting.copy(), present, np.zeros(4, dtype=bool), erring)
    quiet = Summary.of(900.0, voting, voting.copy(), present, np.zeros(4, dtype=bool), ~erring)
    assert verdict(part).stalled[Family.STORAGE_IO] == 1
    assert verdict(merge([part, part])).stalled[Family.STORAGE_IO] == 2
    assert verdict(merge([part, quiet])).stalled[Family.STORAGE_IO] == 1
    assert verdict(nodes_voting(4, 4, Family.STORAGE_IO)).stalled == (0,) * N_FAMILIES
