"""Process tuning for throughput: how memory is allocated and how often garbage is looked for.

Heap: every vectorised step over a 100k-series batch allocates and frees arrays of ~800 KB. glibc serves
those with mmap/munmap, so each one costs page faults on first touch — measured at 3x the arithmetic
itself. Raising the mmap and trim thresholds (what MALLOC_MMAP_THRESHOLD_ does in the environment)
lets freed blocks be reused (32 MiB is glibc's ceiling for the mmap threshold). A no-op where the C
library is not glibc.

Garbage collector: a fetched batch is ~10,000 `ConsumerRecord`s alive at once. Python's collector runs
each 700 net allocations and promotes survivors, so every batch set off dozens of collections and the
older generations were walked again and again: 9% of a replica's CPU in `prexid bench e2e` (timed with
gc.callbacks), 0.5% at 50,000. Cycles are rare here (records and arrays are freed by reference
counting), so looking for them less often costs little memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_large_blocks_on_heap(threshold: int = 32 << 20) -> bool:
    """Tune glibc malloc for large, short-lived numpy arrays; True if it was applied."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, threshold) and mallopt(_M_TRIM_THRESHOLD, 2 * threshold)
    return bool(ok and mallopt(_M_TOP_PAD, 64 << 20))


def collect_garbage_less_often(threshold: int = 50_000) -> None:
    """Run the youngest collection every `threshold` net allocations instead of every 700."""
    gc.set_threshold(threshold, *gc.get_threshold()[1:])
