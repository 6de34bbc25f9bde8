"""Sufficient statistics of :class:`agents.ensemble.EnsembleSampling`: sizing, block work,
checks and persistence.

The MAP objective of Algorithm 6 (docs/method.md §2) depends on an arm's data only through
``S_xx = sum_s vec(X_s) vec(X_s)^T`` (shared by the models), per model
``Y^(m) = sum_s y~^(m)_s X_s``, and the count; :mod:`agents.ensemble` refits the models from
them.  This module holds what the policy needs around those statistics:

* **Memory.**  ``S_xx`` holds ``(d1 d2)^2`` floats per arm and trial: 1.28 MB at
  d1 = d2 = 20 (the paper's ensemble setting), 50 MB at d1 = d2 = 50.  The constructor
  estimates the total (statistics plus the round's working arrays,
  :func:`ensemble_memory_bytes`) and refuses to build past ``max_memory_bytes``.
* **Batching.**  Everything is stored with a leading trial axis (``B = 1`` unbatched) and
  the models are stacked into the same matrix products (no loop over models).  An update
  is memory-bound: it streams each trial's ``(d1 d2)^2`` statistics a few times.  Trials
  are therefore absorbed in blocks of about 2 MiB of statistics (:func:`block_trials`),
  vectorised within a block, so that a block stays in cache and updates its statistics in
  place: one trial per block at d1 = d2 = 20 (one block of 100 trials would spend its time
  on gathers, scatters and 128 MB temporaries), hundreds of trials per block for small
  contexts, where Python overhead would dominate instead.  :class:`BlockWorkspace` keeps a
  block's scratch arrays between rounds.
* **All or nothing.**  A round first computes every block's new statistics and refitted
  factors without storing them, then stores them all; a round whose statistics would
  overflow (:data:`ENTRY_LIMIT`, :data:`STAT_LIMIT`) or whose ALS systems are numerically
  singular (contexts or rewards many orders of magnitude outside the prior's scale) raises
  ``FloatingPointError`` (:func:`failure_message`) with the policy, its generator
  included, as it was.  The statistics' rank-one update is then computed twice
  (:meth:`BlockWorkspace.plus_outer`), in one pass each with the numba engine
  (:mod:`agents.ensemble_kernels`), which keeps the round as fast as the single in-place
  update it replaces.
* **Persistence.**  The policy's configuration (:func:`ensemble_config`) and the checks of
  a saved state's arrays (:func:`check_config`, :func:`check_arrays`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.state import same_value
from lrbandit_gym import engine
from lrbandit_gym.input_checks import check_finite, check_positive_float

__all__ = [
    "BLOCK_BYTES",
    "ENTRY_LIMIT",
    "FLOAT_BYTES",
    "STATE_ARRAYS",
    "STAT_LIMIT",
    "BlockWorkspace",
    "block_trials",
    "check_arrays",
    "check_config",
    "check_memory",
    "check_overflow",
    "ensemble_config",
    "ensemble_memory_bytes",
    "failure_message",
    "per_arm",
    "prior_mean",
]

#: Bytes per float64.
FLOAT_BYTES = 8
#: Bytes of statistics per block of trials absorbed together (cache-sized, 1-2 MiB: one
#: trial per block at d1 = d2 = 20, ~25 at d = 10, ~400 at d = 5).
BLOCK_BYTES = 2**21
#: Largest diagonal entry of the statistics S accepted after a round: far below overflow,
#: so that the ALS contractions of S with the factors stay finite.
STAT_LIMIT = 1e250
#: Largest |entry| of a context or perturbed reward accepted: its square (or product with
#: the other) stays below 1e250, so the statistics' update cannot overflow.
ENTRY_LIMIT = 1e125
#: The arrays of the policy's state (attributes ``_U``, ``_V``, ...).
STATE_ARRAYS = ("U", "V", "mu_u", "mu_v", "S", "Y", "counts")


def _kernels():
    """:mod:`agents.ensemble_kernels`, imported on first use (it needs numba)."""
    global _KERNELS
    if _KERNELS is None:
        from agents import ensemble_kernels

        _KERNELS = ensemble_kernels
    return _KERNELS


_KERNELS = None


def block_trials(d1: int, d2: int, n_trials: int | None) -> int:
    """Trials per vectorised block of an update: about :data:`BLOCK_BYTES` of statistics."""
    b = 1 if n_trials is None else int(n_trials)
    return max(1, min(b, BLOCK_BYTES // ((d1 * d2) ** 2 * FLOAT_BYTES)))


def ensemble_memory_bytes(
    d1: int, d2: int, rank: int, n_actions: int, n_models: int, n_trials: int | None
) -> int:
    """Bytes :class:`~agents.ensemble.EnsembleSampling` needs: sufficient statistics plus
    one round's work.

    Parameters
    ----------
    d1, d2, rank, n_actions, n_models : int
        Problem and ensemble sizes.
    n_trials : int or None
        Batch size ``B`` (None counts as 1).

    Returns
    -------
    int
        ``8 * (B [K (d1 d2)^2 + K M d1 d2 + 2 K M (d1 + d2) r]
        + b [2 (d1 d2)^2 + 2 M r d1 d2 max(d1, d2)])``: per trial the per-arm ``S_xx``, the
        per-model ``Y^(m)``, the factors and prior means; per block of ``b`` trials updated
        together the pulled arm's statistics and rank-one update and the two intermediate
        contractions of an ALS step.  At d1 = d2 = 20, K = 2, M = 10, r = 1 that is
        2.6 MB per trial; at d1 = d2 = 50, 100 MB per trial.
    """
    b = 1 if n_trials is None else int(n_trials)
    p = d1 * d2
    per_trial = n_actions * p * p + n_actions * n_models * p
    per_trial += 2 * n_actions * n_models * (d1 + d2) * rank
    work = 2 * p * p + 2 * n_models * rank * p * max(d1, d2)
    return FLOAT_BYTES * (b * per_trial + block_trials(d1, d2, n_trials) * work)


def check_memory(
    d1: int,
    d2: int,
    rank: int,
    n_actions: int,
    n_models: int,
    n_trials: int | None,
    max_memory_bytes: int,
) -> None:
    """Refuse a policy whose :func:`ensemble_memory_bytes` exceed ``max_memory_bytes``.

    Raises
    ------
    ValueError
        Giving the need, the size of the statistics per arm and trial and the ways out.
    """
    need = ensemble_memory_bytes(d1, d2, rank, n_actions, n_models, n_trials)
    if need > max_memory_bytes:
        B = 1 if n_trials is None else n_trials
        raise ValueError(
            f"EnsembleSampling needs about {need / 2**20:.0f} MiB (> max_memory_bytes = "
            f"{max_memory_bytes / 2**20:.0f} MiB): the sufficient statistics hold "
            f"(d1*d2)^2 = {(d1 * d2) ** 2} floats per arm and trial "
            f"({(d1 * d2) ** 2 * FLOAT_BYTES / 2**20:.1f} MiB) for n_actions={n_actions}, "
            f"n_trials={B}; use fewer trials per policy or raise max_memory_bytes"
        )


def per_arm(value: Any, name: str, n_actions: int) -> np.ndarray:
    """A positive scalar or one per arm, as a ``(K,)`` float array."""
    if np.ndim(value) == 0:
        return np.full(n_actions, check_positive_float(value, name))
    arr = np.asarray(value)
    if arr.shape != (n_actions,):
        raise ValueError(
            f"{name} must be a positive scalar or have shape ({n_actions},), got shape {arr.shape}"
        )
    return np.array([check_positive_float(v, name) for v in arr.tolist()])


def prior_mean(value: Any, name: str, shape: tuple[int, int, int]) -> np.ndarray:
    """``None`` (zeros) or an array broadcastable to ``(K, d, r)``, as a float array."""
    if value is None:
        return np.zeros(shape)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real array, got {value!r}") from None
    try:
        arr = np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(
            f"{name} must broadcast to (n_actions, d, rank) = {shape}, got shape {arr.shape}"
        ) from None
    check_finite(arr, name)
    return np.array(arr)


class BlockWorkspace:
    """Scratch arrays for a block of trials' ``(d1 d2)^2`` statistics, kept between rounds.

    A fresh array every round would cost the kernel's zeroing of its pages every round.
    Scratch 0 holds a block's new statistics, scratch 1 its rank-one term (numpy engine);
    each is allocated on first use, with room for :attr:`block_trials` trials.

    Parameters
    ----------
    p : int
        ``d1 d2``.
    block_trials : int
        Trials per block (:func:`block_trials`).
    """

    def __init__(self, p: int, block_trials: int) -> None:
        self.p = p
        self.block_trials = block_trials
        self._scratch: list[np.ndarray | None] = [None, None]

    def scratch(self, n: int, which: int = 0) -> np.ndarray:
        """Scratch ``which`` for ``n`` trials, shape ``(n, p, p)``."""
        if self._scratch[which] is None:
            p = self.p
            self._scratch[which] = np.empty((self.block_trials, p, p))
        return self._scratch[which][:n]

    def plus_outer(self, S: np.ndarray, xf: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out = S + vec(X) vec(X)^T`` for a block (``S``, ``out``: (n, p, p), possibly
        the same array; ``xf``: (n, p)): the rank-one update of the statistics, the same
        numbers as ``S + xf[:, :, None] * xf[:, None, :]``.

        The numba engine does it in one pass without a temporary
        (:func:`agents.ensemble_kernels.add_outer`), which keeps the two passes of an
        all-or-nothing round as cheap as the one in-place update they replace; the numpy
        engine forms the rank-one term in scratch 1.
        """
        if engine.compiled():
            _kernels().add_outer(S, xf, out)
            return out
        n = xf.shape[0]
        term = np.multiply(xf[:, :, None], xf[:, None, :], out=self.scratch(n, 1))
        return np.add(S, term, out=out)


