"""Bounded store of the warm start's exploration rounds (eq. (10), docs/method.md §3).

The warm start fits ``M_init`` once, from the first ``length`` rounds; a
:class:`WarmStartBuffer` holds exactly those rounds in memory allocated once, hands them to
:func:`agents.warm_start.nuclear_norm_fit`, and gives its storage up afterwards
(to :mod:`agents.buffer_pool` when that pool is on).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.buffer_pool import give_spare, take_spare
from agents.state import plain, read_int, read_str, same_value
from lrbandit_gym.validation import (
    check_actions,
    check_context,
    check_finite,
    check_positive_int,
    check_rewards,
    check_weights,
)

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


class WarmStartBuffer:
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
        Capacity in rounds (e.g. :data:`agents.warm_start.DEFAULT_WARM_START_ROUNDS`).
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
        self.d1 = check_positive_int(d1, "d1")
        self.d2 = check_positive_int(d2, "d2")
        self.n_actions = check_positive_int(n_actions, "n_actions")
        self.length = check_positive_int(length, "length")
        self.n_trials = None if n_trials is None else check_positive_int(n_trials, "n_trials")
        dt = np.dtype(dtype)
        if dt not in _DTYPES:
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        B = 1 if self.n_trials is None else self.n_trials
        shape = (B, self.d1, self.length, self.d2)
        # Stored as (B, d1, length, d2): each trial's rounds of one arm are then one block
        # for the factored fit's GEMMs (agents.factored_fit); data() returns the
        # (B, n, d1, d2) view.
        self._X = take_spare(shape, dt)
        self._actions = np.zeros((B, self.length), dtype=np.int64)
        self._rewards = np.zeros((B, self.length))
        self._weights = np.zeros((B, self.length))
        self._n = 0

    @property
    def n(self) -> int:
        """Rounds stored so far."""
        return self._n

    @property
    def full(self) -> bool:
        """Whether ``length`` rounds have been stored."""
        return self._n >= self.length

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the rounds (:func:`warm_start_buffer_bytes`)."""
        return warm_start_buffer_bytes(self.d1, self.d2, self.length, self.n_trials, self._X.dtype)

    @property
    def pulls(self) -> np.ndarray:
        """Stored rounds with positive weight per arm: ``(K,)``, or ``(B, K)`` batched."""
        n = self._n
        counts = (
            (self._actions[:, :n, None] == np.arange(self.n_actions))
            & (self._weights[:, :n, None] > 0)
        ).sum(axis=1)
        return counts[0] if self.n_trials is None else counts

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
            raise RuntimeError(
                f"WarmStartBuffer is full ({self.length} rounds); call fit() or clear()"
            )
        B = self.n_trials
        Xv = check_context(X, self.d1, self.d2, B)
        a = check_actions(action, self.n_actions, B)
        r = check_rewards(reward, B)
        wv = check_weights(weight, B)
        self.add_validated(Xv if B is not None else Xv[None], a, r, wv)

    def add_validated(self, X: np.ndarray, actions, rewards, weights) -> None:
        """Store one round the caller has validated: ``X`` of shape (B, d1, d2) (``B = 1``
        unbatched), ``actions``, ``rewards`` and ``weights`` of shape (B,) or scalars.  The
        buffer must not be :attr:`full`.

        Raises
        ------
        ValueError
            If the buffer is full, or ``X`` has an entry outside the range of the storage
            dtype (it would be stored as ``inf``); nothing is stored then.
        """
        if self.full:
            raise ValueError(
                f"WarmStartBuffer is full ({self.length} rounds); call fit() or clear()"
            )
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
        i = self._n
        self._X[:, :, i] = X
        self._actions[:, i] = actions
        self._rewards[:, i] = rewards
        self._weights[:, i] = weights
        self._n += 1

    def clear(self) -> None:
        """Forget the stored rounds (the memory stays allocated)."""
        self._n = 0

    def discard_last(self) -> None:
        """Forget the last stored round, e.g. when the fit it completed failed (the
        buffer is then as it was before that round's :meth:`add`)."""
        if self._n == 0:
            raise RuntimeError("WarmStartBuffer.discard_last called on an empty buffer")
        self._n -= 1

    def release(self) -> None:
        """Give the storage up (the buffer is empty and full afterwards: ``length`` 0 is
        not allowed, so further :meth:`add` calls raise).

        With :func:`~agents.buffer_pool.reuse_buffer_memory` on, the storage is kept for the
        next buffer of the same shape; otherwise it is freed as soon as no view of it is
        alive.
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

    def fit(self, **kwargs: Any) -> Any:
        """``M_init`` from the stored rounds: (K, d1, d2) or (B, K, d1, d2).

        Keyword arguments go to :func:`agents.warm_start.nuclear_norm_fit` (``solver=
        "factored"`` by default when ``rank`` is given; ``full_output=True`` returns its
        :class:`~agents.warm_start.NuclearNormFit` instead of the array).
        """
        # Imported here: agents.warm_start re-exports this class.
        from agents.warm_start import nuclear_norm_fit

        if self._n == 0:
            raise RuntimeError("WarmStartBuffer.fit called on an empty buffer; add rounds first")
        if "weights" in kwargs:
            raise ValueError("weights come from add(); do not pass weights to fit")
        X, a, r, w = self.data()
        return nuclear_norm_fit(X, a, r, self.n_actions, weights=w, **kwargs)

    def initial_estimate(self, *, rank: int, context: str = "gaussian", seed: int = 0) -> Any:
        """A start for :meth:`~agents.estimator.LowRankSGD.initialize` from the stored
        rounds, defined for every arm: :func:`agents.warm_start.initial_estimate`.

        Returns
        -------
        ndarray of shape (K, d1, d2) or (B, K, d1, d2)

        Raises
        ------
        RuntimeError
            On an empty buffer.
        FloatingPointError
            If the fit fails (nothing changes: the buffer keeps its rounds).
        """
        from agents.warm_start import initial_estimate

        if self._n == 0:
            raise RuntimeError(
                "WarmStartBuffer.initial_estimate called on an empty buffer; add rounds first"
            )
        X, a, r, w = self.data()
        return initial_estimate(
            X, a, r, self.n_actions, rank=rank, weights=w, context=context, seed=seed
        )

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
        mine = self.state_dict()
        for key in ("d1", "d2", "n_actions", "length", "n_trials", "dtype"):
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            if not same_value(state[key], mine[key]):
                raise ValueError(
                    f"state[{key!r}] = {plain(state[key])!r} does not match this buffer's "
                    f"{mine[key]!r}"
                )
        read_str(state["dtype"], "state['dtype']")
        if "n" not in state:
            raise ValueError("state is missing key 'n'")
        n = read_int(state["n"], "state['n']")
        if n > self.length:
            raise ValueError(f"state['n'] must be an integer in [0, {self.length}], got {n!r}")
        B = self._X.shape[0]
        expected = {
            "X": (B, n, self.d1, self.d2),
            "actions": (B, n),
            "rewards": (B, n),
            "weights": (B, n),
        }
        arrays = {}
        for key, shape in expected.items():
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            arr = np.asarray(state[key])
            if arr.shape != shape:
                raise ValueError(f"state[{key!r}] must have shape {shape}, got {arr.shape}")
            if arr.dtype.kind not in ("iu" if key == "actions" else "f"):
                raise ValueError(f"state[{key!r}] must be a real array, got dtype {arr.dtype}")
            arrays[key] = arr
        check_finite(arrays["X"].astype(np.float64), "state['X']")
        limit = float(np.finfo(self._X.dtype).max)
        if arrays["X"].size and float(np.abs(arrays["X"]).max()) > limit:
            raise ValueError(
                f"state['X'] has entries beyond the range of this buffer's {self._X.dtype} "
                f"storage ({limit:.3g})"
            )
        check_finite(arrays["rewards"], "state['rewards']")
        acts = arrays["actions"]
        if ((acts < 0) | (acts >= self.n_actions)).any():
            raise ValueError(f"state['actions'] must be integers in [0, {self.n_actions})")
        wts = arrays["weights"]
        if not np.isfinite(wts).all() or (wts < 0).any():
            raise ValueError("state['weights'] must be finite and >= 0")
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
