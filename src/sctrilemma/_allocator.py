"""Keep freed CPU memory for reuse instead of returning it to the OS after every training step.

Training allocates and frees the same large activation buffers at every step. glibc serves blocks
above its mmap threshold with fresh ``mmap`` calls and unmaps them on ``free``, so every step pays
page faults for memory it just released. Raising the mmap and trim thresholds makes glibc keep such
blocks for reuse: a small-preset step on the example data ran 2.2x faster (``benchmarks/allocator.py``).
Only training does this. Inference leaves glibc alone: with the raised thresholds the heap kept growing
with the number of embedded batches (buffers of varying sizes; ``benchmarks/out_of_core_memory.py``),
which defeats embedding data larger than memory; the price is slower embedding (1.5x for the shipped
small reference in ``benchmarks/allocator.py``). Set ``SCTRILEMMA_TUNE_MALLOC=0`` to leave the
allocator alone in training too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 30
_TRIM_THRESHOLD = (1 << 31) - 1
_state = {"done": False}


def retain_freed_memory() -> bool:
    """Raise glibc's mmap/trim thresholds once per process (Linux only); returns whether it applied."""
    if _state["done"]:
        return True
    if not sys.platform.startswith("linux") or os.environ.get("SCTRILEMMA_TUNE_MALLOC", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
        )
    except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to tune
        return False
    _state["done"] = applied
    if applied:
        logger.info("Raised glibc's mmap/trim thresholds so freed activation memory is reused.")
    return applied
