"""Input checks for the inference procedures.

Every public entry point validates all of its inputs with these helpers *before* touching
any state, so a rejected call leaves the object bit-identical.  Each helper raises
:class:`ValueError` naming the argument and showing the offending value (and, in batched
mode, the first offending trial).  The common valid case costs a few vectorised numpy
calls; the precise search for the culprit runs only once something is known to be wrong.

Arrays are returned in the internal *batched* layout: a leading trial axis of length ``B``
(``B = 1`` for the unbatched API).
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "PROPENSITY_TOL",
    "check_actions",
    "check_arm",
    "check_batch_vector",
    "check_choice",
    "check_confidence_level",
    "check_factors",
    "check_finite",
    "check_flags",
    "check_matrix_stack",
    "check_n_trials",
    "check_positive_int",
    "check_propensities",
    "check_target_name",
    "check_targets",
]

#: Absolute tolerance on ``sum_a pi(a) = 1``.
PROPENSITY_TOL = 1e-6


def _where(index: tuple[int, ...], batched: bool) -> str:
    if not index:
        return ""
    if batched:
        rest = index[1:]
        return f" (trial {index[0]}" + (f", index {rest})" if rest else ")")
    return f" at index {index}"


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an ``int >= minimum`` (booleans and floats are rejected)."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    try:
        ivalue = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if ivalue < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {ivalue!r}")
    return int(ivalue)


def check_n_trials(n_trials: Any) -> int | None:
    """``None`` (unbatched) or a positive int."""
    if n_trials is None:
        return None
    return check_positive_int(n_trials, "n_trials")


def check_choice(value: Any, name: str, choices: Collection[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {value!r}")
    return value


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
    if isinstance(arm, bool | np.bool_):
        raise ValueError(f"{name} must be an integer in [0, {n_actions}), got {arm!r}")
    try:
        a = operator.index(arm)
    except TypeError:
        raise ValueError(f"{name} must be an integer in [0, {n_actions}), got {arm!r}") from None
    if not 0 <= a < n_actions:
        raise ValueError(f"{name} must be an integer in [0, {n_actions}), got {a!r}")
    return int(a)


def check_finite(arr: np.ndarray, name: str, *, batched: bool = False) -> None:
    """Raise if ``arr`` holds a NaN or an infinity, naming the first one found."""
    # One reduction answers the common case: a finite sum implies finite entries.
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.add.reduce(arr, axis=None))
    if math.isfinite(total):
        return
    bad = ~np.isfinite(arr)
    if not bad.any():  # the sum overflowed on finite entries: accept them
        return
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f"{name} must be finite, got {arr[index]!r}{_where(index, batched)}")


def _as_float_array(value: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be a real array, got {type(value).__name__}: {exc}"
        ) from None


def check_matrix_stack(
    value: Any, shape: tuple[int, ...], n_trials: int | None, name: str
) -> np.ndarray:
    """Return a finite float64 array of shape ``(B, *shape)``.

    Unbatched (``n_trials=None``) the input must have shape ``shape``; batched, it must have
    shape ``(n_trials, *shape)``.
    """
    arr = _as_float_array(value, name)
    expected = shape if n_trials is None else (n_trials, *shape)
    if arr.shape != expected:
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    check_finite(arr, name, batched=n_trials is not None)
    return arr.reshape((1, *shape)) if n_trials is None else arr


def check_factors(
    U: Any, V: Any, n_actions: int, d1: int, d2: int, rank: int, n_trials: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Return the factor stacks ``U (B, K, d1, r)``, ``V (B, K, d2, r)``."""
    Ub = check_matrix_stack(U, (n_actions, d1, rank), n_trials, "U")
    Vb = check_matrix_stack(V, (n_actions, d2, rank), n_trials, "V")
    return Ub, Vb


def check_batch_vector(value: Any, n_trials: int | None, name: str) -> np.ndarray:
    """Return one finite real per trial as float64 of shape ``(B,)``.

    Unbatched: a scalar.  Batched: an array of shape ``(n_trials,)``.
    """
    if n_trials is None:
        if np.ndim(value) != 0:
            raise ValueError(f"{name} must be a scalar, got shape {np.shape(value)}")
        if isinstance(value, bool | np.bool_):
            raise ValueError(f"{name} must be a finite real number, got {value!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a finite real number, got {value!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v!r}")
        return np.array([v])
    arr = _as_float_array(value, name)
    if arr.shape != (n_trials,):
        raise ValueError(f"{name} must have shape ({n_trials},), got shape {arr.shape}")
    check_finite(arr, name, batched=True)
    return arr


