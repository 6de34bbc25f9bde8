"""Whether a request for memory fits this machine, asked before anything is allocated."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["check_memory", "physical_memory"]


def physical_memory() -> int | None:
    """Bytes of memory of this machine (``os.sysconf``), or None where it is not known."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(nbytes: int, name: str, value: Any, what: str) -> None:
    """Refuse, before allocating, a request of ``nbytes`` bytes (``what``, sized by the
    argument ``name`` = ``value``) that exceeds this machine's memory: the allocation
    would end in ``MemoryError`` (or numpy's "array is too big") after state changed."""
    memory = physical_memory()
    if memory is not None and nbytes > memory:
        raise ValueError(
            f"{name} = {value!r} asks for {what} of {nbytes:.3g} bytes, more than this "
            f"machine's memory ({memory:.3g} bytes)"
        )
