"""Whole-processor snapshots: everything a partition's detection state is, as one versioned blob.

A replica that takes over a partition restores the previous owner's snapshot and resumes from the
offsets stored with it, so it neither warms up from nothing (a storm of false alerts while baselines
relearn) nor forgets alerts that are firing. Layout: magic, format version, then length-prefixed
parts: JSON metadata (registry, lifecycle bookkeeping, active alerts, held Xids, offsets), the
pipeline's named arrays (.npy each), the series keys end to end, and the detector bank's own snapshot.
"""

from __future__ import annotations

import dataclasses
import io
from collections import deque
from typing import Any

import numpy as np
import orjson

from prexid.detectors.base import (
    Pieces,
    Readable,
    Stored,
    leaf,
    pack_arrays,
    pack_blobs,
    read_blobs,
    read_exactly,
    unpack_arrays,
)
from prexid.detectors.rate_limit import RateLimiter
from prexid.detectors.signals import Family
from prexid.detectors.xid_bursts import Burst
from prexid.detectors.xid_catalog import xid_info
from prexid.service.pipeline.pipeline import Pipeline
from prexid.service.pipeline.processor import Processor
from prexid.service.pipeline.series_registry import Entity, SeriesRegistry
from prexid.service.pipeline.xid_alerts import _Incident
from prexid.service.schemas import Alert, XidEvent

MAGIC = b"PREXIDSNAP"
VERSION = 7  # v2: peer groups, cluster lifecycle, rate limiter, Xid bursts; v3: series keys as bytes;
# v4: fail-slow family (fusion arrays one column wider), peers' last residual, fusion series counts
# v5: fusion remembers recent load evidence, which cells it explained, which tops are error counters;
# error counters keep burst counts and a recent window; v6: arrays as .npy pieces, not npz (written
# straight from the live arrays); v7: nested blobs marked as such (each array read into its own buffer)


class SnapshotError(ValueError):
    """The blob is not a snapshot this build can restore (corrupt, other version, other config)."""


def dump(processor: Processor, offsets: dict[str, int]) -> bytes:
    """Snapshot `processor` (its pipeline and held Xids); `offsets` are the next offsets it covers."""
    return b"".join(frames(processor, offsets))


def frames(processor: Processor, offsets: dict[str, int]) -> Pieces:
    """`dump` in pieces, for a writer that compresses them one by one. The detectors' arrays come as
    views, not copies (800 MB at 1M series): write them before the processor takes another batch."""
    p = processor.pipeline
    meta = {
        "config": repr(p.config),
        "offsets": offsets,
        "registry": _registry_meta(p.registry),
        "progress": p.watermarks.progress,
        "backlogged": sorted(p.watermarks.backlogged),
        "active": [a.model_dump(mode="json") for a in p.active.values()],
        "pre_xid_fired": [[e, at, fp] for e, (at, fp) in p.pre_xid_fired.items()],
        "samples_seen": p.samples_seen,
        "cluster_families": [int(f) for f in p._cluster_families],
        "peer_groups": [[list(k), v] for k, v in p.peer_groups._groups.items()],
        "peer_nodes": p.peer_groups._nodes,
        "rate_limit": _rate_limit_meta(p.rate_limit),
        "xid_bursts": [dataclasses.asdict(b) for b in p.xid_alerts.bursts.open.values()],
        "xid_incidents": [[node, ts, _incident_meta(i)] for (node, ts), i in p.xid_alerts.incidents.items()],
        "held_xids": [x.model_dump(mode="json") for x in processor.held_xids],
    }
    keys: Pieces = list(p.registry.keys)  # each series' key a piece of its own: joined, 90 MB at 1M
    parts = pack_blobs(orjson.dumps(meta), pack_arrays(_arrays(p)), keys, p.bank.snapshot())
    return [MAGIC, VERSION.to_bytes(2, "little"), *parts]


def load(data: bytes, processor: Processor) -> dict[str, int]:
    """Restore a fresh `processor` from `data` (`dump`) in place; return the offsets it covers."""
    return read(io.BytesIO(data), len(data), processor)


