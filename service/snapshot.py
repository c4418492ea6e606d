"""Whole-processor snapshots: everything a partition's detection state is, as one versioned blob.

A replica that takes over a partition restores the previous owner's snapshot and resumes from the
offsets stored with it, so it neither warms up from nothing (a storm of false alerts while baselines
relearn) nor forgets alerts that are firing. Layout: magic, format version, then length-prefixed
parts: JSON metadata (registry, lifecycle bookkeeping, active alerts, held Xids, offsets), one npz of
arrays, and the detector bank's own snapshot.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import orjson

from detectors.base import pack_blobs, unpack_blobs
from service.models import Alert, XidEvent
from service.pipeline import Pipeline
from service.processor import Processor
from service.series import Entity, SeriesRegistry

MAGIC = b"PREXIDSNAP"
VERSION = 1


class SnapshotError(ValueError):
    """The blob is not a snapshot this build can restore (corrupt, other version, other config)."""


def dump(processor: Processor, offsets: dict[str, int]) -> bytes:
    """Snapshot `processor` (its pipeline and held Xids); `offsets` are the next offsets it covers."""
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
        "held_xids": [x.model_dump(mode="json") for x in processor.held_xids],
    }
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **_arrays(p))
    body = pack_blobs(orjson.dumps(meta), buf.getvalue(), p.bank.snapshot())
    return MAGIC + VERSION.to_bytes(2, "little") + body


def load(data: bytes, processor: Processor) -> dict[str, int]:
    """Restore a fresh `processor` from `data` in place; return the offsets the snapshot covers."""
    if not data.startswith(MAGIC):
        raise SnapshotError("not a prexid snapshot")
    version = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 2], "little")
    if version != VERSION:
        raise SnapshotError(f"snapshot format v{version}, this build reads v{VERSION}")
    try:
        meta_raw, npz, bank = unpack_blobs(data[len(MAGIC) + 2 :])
        meta = orjson.loads(meta_raw)
    except ValueError as err:
        raise SnapshotError(f"corrupt snapshot: {err}") from err
    p = processor.pipeline
    if meta["config"] != repr(p.config):
        raise SnapshotError("snapshot was taken with other detection settings")
    with np.load(io.BytesIO(npz)) as arrays:
        _restore_arrays(p, {k: arrays[k] for k in arrays.files})
    _restore_registry(p.registry, meta["registry"])
    p.bank.restore(bank)
    p.watermarks.progress = {k: float(v) for k, v in meta["progress"].items()}
    p.watermarks.backlogged = set(meta["backlogged"])
    p.active = {a["fingerprint"]: Alert.model_validate(a) for a in meta["active"]}
    p.pre_xid_fired = {int(e): (float(at), str(fp)) for e, at, fp in meta["pre_xid_fired"]}
    p.samples_seen = int(meta["samples_seen"])
    processor.held_xids = [XidEvent.model_validate(x) for x in meta["held_xids"]]
    return {str(k): int(v) for k, v in meta["offsets"].items()}


def _registry_meta(reg: SeriesRegistry) -> dict[str, Any]:
    return {
        "max_series": reg.max_series,
        "names": reg.names,
        "labels": reg.labels,
        "entities": [[e.node, e.gpu] for e in reg.entities],
        "gpu_by_pci": [[node, pci, eid] for (node, pci), eid in reg.gpu_by_pci.items()],
        "refused": reg.refused,
    }


def _restore_registry(reg: SeriesRegistry, meta: dict[str, Any]) -> None:
    reg.names = list(meta["names"])
    reg.labels = list(meta["labels"])
    reg.ids = {
        (n, tuple(sorted(lab.items()))): i
        for i, (n, lab) in enumerate(zip(reg.names, reg.labels, strict=True))
    }
    reg.entities = [Entity(node, gpu) for node, gpu in meta["entities"]]
    reg.entity_ids = {e: i for i, e in enumerate(reg.entities)}
    reg.gpu_by_pci = {(node, pci): int(eid) for node, pci, eid in meta["gpu_by_pci"]}
    reg.refused = int(meta["refused"])


def _arrays(p: Pipeline) -> dict[str, Any]:
    """Every numpy array of the pipeline; scalars that may be infinite travel here, not in JSON."""
    reg, fusion = p.registry, p.fusion
    n = len(reg)
    return {
        "reg_entity_of": reg.entity_of[:n],
        "reg_family_of": reg.family_of[:n],
        "reg_kind_of": reg.kind_of[:n],
        **{f"fusion_{k}": v for k, v in fusion.snapshot_arrays().items()},
        "fusion_at_tick": fusion.at_tick,
        "fusion_common": fusion.common,
        **{f"lifecycle_{k}": v for k, v in p.lifecycle.snapshot_arrays().items()},
        "buffer_ids": p.buffer.ids,
        "buffer_ts": p.buffer.ts,
        "buffer_values": p.buffer.values,
        "fused_scores": p.fused_scores,
        "next_tick": np.array([p.next_tick]),
    }


def _restore_arrays(p: Pipeline, a: dict[str, Any]) -> None:
    reg = p.registry
    reg.entity_of = a["reg_entity_of"].astype(np.int64)
    reg.family_of = a["reg_family_of"].astype(np.uint8)
    reg.kind_of = a["reg_kind_of"].astype(np.uint8)
    p.fusion.restore_arrays({k[7:]: v for k, v in a.items() if k.startswith("fusion_")})
    p.fusion.at_tick = a["fusion_at_tick"].astype(np.float64)
    p.fusion.common = a["fusion_common"].astype(bool)
    p.lifecycle.restore_arrays({k[10:]: v for k, v in a.items() if k.startswith("lifecycle_")})
    p.buffer.ids = a["buffer_ids"].astype(np.int64)
    p.buffer.ts = a["buffer_ts"].astype(np.float64)
    p.buffer.values = a["buffer_values"].astype(np.float64)
    p.fused_scores = a["fused_scores"].astype(np.float64)
    p.next_tick = float(a["next_tick"][0])
