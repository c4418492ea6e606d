"""Peer deviation: each series against its peers at the same instant (cross-sectional robust residual).

Data-parallel training makes peers alike: the 8 GPUs of a node run the same kernels, and the nodes of
a job the same steps. A straggler or a fail-slow GPU can look normal against its own history (the job
changed phase) yet stand out against its peers. So each sample becomes a residual against the median of
its group's latest values, relative to the group's level (r = (x - median) / max(|median|, robust sd)),
and that residual is judged by a `RobustDeviation` of its own: a GPU that always runs 3 °C hotter than
its neighbours is normal, one that starts running 5 °C hotter is not. A checkpoint or a job restart
moves every peer at once, which the residual does not see. A group whose median is not clear of zero by
twice its spread (idle tensor pipes: 0 on most members, a rounding step on some) has no level to be
relative to, and its members are not scored while it has none.

Groups: a GPU series is grouped with the same metric (same non-identity labels) on the other GPUs of
its node; a node series with the same metric on all other nodes. `PeerGroups` assigns these ids when a
series is registered; the hot path only sees integer group ids.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from prexid.detectors.base import (
    MAD_TO_SIGMA,
    ArrayState,
    ByRounds,
    Floats,
    Ids,
    Index,
    Packed,
    SeriesState,
    Stored,
    array_pieces,
    load_array,
    pack_blobs,
    pick,
    ragged,
    rows,
    unpack_blobs,
)
from prexid.detectors.fleet_peers import fleet_key
from prexid.detectors.fleet_prior import field_key
from prexid.detectors.robust import RobustDeviation

HOST_LABELS = frozenset({"Hostname", "hostname", "host", "node", "instance", "nodename"})
GPU_IDENTITY_LABELS = HOST_LABELS | {
    "gpu", "UUID", "uuid", "pci_bus_id", "device", "minor_number", "pod", "container", "namespace"
}  # fmt: skip
_PADDED_MAX = 64  # groups up to this size take the padded-grid median
_SPREAD_W = 0.1  # weight of each scrape in a group's usual spread (~10 scrapes)


class PeerGroups:
    """Interns peer-group keys and node names to dense ids (at series registration, not per sample).

    A group lives while it has members: `release` (series expired) gives an empty group's id to the
    next new group, so label churn on node series (a `pod` label) does not grow the groups for good.
    """

    def __init__(self) -> None:
        self._groups: dict[tuple[object, ...], int] = {}
        self._members: list[int] = []  # group id -> series in it (0: a free id)
        self._keys: list[tuple[object, ...] | None] = []  # group id -> its key (None: a free id)
        self._free: list[int] = []
        self._nodes: dict[str, int] = {}
        self._fields: dict[str, int] = {}
        self._fleet_keys: Ids | None = None  # cached; dropped whenever a group id changes hands

    def fleet_keys(self) -> Ids:
        """Each group id's fleet key (`fleet_peers.fleet_key`) if it is a node group, else -1 (a GPU
        group, one node's GPUs, never spans partitions; a free id has no key)."""
        if self._fleet_keys is None:
            keys = np.full(len(self._keys), -1, dtype=np.int64)
            for key, gid in self._groups.items():
                if key[0] == "node":
                    keys[gid] = fleet_key(key)
            self._fleet_keys = keys
        return self._fleet_keys

    def group_of(self, name: str, labels: dict[str, str], node: str, gpu: int | None) -> int:
        """The group of a new series (counted as its member)."""
        drop = GPU_IDENTITY_LABELS if gpu is not None else HOST_LABELS
        rest = tuple(sorted((k, v) for k, v in labels.items() if k not in drop))
        key: tuple[object, ...] = ("gpu", node, name, rest) if gpu is not None else ("node", name, rest)
        group = self._groups.get(key)
        if group is None:
            if self._free:
                group = self._free.pop()
                self._keys[group] = key
            else:
                group = len(self._keys)
                self._keys.append(key)
                self._members.append(0)
            self._groups[key] = group
            self._fleet_keys = None
        self._members[group] += 1
        return group

    def __len__(self) -> int:
        """Groups with members now."""
        return len(self._groups)

    def id_space(self) -> int:
        """Group ids handed out so far (free ones included)."""
        return len(self._keys)

    def release(self, groups: Ids) -> None:
        """Expired series leave their groups; a group left empty is forgotten, its id free."""
        for group in groups[groups >= 0].tolist():
            self._members[group] -= 1
            key = self._keys[group]
            if self._members[group] <= 0 and key is not None:
                del self._groups[key]
                self._keys[group] = None
                self._free.append(group)
                self._fleet_keys = None

    def node_of(self, node: str) -> int:
        return self._nodes.setdefault(node, len(self._nodes))

    def field_of(self, name: str) -> int:
        """The fleet field of a series: one metric on every part of the fleet (error counters' prior)."""
        return self._fields.setdefault(name, len(self._fields))

    def field_keys(self) -> Ids:
        """Each field id's fleet key (`fleet_prior.field_key`): the same metric in every partition."""
        keys = np.zeros(len(self._fields), dtype=np.int64)
        for name, field in self._fields.items():
            keys[field] = field_key(name)
        return keys

    def snapshot_meta(self) -> dict[str, Any]:
        return {
            "peer_groups": [[list(k), v] for k, v in self._groups.items()],
            "peer_members": self._members,
            "peer_free": self._free,
            "peer_nodes": self._nodes,
            "fleet_fields": self._fields,
        }

    def restore_meta(self, meta: dict[str, Any]) -> None:
        self._groups = {_group_key(k): int(v) for k, v in meta["peer_groups"]}
        self._members = [int(n) for n in meta["peer_members"]]
        self._free = [int(g) for g in meta["peer_free"]]
        self._keys = [None] * len(self._members)
        for key, group in self._groups.items():
            self._keys[group] = key
        self._fleet_keys = None
        self._nodes = {str(k): int(v) for k, v in meta["peer_nodes"].items()}
        self._fields = {str(k): int(v) for k, v in meta["fleet_fields"].items()}


