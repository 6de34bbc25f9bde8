"""Process-wide pool of warm-start buffer storage.

A Monte Carlo study's workers run one warm start per chunk of trials, each with a
:class:`~agents.warm_start.dense.WarmStartBuffer` of the same shape.  Such a buffer is
large (``B * length * d1 * d2`` contexts), and fresh memory costs time: the kernel zeroes
every page on first touch.  With the pool switched on, a released buffer's storage goes to
the next buffer of the same shape and dtype instead of back to the allocator.  It is off by
default, so that elsewhere an agent does not hold the memory after its warm start.
"""

from __future__ import annotations

import numpy as np

__all__ = ["reuse_buffer_memory"]

# Storage of released buffers, kept for the next buffer of the same shape and dtype
# (see reuse_buffer_memory); None: the pool is off and released storage is freed.
_SPARE_STORAGE: list[np.ndarray] | None = None


def reuse_buffer_memory(enabled: bool = True) -> bool:
    """Keep the storage of released :class:`~agents.warm_start.dense.WarmStartBuffer` s for
    the next buffer of the same shape (``True``) or free it (``False``, the default); returns
    the previous setting.

    A Monte Carlo study's workers switch this on for their lifetime: they run one warm start
    per chunk of trials, and reusing a buffer's storage costs nothing while touching as much
    fresh memory costs the kernel's zeroing of every page.  Elsewhere an agent does not hold
    the memory after its warm start.  Switching it off frees the kept storage.
    """
    global _SPARE_STORAGE
    previous = _SPARE_STORAGE is not None
    if bool(enabled) != previous:
        _SPARE_STORAGE = [] if enabled else None
    return previous


def take_spare(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Kept storage of this shape and dtype if the pool has one, else a new uninitialised
    array (``np.empty``: its pages are only touched as rounds arrive)."""
    if _SPARE_STORAGE:
        for i, arr in enumerate(_SPARE_STORAGE):
            if arr.shape == shape and arr.dtype == dtype:
                return _SPARE_STORAGE.pop(i)
    return np.empty(shape, dtype=dtype)


def give_spare(storage: np.ndarray) -> None:
    """Keep released ``storage`` for a later :func:`take_spare` while the pool is on;
    otherwise drop it (it is freed as soon as no view of it is alive)."""
    if _SPARE_STORAGE is not None and storage.size:
        _SPARE_STORAGE.append(storage)
