"""Input checks of the inference cores: trial counts, arms, confidence levels, stacks of
matrices and factors, per-trial vectors and flags, targets and their names.

Like :mod:`lrbandit_gym.input_checks`, which they build on, each raises
:class:`ValueError` naming the argument and the value before any state changes; arrays come
back in the batched layout (a leading trial axis).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from lrbandit_gym.input_checks import (
    check_integer,
    check_magnitude,
    check_positive_int,
    check_real,
    check_scalar_magnitude,
)

__all__ = [
    "check_arm",
    "check_batch_vector",
    "check_confidence_level",
    "check_factors",
    "check_flags",
    "check_matrix_stack",
    "check_n_trials",
    "check_target_name",
    "check_targets",
]


def check_n_trials(n_trials: Any) -> int | None:
    """``None`` (unbatched) or a positive int."""
    if n_trials is None:
        return None
    return check_positive_int(n_trials, "n_trials")


def check_confidence_level(confidence_level: Any) -> float:
    """Return the confidence level as a float strictly inside ``(0, 1)``."""
    if isinstance(confidence_level, bool | np.bool_) or not isinstance(
        confidence_level, numbers.Real
    ):
        raise ValueError(
            f"confidence_level must be a real number in (0, 1), got {confidence_level!r}"
        )
    level = float(confidence_level)
    if not (math.isfinite(level) and 0.0 < level < 1.0):
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    return level


def check_arm(arm: Any, n_actions: int, name: str = "arm") -> int:
    """Return an arm index in ``[0, n_actions)``."""
    a = check_integer(arm, f"{name} must be an integer in [0, {n_actions}), got {arm!r}")
    if not 0 <= a < n_actions:
        raise ValueError(f"{name} must be an integer in [0, {n_actions}), got {a!r}")
    return int(a)


def _as_float_array(value: Any, name: str) -> np.ndarray:
    check_real(value, name)
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be a real array, got {type(value).__name__}: {exc}"
        ) from None


def check_matrix_stack(
    value: Any, shape: tuple[int, ...], n_trials: int | None, name: str
) -> np.ndarray:
    """Return a finite float64 array of shape ``(B, *shape)``, entries of magnitude at most
    :data:`MAX_MAGNITUDE`.

    Unbatched (``n_trials=None``) the input must have shape ``shape``; batched, it must have
    shape ``(n_trials, *shape)``.
    """
    arr = _as_float_array(value, name)
    expected = shape if n_trials is None else (n_trials, *shape)
    if arr.shape != expected:
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    check_magnitude(arr, name, batched=n_trials is not None)
    return arr.reshape((1, *shape)) if n_trials is None else arr


def check_factors(
    U: Any, V: Any, n_actions: int, d1: int, d2: int, rank: int, n_trials: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Return the factor stacks ``U (B, K, d1, r)``, ``V (B, K, d2, r)``."""
    Ub = check_matrix_stack(U, (n_actions, d1, rank), n_trials, "U")
    Vb = check_matrix_stack(V, (n_actions, d2, rank), n_trials, "V")
    return Ub, Vb


def check_batch_vector(value: Any, n_trials: int | None, name: str) -> np.ndarray:
    """Return one finite real per trial (magnitude at most :data:`MAX_MAGNITUDE`) as
    float64 of shape ``(B,)``.

    Unbatched: a scalar.  Batched: an array of shape ``(n_trials,)``.
    """
    if n_trials is None:
        if np.ndim(value) != 0:
            raise ValueError(f"{name} must be a scalar, got shape {np.shape(value)}")
        if isinstance(value, bool | np.bool_ | str | bytes) or np.iscomplexobj(value):
            raise ValueError(f"{name} must be a finite real number, got {value!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a finite real number, got {value!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v!r}")
        check_scalar_magnitude(v, name)
        return np.array([v])
    arr = _as_float_array(value, name)
    if arr.shape != (n_trials,):
        raise ValueError(f"{name} must have shape ({n_trials},), got shape {arr.shape}")
    check_magnitude(arr, name, batched=True)
    return arr


def check_flags(value: Any, n_trials: int | None, name: str) -> np.ndarray:
    """Return boolean flag(s) as a bool array of shape ``(B,)``.

    Accepts Python/numpy booleans (and arrays of them) or 0/1 integers.
    """
    arr = np.asarray(value)
    expected = () if n_trials is None else (n_trials,)
    if arr.shape != expected:
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    if arr.dtype.kind == "b":
        return arr.reshape(-1).astype(bool, copy=False)
    if arr.dtype.kind in "iu" and np.all((arr == 0) | (arr == 1)):
        return arr.reshape(-1).astype(bool)
    raise ValueError(f"{name} must be boolean (True/False or 0/1), got {value!r}")


def check_targets(
    targets: Mapping[str, Any] | Iterable[tuple[str, Any]], d1: int, d2: int
) -> tuple[tuple[str, ...], np.ndarray]:
    """Return ``(names, stack)`` with ``stack`` of shape ``(n_targets, d1, d2)``.

    ``targets`` maps names to ``(d1, d2)`` matrices ``T``; an iterable of ``(name, T)``
    pairs is accepted too, and a repeated name is then an error.  Every ``T`` must be finite
    with entries of magnitude at most :data:`MAX_MAGNITUDE` (:func:`check_magnitude`) and
    not all zero (``<M_a, 0> = 0`` has no variance to estimate: its interval would be NaN
    at every round).
    """
    if isinstance(targets, Mapping):
        items = list(targets.items())
    elif isinstance(targets, str | bytes | np.ndarray) or not isinstance(targets, Iterable):
        raise ValueError(
            f"targets must be a mapping from names to ({d1}, {d2}) matrices, got "
            f"{type(targets).__name__}"
        )
    else:
        items = []
        for item in targets:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise ValueError(f"targets must hold (name, matrix) pairs, got {item!r}")
            items.append(item)
    if not items:
        raise ValueError("targets must name at least one matrix T, got an empty collection")
    names: list[str] = []
    mats: list[np.ndarray] = []
    for name, T in items:
        if not isinstance(name, str) or not name:
            raise ValueError(f"target names must be non-empty strings, got {name!r}")
        if name in names:
            raise ValueError(f"duplicate target name {name!r}")
        arr = _as_float_array(T, f"targets[{name!r}]")
        if arr.shape != (d1, d2):
            raise ValueError(
                f"targets[{name!r}] must have shape ({d1}, {d2}), got shape {arr.shape}"
            )
        check_magnitude(arr, f"targets[{name!r}]")
        if not arr.any():
            raise ValueError(
                f"targets[{name!r}] is all zero: <M_a, T> = 0 for every arm whatever the data, "
                "so there is nothing to estimate (its variance is 0 and its interval would stay "
                "NaN); drop it or give a non-zero T"
            )
        names.append(name)
        mats.append(arr)
    return tuple(names), np.stack(mats)


def check_target_name(target: Any, names: tuple[str, ...]) -> int:
    """Return the position of ``target`` among ``names``."""
    if isinstance(target, str) and target in names:
        return names.index(target)
    known = ", ".join(repr(n) for n in names)
    raise ValueError(f"target must be one of {known}; got {target!r}")
