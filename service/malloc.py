"""Keep numpy's large temporaries on the heap instead of fresh mmap pages each time.

Every vectorised step over a 100k-series batch allocates and frees arrays of ~800 KB. glibc serves
those with mmap/munmap, so each one costs page faults on first touch — measured at 3x the arithmetic
itself. Raising the mmap and trim thresholds (what MALLOC_MMAP_THRESHOLD_ does in the environment)
lets freed blocks be reused (32 MiB is glibc's ceiling for the mmap threshold). A no-op where the C
library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

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