def _group_key(raw: list[Any]) -> tuple[object, ...]:
    """JSON turned the key's tuples into lists; keys are (kind, [node,] name, label pairs)."""
    *head, rest = raw
    return (*head, tuple((str(k), str(v)) for k, v in rest))


class PeerDeviation(ByRounds, ArrayState):
    """Residual of each sample against its group's median now, judged against the series' own residuals."""

    name = "peer_deviation"
    nested = ("residuals",)

    def __init__(self, min_peers: int = 4, fresh_s: float = 45.0) -> None:
        self.min_peers = min_peers
        self.fresh_s = fresh_s
        # resid: the last residual against the peers' median, as a fraction of it (fail-slow's effect size)
        self.state = SeriesState({"last": np.nan, "last_ts": -np.inf, "group": -1.0, "resid": np.nan})
        # per group: its robust spread on the residuals' scale, averaged over ~10 scrapes (its own scatter)
        self._spread: Floats = np.full(0, np.nan)
        # a residual against peers at the same instant: the job's phases cancel, and a young GPU is judged
        # against the usual tail at once (fail-slow warns in the first hour too)
        self.residuals = RobustDeviation(rel_floor=0.0, abs_floor=1e-3, young_xi=0.0)
        self._order: Ids = np.zeros(0, dtype=np.int64)  # series ids sorted by group
        self._starts: Ids = np.zeros(1, dtype=np.int64)  # CSR offsets of each group in _order
        self._group: Ids = np.zeros(0, dtype=np.int64)  # the "group" field as integers, for the hot path
        self._width = 0  # every group's size when all groups are equal (the GPUs of a node), else 0
        self._layout: Index = self._order  # _order, as a slice when the groups lie in id order
        self._dirty = True
        # other partitions' node values joined to this one's groups (`fleet_peers`): group id -> CSR
        self._outside: tuple[Ids, Floats] | None = None  # (offsets by group id, values); None: local

    def set_groups(self, ids: Ids, groups: Ids) -> None:
        """Declare each series' peer group (-1: no peers, never scored)."""
        if len(ids):
            self.state.ensure(int(ids.max()))
            self.state["group"][ids] = groups
            self._dirty = True

    def grow(self, max_id: int) -> None:
        """The state, then the group index when the groups changed or the state outgrew it."""
        super().grow(max_id)
        if self._dirty or len(self._group) < self.state.capacity:
            self._index_groups()

    def _index_groups(self) -> None:
        groups = self._group = self.state["group"].astype(np.int64)
        members = np.flatnonzero(groups >= 0)
        self._order = members[np.argsort(groups[members], kind="stable")]
        n_groups = int(groups.max()) + 1 if len(members) else 0
        self._starts = np.searchsorted(groups[self._order], np.arange(n_groups + 1)).astype(np.int64)
        sizes = np.diff(self._starts)
        equal = n_groups > 0 and 0 < int(sizes[0]) <= _PADDED_MAX and bool((sizes == sizes[0]).all())
        self._width = int(sizes[0]) if equal else 0
        self._layout = rows(self._order)
        empty = np.flatnonzero(sizes[: len(self._spread)] == 0)
        self._spread[empty] = np.nan  # a group id given to a new group starts without a spread
        self._dirty = False

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        st, at = self.state, rows(ids)
        ok = np.isfinite(x) & np.isfinite(ts) & (ts >= st["last_ts"][at])
        st.put(at, ok, last=x, last_ts=ts)
        group = self._group[at]
        scored = ok & (group >= 0)
        if not scored.any():
            return np.ones(len(ids))
        every = bool(scored.all())
        now = float(ts.max() if every else ts[scored].max())
        if self._width and 2 * len(ids) >= len(self._order):  # most groups touched: all of them at once
            median, spread, count = self._equal_group_stats(now)
            slot = group if every else np.maximum(group, 0)  # the stats' row is the group id (>= 0 if scored)
            touched = np.arange(len(median), dtype=np.int64)
        else:
            touched = np.flatnonzero(np.bincount(group[scored])).astype(np.int64)
            median, spread, count = self._group_stats(touched, now)
            position = np.zeros(len(self._starts), dtype=np.int64)  # group id -> its row in `touched`
            position[touched] = np.arange(len(touched))
            slot = position[np.maximum(group, 0)]
        if self._outside is not None:
            self._join_outside(touched, now, median, spread, count)
        # per group first, then one gather per sample (if some lack); a group whose level is not clear of
        # zero by twice its spread (idle tensor pipes reading 0 on most members, a rounding step on some)
        # has no level to be relative to: a residual against it is 0 or unbounded (wide-s1309)
        enough = (count >= self.min_peers) & (np.abs(median) > 2.0 * spread)
        if not enough.all():
            scored &= enough[slot]
        scale_ = np.maximum(np.maximum(np.abs(median), spread), 1e-9)
        med, scale = median[slot], scale_[slot]
        self._learn_spread(touched, np.bincount(slot[scored], minlength=len(median)) > 0, spread / scale_)
        if scored.all():
            resid = (x - med) / scale
            st["resid"][at] = resid
            return self.residuals.update(ids, ts, resid)
        p = np.ones(len(ids))
        if scored.any():
            resid = (x[scored] - med[scored]) / scale[scored]
            st["resid"][ids[scored]] = resid
            p[scored] = self.residuals.update(ids[scored], ts[scored], resid)
        return p

    def _learn_spread(self, groups: Ids, scored: NDArray[np.bool_], rel: Floats) -> None:
        """Fold each scored group's spread now into its usual one."""
        groups, rel = groups[scored], rel[scored]
        if len(groups) and int(groups.max()) >= len(self._spread):
            grown = np.full(len(self._starts), np.nan)
            grown[: len(self._spread)] = self._spread
            self._spread = grown
        was = self._spread[groups]
        self._spread[groups] = np.where(np.isfinite(was), was + _SPREAD_W * (rel - was), rel)

    def set_outside(self, groups: Ids | None, values: Floats | None = None) -> None:
        """Other partitions' values to judge each of these groups with, beside its own members
        (`fleet_peers.Outside.for_groups`); None: every group its own members only (one partition)."""
        if groups is None or values is None or not len(groups):
            self._outside = None
            return
        n = max(int(groups.max()) + 1, len(self._starts) - 1)
        order = np.argsort(groups, kind="stable")
        offsets = np.searchsorted(groups[order], np.arange(n + 1)).astype(np.int64)
        self._outside = (offsets, values[order])

    def _join_outside(
        self, rows_: Ids, now: float, median: Floats, spread: Floats, count: NDArray[np.int64]
    ) -> None:
        """Overwrite the stats of the rows whose group has outside values with those of the union."""
        assert self._outside is not None
        offsets, extra = self._outside
        known = rows_ < len(offsets) - 1
        size = np.zeros(len(rows_), dtype=np.int64)
        size[known] = offsets[rows_[known] + 1] - offsets[rows_[known]]
        at = np.flatnonzero(size)
        if not len(at):
            return
        groups = rows_[at]
        starts, ends = self._starts[groups], self._starts[groups + 1]
        sizes = ends - starts
        slot, _, at_members = ragged(starts, sizes)
        members = self._order[at_members]
        own = self.state["last"][members]
        own = np.where(np.isfinite(own) & (self.state["last_ts"][members] >= now - self.fresh_s), own, np.nan)
        lo, n_out = offsets[groups], size[at]
        out_slot, _, at_extra = ragged(lo, n_out)
        theirs = extra[at_extra]
        m, sd, c = segment_stats(np.concatenate([slot, out_slot]), np.concatenate([own, theirs]), len(groups))
        median[at], spread[at], count[at] = m, sd, c

    def fresh_values(self, ids: Ids, ts: Floats, x: Floats, now: float, wanted: Ids) -> tuple[Ids, Floats]:
        """The fresh latest values of the members of the `wanted` groups as they will be once this batch
        is scored, by group (what a partition tells the fleet, `fleet_peers.PeerSketch`); the state is
        left as it is."""
        if len(ids):
            self.state.ensure(int(ids.max()))
        if self._dirty or len(self._group) < self.state.capacity:
            self._index_groups()
        want = np.zeros(len(self._starts), dtype=bool)
        want[wanted[wanted < len(want)]] = True
        members = self._order[want[self._group[self._order]]]
        last, last_ts = self.state["last"][members].copy(), self.state["last_ts"][members].copy()
        pos = np.full(self.state.capacity, -1, dtype=np.int64)
        pos[members] = np.arange(len(members))
        sel = np.flatnonzero((pos[ids] >= 0) & np.isfinite(x) & np.isfinite(ts))
        sel = sel[np.argsort(ts[sel], kind="stable")]  # the latest sample of a series is written last
        at = pos[ids[sel]]
        newer = ts[sel] >= last_ts[at]
        last[at[newer]], last_ts[at[newer]] = x[sel][newer], ts[sel][newer]
        fresh = np.isfinite(last) & (last_ts >= now - self.fresh_s)
        return self._group[members][fresh], last[fresh]

    def peers_of(self, ids: Ids) -> tuple[NDArray[np.intp], Ids]:
        """Each series' group members, itself included (none without a group): pairs of the series'
        place in `ids` and a member's id, one run per series."""
        if self._dirty or len(self._group) < self.state.capacity:
            self._index_groups()
        group = self._group_of(ids)
        at = np.maximum(group, 0)
        sizes = np.where(group >= 0, self._starts[at + 1] - self._starts[at], 0)
        slot, _, members = ragged(self._starts[at], sizes)
        return slot, self._order[members]

    def last_fresh(self, ids: Ids, ts: Floats) -> Floats:
        """Each series' last value while still fresh at `ts` (NaN once older than `fresh_s`)."""
        fresh = self.state.read("last_ts", ids) >= ts - self.fresh_s
        return np.where(fresh, self.state.read("last", ids), np.nan)

    def _group_of(self, ids: Ids) -> Ids:
        """Each series' group id as last indexed (-1: none, or an id beyond the index)."""
        known = ids < len(self._group)
        return np.where(known, self._group[np.where(known, ids, 0)], -1)

    def spread(self, ids: Ids) -> Floats:
        """Each series' group's usual robust spread, on `shortfall`'s scale (a fraction of its median;
        NaN: none learned yet)."""
        group = self._group_of(ids)
        table: Floats = np.r_[self._spread, np.nan]  # the last cell answers for groups without a spread
        return table[np.where((group >= 0) & (group < len(self._spread)), group, len(self._spread))]

    def shortfall(self, ids: Ids) -> Floats:
        """Each series' last residual against its peers' median, as a fraction of it (below: negative)."""
        return self.state.read("resid", ids)

    def _equal_group_stats(self, now: float) -> tuple[Floats, Floats, NDArray[np.int64]]:
        """`_group_stats` of every group when all have `_width` members: the grid is a reshape, and a
        view of the state when the groups lie in id order (registry order), with no gather at all."""
        values, last_ts = self.state["last"][self._layout], self.state["last_ts"][self._layout]
        fresh = np.isfinite(values) & (last_ts >= now - self.fresh_s)
        grid = pick(fresh, values, np.nan).reshape(-1, self._width)
        return _row_stats(grid, np.full(len(grid), self._width) if fresh.all() else None)

    def _group_stats(self, touched: Ids, now: float) -> tuple[Floats, Floats, NDArray[np.int64]]:
        """Median, robust sigma (IQR or MAD based) and count of each touched group's fresh latest values."""
        starts, ends = self._starts[touched], self._starts[touched + 1]
        sizes = ends - starts
        slot, offset, at_members = ragged(starts, sizes)
        members = self._order[at_members]
        values = self.state["last"][members]
        fresh = np.isfinite(values) & (self.state["last_ts"][members] >= now - self.fresh_s)
        values = np.where(fresh, values, np.nan)
        width = int(sizes.max())
        if width <= _PADDED_MAX:  # GPUs of a node: one padded row per group, sorted along the row
            grid = np.full((len(touched), width), np.nan)
            grid[slot, offset] = values
            return _row_stats(grid)
        median = segment_median(slot, values, len(touched))
        mad = segment_median(slot, np.abs(values - median[slot]), len(touched))
        return median, MAD_TO_SIGMA * mad, np.bincount(slot[fresh], minlength=len(touched))

    def baseline(self, ids: Ids) -> Floats:
        """The series' usual residual against its peers (a fraction of the peer median)."""
        return self.residuals.baseline(ids)

    def forget(self, ids: Ids) -> None:
        """Reset the series (their group too: -1) and their residuals' judge; the groups are re-indexed."""
        super().forget(ids)
        self._dirty = True

    def snapshot(self) -> Packed:
        """The series' state and their residuals' judge; then each group's usual spread."""
        return pack_blobs(super().snapshot(), array_pieces(self._spread))

    def restore(self, data: Stored) -> None:
        own, spread = unpack_blobs(data)
        super().restore(own)
        self._spread = load_array(spread).astype(np.float64, copy=False)
        self._dirty = True


