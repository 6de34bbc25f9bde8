"""Bounded store of the warm start's exploration rounds (eq. (10), docs/method.md §3).

The warm start fits ``M_init`` once, from the first ``length`` rounds; a
:class:`WarmStartBuffer` holds exactly those rounds in memory allocated once, hands them to
:func:`agents.warm_start.nuclear_norm_fit`, and gives its storage up afterwards
(to :mod:`agents.warm_start.memory_pool` when that pool is on).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.state import read_str
from agents.warm_start.memory_pool import give_spare, take_spare
from agents.warm_start.store import RoundStore
from lrbandit_gym.input_checks import (
    check_actions,
    check_context,
    check_finite,
    check_magnitude,
    check_rewards,
    check_weights,
)
from lrbandit_gym.rounds import Round

__all__ = ["WarmStartBuffer", "warm_start_buffer_bytes"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def warm_start_buffer_bytes(
    d1: int, d2: int, length: int, n_trials: int | None = None, dtype: Any = np.float32
) -> int:
    """Bytes a :class:`WarmStartBuffer` of this size allocates.

    ``B * length * (d1 * d2 * itemsize + 24)``: the contexts in ``dtype`` plus an int64
    action, a float64 reward and a float64 weight per round (``B = 1`` unbatched).
    """
    b = 1 if n_trials is None else int(n_trials)
    return b * int(length) * (int(d1) * int(d2) * np.dtype(dtype).itemsize + 24)


class WarmStartBuffer(RoundStore):
    """Preallocated store for the exploration phase that feeds
    :func:`~agents.warm_start.nuclear_norm_fit`.

    Memory is ``O(length * d1 * d2)`` per trial, allocated once
    (:func:`warm_start_buffer_bytes`).  Contexts are stored as float32 by default (half
    the memory; the fit is unaffected at the noise levels of interest: rounding perturbs
    ``<M, X>`` by ~1e-7 relative); a context outside the float32 range is refused rather
    than stored as ``inf``.

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    n_actions : int
        Number of arms ``K``.
    length : int
        Capacity in rounds (e.g. :func:`agents.warm_start.default_warm_start_rounds`).
    n_trials : int or None, default None
        Batch size ``B`` (None: unbatched API, as in :class:`~agents.estimator.LowRankSGD`).
    dtype : {numpy.float32, numpy.float64}, default numpy.float32
        Storage type of the contexts.

    Examples
    --------
    >>> buf = WarmStartBuffer(4, 3, n_actions=2, length=2)
    >>> buf.add(np.ones((4, 3)), action=0, reward=1.0)
    >>> buf.full
    False
    """

    def __init__(
        self,
        d1: int,
        d2: int,
        n_actions: int,
        length: int,
        n_trials: int | None = None,
        *,
        dtype: Any = np.float32,
    ) -> None:
        B = self._init_rounds(d1, d2, n_actions, length, n_trials)
        dt = np.dtype(dtype)
        if dt not in _DTYPES:
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        shape = (B, self.d1, self.length, self.d2)
        # Stored as (B, d1, length, d2): each trial's rounds of one arm are then one block
        # for the factored fit's GEMMs (agents.warm_start.factored); data() returns the
        # (B, n, d1, d2) view.
        self._X = take_spare(shape, dt)
        self._actions = np.zeros((B, self.length), dtype=np.int64)
        self._rewards = np.zeros((B, self.length))
        self._weights = np.zeros((B, self.length))
        self._n = 0

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the rounds (:func:`warm_start_buffer_bytes`)."""
        return warm_start_buffer_bytes(self.d1, self.d2, self.length, self.n_trials, self._X.dtype)

    def _round_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._actions[:, : self._n], self._weights[:, : self._n]

    def add(self, X: Any, action: Any, reward: Any, weight: Any = 1.0) -> None:
        """Store one round (validated first; a rejected round changes nothing).

        Parameters
        ----------
        X : array_like of shape (d1, d2) or (B, d1, d2)
        action : int or array_like of int, shape (B,)
        reward : float or array_like of shape (B,)
        weight : float or array_like of shape (B,), default 1.0
            E.g. ``1/pi_t(a_t)`` when the actions were not uniformly random.

        Raises
        ------
        RuntimeError
            If the buffer is full.
        ValueError
            On invalid input.
        """
        if self.full:
            raise self._full_error(RuntimeError)
        B = self.n_trials
        Xv = check_context(X, self.d1, self.d2, B)
        a = check_actions(action, self.n_actions, B)
        r = check_rewards(reward, B)
        wv = check_weights(weight, B)
        self.add_round(Round(Xv if B is not None else Xv[None], a, r, None), wv)

    def add_round(self, round_: Round, weights: Any = 1.0) -> None:
        """Store one checked round (:meth:`add` is this behind the check of the raw
        inputs): its contexts of shape (B, d1, d2) (``B = 1`` unbatched), actions and
        rewards of shape (B,), with ``weights`` of shape (B,) or a scalar (its
        propensities are not read).  The buffer must not be :attr:`full`.

        Raises
        ------
        ValueError
            If the buffer is full, or ``X`` has an entry outside the range of the storage
            dtype (it would be stored as ``inf``) or, stored as float64, beyond
            :data:`~lrbandit_gym.input_checks.MAX_MAGNITUDE`; nothing is stored then.
        """
        if self.full:
            raise self._full_error(ValueError)
        X = round_.contexts
        dt = self._X.dtype
        if dt != np.float64:
            top = float(np.abs(X).max()) if X.size else 0.0
            if top > float(np.finfo(dt).max):
                b = int(np.argmax(np.abs(X).reshape(X.shape[0], -1).max(axis=1)))
                where = "" if self.n_trials is None else f" (trial {b})"
                raise ValueError(
                    f"context X has an entry of magnitude {top:.3g}{where}, beyond the range "
                    f"of the warm-start buffer's {dt} storage ({np.finfo(dt).max:.3g}); "
                    "rescale the contexts (or store them as float64: dtype=np.float64)"
                )
        else:  # the fit squares the contexts: a stored 1e200 would make every fit fail
            check_magnitude(X, "context X", batched=self.n_trials is not None)
        i = self._n
        self._X[:, :, i] = X
        self._actions[:, i] = round_.actions
        self._rewards[:, i] = round_.rewards
        self._weights[:, i] = weights
        self._n += 1

    def release(self) -> None:
        """Give the storage up (the buffer is empty and full afterwards: ``length`` 0 is
        not allowed, so further :meth:`add` calls raise).

        With :func:`~agents.warm_start.memory_pool.reuse_buffer_memory` on, the storage is
        kept for the next buffer of the same shape; otherwise it is freed as soon as no view
        of it is alive.
        """
        give_spare(self._X)
        self._X = self._X[:, :, :0]
        self._n = 0
        self.length = 0

    def data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Views of the stored ``(X, actions, rewards, weights)`` in the public layout."""
        n = self._n
        parts = (
            self._X[:, :, :n].transpose(0, 2, 1, 3),
            self._actions[:, :n],
            self._rewards[:, :n],
            self._weights[:, :n],
        )
        if self.n_trials is None:
            parts = tuple(p[0] for p in parts)
        return parts  # type: ignore[return-value]

    def state_dict(self) -> dict[str, Any]:
        """Configuration and stored rounds as plain numpy arrays and scalars (copies)."""
        n = self._n
        return {
            "d1": self.d1,
            "d2": self.d2,
            "n_actions": self.n_actions,
            "length": self.length,
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "dtype": str(self._X.dtype),
            "n": n,
            "X": self._X[:, :, :n].transpose(0, 2, 1, 3).copy(),
            "actions": self._actions[:, :n].copy(),
            "rewards": self._rewards[:, :n].copy(),
            "weights": self._weights[:, :n].copy(),
        }

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` against this buffer's configuration, changing nothing.

        Accepts what ``np.load`` returns for a saved state (scalars as 0-d arrays).

        Returns
        -------
        dict
            The validated ``n`` and arrays, for :meth:`load_state_dict`.

        Raises
        ------
        ValueError
            On a missing key, a configuration that differs from this buffer's, or arrays of
            the wrong shape or with invalid entries.
        """
        B = self._X.shape[0]
        n, arrays = self._check_state(
            state,
            ("d1", "d2", "n_actions", "length", "n_trials", "dtype"),
            lambda n: {
                "X": (B, n, self.d1, self.d2),
                "actions": (B, n),
                "rewards": (B, n),
                "weights": (B, n),
            },
            integer=("actions",),
        )
        read_str(state["dtype"], "state['dtype']")
        check_finite(arrays["X"].astype(np.float64), "state['X']")
        limit = float(np.finfo(self._X.dtype).max)
        if arrays["X"].size and float(np.abs(arrays["X"]).max()) > limit:
            raise ValueError(
                f"state['X'] has entries beyond the range of this buffer's {self._X.dtype} "
                f"storage ({limit:.3g})"
            )
        return {"n": n, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same configuration; everything
        is checked first (:meth:`validate_state_dict`), so a failure changes nothing."""
        checked = self.validate_state_dict(state)
        n = checked["n"]
        self._X[:, :, :n] = checked["X"].transpose(0, 2, 1, 3)
        self._actions[:, :n] = checked["actions"]
        self._rewards[:, :n] = checked["rewards"]
        self._weights[:, :n] = checked["weights"]
        self._n = n
