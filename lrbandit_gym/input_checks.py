"""Input checks shared by the environment's users: the estimators, the policies and the
inference procedures.

Every public entry point validates its inputs with these helpers *before* it changes any
state, so that a rejected call leaves the object bit-identical.  Each helper raises
:class:`ValueError` with a message that names the argument and shows the offending value;
in batched mode (``n_trials`` given) the message also names the first offending trial.
Arrays come back in the internal *batched* layout: a leading trial axis of length ``B``
(``B = 1`` for the unbatched API).

The helpers are written for the per-round hot path: the common case (valid input) costs a
handful of vectorised numpy calls and the slow, precise search for the culprit runs only
once a problem is known to exist.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Collection
from typing import Any

import numpy as np

__all__ = [
    "MAX_MAGNITUDE",
    "MIN_PROPENSITY",
    "PROPENSITY_TOL",
    "check_actions",
    "check_choice",
    "check_context",
    "check_context_fingerprint",
    "check_finite",
    "check_integer",
    "check_magnitude",
    "check_positive_float",
    "check_positive_int",
    "check_propensities",
    "check_real",
    "check_scalar_magnitude",
    "check_rewards",
    "check_weights",
]

#: Absolute tolerance on ``sum_a pi(a) = 1``.
PROPENSITY_TOL = 1e-6

#: Smallest propensity of the chosen arm accepted where it is a weight ``1/pi`` (known
#: propensities): below it one round would weigh more than 10**6 ordinary ones and dominate
#: every estimate and variance.  A policy that reports less must explore more.
MIN_PROPENSITY = 1e-6


#: Largest magnitude accepted for a value that enters an estimate or a running sum (a
#: reward, a context, factor, target or M_init entry, a prediction).  Its square, about
#: 1e300, is still a float64, so one round's squared residual or squared weight cannot
#: overflow into an infinity that would turn every later interval into NaN; any realistic
#: data is hundreds of orders of magnitude below it.
MAX_MAGNITUDE = 1e150


def _too_small(name: str, a: int, value: float, where: str = "") -> ValueError:
    return ValueError(
        f"{name}[action] must be >= MIN_PROPENSITY = {MIN_PROPENSITY:g} (known propensities "
        f"weight each round by 1/pi), got {name}[{a}] = {value!r}{where}: the policy must "
        "explore more (e.g. a larger epsilon or temperature)"
    )


def _where(index: tuple[int, ...], batched: bool) -> str:
    """Describe the position of a bad entry: ``' (trial 3)'`` or ``' at index (2, 5)'``."""
    if not index:
        return ""
    if batched:
        rest = index[1:]
        tail = f", index {rest}" if rest else ""
        return f" (trial {index[0]}{tail})"
    return f" at index {index}"


def check_integer(value: Any, message: str) -> int:
    """``operator.index(value)``; ``ValueError(message)`` for a non-integer or a boolean."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(message)
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(message) from None


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an ``int`` after checking it is an integer ``>= minimum``.

    Booleans are rejected (``True`` is an ``int`` in Python but never a size).
    """
    ivalue = check_integer(value, f"{name} must be an integer >= {minimum}, got {value!r}")
    if ivalue < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {ivalue!r}")
    return int(ivalue)


def check_positive_float(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite ``float`` ``> 0`` (``>= 0`` with ``allow_zero``)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive real number, got {value!r}")
    fvalue = float(value)
    if not math.isfinite(fvalue) or fvalue < 0 or (fvalue == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite real number {bound}, got {value!r}")
    return fvalue


def check_choice(value: Any, name: str, choices: Collection[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {value!r}")
    return value


def check_finite(arr: np.ndarray, name: str, *, batched: bool = False) -> None:
    """Raise if ``arr`` holds a NaN or an infinity, naming the first one found.

    Parameters
    ----------
    arr : ndarray
        A floating array (already converted).
    name : str
        The argument name used in the message.
    batched : bool, default False
        If True the leading axis indexes trials and the message names the trial.
    """
    if arr.dtype.kind in "biu":
        return
    # One pass and no temporary: a NaN or an infinity makes the sum non-finite.  Only then
    # (or when finite entries overflow the sum) is the offending entry looked for.
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(arr)):
            return
    finite = np.isfinite(arr)
    if finite.all():
        return
    bad = ~finite
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    value = arr[index]
    raise ValueError(f"{name} must be finite, got {value!r}{_where(index, batched)}")


def check_magnitude(arr: np.ndarray, name: str, *, batched: bool = False) -> None:
    """Raise unless every entry of ``arr`` is finite with magnitude at most
    :data:`MAX_MAGNITUDE`, naming the first offending entry (and trial, ``batched``).

    Two reductions (``max`` and ``min``, no temporary array) when the array is valid; a NaN
    makes both comparisons fail, so non-finite entries are caught too.
    """
    if arr.size == 0 or arr.dtype.kind in "biu":
        return
    if arr.max() <= MAX_MAGNITUDE and arr.min() >= -MAX_MAGNITUDE:
        return
    check_finite(arr, name, batched=batched)
    big = np.abs(arr) > MAX_MAGNITUDE
    index = tuple(int(i) for i in np.argwhere(big)[0])
    raise ValueError(
        f"{name} must have entries of magnitude <= MAX_MAGNITUDE = {MAX_MAGNITUDE:g} (their "
        f"squares must stay finite in float64), got {arr[index]!r}{_where(index, batched)}: "
        "rescale the data to order 1"
    )


def check_scalar_magnitude(value: float, name: str) -> None:
    """:func:`check_magnitude` for one finite Python float."""
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError(
            f"{name} must have magnitude <= MAX_MAGNITUDE = {MAX_MAGNITUDE:g} (its square "
            f"must stay finite in float64), got {value!r}: rescale the data to order 1"
        )


def check_context(
    X: Any, d1: int, d2: int, n_trials: int | None = None, name: str = "X", *, bounded=False
) -> np.ndarray:
    """Return the context(s) as a float64 array of shape ``(d1, d2)`` or ``(B, d1, d2)``.

    Entries must be finite; with ``bounded`` (the paths that store or sum contexts, such as
    the warm-start buffers) also of magnitude at most :data:`MAX_MAGNITUDE`.  Acting on a
    huge context changes nothing, so ``act`` and ``predict`` leave it to their own checks.

    Parameters
    ----------
    X : array_like
        One context matrix (``n_trials=None``) or a stack of ``n_trials`` of them.
    d1, d2 : int
        Expected matrix shape.
    n_trials : int or None
        Batch size ``B``; None for the unbatched API.
    name : str
        Argument name used in error messages.
    bounded : bool, default False
        Whether entries beyond :data:`MAX_MAGNITUDE` are refused.
    """
    arr = _context_array(X, d1, d2, n_trials, name)
    if bounded:
        check_magnitude(arr, name, batched=n_trials is not None)
    else:
        check_finite(arr, name, batched=n_trials is not None)
    return arr


def check_context_fingerprint(
    X: Any, d1: int, d2: int, n_trials: int | None, weights: np.ndarray, name: str = "X"
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_context` that also returns each context's fingerprint ``<X, W>``.

    ``weights`` (``d1 * d2`` entries, all in ``[1, 2)``) are fixed; the fingerprint, one
    matrix-vector product, is both the finiteness test (a NaN or an infinity anywhere makes
    it non-finite, since no weight is zero; only then, or when finite entries overflow it,
    are the entries themselves examined) and a key that tells a context from another (the
    estimator's product cache uses it).  One pass over the data instead of two.

    Returns
    -------
    arr : ndarray of shape (d1, d2) or (B, d1, d2)
    fingerprint : ndarray of shape (1,) or (B,)
    """
    arr = _context_array(X, d1, d2, n_trials, name)
    with np.errstate(over="ignore", invalid="ignore"):  # bad entries are reported below
        fingerprint = arr.reshape(-1, d1 * d2) @ weights
    if not np.isfinite(fingerprint).all():
        check_finite(arr, name, batched=n_trials is not None)
    return arr, fingerprint


