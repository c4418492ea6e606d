"""Child process of `prexid bench e2e`: peak RSS of one pipeline holding N series (default 1M).

Feeds N distinct DCGM-like series (prometheus-kafka-adapter JSON, through the real decoder) for a
few scrapes, checkpoints it as a replica does (snapshot pieces compressed into chunks), then has a
process of its own take that snapshot over as a replica does (chunks inflated as they are read).
Prints one JSON line: series held, peak RSS (VmHWM) of each process and the snapshot's size.
Run in processes of their own so the figures are the pipeline's alone.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson

from prexid.service.app.settings import Settings
from prexid.service.app.wiring import build
from prexid.service.offline.bench.e2e_load import child_result, peak_rss_mib
from prexid.service.pipeline.processor import Message
from prexid.service.sources.demo_cluster import GPU_ERROR_COUNTERS, GPU_GAUGES
from prexid.service.state import snapshot
from prexid.service.state.changelog_store import Inflate, compressed_chunks

METRICS = (*GPU_GAUGES, *GPU_ERROR_COUNTERS)
BATCH = 100_000


def scrape(n_series: int, ts: float) -> Iterator[list[Message]]:
    """One scrape of every series, a batch at a time (the input never all sits in memory)."""
    stamp = datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for start in range(0, n_series, BATCH):
        batch = []
        for i in range(start, min(start + BATCH, n_series)):
            gpu, metric = divmod(i, len(METRICS))
            payload = (
                f'{{"timestamp":"{stamp}","value":"1.0","name":"{METRICS[metric]}","labels":'
                f'{{"gpu":"{gpu % 8}","UUID":"GPU-{gpu:012d}","Hostname":"node-{gpu // 8:06d}"}}}}'
            )
            batch.append(Message(payload.encode(), ts, "metrics", 0))
        yield batch


def rss_mib() -> float:
    """Resident memory now (the peak also counts scoring temporaries and snapshot serialisation)."""
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(n_series: int, scrapes: int = 2) -> dict[str, float]:
    _, processor = build(Settings())
    t0 = time.perf_counter()
    for k in range(scrapes):
        ts = 1_796_205_600.0 + 15.0 * k
        for batch in scrape(n_series, ts):
            processor.process(batch, [], {"metrics:0"})
    processor.process([], [], set(), drain=True)
    held = rss_mib()
    pieces = snapshot.frames(processor, {})  # checkpointed as a replica does it
    chunks = compressed_chunks(pieces, Settings().snapshot_chunk_bytes)
    size = sum(len(p) for p in pieces)
    result = {
        "series": len(processor.pipeline.registry),
        "rss_mib": held,
        "peak_rss_mib": peak_rss_mib(os.getpid()),
        "snapshot_mib": size / 2**20,
        "compressed_mib": sum(len(c) for c in chunks) / 2**20,
        "seconds": time.perf_counter() - t0,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chunks.pickle"
        path.write_bytes(pickle.dumps(chunks))
        del processor, pieces, chunks
        taken = child_result("prexid.service.offline.bench.series_memory", "restore", str(path), str(size))
    return result | {f"restore_{k}": v for k, v in taken.items()}


def restore(path: Path, size: int) -> dict[str, float]:
    """Take the snapshot in `path` over as a replica does: chunks inflated as the state is read."""
    chunks = pickle.loads(path.read_bytes())  # our own file, written just before
    _, processor = build(Settings())
    t0 = time.perf_counter()
    snapshot.read(Inflate(chunks), size, processor)
    return {
        "series": len(processor.pipeline.registry),
        "rss_mib": rss_mib(),
        "peak_rss_mib": peak_rss_mib(os.getpid()),
        "seconds": time.perf_counter() - t0,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["restore"]:
        print(orjson.dumps(restore(Path(sys.argv[2]), int(sys.argv[3]))).decode())
    else:
        print(orjson.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)).decode())
