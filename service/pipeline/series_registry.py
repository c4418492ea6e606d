"""Series registry: interns (metric, labels) to dense ids and maps each series to its entity.

Entities are what alerts are about: one per GPU (`node`, `gpu` index) and one per node (its host-level
series). The registry also learns each GPU's PCI bus id from DCGM labels, so an Xid line naming only a
PCI id finds its GPU. A cardinality limit refuses new series beyond `max_series` (counted, not stored).

A series is stored once, as its canonical key: compact JSON bytes of the name and the sorted labels
(a label dict per series cost ~1 KiB at a million series). Lookups go through aliases first: the
series as a producer spells it (the raw bytes a decoder saw, or name and labels in arrival order),
so the canonical key is built only the first time a spelling is seen.

Series expire: `expire(expiring(cutoff))` drops every series last seen (`touch`, in event time)
before `cutoff`, its key, aliases and slot in the limit, and keeps its id on a free list for the next
new series, so label churn (`pod`, `container`) neither fills the limit nor grows the per-series
arrays. Callers reset whatever else they keep per id (the pipeline does: `Pipeline.expire`) before the
id is given out again.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from prexid.detectors.base import rows
from prexid.detectors.signals import DECISIVE_METRICS, FALLS_WITH_LOAD, Family, Kind, spec_for
from prexid.service.decode.common import HOST_LABELS
from prexid.service.decode.xid import normalise_pci

__all__ = [
    "HOST_LABELS",
    "NO_FAMILY",
    "Entity",
    "SeriesBudget",
    "SeriesRegistry",
    "canonical_key",
    "normalise_host",
]
NO_FAMILY = 255


def normalise_host(raw: str) -> str:
    """Short host name: `node-17.cluster.local:9100` -> `node-17` (FQDN, short name and instance agree).

    IP addresses are kept whole: their dots are not domain separators. An empty result is `unknown`.
    """
    host = raw.strip().lower().rstrip(".")
    if host.startswith("["):  # [v6]:port
        return host[1:].split("]")[0] or "unknown"
    if host.count(":") == 1:
        host = host.split(":")[0]
    if host.replace(".", "").isdigit():
        return host
    return host.split(".")[0] or "unknown"


def node_of(labels: dict[str, str]) -> str:
    """The node a series belongs to, from the first host-like label present (also the Kafka key)."""
    host = next((labels[k] for k in HOST_LABELS if labels.get(k)), "")
    return normalise_host(host) if host else "unknown"


def canonical_key(name: str, labels: dict[str, str]) -> bytes:
    """One series, one key, whatever order its labels came in: `["name",{sorted labels}]`.

    Copied to an exact-size bytes object: orjson's own result keeps a ~4 KiB buffer, 4 GiB at 1M series.
    """
    return memoryview(orjson.dumps((name, labels), option=orjson.OPT_SORT_KEYS)).tobytes()


@dataclass(frozen=True, slots=True)
class Entity:
    node: str
    gpu: int | None  # None for the node itself


class SeriesBudget:
    """One cardinality limit for a whole process, shared by the registries of all its shards: under
    `prexid run` each partition has a pipeline, and a limit per registry would let a replica owning
    many partitions hold many times what `max_series` says."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.registries: weakref.WeakSet[SeriesRegistry] = weakref.WeakSet()  # shards handed off leave

    def used(self) -> int:
        return sum(len(r) for r in self.registries)