def _context_array(X: Any, d1: int, d2: int, n_trials: int | None, name: str) -> np.ndarray:
    check_real(X, name)
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real array, got {type(X).__name__}: {exc}") from None
    expected = (d1, d2) if n_trials is None else (n_trials, d1, d2)
    if arr.shape != expected:
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    return arr


def check_actions(
    action: Any, n_actions: int, n_trials: int | None = None, name: str = "action"
) -> np.ndarray:
    """Return the action(s) as an int64 array of shape ``(1,)`` or ``(B,)``.

    The unbatched form (``n_trials=None``) takes one Python or numpy integer; the batched
    form an integer array of shape ``(B,)``.  Floats (even integral ones) and booleans are
    rejected: an action is an index.
    """
    if n_trials is None:
        if isinstance(action, bool | np.bool_):
            raise ValueError(f"{name} must be an integer in [0, {n_actions}), got {action!r}")
        try:
            a = operator.index(action)
        except TypeError:
            arr = np.asarray(action) if isinstance(action, np.ndarray) else None
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
            f"got dtype {arr.dtype} (first value {arr.flat[0]!r})"
        )
    bad = (arr < 0) | (arr >= n_actions)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must be in [0, {n_actions}), got {arr[i]!r} (trial {i})")
    return arr.astype(np.int64, copy=False)


