"""Whole-processor snapshots: everything a partition's detection state is, as one versioned blob.

A replica that takes over a partition restores the previous owner's snapshot and resumes from the
offsets stored with it, so it neither warms up from nothing (a storm of false alerts while baselines
relearn) nor forgets alerts that are firing. Layout: magic, format version, then length-prefixed
parts: JSON metadata (registry, lifecycle bookkeeping, active alerts, held Xids, offsets), the
pipeline's named arrays (.npy each), the series keys end to end, and the detector bank's own snapshot.
"""

from __future__ import annotations

import io
from typing import Any

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
from prexid.service.pipeline.processor import Processor

MAGIC = b"PREXIDSNAP"
VERSION = 38  # v2: peer groups, cluster lifecycle, rate limiter, Xid bursts; v3: series keys as bytes;
# v4: fail-slow family (fusion arrays one column wider), peers' last residual, fusion series counts
# v5: fusion remembers recent load evidence, which cells it explained, which tops are error counters;
# error counters keep burst counts and a recent window; v6: arrays as .npy pieces, not npz (written
# straight from the live arrays); v7: nested blobs marked as such (each array read into its own buffer);
# v8: when each firing Xid alert's burst last printed (Xid alerts resolve); v9: the node reliability
# ledger, DCGM's Xid field per GPU; v10: error counters by episode, with fleet fields (their prior);
# v11: series expire: the registry keeps when each series was last seen and the free ids; v12: fusion
# latches decisive events (row remaps) per cell, and the registry knows which series are row-remap fields
# v13: gauges gain the variance-shift and seasonal (time-of-day profile) detectors; v14: counter rates
# remember a repeated reading, error counters' fleet prior keeps the exposure it pooled (its warm-up);
# v15: the family calibration (episodes per level, family and surprise level; pending ones; shifts), and
# fusion keeps the shifts and the hard-error path it applied at the last tick; v16: gauges gain the
# trend detector (smoothed slope of deseasonalised 5-minute means, its noise and slope spread); v17:
# fusion holds error counters' evidence per cell apart (`error_held`, the cluster vote reads it); v18: the
# cooling family (fusion and family-calibration arrays one column wider) and the bank's cooling detector
# (GPU temperatures against their node's other GPUs: batch, usual offset, CUSUM, its tail); v19:
# fail-slow pairs each GPU's work rate with its temperature (entity per watched row, heat per entity)
# and keeps each GPU's usual heat over its peers (gap, last and first learned) and the fleet's hot gap;
# v20: fusion keeps the fresh evidence of each cell's strongest series apart (`fresh_top`); v21: fusion's
# last strong burst per cell, its first tick and its hard-error families' sustained vote (`alone_hard`);
# v22: error counters keep their current episode's least p (`cur_p`: an escalated episode is not learned)
# v23: fail-slow keeps the temperature its fleet's hottest GPUs read (heat throttling at a hot inlet);
# v24: fail-slow pairs each GPU with its work series (power, tensor activity: `work`, per entity)
# v25: fusion's `alone_hard` is no longer saved (every tick takes it again before `confirmed` reads it);
# Xid alerts keep the families each GPU's Xids explain, and when each was last loud (`known_faults`);
# fail-slow keeps since when each GPU's heat has been new (`new_from`: counted once it lasts)
# v26: the error counters' fleet prior keeps each field's fleet key (the prior is
# fitted from every partition's statistics) and refits at fixed event times
# v27: each known fault keeps the event time of the Xid that marked it (`since`: it holds from then on)
# v28: the error counters' fleet prior keeps each field's errors a burst (`errors_per_burst`), not an episode
# v29: fail-slow's pace keeps each GPU's run of scrapes behind (`run_bursts`, `run_errors`, `run_start`,
# `run_held`: those that did less work than the peers)
# v30: the cooling detector keeps each temperature's last standardised batch mean and the lag-1 moments of
# its means (`prev`, `cxy`, `cxx`: their node's memory scales the CUSUM's z-scores)
# v31: fail-slow keeps its fleet's clock curve by degree and the throttle onset learned from it, not the
# temperature its hottest GPUs read
# v32: fusion times cluster-wide storage rises against the job's phase changes (`job_io_*`: the rise under
# way and the job's last bursts)
# v33: the peer detector keeps each series' peers' usual spread (`spread`); fail-slow its fleet's busy clock
# v34: the drift detector counts the means its reference has averaged since it was set (`refs`), not the
# last batch's time
# v35: the level detector keeps how often an exceedance follows another (`stick`: runs of them); flatline
# derives its decayed step count from its sample count (`seen` dropped)
# v36: the alert lifecycle keeps when each firing entity's score fell under resolve (`quiet_from`: an alert
# is kept firing for `keep_firing_for_s` after)
# v37: the level detector's `stick` is kept by its calibrator (`runs.RunCalibrator`), beside the run it
# judges; the seasonal detector's calibrator keeps one too, and whether its profile explains a series is
# derived (`explained` dropped)
# v38: the trend detector holds a mean that jumped off its forecast (`held`) until the next confirms a step


class SnapshotError(ValueError):
    """The blob is not a snapshot this build can restore (corrupt, other version, other config)."""


def dump(processor: Processor, offsets: dict[str, int]) -> bytes:
    """Snapshot `processor` (its pipeline and held Xids); `offsets` are the next offsets it covers."""
    return b"".join(frames(processor, offsets))


def frames(processor: Processor, offsets: dict[str, int]) -> Pieces:
    """`dump` in pieces, for a writer that compresses them one by one. The detectors' arrays come as
    views, not copies (800 MB at 1M series): write them before the processor takes another batch."""
    p = processor.pipeline
    state, arrays = p.snapshot()
    meta = {
        "config": repr(p.config),
        "offsets": offsets,
        **state,
        **processor.snapshot_meta(),
    }
    keys: Pieces = list(p.registry.keys)  # each series' key a piece of its own: joined, 90 MB at 1M
    parts = pack_blobs(orjson.dumps(meta), pack_arrays(arrays), keys, p.bank.snapshot())
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
    processor.pipeline.restore(meta, unpack_arrays(arrays), memoryview(leaf(keys)), bank)
    processor.restore_meta(meta)