@dataclass(eq=False)
class SeriesRegistry:
    max_series: int = 2_000_000
    budget: SeriesBudget | None = None  # the process's limit, when shards share one
    keys: list[bytes] = field(default_factory=list)  # series id -> canonical key (b"": a free id)
    ids: dict[bytes, int] = field(default_factory=dict)  # canonical key -> series id
    aliases: dict[Hashable, int] = field(default_factory=dict)  # a producer's spelling -> series id
    entity_of: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    family_of: NDArray[np.uint8] = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    kind_of: NDArray[np.uint8] = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    falls_with_load: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    decisive: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))  # row remaps
    entities: list[Entity] = field(default_factory=list)
    entity_ids: dict[Entity, int] = field(default_factory=dict)
    parent_of: list[int] = field(default_factory=list)  # GPU entity -> its node entity; node -> -1
    gpu_by_pci: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_by_uuid: dict[str, int] = field(default_factory=dict)
    # GPU entity -> its DCGM identity labels (Hostname, UUID, pci_bus_id), so score metrics can carry
    # them and PromQL join them with dcgm-exporter's series
    dcgm_of: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    refused: int = 0
    # event time each series was last seen (+inf on a free id: never expires again)
    last_seen: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    free: list[int] = field(default_factory=list)  # expired ids, the next new series' (last first)
    placed: list[int] = field(default_factory=list)  # ids given to new series since `take_placed`
    expired: int = 0

    def __post_init__(self) -> None:
        if self.budget is not None:
            self.budget.registries.add(self)

    def __len__(self) -> int:
        """Series held now (expired ones left; their ids wait on the free list)."""
        return len(self.ids)

    def id_space(self) -> int:
        """Ids handed out so far: every per-series array is indexed below this."""
        return len(self.keys)

    def full(self) -> bool:
        """Whether a new series would pass the limit: this registry's, or its process's."""
        if len(self.ids) >= self.max_series:
            return True
        return self.budget is not None and self.budget.used() >= self.budget.limit

    def snapshot_meta(self) -> dict[str, Any]:
        return {
            "max_series": self.max_series,
            "entities": [[e.node, e.gpu] for e in self.entities],
            "gpu_by_pci": [[node, pci, eid] for (node, pci), eid in self.gpu_by_pci.items()],
            "gpu_by_uuid": self.gpu_by_uuid,
            "dcgm_of": [[eid, *labels] for eid, labels in self.dcgm_of.items()],
            "parent_of": self.parent_of,
            "refused": self.refused,
            "expired": self.expired,
        }

    def snapshot_arrays(self) -> dict[str, NDArray[np.generic]]:
        """Per-series columns, and where each series' key ends in the keys written end to end."""
        return {
            "key_ends": np.cumsum([len(k) for k in self.keys], dtype=np.int64),
            "entity_of": self.entity_of,
            "family_of": self.family_of,
            "kind_of": self.kind_of,
            "falls_with_load": self.falls_with_load,
            "decisive": self.decisive,
            "last_seen": self.last_seen,
            "free": np.array(self.free, dtype=np.int64),
        }

    def restore(self, meta: dict[str, Any], arrays: dict[str, NDArray[np.generic]], keys: memoryview) -> None:
        """From `snapshot_meta`, `snapshot_arrays` and the keys end to end. Aliases are not kept: each
        series' first message after a restore is decoded in full."""
        ends = arrays["key_ends"].tolist()
        self.keys = [keys[start:end].tobytes() for start, end in zip([0, *ends], ends, strict=False)]
        self.ids = {k: i for i, k in enumerate(self.keys) if k}
        self.last_seen = arrays["last_seen"].astype(np.float64, copy=False)
        self.free = [int(i) for i in arrays["free"].tolist()]
        free_ok = all(0 <= i < len(self.keys) and not self.keys[i] for i in self.free)
        if (
            not free_ok
            or len(set(self.free)) + len(self.ids) != len(self.keys)
            or len(self.last_seen) < len(self.keys)
        ):
            raise ValueError("series keys, last-seen times and free ids do not add up")
        self.placed = []
        self.entity_of = arrays["entity_of"].astype(np.int64, copy=False)
        self.family_of = arrays["family_of"].astype(np.uint8, copy=False)
        self.kind_of = arrays["kind_of"].astype(np.uint8, copy=False)
        self.falls_with_load = arrays["falls_with_load"].astype(bool, copy=False)
        self.decisive = arrays["decisive"].astype(bool, copy=False)
        self.entities = [Entity(node, gpu) for node, gpu in meta["entities"]]
        self.entity_ids = {e: i for i, e in enumerate(self.entities)}
        self.gpu_by_pci = {(node, pci): int(eid) for node, pci, eid in meta["gpu_by_pci"]}
        self.gpu_by_uuid = {str(k): int(v) for k, v in meta["gpu_by_uuid"].items()}
        self.dcgm_of = {int(eid): (str(h), str(u), str(pci)) for eid, h, u, pci in meta.get("dcgm_of", [])}
        self.parent_of = [int(e) for e in meta["parent_of"]]
        self.refused = int(meta["refused"])
        self.expired = int(meta["expired"])

    def series(self, sid: int) -> tuple[str, dict[str, str]]:
        """Name and labels of a series (decoded from its key: alerts and registration need them, not
        the per-sample path)."""
        name, labels = orjson.loads(self.keys[sid])
        return name, labels

    def entity_id(self, node: str, gpu: int | None) -> int:
        """Entity id of a node or GPU; a GPU's node entity is created with it (the GPU's parent)."""
        key = Entity(node, gpu)
        eid = self.entity_ids.get(key)
        if eid is None:
            parent = self.entity_id(node, None) if gpu is not None else -1
            eid = self.entity_ids[key] = len(self.entities)
            self.entities.append(key)
            self.parent_of.append(parent)
        return eid

    def intern(self, name: str, labels: dict[str, str], alias: Hashable | None = None) -> int:
        """Series id for (name, labels); -1 when the cardinality limit refuses a new series.

        `alias` is how the caller will look this series up next time (`aliases`), by default name
        and labels in the order given: producers keep a series' label order, so sorting and encoding
        the canonical key is paid once per spelling.
        """
        if alias is None:
            alias = (name, tuple(labels.items()))
        sid = self.aliases.get(alias)
        if sid is not None:
            return sid
        key = canonical_key(name, labels)
        sid = self.ids.get(key)
        if sid is None:
            if self.full():
                self.refused += 1
                return -1
            if self.free:
                sid = self.ids[key] = self.free.pop()
                self.keys[sid] = key
            else:
                sid = self.ids[key] = len(self.keys)
                self.keys.append(key)
            self._place(sid, name, labels)
            self.placed.append(sid)
        if len(self.aliases) < 2 * self.max_series:
            self.aliases[alias] = sid
        return sid

    def _place(self, sid: int, name: str, labels: dict[str, str]) -> None:
        node = node_of(labels)
        gpu_label = labels.get("gpu", "")
        gpu = int(gpu_label) if gpu_label.isdecimal() and gpu_label.isascii() and len(gpu_label) < 6 else None
        eid = self.entity_id(node, gpu)
        if gpu is not None:
            self._learn_gpu(eid, node, labels)
        spec = spec_for(name)
        if sid >= len(self.entity_of):
            cap = max(1024, 2 * len(self.entity_of))
            self.entity_of = np.resize(self.entity_of, cap)
            self.family_of = np.resize(self.family_of, cap)
            self.kind_of = np.resize(self.kind_of, cap)
            self.falls_with_load = np.resize(self.falls_with_load, cap)
            self.decisive = np.resize(self.decisive, cap)
            self.last_seen = np.resize(self.last_seen, cap)
        self.last_seen[sid] = -np.inf  # not seen until a sample of it is buffered (`touch`)
        self.entity_of[sid] = eid
        self.family_of[sid] = spec.family if spec else NO_FAMILY
        self.kind_of[sid] = spec.kind if spec else Kind.IGNORED
        self.falls_with_load[sid] = name in FALLS_WITH_LOAD
        self.decisive[sid] = name in DECISIVE_METRICS

    def take_placed(self) -> NDArray[np.int64]:
        """Ids given to new series since the last call (fresh or recycled), for the detectors to learn."""
        out = np.array(self.placed, dtype=np.int64)
        self.placed.clear()
        return out

    def touch(self, ids: NDArray[np.int64], ts: NDArray[np.float64]) -> None:
        """These series were seen at these event times (NaN times: not seen)."""
        ok = (ids >= 0) & np.isfinite(ts)
        if len(ids) and ok.all() and bool((ids[1:] > ids[:-1]).all()):  # distinct: one gather, one write
            at = rows(ids)  # a slice for a run of ids (a scrape in registry order): no gather at all
            if isinstance(at, slice):
                view = self.last_seen[at]
                np.maximum(view, ts, out=view)
            else:
                self.last_seen[at] = np.maximum(self.last_seen[at], ts)
        elif ok.any():
            np.maximum.at(self.last_seen, ids[ok], ts[ok])

    def expiring(self, cutoff: float) -> NDArray[np.int64]:
        """The series last seen before `cutoff` (event time): one comparison over the last-seen column."""
        return np.flatnonzero(self.last_seen[: len(self.keys)] < cutoff).astype(np.int64)

    def expire(self, gone: NDArray[np.int64]) -> None:
        """Drop these series (`expiring`): keys, aliases (purged by one gather over their ids), their
        slot in the limit; their ids go on the free list. The caller resets its own per-id state before
        the next `intern`."""
        if not len(gone):
            return
        n = len(self.keys)
        for sid in gone.tolist():
            del self.ids[self.keys[sid]]
            self.keys[sid] = b""
        if self.aliases:
            dead = np.zeros(n, dtype=bool)
            dead[gone] = True
            sids = np.fromiter(self.aliases.values(), dtype=np.int64, count=len(self.aliases))
            hit = np.flatnonzero(dead[sids])
            if len(hit):
                spellings = list(self.aliases)
                for i in hit.tolist():
                    del self.aliases[spellings[i]]
        self.family_of[gone] = NO_FAMILY
        self.kind_of[gone] = Kind.IGNORED
        self.falls_with_load[gone] = False
        self.decisive[gone] = False
        self.last_seen[gone] = np.inf
        self.free.extend(gone[::-1].tolist())  # the lowest id is given out first
        self.expired += len(gone)

    def _learn_gpu(self, eid: int, node: str, labels: dict[str, str]) -> None:
        """DCGM labels tell which PCI bus id and UUID each (node, gpu index) has."""
        if labels.get("pci_bus_id"):
            self.gpu_by_pci[(node, normalise_pci(labels["pci_bus_id"]))] = eid
        uuid = labels.get("UUID") or labels.get("uuid")
        if uuid:
            self.gpu_by_uuid[uuid.lower()] = eid
        if eid not in self.dcgm_of and (uuid or labels.get("pci_bus_id")):
            self.dcgm_of[eid] = (labels.get("Hostname", ""), uuid or "", labels.get("pci_bus_id", ""))

    def intern_many(self, names: Sequence[str], labels: Sequence[dict[str, str]]) -> NDArray[np.int64]:
        """Series ids for parallel name/label columns (-1 where the cardinality limit refused)."""
        intern = self.intern
        return np.fromiter(map(intern, names, labels), dtype=np.int64, count=len(names))

    def gpu_for_uuid(self, uuid: str) -> int | None:
        return self.gpu_by_uuid.get(uuid.lower())

    def gpu_for_pci(self, node: str, pci: str) -> int | None:
        """The GPU entity with this PCI bus id on this node, once DCGM labels have taught it."""
        return self.gpu_by_pci.get((normalise_host(node), normalise_pci(pci)))

    def family_name(self, sid: int) -> str:
        fam = int(self.family_of[sid])
        return Family(fam).label if fam != NO_FAMILY else "unknown"