def _row_stats(
    grid: NDArray[np.float64], count: NDArray[np.int64] | None = None
) -> tuple[Floats, Floats, NDArray[np.int64]]:
    """Median, IQR/1.349 and count of the non-NaN values of each row, from one sort along the rows
    (`count`, when the caller knows it, spares a slow reduction along short rows)."""
    ordered = np.sort(grid, axis=1)  # NaN sorts last
    count = np.isfinite(grid).sum(axis=1) if count is None else count
    rows_, last = np.arange(len(grid)), np.maximum(count - 1, 0)
    full = grid.shape[1] > 0 and bool((count == grid.shape[1]).all())

    def at(q: float) -> Floats:
        if full:  # every row complete: the same positions in every row, read as columns
            top = grid.shape[1] - 1
            lo_, pos_ = int(np.floor(top * q)), top * q
            return np.asarray(
                (1.0 - (pos_ - lo_)) * ordered[:, lo_] + (pos_ - lo_) * ordered[:, min(lo_ + 1, top)]
            )
        pos = last * q
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, last)
        frac = pos - lo
        return np.asarray((1.0 - frac) * ordered[rows_, lo] + frac * ordered[rows_, hi])

    empty = count == 0
    median = np.where(empty, np.nan, at(0.5))
    spread = np.where(empty, np.nan, (at(0.75) - at(0.25)) / 1.349)
    return median, spread, count