def read(src: Readable, size: int, processor: Processor) -> dict[str, int]:
    """`load` from a stream of `size` bytes. Each array is read into memory of its own, which the
    restored state then uses as it is: a restore peaks at about the state it restores, not twice it."""
    try:
        head = read_exactly(src, len(MAGIC) + 2)
    except ValueError:
        raise SnapshotError("not a prexid snapshot") from None
    if not head.startswith(MAGIC):
        raise SnapshotError("not a prexid snapshot")
    version = int.from_bytes(head[len(MAGIC) :], "little")
    if version != VERSION:
        raise SnapshotError(f"snapshot format v{version}, this build reads v{VERSION}")
    try:
        meta_raw, arrays, keys, bank = read_blobs(src, size - len(head))
        meta = orjson.loads(leaf(meta_raw))
        if meta["config"] != repr(processor.pipeline.config):
            raise SnapshotError("snapshot was taken with other detection settings")
        _restore(processor, meta, arrays, keys, bank)
        if src.readinto(memoryview(bytearray(1))):  # and the stream ends here (zlib checks its sum)
            raise ValueError("bytes after the snapshot's end")
        return {str(k): int(v) for k, v in meta["offsets"].items()}
    except SnapshotError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:  # parsing garbage
        raise SnapshotError(f"corrupt snapshot: {err!r}") from err


def _restore(processor: Processor, meta: dict[str, Any], arrays: Stored, keys: Stored, bank: Stored) -> None:
    p = processor.pipeline
    _restore_arrays(p, unpack_arrays(arrays), keys)
    _restore_registry(p.registry, meta["registry"])
    p.bank.restore(bank)
    p.watermarks.progress = {k: float(v) for k, v in meta["progress"].items()}
    p.watermarks.backlogged = set(meta["backlogged"])
    p.active = {a["fingerprint"]: Alert.model_validate(a) for a in meta["active"]}
    p.pre_xid_fired = {int(e): (float(at), str(fp)) for e, at, fp in meta["pre_xid_fired"]}
    p.samples_seen = int(meta["samples_seen"])
    p._cluster_families = [Family(f) for f in meta["cluster_families"]]
    p.peer_groups._groups = {_peer_key(k): int(v) for k, v in meta["peer_groups"]}
    p.peer_groups._nodes = {str(k): int(v) for k, v in meta["peer_nodes"].items()}
    _restore_rate_limit(p.rate_limit, meta["rate_limit"])
    p.xid_alerts.bursts.open = {b["node"]: _burst(b) for b in meta["xid_bursts"]}
    p.xid_alerts.incidents = {(node, float(ts)): _incident(i) for node, ts, i in meta["xid_incidents"]}
    processor.held_xids = [XidEvent.model_validate(x) for x in meta["held_xids"]]


def _registry_meta(reg: SeriesRegistry) -> dict[str, Any]:
    return {
        "max_series": reg.max_series,
        "entities": [[e.node, e.gpu] for e in reg.entities],
        "gpu_by_pci": [[node, pci, eid] for (node, pci), eid in reg.gpu_by_pci.items()],
        "gpu_by_uuid": reg.gpu_by_uuid,
        "uuid_of": [[eid, uuid] for eid, uuid in reg.uuid_of.items()],
        "parent_of": reg.parent_of,
        "refused": reg.refused,
    }


def _restore_registry(reg: SeriesRegistry, meta: dict[str, Any]) -> None:
    reg.entities = [Entity(node, gpu) for node, gpu in meta["entities"]]
    reg.entity_ids = {e: i for i, e in enumerate(reg.entities)}
    reg.gpu_by_pci = {(node, pci): int(eid) for node, pci, eid in meta["gpu_by_pci"]}
    reg.gpu_by_uuid = {str(k): int(v) for k, v in meta["gpu_by_uuid"].items()}
    reg.uuid_of = {int(eid): str(uuid) for eid, uuid in meta["uuid_of"]}
    reg.parent_of = [int(e) for e in meta["parent_of"]]
    reg.refused = int(meta["refused"])


