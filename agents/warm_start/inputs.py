"""Inputs and messages of the warm start (:mod:`agents.warm_start`, eq. (10)).

The fits of eq. (10) (docs/method.md §3) and the weak-arm start of
:mod:`agents.warm_start.rules` take their data through :func:`validate_inputs`, which checks
everything once and returns it with a trial axis, so the solvers can assume valid,
batched input.  The messages that name the arms without data (:func:`warn_empty_arms`)
and a fit that failed numerically (:func:`fit_failure`) are built here too.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from lrbandit_gym.input_checks import check_choice, check_finite, check_positive_int
from lrbandit_gym.onehot import OneHotContexts

__all__ = [
    "CONTEXTS",
    "LISTED",
    "fit_failure",
    "name_list",
    "per_arm_values",
    "validate_inputs",
    "warn_empty_arms",
]

#: The context distributions of the warm start.
CONTEXTS = ("gaussian", "completion")
#: How many (trial, arm) pairs a warning lists before it summarises the rest.
LISTED = 8


def name_list(listed: list[str]) -> str:
    """The first :data:`LISTED` names joined by commas, then how many more there are."""
    more = len(listed) - LISTED
    return ", ".join(listed[:LISTED]) + (f" and {more} more" if more > 0 else "")


def fit_failure(Xa: np.ndarray | OneHotContexts, y: np.ndarray, what: str) -> str:
    """The message of a warm-start fit that failed numerically."""
    if isinstance(Xa, OneHotContexts):
        xmax = 1.0
    else:
        xmax = float(np.abs(Xa).max()) if Xa.size else 0.0
    ymax = float(np.abs(y).max()) if y.size else 0.0
    return (
        f"the warm-start fit of eq. (10) ended in {what} on {y.shape[-1]} rounds with largest "
        f"|reward| {ymax:.3g} and largest |context entry| {xmax:.3g}: the data are too large "
        "(or too degenerate) for it.  Rescale the rewards and contexts, or pass an initial "
        "estimate (M_init=) to skip the warm start"
    )


def warn_empty_arms(acts: np.ndarray, w: np.ndarray, K: int, batched: bool) -> None:
    """Warn about the arms (of any trial) without a round of positive weight.

    The warning points at the caller of the function that calls this one
    (:func:`agents.warm_start.nuclear_norm_fit`).
    """
    has = ((acts[..., None] == np.arange(K)) & (w[..., None] > 0)).any(axis=1)  # (B, K)
    if has.all():
        return
    empty = np.argwhere(~has)
    names = name_list([(f"trial {b} " if batched else "") + f"arm {k}" for b, k in empty])
    warnings.warn(
        f"no rounds with positive weight for {names}; the estimate of such an arm is zero",
        RuntimeWarning,
        stacklevel=3,
    )


def per_arm_values(value: Any, name: str, B: int, K: int, batched: bool) -> np.ndarray:
    """A non-negative scalar, per-arm or (batched) per-trial-and-arm value as (B, K)."""
    arr = np.asarray(value, dtype=np.float64)
    shapes = [(), (K,)] + ([(B, K)] if batched else [])
    if arr.shape not in shapes:
        raise ValueError(
            f"{name} must be a scalar or of shape {' or '.join(map(str, shapes[1:]))}, "
            f"got shape {arr.shape}"
        )
    check_finite(arr, name)
    if (arr < 0).any():
        raise ValueError(f"{name} must be >= 0, got {arr.min()!r}")
    return np.broadcast_to(arr, (B, K)).copy()


def validate_inputs(
    X: Any,
    actions: Any,
    rewards: Any,
    n_actions: Any,
    weights: Any,
    context: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """Checked inputs with a trial axis: ``X`` (B, n, d1, d2) in float32 or float64,
    ``actions``, ``rewards`` and ``weights`` (B, n), ``K`` and whether the input was batched.

    Completion contexts may come as a :class:`~lrbandit_gym.onehot.OneHotContexts` of
    shape ``(n, d1, d2)`` or ``(B, n, d1, d2)`` (their indices; ``context`` must then be
    "completion"), and stay in that form.
    """
    K = check_positive_int(n_actions, "n_actions")
    check_choice(context, "context", CONTEXTS)
    if isinstance(X, OneHotContexts):
        if context != "completion":
            raise ValueError(
                f"X holds one-hot contexts as indices, which need context='completion'; got "
                f"context={context!r}"
            )
        if X.rows.ndim not in (1, 2) or X.rows.size == 0:
            raise ValueError(
                f"X must have shape (n, d1, d2) or (B, n, d1, d2) with n >= 1, got {X.shape}"
            )
        bad = (X.rows < 0) | (X.rows >= X.d1) | (X.cols < 0) | (X.cols >= X.d2)
        if bad.any():
            raise ValueError(f"X holds an index outside ({X.d1}, {X.d2}): {X!r}")
        Xa = X if X.rows.ndim == 2 else X[None]
        return (Xa, *_check_round_data(actions, rewards, weights, K, *Xa.shape[:2], X.ndim == 4))
    Xa = np.asarray(X)
    if Xa.dtype.kind not in "iuf":
        raise ValueError(f"X must be a real array, got dtype {Xa.dtype}")
    if Xa.ndim not in (3, 4):
        raise ValueError(f"X must have shape (n, d1, d2) or (B, n, d1, d2), got shape {Xa.shape}")
    batched = Xa.ndim == 4
    if not batched:
        Xa = Xa[None]
    B, n, d1, d2 = Xa.shape
    if n == 0 or d1 == 0 or d2 == 0:
        raise ValueError(f"X must have at least one round and a non-empty matrix, got {Xa.shape}")
    if Xa.dtype != np.float32:
        Xa = Xa.astype(np.float64, copy=False)
    check_finite(Xa if batched else Xa[0], "X", batched=batched)
    acts, rew, w, K, batched = _check_round_data(actions, rewards, weights, K, B, n, batched)
    if context == "completion":
        flat = Xa.reshape(B, n, d1 * d2)
        ok = (np.count_nonzero(flat, axis=2) == 1) & np.isclose(flat.sum(axis=2), 1.0)
        if not ok.all():
            b, t = (int(i) for i in np.argwhere(~ok)[0])
            where = f"X[{b}, {t}]" if batched else f"X[{t}]"
            raise ValueError(
                f"context='completion' needs one-hot contexts e_j e_k^T; {where} has "
                f"{int(np.count_nonzero(flat[b, t]))} non-zero entries summing to "
                f"{float(flat[b, t].sum())!r}"
            )
    return Xa, acts, rew, w, K, batched


def _check_round_data(
    actions: Any, rewards: Any, weights: Any, K: int, B: int, n: int, batched: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """:func:`validate_inputs`' checks of the actions, rewards and weights of ``n`` rounds
    (``B`` trials): ``(actions, rewards, weights, K, batched)`` with a trial axis."""
    lead = (B, n) if batched else (n,)

    def first_bad(bad: np.ndarray) -> str:
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return f" at index {idx if batched else idx[1:]}"

    acts = np.asarray(actions)
    if acts.shape != lead:
        raise ValueError(f"actions must have shape {lead}, got shape {acts.shape}")
    acts = acts.reshape(B, n)
    if acts.dtype.kind not in "iu":
        raise ValueError(f"actions must be integers in [0, {K}), got dtype {acts.dtype}")
    bad = (acts < 0) | (acts >= K)
    if bad.any():
        raise ValueError(
            f"actions must be in [0, {K}), got {acts[bad][0].item()!r}{first_bad(bad)}"
        )
    try:
        rew = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"rewards must be a real array, got {rewards!r}") from None
    if rew.shape != lead:
        raise ValueError(f"rewards must have shape {lead}, got shape {rew.shape}")
    rew = rew.reshape(B, n)
    if not np.isfinite(rew).all():
        bad = ~np.isfinite(rew)
        raise ValueError(f"rewards must be finite, got {rew[bad][0].item()!r}{first_bad(bad)}")
    if weights is None:
        w = np.ones((B, n))
    else:
        try:
            w = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"weights must be a real array, got {weights!r}") from None
        if w.shape != lead:
            raise ValueError(f"weights must have shape {lead}, got shape {w.shape}")
        w = w.reshape(B, n)
        bad = ~np.isfinite(w) | (w < 0)
        if bad.any():
            raise ValueError(
                f"weights must be finite and >= 0, got {w[bad][0].item()!r}{first_bad(bad)}"
            )
    return acts, rew, w, K, batched
