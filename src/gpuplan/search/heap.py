"""The C allocator's thresholds for a process that plans once and exits (#11) (L4).

A search allocates and frees arrays of a few hundred KiB to a few MiB many times over. glibc's
malloc serves a block above its mmap threshold (128 KiB at start, raised as such blocks are
freed) with a fresh mapping and unmaps it when freed, and returns the free top of its heap to
the system above its trim threshold; each page taken again costs a page fault (a few
microseconds). In a fresh process (the CLI) a deepseek-v3 search so faults about 140,000
times for a peak of 250 MiB, about a fifth of its CPU time. With fixed, high thresholds freed
blocks are reused: about 60,000 faults, the same peak, 15-20% less CPU, in one process or
split (`split.py`: the parts fork from a process set so). The figures are unchanged (where
memory comes from changes no arithmetic). An effect on the whole process, so only the CLI
asks for it; a long-running server keeps glibc's adaptive thresholds. Nothing happens where
the C library is not glibc (macOS, musl) or the call fails.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc malloc.h)
TRIM_BYTES = 1 << 30  # free heap top kept up to this (the search peaks near 250 MiB)
MMAP_BYTES = 1 << 28  # blocks up to this come from the heap, reused once freed


def _glibc() -> ctypes.CDLL | None:
    """This process's C library when it is glibc (its symbols are the process's), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Set glibc's trim and mmap thresholds (module docstring); True when set."""
    libc = _glibc()
    try:
        return bool(libc is not None and libc.mallopt(M_TRIM_THRESHOLD, TRIM_BYTES)
                    and libc.mallopt(M_MMAP_THRESHOLD, MMAP_BYTES))
    except AttributeError:
        return False


def release_free() -> bool:
    """Return the heap's free memory to the system (glibc's malloc_trim); True when some was."""
    libc = _glibc()
    try:
        return bool(libc is not None and libc.malloc_trim(0))
    except AttributeError:
        return False
