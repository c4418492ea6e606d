"""A restored processor carries on exactly where its snapshot was taken."""

from __future__ import annotations

import collections
import zlib
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from prexid.detectors.base import array_pieces, load_array, pack_arrays, parse_blobs, unpack_arrays
from prexid.detectors.signals import Kind
from prexid.service.app.settings import DetectionSettings, Settings
from prexid.service.app.wiring import build
from prexid.service.pipeline.processor import Processor
from prexid.service.sources.demo_cluster import DemoCluster, DemoFault, simulate
from prexid.service.state import snapshot
from prexid.service.state.changelog_store import Inflate, compressed_chunks
from tests.unit import wiring

INCIDENT = DemoCluster(nodes=3, gpus=4, duration_s=2100.0, fault=DemoFault(node=1, gpu=2, xid_at_s=1800.0))


def fresh(settings: Settings | None = None) -> Processor:
    return build(settings or Settings())[1]


@pytest.mark.parametrize("cut_s", [600.0, 1500.0, 1650.0])
def test_a_restored_pipeline_raises_exactly_the_alerts_of_an_uninterrupted_one(cut_s: float) -> None:
    ticks = list(simulate(INCIDENT))
    cut = int(cut_s // INCIDENT.step_s)
    uninterrupted = fresh()
    expected = wiring.feed(uninterrupted, ticks, drain=True)
    assert [a.kind for a in expected if a.status == "firing"] == ["pre_xid", "xid"]

    first = fresh()
    before = wiring.feed(first, ticks[:cut])
    blob = snapshot.dump(first, {"metrics:0": 1234})
    second = fresh()
    assert snapshot.load(blob, second) == {"metrics:0": 1234}
    after = wiring.feed(second, ticks[cut:], drain=True)
    assert before + after == expected
    assert second.pipeline.alert_book.active.keys() == uninterrupted.pipeline.alert_book.active.keys()


def test_a_snapshot_of_a_restored_pipeline_is_byte_identical() -> None:
    first = fresh()
    wiring.feed(first, list(simulate(INCIDENT))[:100])
    blob = snapshot.dump(first, {})
    second = fresh()
    snapshot.load(blob, second)
    assert snapshot.dump(second, {}) == blob


def test_another_format_version_is_refused_with_a_clear_error() -> None:
    blob = bytearray(snapshot.dump(fresh(), {}))
    blob[len(snapshot.MAGIC)] += 1
    with pytest.raises(snapshot.SnapshotError, match=f"format v{snapshot.VERSION + 1}"):
        snapshot.load(bytes(blob), fresh())
    with pytest.raises(snapshot.SnapshotError, match="not a prexid snapshot"):
        snapshot.load(b"garbage", fresh())


def test_a_snapshot_taken_under_other_detection_settings_is_refused() -> None:
    blob = snapshot.dump(fresh(), {})
    other = Settings(detection=DetectionSettings(fire_threshold=10.0))
    with pytest.raises(snapshot.SnapshotError, match="other detection settings"):
        snapshot.load(blob, fresh(other))


# listeners, rebuilt indexes, and the registry's aliases (a cache: each spelling relearned once)
DERIVED = {
    "tick_listeners",
    "_order",
    "_starts",
    "_group",
    "_dirty",
    "_width",
    "_layout",
    "aliases",
    "budget",  # the process's series limit, shared with its other partitions: wiring, not state
    "own_stats",  # error counters' prior statistics as of their last refit: for the fleet, retaken at the next
}


def differences(a: object, b: object, path: str = "pipeline", seen: set[int] | None = None) -> list[str]:
    """Every attribute path where two object graphs differ (callables, e.g. listeners, are skipped)."""
    seen = set() if seen is None else seen
    if id(a) in seen or (callable(a) and not hasattr(a, "__dict__")) or path.rsplit(".", 1)[-1] in DERIVED:
        return []
    seen.add(id(a))
    if isinstance(a, np.ndarray):
        same = isinstance(b, np.ndarray) and a.shape == b.shape and a.dtype == b.dtype
        return [] if same and np.array_equal(a, b, equal_nan=a.dtype.kind == "f") else [path]
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return [path]
        return [d for k in a for d in differences(a[k], b[k], f"{path}[{k!r}]", seen)]
    if isinstance(a, list | tuple | deque):
        if type(a) is not type(b) or len(a) != len(b):  # type: ignore[arg-type]
            return [path]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]", seen)
        ]
    fields = getattr(a, "__dict__", None) or {s: getattr(a, s) for s in getattr(a, "__slots__", ())}
    if not fields or isinstance(a, BaseModel):
        return [] if a == b or (a != a and b != b) else [path]
    return [
        d
        for k, v in fields.items()
        if not callable(v) or hasattr(v, "__dict__")
        for d in differences(v, getattr(b, k, None), f"{path}.{k}", seen)
    ]