def _arrays(p: Pipeline) -> dict[str, Any]:
    """Every numpy array of the pipeline; scalars that may be infinite travel here, not in JSON."""
    reg, fusion = p.registry, p.fusion
    return {
        "reg_key_ends": np.cumsum([len(k) for k in reg.keys], dtype=np.int64),
        "reg_entity_of": reg.entity_of,
        "reg_family_of": reg.family_of,
        "reg_kind_of": reg.kind_of,
        "reg_falls_with_load": reg.falls_with_load,
        **{f"fusion_{k}": v for k, v in fusion.snapshot_arrays().items()},
        "fusion_at_tick": fusion.at_tick,
        "fusion_common_share": fusion.common_share,
        "fusion_rising_share": fusion.rising_share,
        **{f"lifecycle_{k}": v for k, v in p.lifecycle.snapshot_arrays().items()},
        **{f"cluster_{k}": v for k, v in p.cluster_lifecycle.snapshot_arrays().items()},
        "buffer_ids": p.buffer.ids,
        "buffer_ts": p.buffer.ts,
        "buffer_values": p.buffer.values,
        "fused_scores": p.fused_scores,
        "next_tick": np.array([p.next_tick]),
        "cluster_score": np.array([p.cluster_score]),
    }


def _restore_arrays(p: Pipeline, a: dict[str, Any], keys: Stored) -> None:
    reg = p.registry
    blob, ends = memoryview(leaf(keys)), a["reg_key_ends"].tolist()
    reg.keys = [blob[start:end].tobytes() for start, end in zip([0, *ends], ends, strict=False)]
    reg.ids = {k: i for i, k in enumerate(reg.keys)}
    p.registered = len(reg.keys)  # the bank's snapshot carries their kinds and groups
    reg.entity_of = a["reg_entity_of"].astype(np.int64, copy=False)
    reg.family_of = a["reg_family_of"].astype(np.uint8, copy=False)
    reg.kind_of = a["reg_kind_of"].astype(np.uint8, copy=False)
    reg.falls_with_load = a["reg_falls_with_load"].astype(bool, copy=False)
    p.fusion.restore_arrays({k[7:]: v for k, v in a.items() if k.startswith("fusion_")})
    p.fusion.at_tick = a["fusion_at_tick"].astype(np.float64, copy=False)
    p.fusion.common_share = a["fusion_common_share"].astype(np.float64, copy=False)
    p.fusion.rising_share = a["fusion_rising_share"].astype(np.float64, copy=False)
    p.lifecycle.restore_arrays({k[10:]: v for k, v in a.items() if k.startswith("lifecycle_")})
    p.cluster_lifecycle.restore_arrays({k[8:]: v for k, v in a.items() if k.startswith("cluster_")})
    p.buffer.ids = a["buffer_ids"].astype(np.int64, copy=False)
    p.buffer.ts = a["buffer_ts"].astype(np.float64, copy=False)
    p.buffer.values = a["buffer_values"].astype(np.float64, copy=False)
    p.fused_scores = a["fused_scores"].astype(np.float64, copy=False)
    p.next_tick = float(a["next_tick"][0])
    p.cluster_score = float(a["cluster_score"][0])


def _peer_key(raw: list[Any]) -> tuple[object, ...]:
    """JSON turned the key's tuples into lists; PeerGroups keys are (kind, [node,] name, label pairs)."""
    *head, rest = raw
    return (*head, tuple((str(k), str(v)) for k, v in rest))


def _rate_limit_meta(r: RateLimiter) -> dict[str, Any]:
    history = [[e, list(times)] for e, times in r.history.items()]
    return {"history": history, "muted": sorted(r.muted), "withheld": r.withheld}


def _restore_rate_limit(r: RateLimiter, meta: dict[str, Any]) -> None:
    r.history = {int(e): deque(float(t) for t in times) for e, times in meta["history"]}
    r.muted = {int(e) for e in meta["muted"]}
    r.withheld = int(meta["withheld"])


def _burst(raw: dict[str, Any]) -> Burst:
    return Burst(**{**raw, "codes": tuple(raw["codes"])})


def _incident_meta(i: _Incident) -> dict[str, Any]:
    return {**dataclasses.asdict(i), "worst": i.worst.code}


def _incident(raw: dict[str, Any]) -> _Incident:
    return _Incident(**{**raw, "codes": tuple(raw["codes"]), "worst": xid_info(raw["worst"])})
