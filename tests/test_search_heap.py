"""search/heap.py: the CLI's `plan` keeps freed memory for reuse (#11). Where the C library is
glibc the thresholds are set; elsewhere nothing happens and the call says so. Either way the
plan is the same (where memory comes from changes no arithmetic)."""

from __future__ import annotations

import platform

from gpuplan import api
from gpuplan.search import heap


def test_thresholds_are_set_on_glibc_and_skipped_elsewhere(monkeypatch):
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert heap.keep_freed_memory() is glibc
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert heap.keep_freed_memory() is False


def test_plan_is_the_same_after():
    ask = dict(model="llama3-8b", tokens="1T", gpu=["h100-sxm"], max_gpus=64)
    before = api.plan(**ask)
    heap.keep_freed_memory()
    after = api.plan(**ask)
    assert before.plans == after.plans and before.excluded == after.excluded


def test_free_memory_is_released_on_glibc_and_skipped_elsewhere(monkeypatch):
    """`release_free` (what a forked child of `search/split.py` calls first) trims on glibc,
    where a heap with freed arrays in it has pages to give back, and does nothing elsewhere."""
    import numpy as np

    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    heap.keep_freed_memory()
    arrays = [np.ones(1 << 20) for _ in range(8)]
    del arrays  # 64 MiB freed, kept in the heap
    assert heap.release_free() is glibc
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert heap.release_free() is False