def failure_message(
    n_trials: int | None,
    sl: slice,
    x: np.ndarray,
    y_tilde: np.ndarray,
    b: int | None,
    what: str,
) -> str:
    """The message of a round that cannot be absorbed.

    Parameters
    ----------
    n_trials : int or None
        The policy's ``n_trials`` (None: unbatched, no trial is named).
    sl : slice
        The block's trials.
    x : ndarray of shape (n, d1, d2)
        The block's contexts.
    y_tilde : ndarray of shape (n, M)
        Its perturbed rewards.
    b : int or None
        The failing trial of the block, or None when the block's linear algebra failed as
        a whole (the trial with the largest context entry is named).
    what : {"S", "Y", "singular", "factors"}
        What failed.

    Returns
    -------
    str
    """
    lo = sl.start or 0
    if b is None:
        b = int(np.argmax(np.abs(x.reshape(x.shape[0], -1)).max(axis=1)))
    where = "" if n_trials is None else f" in trial {lo + b}"
    reason = {
        "S": "the context's sufficient statistics sum_s vec(X_s) vec(X_s)^T would overflow",
        "Y": "the perturbed rewards' statistics sum_s y~_s X_s would overflow",
        "singular": "the ALS normal equations of eq. (MAP obj) become numerically singular",
        "factors": "the refitted factors would be non-finite",
    }[what]
    return (
        f"EnsembleSampling cannot absorb this round{where}: {reason} (obs with largest "
        f"entry {float(np.abs(x[b]).max()):.3g}, reward {float(y_tilde[b].mean()):.3g}); "
        "the contexts and rewards are far outside the scale of the prior.  Rescale them "
        "to order 1, or regularise more (a larger noise_std or smaller prior_std_u, "
        "prior_std_v); the policy is unchanged (its generator included)"
    )


