"""Saving, checking and restoring the state of :class:`agents.estimator.LowRankSGD`.

A state is a flat dict (:mod:`agents.state`): the estimator's configuration
(:data:`CONFIG_KEYS`) and its arrays in the internal batched layout, so it round-trips
through ``np.savez`` and ``np.load(allow_pickle=False)``.  Restoring checks everything
first (:func:`validate_state`): the configuration must be the estimator's, every array
must have its shape and dtype and finite entries, and the state must be one that
Algorithm 1 (docs/method.md §3) can reach (balanced singular values in decreasing order,
one arm moved per round, no factors before initialisation).  A state that fails a check
changes nothing.

The estimator's methods :meth:`~agents.estimator.LowRankSGD.state_dict`,
:meth:`~agents.estimator.LowRankSGD.validate_state_dict`,
:meth:`~agents.estimator.LowRankSGD.load_state_dict` and
:meth:`~agents.estimator.LowRankSGD.from_state_dict` delegate here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agents.divergence import fixed_bound, initial_bound
from agents.state import plain, read_bool, read_int, same_value
from lrbandit_gym.validation import check_finite

if TYPE_CHECKING:
    from agents.estimator import LowRankSGD

__all__ = ["CONFIG_KEYS", "config", "estimator_from_state", "pack_state", "validate_state"]

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


def config(est: LowRankSGD) -> dict[str, Any]:
    """The configuration part of ``est``'s state, keyed by :data:`CONFIG_KEYS`."""
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


def _with_step_gain(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with ``step_gain`` = 0.0 (the absolute step) when it was saved before the
    scale-free step existed (every such state has an absolute ``step_scale``)."""
    return state if "step_gain" in state else {**state, "step_gain": 0.0}


def pack_state(
    est: LowRankSGD,
    *,
    U: np.ndarray,
    V: np.ndarray,
    singular_values: np.ndarray,
    counts: np.ndarray,
    t: int,
    initialized: bool,
    max_singular_value: np.ndarray,
) -> dict[str, Any]:
    """The state dict of ``est``: its configuration and copies of the given arrays.

    Parameters
    ----------
    est : LowRankSGD
        The estimator, for its configuration.
    U, V, singular_values, counts : ndarray
        Its arrays in the batched layout: ``(B, K, d1, r)``, ``(B, K, d2, r)``,
        ``(B, K, r)`` and ``(B, K)`` int64.
    t : int
        Rounds absorbed since initialisation.
    initialized : bool
        Whether the factors are set.
    max_singular_value : ndarray of shape (B,)
        The divergence bound per trial.

    Returns
    -------
    dict
        Flat: the configuration, then the state under the keys above.
    """
    return {
        **config(est),
        "U": U.copy(),
        "V": V.copy(),
        "singular_values": singular_values.copy(),
        "counts": counts.copy(),
        "t": int(t),
        "initialized": bool(initialized),
        "max_singular_value": max_singular_value.copy(),
    }


def validate_state(est: LowRankSGD, state: dict[str, Any]) -> dict[str, Any]:
    """Check a state dict against ``est``, changing nothing.

    Accepts what ``np.load`` returns for a saved state (scalars as 0-d arrays) and states
    saved before ``max_singular_value`` was stored (the bound is then set as
    :meth:`~agents.estimator.LowRankSGD.initialize` would set it from the loaded singular
    values).

    Parameters
    ----------
    est : LowRankSGD
        The estimator the state is for.
    state : dict
        From :meth:`~agents.estimator.LowRankSGD.state_dict` (possibly saved and loaded).

    Returns
    -------
    dict
        The validated state as copies (``U``, ``V``, ``singular_values``, ``counts``,
        ``t``, ``initialized``, ``max_singular_value``).

    Raises
    ------
    ValueError
        If a key is missing, the configuration differs from the estimator's, an array has
        the wrong shape, dtype or non-finite entries, ``t`` or a count is negative, a
        singular value is negative or out of order, the counts do not add up to ``t``, or
        an uninitialised state holds factors.
    """
    state = _with_step_gain(state)
    missing = [
        k
        for k in (*CONFIG_KEYS, "U", "V", "singular_values", "counts", "t", "initialized")
        if k not in state
    ]
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
    setting = est.max_singular_value_setting
    if "max_singular_value" in state:
        bound = np.asarray(state["max_singular_value"])
        if bound.shape != (B,) or bound.dtype != np.float64 or not (bound > 0).all():
            raise ValueError(
                f"state['max_singular_value'] must be a positive float64 array of shape "
                f"{(B,)}, got {bound!r}"
            )
        bound = bound.copy()
    elif initialized:
        bound = initial_bound(sv, setting, B)
    else:
        bound = np.full(B, fixed_bound(setting))
    return {
        "U": arrays["U"],
        "V": arrays["V"],
        "singular_values": sv,
        "counts": counts.astype(np.int64, copy=True),
        "t": t,
        "initialized": initialized,
        "max_singular_value": bound,
    }


def estimator_from_state(cls: type[LowRankSGD], state: dict[str, Any]) -> LowRankSGD:
    """Build an estimator of class ``cls`` from its configuration in ``state``, then load
    the state (:func:`validate_state` checks it first).

    Raises
    ------
    ValueError
        If a configuration key is missing, or as :func:`validate_state`.
    """
    try:
        n_trials = read_int(state["n_trials"], "state['n_trials']")
        cfg = {k: plain(v) for k, v in _with_step_gain(state).items() if k in CONFIG_KEYS}
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