def test_a_restored_processor_equals_the_original_in_every_attribute() -> None:
    """Catches state a new feature adds to the pipeline but forgets to put in the snapshot."""
    first = fresh()
    wiring.feed(first, list(simulate(INCIDENT))[:125])  # mid-precursor, a pre_xid firing, Xid burst open
    second = fresh()
    snapshot.load(snapshot.dump(first, {}), second)
    assert differences(first.pipeline, second.pipeline) == []


def test_a_snapshot_written_in_compressed_chunks_reads_back_whole() -> None:
    """What the changelog store writes: the snapshot's pieces compressed one by one and cut into
    chunks of the broker's size; joined and decompressed they are `dump`'s blob, which restores."""
    first = fresh()
    wiring.feed(first, list(simulate(INCIDENT))[:40])
    pieces = snapshot.frames(first, {"metrics:0": 7})
    chunks = compressed_chunks(pieces, 4096)
    assert len(chunks) > 3 and all(len(c) == 4096 for c in chunks[:-1]) and 0 < len(chunks[-1]) <= 4096
    blob = zlib.decompress(b"".join(chunks))
    assert blob == snapshot.dump(first, {"metrics:0": 7})
    assert snapshot.load(blob, fresh()) == {"metrics:0": 7}
    assert [zlib.decompress(b"".join(compressed_chunks(p, 10))) for p in ([], [b""], [b"ab", b"c"])] == [
        b"",
        b"",
        b"abc",
    ]
    mixed = [b"k%d," % i for i in range(300_000)] + [bytes(100_000), b"tail"]  # small runs, then large
    assert zlib.decompress(b"".join(compressed_chunks(mixed, 1000))) == b"".join(mixed)


def test_a_takeover_restores_from_the_chunks_as_it_inflates_them() -> None:
    """What a replica taking a partition over does: the chunks are inflated as the state is read,
    each array into memory of its own that the restored state then uses. The snapshot is never whole
    in memory beside the state (at 1M series that was 3.6 GiB at peak, `prexid bench e2e` says)."""
    first = fresh()
    wiring.feed(first, list(simulate(INCIDENT))[:125])  # mid-precursor, a pre_xid firing, Xid burst open
    pieces = snapshot.frames(first, {"metrics:0": 7})
    size = sum(map(len, pieces))
    second = fresh()
    assert snapshot.read(Inflate(compressed_chunks(pieces, 4096)), size, second) == {"metrics:0": 7}
    assert differences(first.pipeline, second.pipeline) == []
    center = second.pipeline.bank.detectors[Kind.GAUGE][0].state["center"]  # type: ignore[attr-defined]
    owner = center.base
    while isinstance(owner, np.ndarray | memoryview):
        owner = owner.base if isinstance(owner, np.ndarray) else owner.obj
    assert isinstance(owner, bytearray) and len(owner) < center.nbytes + 256
    assert center.flags.writeable and center.flags.aligned


def _damaged(chunks: list[bytes]) -> list[bytes]:
    """The chunks with one byte of the middle one flipped, from its 100th on, where that changes what
    they inflate to: deflate ignores some bits (padding, unused code lengths), and a flip there is no
    damage at all."""
    mid, whole = len(chunks) // 2, zlib.decompress(b"".join(chunks))
    for at in range(100, len(chunks[mid])):
        flipped = bytearray(chunks[mid])
        flipped[at] ^= 0x55
        damaged = [*chunks[:mid], bytes(flipped), *chunks[mid + 1 :]]
        try:
            if zlib.decompress(b"".join(damaged)) != whole:
                return damaged
        except zlib.error:
            return damaged
    raise AssertionError("no byte of the middle chunk changes the snapshot")


def test_a_damaged_or_cut_short_compressed_snapshot_is_refused_with_a_reason() -> None:
    first = fresh()
    wiring.feed(first, list(simulate(INCIDENT))[:40])
    pieces = snapshot.frames(first, {})
    size = sum(map(len, pieces))
    chunks = compressed_chunks(pieces, 4096)
    damaged = _damaged(chunks)
    for stream, claimed in ((chunks[:-1], size), (damaged, size), (chunks, size + 1), (chunks, size - 1)):
        with pytest.raises(snapshot.SnapshotError, match="corrupt snapshot"):
            snapshot.read(Inflate(stream), claimed, fresh())


