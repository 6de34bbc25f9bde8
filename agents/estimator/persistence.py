"""Saving, checking and restoring the state of :class:`agents.estimator.LowRankSGD`.

A state is a flat dict (:mod:`agents.state`): its ``format_version``, the estimator's
configuration (:data:`CONFIG_KEYS`) and its arrays (:data:`STATE_KEYS`) in the internal
batched layout, so it round-trips through ``np.savez`` and ``np.load(allow_pickle=False)``.
Restoring checks everything first (:func:`validate_state`): the format version and the
configuration must be the estimator's, every array must have its shape and dtype and finite
entries, and the state must be one that Algorithm 1 (docs/method.md §3) can reach (balanced
singular values in decreasing order, one arm moved per round, no factors before
initialisation).  A state that fails a check
changes nothing.

The functions here read the estimator through its public API only: :func:`config` (the
configuration part of a state), :func:`validate_state` (behind
:meth:`LowRankSGD.validate_state_dict <agents.estimator.LowRankSGD.validate_state_dict>`)
and :func:`from_state` (behind :meth:`~agents.estimator.LowRankSGD.from_state_dict`); the
estimator's own :meth:`~agents.estimator.LowRankSGD.state_dict` and
:meth:`~agents.estimator.LowRankSGD.load_state_dict` write and read the arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.state import (
    check_format_version,
    plain,
    read_bool,
    read_int,
    same_value,
)
from lrbandit_gym.input_checks import check_finite

__all__ = ["CONFIG_KEYS", "STATE_KEYS", "config", "from_state", "validate_state"]

#: The configuration keys of a state: the constructor's arguments (``n_trials`` stored as
#: ``0`` for the unbatched API; ``step_scale`` as ``0.0`` for the scale-free step and
#: ``step_gain`` as ``0.0`` for the absolute one, since a state holds no ``None``).
CONFIG_KEYS = (
    "d1",
    "d2",
    "rank",
    "n_actions",
    "n_trials",
    "context",
    "step_scale",
    "step_offset",
    "step_decay",
    "propensities",
    "step_gain",
)

#: The keys of a state besides ``format_version`` and the configuration.
STATE_KEYS = (
    "U",
    "V",
    "singular_values",
    "counts",
    "t",
    "initialized",
    "max_singular_value",
    "prior_rounds",
    "square_weight_sum",
)


def config(est: Any) -> dict[str, Any]:
    """The configuration part of the state of estimator ``est``, keyed by
    :data:`CONFIG_KEYS`."""
    return {
        "d1": est.d1,
        "d2": est.d2,
        "rank": est.rank,
        "n_actions": est.n_actions,
        "n_trials": 0 if est.n_trials is None else est.n_trials,
        "context": est.context,
        "step_scale": 0.0 if est.step_scale is None else est.step_scale,
        "step_offset": est.step_offset,
        "step_decay": est.step_decay,
        "propensities": est.propensities,
        "step_gain": 0.0 if est.step_gain is None else est.step_gain,
    }


def validate_state(est: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Check a saved state against estimator ``est``, changing nothing.

    Accepts what ``np.load`` returns for a saved state (scalars as 0-d arrays).

    Returns
    -------
    dict
        The validated state as copies (``U``, ``V``, ``singular_values``, ``counts``,
        ``t``, ``initialized``, ``max_singular_value``, ``prior_rounds``,
        ``square_weight_sum``), for ``load_state_dict``.

    Raises
    ------
    ValueError
        If a key is missing, the configuration differs from ``est``'s, an array has the
        wrong shape, dtype or non-finite entries, ``t`` or a count is negative, a singular
        value is negative or out of order, the counts do not add up to ``t``, or an
        uninitialised state holds factors.
    """
    check_format_version(state)
    missing = [k for k in (*CONFIG_KEYS, *STATE_KEYS) if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    mine = config(est)
    for key in CONFIG_KEYS:
        if not same_value(state[key], mine[key]):
            raise ValueError(
                f"state[{key!r}] = {state[key]!r} does not match this estimator's "
                f"{key} = {mine[key]!r}"
            )
    B = 1 if est.n_trials is None else est.n_trials
    K, r = est.n_actions, est.rank
    arrays = {}
    for key, shape in (
        ("U", (B, K, est.d1, r)),
        ("V", (B, K, est.d2, r)),
        ("singular_values", (B, K, r)),
    ):
        arr = np.asarray(state[key])
        if arr.shape != shape or arr.dtype != np.float64:
            raise ValueError(
                f"state[{key!r}] must be a float64 array of shape {shape}, got "
                f"{arr.dtype} array of shape {arr.shape}"
            )
        check_finite(arr, f"state[{key!r}]")
        arrays[key] = np.array(arr, copy=True)
    sv = arrays["singular_values"]
    if (sv < 0).any():
        raise ValueError(
            f"state['singular_values'] must be >= 0, got {sv[sv < 0][0]!r} at index "
            f"{tuple(int(i) for i in np.argwhere(sv < 0)[0])}"
        )
    if (np.diff(sv, axis=-1) > 0).any():
        idx = tuple(int(i) for i in np.argwhere(np.diff(sv, axis=-1) > 0)[0][:2])
        raise ValueError(
            "state['singular_values'] must be in decreasing order for every arm, got "
            f"{sv[idx].tolist()} at (trial, arm) {idx}"
        )
    counts = np.asarray(state["counts"])
    if counts.shape != (B, K) or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise ValueError(
            f"state['counts'] must be a non-negative integer array of shape {(B, K)}, "
            f"got {counts.dtype} array of shape {counts.shape}"
            + (f" with minimum {counts.min()!r}" if counts.size else "")
        )
    t = read_int(state["t"], "state['t']")
    initialized = read_bool(state["initialized"], "state['initialized']")
    if (counts.sum(axis=1) != t).any():
        b = int(np.argmax(counts.sum(axis=1) != t))
        raise ValueError(
            f"state['counts'] must add up to state['t'] = {t} in every trial (one arm "
            f"moves per round), got {counts[b].tolist()} in trial {b}"
        )
    if not initialized and (t != 0 or np.any(arrays["U"]) or np.any(arrays["V"]) or np.any(sv)):
        raise ValueError(
            "state['initialized'] is False but the state holds factors or rounds "
            f"(t = {t}): an uninitialised estimator has t = 0 and zero factors"
        )
    bound = np.asarray(state["max_singular_value"])
    if bound.shape != (B,) or bound.dtype != np.float64 or not (bound > 0).all():
        raise ValueError(
            f"state['max_singular_value'] must be a positive float64 array of shape "
            f"{(B,)}, got {bound!r}"
        )
    bound = bound.copy()
    # The step's warm-start cap (agents.estimator.step_size.continuing_gain).
    prior = read_int(state["prior_rounds"], "state['prior_rounds']")
    try:
        square = np.asarray(state["square_weight_sum"], dtype=float)
    except (TypeError, ValueError):
        square = np.full(1, np.nan)
    if square.shape != (B, K) or not (square >= 0).all():
        raise ValueError(
            f"state['square_weight_sum'] must be a non-negative array of shape {(B, K)} "
            f"(inf allowed), got {square!r}"
        )
    return {
        "U": arrays["U"],
        "V": arrays["V"],
        "singular_values": sv,
        "counts": counts.astype(np.int64, copy=True),
        "t": t,
        "initialized": initialized,
        "max_singular_value": bound,
        "prior_rounds": prior,
        "square_weight_sum": np.array(square, dtype=np.float64, copy=True),
    }


def from_state(cls: type, state: dict[str, Any]) -> Any:
    """An estimator of class ``cls`` built from the configuration in a saved state, with
    the state loaded (its ``validate_state_dict`` checks it first).

    Raises
    ------
    ValueError
        If a configuration key is missing, or as :func:`validate_state`.
    """
    try:
        n_trials = read_int(state["n_trials"], "state['n_trials']")
        check_format_version(state)
        cfg = {k: plain(v) for k, v in state.items() if k in CONFIG_KEYS}
        del cfg["n_trials"]
        # 0.0 stands for None (the parametrisation not in use).
        cfg["step_scale"] = float(cfg["step_scale"]) or None
        cfg["step_gain"] = float(cfg["step_gain"]) or None
        est = cls(
            cfg.pop("d1"),
            cfg.pop("d2"),
            cfg.pop("rank"),
            cfg.pop("n_actions"),
            n_trials=None if n_trials == 0 else n_trials,
            **cfg,
        )
    except KeyError as exc:
        raise ValueError(f"state is missing key {exc.args[0]!r}") from None
    est.load_state_dict(state)
    return est