def segment_stats(slot: NDArray[np.intp], values: Floats, n: int) -> tuple[Floats, Floats, NDArray[np.int64]]:
    """Median, robust sigma and count of the non-NaN values of each slot 0..n-1, by the same rules as
    a group's own (`PeerDeviation._group_stats`): IQR based up to `_PADDED_MAX` values, MAD based beyond."""
    keep = np.isfinite(values)
    slot, values = slot[keep], values[keep]
    count = np.bincount(slot, minlength=n).astype(np.int64)
    order = np.argsort(slot, kind="stable")
    slot, values = slot[order], values[order]
    offset = np.arange(len(slot)) - np.repeat(np.cumsum(count) - count, count)
    if n and int(count.max()) <= _PADDED_MAX:
        grid = np.full((n, max(int(count.max()), 1)), np.nan)
        grid[slot, offset] = values
        return _row_stats(grid, count)
    median = segment_median(slot, values, n)
    mad = segment_median(slot, np.abs(values - median[slot]), n)
    return median, MAD_TO_SIGMA * mad, count


def segment_median(slot: NDArray[np.intp], values: Floats, n: int) -> Floats:
    """Median of the non-NaN `values` within each segment 0..n-1 (NaN for empty ones), one sort for all."""
    keep = np.isfinite(values)
    slot, values = slot[keep], values[keep]
    order = np.lexsort((values, slot))
    sorted_vals = values[order]
    counts = np.bincount(slot, minlength=n)
    starts = np.cumsum(counts) - counts
    lo = starts + np.maximum(counts - 1, 0) // 2
    hi = starts + counts // 2
    out = np.full(n, np.nan)
    has = counts > 0
    out[has] = 0.5 * (sorted_vals[lo[has]] + sorted_vals[hi[has]])
    return out