def check_rewards(reward: Any, n_trials: int | None = None, name: str = "reward") -> np.ndarray:
    """Return the reward(s) as a float64 array of shape ``(1,)`` or ``(B,)``, all finite and
    of magnitude at most :data:`MAX_MAGNITUDE`."""
    if n_trials is None:
        is_real = isinstance(reward, numbers.Real) or (
            isinstance(reward, np.ndarray) and reward.shape == () and reward.dtype.kind in "iuf"
        )
        if isinstance(reward, bool | np.bool_) or not is_real:
            raise ValueError(f"{name} must be a finite real scalar, got {reward!r}")
        r = float(reward)
        if not math.isfinite(r):
            raise ValueError(f"{name} must be finite, got {r!r}")
        check_scalar_magnitude(r, name)
        return np.array([r])
    try:
        arr = np.asarray(reward, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real array, got {reward!r}") from None
    if arr.shape != (n_trials,):
        raise ValueError(f"{name} must have shape ({n_trials},), got shape {arr.shape}")
    check_magnitude(arr, name, batched=True)
    return arr


def check_weights(weight: Any, n_trials: int | None = None, name: str = "weight") -> np.ndarray:
    """Return non-negative finite weight(s) as float64 of shape ``(1,)`` or ``(B,)``.

    A scalar is broadcast to every trial.
    """
    try:
        arr = np.asarray(weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a non-negative real, got {weight!r}") from None
    size = 1 if n_trials is None else n_trials
    if arr.ndim == 0:
        arr = np.full(size, float(arr))
    elif arr.shape != (size,) or n_trials is None:
        expected = "a scalar" if n_trials is None else f"a scalar or shape ({n_trials},)"
        raise ValueError(f"{name} must be {expected}, got shape {arr.shape}")
    check_finite(arr, name, batched=n_trials is not None)
    if (arr < 0).any():
        i = int(np.argmax(arr < 0))
        where = f" (trial {i})" if n_trials is not None else ""
        raise ValueError(f"{name} must be >= 0, got {arr[i]!r}{where}")
    return arr


def check_propensities(
    p: Any,
    action: np.ndarray | None,
    n_actions: int,
    n_trials: int | None = None,
    name: str = "propensities",
    *,
    require_chosen_positive: bool = True,
) -> np.ndarray:
    """Return propensities as float64 of shape ``(1, K)`` or ``(B, K)`` after checking them.

    Checks: the shape is ``(K,)`` (unbatched) or ``(B, K)``; entries are finite and
    ``>= 0``; each row sums to 1 within :data:`PROPENSITY_TOL`; and, when
    ``require_chosen_positive`` and ``action`` is given, the chosen arm has
    ``pi >= MIN_PROPENSITY`` (the inverse-propensity weight ``1/pi(a_t)`` must exist and
    stay bounded).

    Parameters
    ----------
    p : array_like
        ``pi_t(a)`` for every arm.
    action : ndarray of shape (1,) or (B,), or None
        Already validated actions (from :func:`check_actions`).
    n_actions : int
        Number of arms ``K``.
    n_trials : int or None
        Batch size, None for the unbatched API.
    name : str
        Argument name used in error messages.
    require_chosen_positive : bool, default True
        Whether ``pi(a_t) >= MIN_PROPENSITY`` is required.
    """
    batched = n_trials is not None
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real array, got {p!r}") from None
    expected = (n_actions,) if not batched else (n_trials, n_actions)
    if arr.shape != expected:
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    rows = arr.reshape(-1, n_actions)
    if not batched:  # one pmf in plain Python (a few hundred ns for small K)
        values = arr.tolist()
        for j, v in enumerate(values):
            if not math.isfinite(v):
                raise ValueError(f"{name} must be finite, got {v!r} at index ({j},)")
        if min(values) < 0:
            raise ValueError(f"{name} must be >= 0, got {values}")
        total = math.fsum(values)
        if abs(total - 1.0) > PROPENSITY_TOL:
            raise ValueError(
                f"{name} must sum to 1 (tol {PROPENSITY_TOL:g}), got sum {total!r} for {values}"
            )
        if require_chosen_positive and action is not None:
            a = int(action[0])
            if not values[a] >= MIN_PROPENSITY:
                raise _too_small(name, a, values[a])
        return rows
    check_finite(rows, name, batched=True)
    totals = rows.sum(axis=1)
    lowest = rows.min(axis=1)
    bad_sum = np.abs(totals - 1.0) > PROPENSITY_TOL
    bad_neg = lowest < 0
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
        small = ~(chosen >= MIN_PROPENSITY)
        if small.any():
            i = int(np.argmax(small))
            where = f" (trial {i})" if batched else ""
            raise _too_small(name, int(action[i]), chosen[i], where)
    return rows


def check_real(value: Any, name: str) -> None:
    """Raise for complex numbers and text: casting them to float64 would drop an imaginary
    part silently or parse a string, so they are refused, not converted."""
    kind = value.dtype.kind if isinstance(value, np.ndarray) else None
    if isinstance(value, str | bytes) or kind in ("U", "S") or np.iscomplexobj(value):
        shown = f"dtype {value.dtype}" if kind is not None else repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise ValueError(f"{name} must be real numbers, got {type(value).__name__} {shown}")