def test_inflate_hands_a_reader_at_most_a_few_mib_at_a_time() -> None:
    data = bytes(range(256)) * 40_000  # 10 MB
    stream = Inflate(compressed_chunks([data], 1 << 20))
    out = bytearray(len(data) + 1)
    view, got = memoryview(out), 0
    steps = []
    while n := stream.readinto(view[got:]):
        steps.append(n)
        got += n
    assert got == len(data) and out[:got] == data
    assert max(steps) == Inflate.STEP and len(steps) >= 3


def test_arrays_travel_as_npy_pieces_viewing_the_live_data() -> None:
    """Every dtype and shape the pipeline snapshots comes back equal, and the data pieces are views of
    the arrays themselves (what keeps a checkpoint from copying the state)."""
    arrays = {
        "f": np.linspace(0.0, 1.0, 7),
        "grid": np.arange(12, dtype=np.float32).reshape(3, 4),
        "flags": np.array([True, False, True]),
        "slots": np.array([-1, 5, 7], dtype=np.int32),
        "none": np.zeros(0, dtype=np.uint8),
    }
    pieces = pack_arrays(arrays)
    back = unpack_arrays(parse_blobs(b"".join(pieces)))
    assert list(back) == list(arrays)
    assert all(back[k].dtype == a.dtype and np.array_equal(back[k], a) for k, a in arrays.items())
    assert all(back[k].flags.writeable for k in back)
    arrays["f"][0] = 42.0  # a view: the pieces see the write
    assert unpack_arrays(parse_blobs(b"".join(pieces)))["f"][0] == 42.0


_SMALL_DUMP: list[bytes] = []


def small_dump() -> bytes:
    if not _SMALL_DUMP:
        first = fresh()
        wiring.feed(first, list(simulate(INCIDENT))[:20])
        _SMALL_DUMP.append(snapshot.dump(first, {"metrics:0": 3}))
    return _SMALL_DUMP[0]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_damaged_snapshot_restores_or_is_refused_never_anything_else(data: st.DataObject) -> None:
    """Any byte changed anywhere (a length, a header, the JSON, an array's data): the restore either
    works (a changed value is still a snapshot) or raises SnapshotError with its reason, which the
    runner turns into a cold start. Any other exception would crash the takeover (found this way: a
    damaged "offsets" key raised KeyError, a damaged .npy header numpy's tokenize.TokenError)."""
    blob = bytearray(small_dump())
    head = min(30_000, len(blob) - 1)  # lengths, headers and the JSON live here; the rest is array data
    at = data.draw(st.one_of(st.integers(0, head), st.integers(0, len(blob) - 1)))
    blob[at] ^= data.draw(st.integers(1, 255))
    outcome = restore_outcome(bytes(blob))
    assert outcome == "restored" or (outcome.startswith("refused: ") and len(outcome) > len("refused: "))


def restore_outcome(blob: bytes) -> str:
    """`restored`, or `refused: <reason>`; anything else the restore raises propagates."""
    try:
        snapshot.load(blob, fresh())
    except snapshot.SnapshotError as err:
        return f"refused: {err}"
    return "restored"


def test_damage_to_the_metadata_a_restore_reads_last_is_refused_with_a_reason() -> None:
    blob = bytearray(small_dump())
    blob[blob.index(b'"offsets"') + 3] ^= 0x20  # "offsets" -> "ofFsets": read after everything else
    assert restore_outcome(bytes(blob)).startswith("refused: corrupt snapshot: KeyError")


@pytest.mark.filterwarnings("ignore::UserWarning")  # numpy on some damaged headers: "created on Python 2"
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ... its parse: invalid escapes, dtype "a"
def test_every_one_byte_damage_to_an_array_header_is_refused_or_still_an_array() -> None:
    """numpy's own header parser raises tokenize.TokenError (a `{` changed) or TypeError on some
    damage: `load_array` turns whatever it raises into the ValueError a restore refuses."""
    header, data = array_pieces(np.arange(4.0))
    intact = bytes(header) + bytes(data)
    outcomes = collections.Counter()
    for at in range(len(header)):
        for change in range(1, 256, 3):  # every third bit pattern: flips of each bit, and more
            damaged = bytearray(intact)
            damaged[at] ^= change
            outcomes[array_outcome(damaged)] += 1
    assert set(outcomes) == {"array", "refused"} and outcomes["refused"] > 300


def array_outcome(blob: bytearray) -> str:
    try:
        load_array(blob)
    except ValueError:
        return "refused"
    return "array"
