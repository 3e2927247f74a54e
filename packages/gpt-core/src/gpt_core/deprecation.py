"""Names kept working for one release after they were renamed: each warns once per process."""

from __future__ import annotations

import warnings

_warned: set[str] = set()


def warn_once(old: str, new: str) -> None:
    """A DeprecationWarning, the first time in this process only, that `old` is deprecated for `new`."""
    if old in _warned:
        return
    _warned.add(old)
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}", DeprecationWarning, 3)