def check_actions(
    action: Any, n_actions: int, n_trials: int | None, name: str = "action"
) -> np.ndarray:
    """Return the action(s) as int64 of shape ``(B,)`` with values in ``[0, n_actions)``.

    An action is an index: floats (even integral ones) and booleans are rejected.
    """
    if n_trials is None:
        if isinstance(action, bool | np.bool_):
            raise ValueError(f"{name} must be an integer in [0, {n_actions}), got {action!r}")
        try:
            a = operator.index(action)
        except TypeError:
            arr = action if isinstance(action, np.ndarray) else None
            if arr is not None and arr.shape == () and arr.dtype.kind in "iu":
                a = int(arr)
            else:
                raise ValueError(
                    f"{name} must be an integer in [0, {n_actions}), got {action!r}"
                ) from None
        if not 0 <= a < n_actions:
            raise ValueError(f"{name} must be an integer in [0, {n_actions}), got {a!r}")
        return np.array([a], dtype=np.int64)
    arr = np.asarray(action)
    if arr.shape != (n_trials,):
        raise ValueError(f"{name} must have shape ({n_trials},), got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(
            f"{name} must be an integer array with values in [0, {n_actions}), "
            f"got dtype {arr.dtype}"
        )
    bad = (arr < 0) | (arr >= n_actions)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must be in [0, {n_actions}), got {arr[i]!r} (trial {i})")
    return arr.astype(np.int64, copy=False)


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


def check_propensities(
    p: Any,
    action: np.ndarray | None,
    n_actions: int,
    n_trials: int | None,
    name: str = "propensities",
    *,
    require_chosen_positive: bool = True,
) -> np.ndarray:
    """Return propensities as float64 of shape ``(B, K)`` after checking them.

    Checks: shape ``(K,)`` (unbatched) or ``(B, K)``; entries finite and ``>= 0``; each row
    sums to 1 within :data:`PROPENSITY_TOL`; and, with ``require_chosen_positive``, the
    chosen arm has ``pi > 0`` (the weight ``1/pi(a_t)`` must exist).
    """
    batched = n_trials is not None
    arr = _as_float_array(p, name)
    expected = (n_actions,) if not batched else (n_trials, n_actions)
    if arr.shape != expected:
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    rows = arr.reshape(-1, n_actions)
    check_finite(rows if batched else arr, name, batched=batched)
    totals = rows.sum(axis=1)
    bad_sum = np.abs(totals - 1.0) > PROPENSITY_TOL
    bad_neg = rows.min(axis=1) < 0
    if bad_sum.any() or bad_neg.any():
        i = int(np.argmax(bad_sum | bad_neg))
        where = f" (trial {i})" if batched else ""
        if bad_neg[i]:
            raise ValueError(f"{name} must be >= 0, got {rows[i].tolist()}{where}")
        raise ValueError(
            f"{name} must sum to 1 (tol {PROPENSITY_TOL:g}), got sum {totals[i]!r} "
            f"for {rows[i].tolist()}{where}"
        )
    if require_chosen_positive and action is not None:
        chosen = rows[np.arange(rows.shape[0]), action]
        zero = chosen <= 0
        if zero.any():
            i = int(np.argmax(zero))
            where = f" (trial {i})" if batched else ""
            raise ValueError(
                f"{name}[action] must be > 0 (the inverse-propensity weight 1/pi is used), "
                f"got {name}[{int(action[i])}] = {chosen[i]!r}{where}"
            )
    return rows


def check_targets(
    targets: Mapping[str, Any] | Iterable[tuple[str, Any]], d1: int, d2: int
) -> tuple[tuple[str, ...], np.ndarray]:
    """Return ``(names, stack)`` with ``stack`` of shape ``(n_targets, d1, d2)``.

    ``targets`` maps names to ``(d1, d2)`` matrices ``T``; an iterable of ``(name, T)``
    pairs is accepted too, and a repeated name is then an error.
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
        check_finite(arr, f"targets[{name!r}]")
        names.append(name)
        mats.append(arr)
    return tuple(names), np.stack(mats)


def check_target_name(target: Any, names: tuple[str, ...]) -> int:
    """Return the position of ``target`` among ``names``."""
    if isinstance(target, str) and target in names:
        return names.index(target)
    known = ", ".join(repr(n) for n in names)
    raise ValueError(f"target must be one of {known}; got {target!r}")