def check_overflow(
    S_diag: np.ndarray,
    Y_old: np.ndarray,
    xf: np.ndarray,
    x: np.ndarray,
    y_tilde: np.ndarray,
    sl: slice,
    n_trials: int | None,
) -> None:
    """Refuse a block whose statistics' update could overflow.

    ``S`` is positive semi-definite, so its entries are bounded by its largest diagonal
    entry; with that below :data:`STAT_LIMIT` and the new context's and perturbed rewards'
    entries below :data:`ENTRY_LIMIT`, every term of the rank-one update stays below 1e250.

    Parameters
    ----------
    S_diag : ndarray of shape (n, p)
        The diagonals of the pulled arms' ``S_xx``.
    Y_old : ndarray of shape (n, M, d1, d2)
        The pulled arms' ``Y^(m)``.
    xf : ndarray of shape (n, p)
        The contexts, flattened.
    x, y_tilde, sl, n_trials
        As in :func:`failure_message`.

    Raises
    ------
    FloatingPointError
        With :func:`failure_message` for the first offending trial.
    """
    n = x.shape[0]
    x_top = np.abs(xf).max(axis=1)
    bad = ~((x_top < ENTRY_LIMIT) & (S_diag.max(axis=1) < STAT_LIMIT))
    if bad.any():
        raise FloatingPointError(
            failure_message(n_trials, sl, x, y_tilde, int(np.argmax(bad)), "S")
        )
    y_top = np.abs(y_tilde).max(axis=1)
    bad = ~((y_top < ENTRY_LIMIT) & (np.abs(Y_old.reshape(n, -1)).max(axis=1) < STAT_LIMIT))
    if bad.any():
        raise FloatingPointError(
            failure_message(n_trials, sl, x, y_tilde, int(np.argmax(bad)), "Y")
        )


