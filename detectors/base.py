"""The contract every detector keeps, and the array state they share.

A detector holds one slot per series id in flat numpy arrays grown by doubling, and turns a batch of
samples into per-sample tail probabilities: p = 1 means "nothing unusual", small p is evidence. Fusion
only ever sees these probabilities, so detectors with different raw scales are compared like with like.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import ClassVar, Protocol, TypeAlias, TypeVar, cast, runtime_checkable

import numpy as np
from numpy.typing import NDArray

Ids = NDArray[np.int64]
Floats = NDArray[np.float64]
IntT = TypeVar("IntT", np.int32, np.int64)  # an id map's integer type
Index = Ids | slice  # series ids, or the same ids as a slice when they are a contiguous ascending range
Piece = bytes | memoryview
Pieces = list[Piece]
# Gaussian noise's sigma from a robust spread: the median absolute deviation, the mean absolute value,
# and the mean absolute first difference (E|x_t - x_{t-1}| = 2 sigma / sqrt(pi) for iid noise)
MAD_TO_SIGMA = 1.4826
ABS_TO_SIGMA = 1.2533
DIFF_TO_SIGMA = ABS_TO_SIGMA / np.sqrt(2.0)
# A part of a snapshot as read back (`read_blobs`): a leaf's bytes, or the parts of a nested blob.
Stored: TypeAlias = bytearray | list["Stored"]


class Packed(list[Piece]):
    """What `pack_blobs` returns: length-prefixed blobs. Packed again, it is recorded as nested, so a
    reader can give every leaf a buffer of its own (`read_blobs`) without knowing the layout."""


class Saved(Protocol):
    """State that is counted and saved: a detector, or a part of one (a calibrator, an inner detector)."""

    def bytes_per_series(self) -> int:
        """State bytes one more series costs (the memory budget is per series)."""
        ...

    def snapshot(self) -> Packed:
        """The state as bytes in pieces (views of live arrays: join or compress them before the next
        update); `restore` takes them as `read_blobs` reads them back."""
        ...

    def restore(self, data: Stored) -> None: ...

    def forget(self, ids: Ids) -> None:
        """Return these series' state to what a series never seen has: their ids are given to new
        series (an expired series' id is recycled), which must not inherit it."""
        ...


@runtime_checkable
class Detector(Saved, Protocol):
    """Online detector over many series at once."""

    name: str

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        """Fold one batch into the state; return each sample's tail probability in (0, 1]."""
        ...

    def baseline(self, ids: Ids) -> Floats:
        """What each series is expected to read now (NaN where unknown), for alert explanations."""
        ...


class SeriesState:
    """Named per-series float64 arrays indexed by series id, grown by doubling, saved as .npy pieces."""

    def __init__(self, fields: dict[str, float], capacity: int = 1024) -> None:
        self._defaults = dict(fields)
        self.arrays: dict[str, Floats] = {
            k: np.full(capacity, v, dtype=np.float64) for k, v in fields.items()
        }

    @property
    def capacity(self) -> int:
        return len(next(iter(self.arrays.values())))

    def ensure(self, max_id: int) -> None:
        """Grow every array so that `max_id` is a valid index; new slots take the field default."""
        cap = self.capacity
        if max_id < cap:
            return
        new_cap = max(cap * 2, max_id + 1)
        for k, arr in self.arrays.items():
            grown = np.full(new_cap, self._defaults[k], dtype=np.float64)
            grown[:cap] = arr
            self.arrays[k] = grown

    def __getitem__(self, key: str) -> Floats:
        return self.arrays[key]

    def reset(self, ids: Ids) -> None:
        """Every field of these series back to its default, as a series never seen (ids past the
        arrays hold the defaults already)."""
        ids = ids[ids < self.capacity]
        for k, arr in self.arrays.items():
            arr[ids] = self._defaults[k]

    def put(self, at: Index, where: NDArray[np.bool_], **fields: Floats) -> None:
        """Write each field's new values for the series where `where` holds (others keep theirs)."""
        if where.all():
            for k, v in fields.items():
                self.arrays[k][at] = v
            return
        sel = subset(at, where)
        for k, v in fields.items():
            self.arrays[k][sel] = v[where]

    def read(self, key: str, ids: Ids) -> Floats:
        """One field for these series; NaN for ids never seen (beyond the arrays)."""
        if len(ids) == 0 or int(ids.max()) < self.capacity:  # the usual case: one gather, no mask
            return self.arrays[key][rows(ids)].copy()
        out = np.full(len(ids), np.nan)
        known = ids < self.capacity
        out[known] = self.arrays[key][ids[known]]
        return out

    def nbytes_per_series(self) -> int:
        return 8 * len(self.arrays)

    def to_pieces(self) -> Packed:
        return pack_arrays(dict(self.arrays))

    def load_bytes(self, data: Stored) -> None:
        blob = unpack_arrays(data)
        missing = set(self._defaults) - set(blob)
        if missing:
            raise ValueError(f"snapshot lacks fields {sorted(missing)}")
        self.arrays = {k: np.asarray(blob[k], dtype=np.float64) for k in self._defaults}


class ArrayState:
    """The `Saved` half of the detector contract for state kept in `state` (a `SeriesState`) and in the
    parts named by `nested`, in that order: their bytes add up, and a snapshot is the state's pieces
    alone, or `pack_blobs(state, *parts)` when there are parts (the layout snapshot format v7 holds)."""

    state: SeriesState
    nested: ClassVar[tuple[str, ...]] = ()  # attributes holding `Saved` parts, saved after the state

    def _parts(self) -> list[Saved]:
        return [cast(Saved, getattr(self, name)) for name in self.nested]

    def bytes_per_series(self) -> int:
        return self.state.nbytes_per_series() + sum(part.bytes_per_series() for part in self._parts())

    def snapshot(self) -> Packed:
        parts = self._parts()
        if not parts:
            return self.state.to_pieces()
        return pack_blobs(self.state.to_pieces(), *(part.snapshot() for part in parts))

    def forget(self, ids: Ids) -> None:
        """The state's rows of these series to their defaults, and the parts' too."""
        self.state.reset(ids)
        for part in self._parts():
            part.forget(ids)

    def restore(self, data: Stored) -> None:
        parts = self._parts()
        if not parts:
            self.state.load_bytes(data)
            return
        own, *saved = unpack_blobs(data)
        if len(saved) != len(parts):
            raise ValueError(f"snapshot holds {len(saved)} parts besides the state, not {len(parts)}")
        self.state.load_bytes(own)
        for part, blob in zip(parts, saved, strict=True):
            part.restore(blob)


class ByRounds:
    """`update` for detectors whose state is a `SeriesState` updated a round of distinct series at a
    time (`by_rounds`): a batch that repeats a series scores as its samples one by one."""

    state: SeriesState

    def update(self, ids: Ids, ts: Floats, values: Floats) -> Floats:
        if len(ids) == 0:
            return np.ones(0, dtype=np.float64)
        self.grow(int(ids.max()))
        return by_rounds(self._update_round, ids, ts, values)

    def grow(self, max_id: int) -> None:
        """Make `max_id` a row of every per-series array a round indexes: the state here; a detector
        whose rounds index more (a calibrator, profiles) grows those too, once a batch, not a round."""
        self.state.ensure(max_id)

    def _update_round(self, ids: Ids, ts: Floats, x: Floats) -> Floats:
        """Each sample's p for one round, every series in it once."""
        raise NotImplementedError


class ArrayDetector(ArrayState):
    """`ArrayState` whose baseline is one of its state fields, `baseline_of`."""

    baseline_of: ClassVar[str]

    def baseline(self, ids: Ids) -> Floats:
        return self.state.read(self.baseline_of, ids)


def rows(ids: Ids) -> Index:
    """`ids` as a slice when they are a contiguous ascending range (one exporter's scrape in registry
    order), else as they are: state arrays are then read as views and written as block copies, which
    costs a fifth of a gather or scatter by index array.

    A slice read is a view: callers read every field they need before writing any of them. Inside
    `batch_rows(ids)` the answer for that very array is known, and not looked for again.
    """
    known = _BATCH.get()
    if known is not None and known[0] is ids:
        return known[1]
    return _rows(ids)


@contextmanager
def batch_rows(ids: Ids) -> Iterator[Index]:
    """`rows(ids)`, worked out once for every detector a batch passes through (each asks again, and the
    ascending check is a pass over the ids): inside the block, `rows`, `_increasing` and
    `_all_distinct` of this same array object answer from it. The array must not change meanwhile, as
    for any function reading it."""
    at = _rows(ids)
    token = _BATCH.set((ids, at))
    try:
        yield at
    finally:
        _BATCH.reset(token)


_BATCH: ContextVar[tuple[Ids, Index] | None] = ContextVar("prexid_batch_rows", default=None)


def _rows(ids: Ids) -> Index:
    n = len(ids)
    if n == 0:
        return ids
    lo, hi = int(ids[0]), int(ids[-1])
    if hi - lo != n - 1 or lo < 0 or not _increasing(ids):
        return ids
    return slice(lo, hi + 1)


def subset(at: Index, where: NDArray[np.bool_] | NDArray[np.intp]) -> Ids:
    """The ids of `at` selected by a mask or positions, as an array."""
    if isinstance(at, slice):
        return np.arange(at.start, at.stop, dtype=np.int64)[where]
    return at[where]


def grown_id_map(a: NDArray[IntT], n: int) -> NDArray[IntT]:
    """`a`, an array indexed by series or entity id (-1: none; a row of them where `a` is 2-D), long
    enough to hold index n-1 (doubling, at least 1024, new rows -1)."""
    if n <= len(a):
        return a
    out = np.full((max(2 * len(a), n, 1024), *a.shape[1:]), -1, dtype=a.dtype)
    out[: len(a)] = a
    return out


def unique_rounds(ids: Ids, ts: Floats) -> Iterator[NDArray[np.intp] | slice]:
    """Split a batch into rounds in which every series appears once, oldest sample first.

    Fancy-index assignment keeps only one write per index, so a batch carrying two samples of the same
    series must be applied in rounds. A scrape batch has one sample per series: one round, the whole
    batch as a slice (no copy), found by one comparison when the ids ascend, else with a bincount
    rather than a sort.
    """
    if len(ids) == 0:
        return
    if _all_distinct(ids):
        yield slice(None)
        return
    order = np.lexsort((ts, ids))
    sorted_ids = ids[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1]
    rank = np.arange(len(ids)) - np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
    for r in range(int(rank.max()) + 1):
        yield order[rank == r]


def by_rounds(
    update_round: Callable[..., Floats], ids: Ids, ts: Floats, x: Floats, *extra: NDArray[np.generic]
) -> Floats:
    """Each sample's p from `update_round` applied to the batch's rounds (`unique_rounds`); a batch of
    distinct series is one round, whose answer is returned as it is (no copy into a fresh array).
    `extra` per-sample arrays go into each round beside the values, cut as they are."""
    if len(ids) and _all_distinct(ids):
        return update_round(ids, ts, x, *extra)
    p = np.ones(len(ids), dtype=np.float64)
    for idx in unique_rounds(ids, ts):
        p[idx] = update_round(ids[idx], ts[idx], x[idx], *(e[idx] for e in extra))
    return p


def _increasing(ids: Ids) -> bool:
    known = _BATCH.get()
    if known is not None and known[0] is ids and isinstance(known[1], slice):
        return True
    return bool((ids[1:] > ids[:-1]).all())


def _all_distinct(ids: Ids) -> bool:
    if _increasing(ids):
        return True
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo <= 8 * len(ids):
        return bool(np.bincount(ids - lo).max() <= 1)
    sorted_ids = np.sort(ids)
    return not bool((sorted_ids[1:] == sorted_ids[:-1]).any())


def ragged(starts: Ids, sizes: Ids) -> tuple[NDArray[np.intp], Ids, Ids]:
    """Runs `starts[i]` of `sizes[i]` elements, flattened: each element's run number, its place in its run
    and its index; one vectorised gather rather than a loop over runs (group members, a group's values
    from elsewhere)."""
    slot = np.repeat(np.arange(len(sizes)), sizes)
    offset = np.arange(len(slot)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return slot, offset, np.asarray(np.repeat(starts, sizes) + offset, dtype=np.int64)


def order_statistics(ordered: Floats, n: int) -> Floats:
    """`n` evenly spaced order statistics of sorted values, the ends included (linear interpolation;
    each column apart when 2-D): how a capped fleet sketch stands for more values than it stores, and
    how they are spread back over the count they stand for."""
    grid, at = np.linspace(0, len(ordered) - 1, n), np.arange(len(ordered))
    if ordered.ndim == 1:
        return np.interp(grid, at, ordered)
    return np.stack([np.interp(grid, at, ordered[:, c]) for c in range(ordered.shape[1])], axis=1)


def pick(mask: NDArray[np.bool_], a: Floats | float, b: Floats | float) -> Floats:
    """`np.where(mask, a, b)` for float operands, skipping the per-element select when the mask is
    uniform: usually every sample is finite, in order and past warm-up, and the select costs three
    arithmetic passes. It may return `a` or `b` itself: callers never write into the result.
    """
    if mask.all():
        return a if isinstance(a, np.ndarray) else np.full(mask.shape, a, dtype=np.float64)
    if not mask.any():
        return b if isinstance(b, np.ndarray) else np.full(mask.shape, b, dtype=np.float64)
    return np.where(mask, a, b)


def decayed_count(prior: float, decay: Floats, keep: float) -> Floats:
    """A count that gains 1 a step and is multiplied by `keep` before each, from `prior`, after the
    steps whose total decay (`keep ** steps`) is `decay`: its closed form, so it costs no state."""
    return np.asarray(prior * decay + (1.0 - decay) / (1.0 - keep))


def half_life_weight(dt: Floats, half_life: float) -> Floats:
    """`1 - 2**(-dt / half_life)`, the weight of a new sample after `dt` seconds; one exp2 for the
    whole batch when every series has the same `dt` (a scrape), the usual case."""
    w = uniform_weight(dt, half_life)
    if w is not None:
        return np.full(len(dt), w)
    return np.asarray(1.0 - np.exp2(-dt / half_life))


def uniform_weight(dt: Floats, half_life: float) -> float | None:
    """`half_life_weight` as one number when every series of the batch has the same `dt` (a scrape),
    else None."""
    if len(dt) > 1 and dt[0] == dt[-1] and bool((dt == dt[0]).all()):
        return float(1.0 - np.exp2(-dt[:1] / half_life)[0])
    return None


def ewma_weight(
    dt: Floats, half_life: float, n: Floats, plus: float = 0.0, least: float | None = None
) -> Floats | float:
    """`np.maximum(half_life_weight(dt, half_life), 1 / np.maximum(n + plus, 1))`: an EWMA's weight, at
    least a running mean's over its `n + plus` samples (a young series learns at the mean's pace).

    Once every series of a scrape has seen enough samples that the mean's weight is the smaller, that
    is the scrape's one weight, returned as a number: the batch's passes for the mean's weight and the
    maximum are skipped, and callers' arithmetic with it gives the same bits (the maximum picks it).
    So is a scrape's whose series have all seen as many samples (they started together).
    `least`: `n.min()`, when the caller has it already."""
    w = uniform_weight(dt, half_life)
    if w is not None and len(n):
        # fl(n + plus) is monotone in n: the smallest n has the largest 1/n
        nmin = float(n.min()) if least is None else least
        fewest = nmin + plus
        if fewest == fewest and 1.0 / max(fewest, 1.0) <= w:
            return w
        if nmin == float(n.max()):  # series that started together: one count, one weight
            return max(w, 1.0 / max(fewest, 1.0))
    return np.maximum(half_life_weight(dt, half_life), 1.0 / np.maximum(n + plus if plus else n, 1.0))


def floored_sigma(sigma: Floats, level: Floats, rel_floor: float, abs_floor: float) -> Floats:
    """`sigma`, at least `rel_floor` of |level| and `abs_floor`: a series that has not moved yet (a
    spread of 0) must not make its first small wiggle infinitely surprising."""
    floor = np.abs(level)
    floor *= rel_floor
    np.maximum(floor, abs_floor, out=floor)
    return np.maximum(sigma, floor, out=floor)


NESTED = 1 << 63  # in a blob's length prefix: its content is blobs too


def pack_blobs(*blobs: Piece | Pieces) -> Packed:
    """Length-prefixed blobs, so composite snapshots unpack their parts unambiguously. A blob may come
    in pieces and the result is pieces (join them for the bytes): nothing is copied on the way, so a
    checkpoint compresses state straight out of the detectors' arrays. A blob that is itself `Packed`
    is marked nested."""
    out = Packed()
    for blob in blobs:
        parts = blob if isinstance(blob, list) else [blob]
        size = sum(len(part) for part in parts)  # byte views: len is bytes
        out.append((size | (NESTED if isinstance(blob, Packed) else 0)).to_bytes(8, "little"))
        out.extend(parts)
    return out


class Readable(Protocol):
    def readinto(self, buffer: memoryview, /) -> int: ...


def read_blobs(src: Readable, size: int) -> list[Stored]:
    """The blobs of `size` bytes of `pack_blobs` output, read from a stream: each leaf into a buffer of
    its own, which the arrays restored from it then use as their memory. A restore thus never holds
    the snapshot a second time beside the state it becomes."""
    out: list[Stored] = []
    while size > 0:
        word = int.from_bytes(read_exactly(src, 8), "little")
        n = word & ~NESTED
        if 8 + n > size:
            raise ValueError(f"a blob of {n} bytes overruns the {size} left")
        out.append(read_blobs(src, n) if word & NESTED else read_exactly(src, n))
        size -= 8 + n
    return out


def read_exactly(src: Readable, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = src.readinto(view[got:])
        if not k:
            raise ValueError(f"truncated: {got} of {n} bytes")
        got += k
    return buf


def parse_blobs(data: bytes) -> list[Stored]:
    """`read_blobs` of `pack_blobs` pieces joined."""
    return read_blobs(io.BytesIO(data), len(data))


def unpack_blobs(data: Stored) -> list[Stored]:
    """The parts of a nested blob."""
    if not isinstance(data, list):
        raise ValueError("expected nested blobs, found a leaf")
    return data


def leaf(data: Stored) -> bytearray:
    if not isinstance(data, bytearray):
        raise ValueError("expected a leaf, found nested blobs")
    return data


def array_pieces(arr: NDArray[np.generic]) -> Pieces:
    """An array as .npy bytes in two pieces: the header, and a byte view of its data (no copy)."""
    arr = np.ascontiguousarray(arr)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(arr))
    return [header.getvalue(), arr.reshape(-1).view(np.uint8).data]


def load_array(data: Stored) -> NDArray[np.generic]:
    """The array in a leaf read back (`array_pieces`), as a writable view of the leaf's own buffer (the
    .npy header keeps the data aligned): restoring an array copies nothing."""
    buf = leaf(data)
    header_end = 10 + int.from_bytes(buf[8:10], "little")
    head = io.BytesIO(bytes(buf[:header_end]))
    if np.lib.format.read_magic(head) != (1, 0):
        raise ValueError("not a .npy 1.0 array")
    try:
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
    except Exception as err:  # numpy's header parser on garbage: TokenError, TypeError, ValueError...
        raise ValueError(f"unreadable .npy header: {err!r}") from err
    count = int(np.prod(shape))
    if dtype.hasobject or len(buf) != header_end + count * dtype.itemsize:
        raise ValueError("not an array of plain values, or not all of one")
    flat = np.frombuffer(buf, dtype=dtype, count=count, offset=header_end)
    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


def pack_arrays(arrays: dict[str, NDArray[np.generic]]) -> Packed:
    """Named arrays: their names (JSON), then each as .npy pieces."""
    names = json.dumps(list(arrays)).encode()
    return pack_blobs(names, *(array_pieces(a) for a in arrays.values()))


def unpack_arrays(data: Stored) -> dict[str, NDArray[np.generic]]:
    names, *blobs = unpack_blobs(data)
    keys = json.loads(leaf(names))
    if len(keys) != len(blobs):
        raise ValueError("array names and arrays do not match")
    return {k: load_array(b) for k, b in zip(keys, blobs, strict=True)}


def read_versioned(text: str, head: np.dtype[np.void], version: int, what: str) -> tuple[bytes, np.void]:
    """The bytes of a versioned base64 wire record (fleet statistics on the summaries topic) and its
    head, read as `head` (whose first field is `version`); ValueError if it is not base64, shorter than
    its head, or of another version."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) < head.itemsize:
        raise ValueError(f"{what} too short")
    fields = np.frombuffer(raw[: head.itemsize], dtype=head)[0]
    if int(fields["version"]) != version:
        raise ValueError(f"{what} v{int(fields['version'])}, this prexid reads v{version}")
    return raw, fields
