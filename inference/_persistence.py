"""Validation of a persisted state against an inference object's own :meth:`state_dict`.

Each check raises :class:`ValueError` naming the offending key, before anything is
assigned, so that a rejected ``load_state_dict`` leaves the object unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["check_config", "check_count", "copy_arrays"]


def check_config(state: Mapping[str, Any], mine: Mapping[str, Any], keys: Iterable[str]) -> None:
    """Raise unless ``state`` has every key of ``mine`` and agrees on the ``keys``."""
    missing = [k for k in mine if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    for key in keys:
        theirs = list(state[key]) if isinstance(mine[key], list) else state[key]
        if theirs != mine[key]:
            raise ValueError(
                f"state[{key!r}] = {state[key]!r} does not match this object's "
                f"{key} = {mine[key]!r}"
            )


def copy_arrays(
    state: Mapping[str, Any], mine: Mapping[str, Any], keys: Iterable[str]
) -> dict[str, np.ndarray]:
    """Copies of ``state[key]``, each finite with the shape and dtype of ``mine[key]``."""
    new = {}
    for key in keys:
        arr = np.asarray(state[key])
        if arr.shape != mine[key].shape or arr.dtype != mine[key].dtype:
            raise ValueError(
                f"state[{key!r}] must be a {mine[key].dtype} array of shape "
                f"{mine[key].shape}, got {arr.dtype} array of shape {arr.shape}"
            )
        if not np.isfinite(arr).all():
            raise ValueError(f"state[{key!r}] must be finite")
        new[key] = arr.copy()
    return new


def check_count(value: Any, key: str) -> int:
    """``state[key]`` as a non-negative ``int``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"state[{key!r}] must be a non-negative integer, got {value!r}")
    return int(value)