def ensemble_config(pol: Any) -> dict[str, Any]:
    """The configuration part of an :class:`~agents.ensemble.EnsembleSampling` state."""
    return {
        "d1": pol.d1,
        "d2": pol.d2,
        "n_actions": pol.n_actions,
        "context": pol.context,
        "n_trials": 0 if pol.n_trials is None else pol.n_trials,
        "rank": pol.rank,
        "n_models": pol.n_models,
        "prior_std_u": pol.prior_std_u,
        "prior_std_v": pol.prior_std_v,
        "noise_std": pol.noise_std.copy(),
        "perturbation_std": pol.perturbation_std,
        "prior_anchor": pol.prior_anchor,
        "als_sweeps": pol.als_sweeps,
    }


def check_config(state: dict[str, Any], mine: dict[str, Any]) -> None:
    """Check that ``state`` has every key and the configuration ``mine``.

    Raises
    ------
    ValueError
        On a missing key (of ``mine`` or :data:`STATE_ARRAYS`) or a configuration value that
        differs from ``mine``'s.
    """
    missing = [k for k in (*mine, *STATE_ARRAYS) if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    for key, value in mine.items():
        if not same_value(state[key], value):
            raise ValueError(
                f"state[{key!r}] = {state[key]!r} does not match this policy's {value!r}"
            )


def check_arrays(
    state: dict[str, Any], current: dict[str, np.ndarray], t: int
) -> dict[str, np.ndarray]:
    """Check the arrays of a saved state against the policy's current ones.

    Parameters
    ----------
    state : dict
        The saved state.
    current : dict
        The policy's arrays by name (:data:`STATE_ARRAYS`), for their shapes and dtypes.
    t : int
        The state's validated round count.

    Returns
    -------
    dict
        Copies of the state's arrays.

    Raises
    ------
    ValueError
        On an array of the wrong shape or dtype or with non-finite entries, negative
        counts, or counts that do not add up to ``t`` in every trial.
    """
    arrays = {}
    for name in STATE_ARRAYS:
        cur = current[name]
        arr = np.asarray(state[name])
        if arr.shape != cur.shape or arr.dtype != cur.dtype:
            raise ValueError(
                f"state[{name!r}] must be a {cur.dtype} array of shape "
                f"{cur.shape}, got {arr.dtype} array of shape {arr.shape}"
            )
        if arr.dtype.kind == "f":
            check_finite(arr, f"state[{name!r}]")
        arrays[name] = np.array(arr, copy=True)
    counts = arrays["counts"]
    bad = (counts < 0).any(axis=1) | (counts.sum(axis=1) != t)
    if bad.any():
        b = int(np.argmax(bad))
        raise ValueError(
            f"state['counts'] must be non-negative and add up to state['t'] = "
            f"{t} in every trial (one pull per round), got {counts[b].tolist()} "
            f"in trial {b}"
        )
    return arrays
