"""Keeping the memory a training step frees for the next one under glibc (Linux): above 128 KiB glibc returns
freed memory to the kernel, and each step page-faults it back in. The bits trained are the same; a user's own
glibc settings win."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers, from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 1 << 30  # free memory the heap may hold at its top before giving any back
MMAP_THRESHOLD = 32 << 20  # the largest block glibc lets the heap serve (DEFAULT_MMAP_THRESHOLD_MAX)
GLIBC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
TUNABLES = "GLIBC_TUNABLES"
MALLOC_TUNABLES = ("glibc.malloc.trim_threshold", "glibc.malloc.mmap_threshold", "glibc.malloc.top_pad")


def _on_glibc() -> bool:
    try:
        return sys.platform == "linux" and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # no such name here, or another C library
        return False


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds (unless off glibc or set by the user); True when they were set."""
    if not _on_glibc() or user_set_thresholds(os.environ):
        return False
    libc = ctypes.CDLL(None)  # the process's own C library, already loaded
    trim_set = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    mmap_set = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return trim_set and mmap_set


def user_set_thresholds(environment: Mapping[str, str]) -> bool:
    """Whether `environment` sets glibc's heap thresholds (GLIBC_VARIABLES, or MALLOC_TUNABLES in GLIBC_TUNABLES)."""
    if any(name in environment for name in GLIBC_VARIABLES):
        return True
    named = {entry.partition("=")[0].strip() for entry in environment.get(TUNABLES, "").split(":")}
    return not named.isdisjoint(MALLOC_TUNABLES)
