"""Warm-start store for completion contexts: indices and values, 32 bytes a round.

A completion context ``e_j e_kᵀ`` is known by its index, so the warm start of eq. (10)
needs, per round, the flat position ``j d2 + k`` (int64), the action (int64), the reward
and the weight (float64): 32 bytes, whatever ``d1 x d2``.  A
:class:`~agents.warm_start.dense.WarmStartBuffer` would store the ``d1 x d2`` matrix
(4 MB a round in float32 at 1000 x 1000: 186 GiB for a 50,000-round warm start).  The fit
reads the indices directly (:mod:`agents.warm_start.factored_completion`), so no context
matrix is formed at any point.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.warm_start.store import RoundStore
from lrbandit_gym.input_checks import (
    check_actions,
    check_context,
    check_rewards,
    check_weights,
)
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like, one_hot_contexts
from lrbandit_gym.rounds import Round

__all__ = ["ROUND_BYTES", "CompletionWarmStartBuffer", "completion_buffer_bytes"]

#: Bytes a :class:`CompletionWarmStartBuffer` stores per round and trial: the flat index,
#: the action (int64), the reward and the weight (float64).
ROUND_BYTES = 32


def completion_buffer_bytes(length: int, n_trials: int | None = None) -> int:
    """Bytes a :class:`CompletionWarmStartBuffer` allocates: ``B * length * 32``
    (``B = 1`` unbatched), independent of ``d1 x d2``."""
    b = 1 if n_trials is None else int(n_trials)
    return b * int(length) * ROUND_BYTES


class CompletionWarmStartBuffer(RoundStore):
    """Preallocated store of a warm start's completion rounds, as indices
    (:class:`~agents.warm_start.dense.WarmStartBuffer`'s interface).

    Memory is ``32 * length`` bytes per trial (:func:`completion_buffer_bytes`), allocated
    once.  A round's context is given as its index ``[j, k]`` (shape (2,), or (B, 2)) or as
    the dense one-hot matrix, which is converted; any other matrix is refused
    (``ValueError``: the warm start of a completion problem fits one-hot data).

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    n_actions : int
        Number of arms ``K``.
    length : int
        Capacity in rounds.
    n_trials : int or None, default None
        Batch size ``B`` (None: unbatched API, as in :class:`~agents.estimator.LowRankSGD`).

    Examples
    --------
    >>> buf = CompletionWarmStartBuffer(4, 3, n_actions=2, length=2)
    >>> buf.add([2, 1], action=0, reward=1.0)
    >>> buf.n, buf.nbytes
    (1, 64)
    """

    _default_context = "completion"

    def __init__(
        self, d1: int, d2: int, n_actions: int, length: int, n_trials: int | None = None
    ) -> None:
        B = self._init_rounds(d1, d2, n_actions, length, n_trials)
        # Round-major (length, B): a round of every trial is one contiguous write.
        self._flat = np.zeros((self.length, B), dtype=np.int64)
        self._actions = np.zeros((self.length, B), dtype=np.int64)
        self._rewards = np.zeros((self.length, B))
        self._weights = np.zeros((self.length, B))

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the rounds (:func:`completion_buffer_bytes`)."""
        return completion_buffer_bytes(self.length, self.n_trials)

    def _round_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._actions[: self._n].T, self._weights[: self._n].T

    def _one_hot(self, X: Any) -> OneHotContexts:
        """Index-form contexts (B,) from an index or a dense one-hot stack (B, d1, d2)."""
        if isinstance(X, OneHotContexts):
            return X
        ctx = one_hot_contexts(np.asarray(X))
        if ctx is None:
            flat = np.asarray(X).reshape(np.shape(X)[0], -1)
            nz = np.count_nonzero(flat, axis=1)
            b = int(np.argmax((nz != 1) | (flat.sum(axis=1) != 1.0)))
            where = "" if self.n_trials is None else f" (trial {b})"
            raise ValueError(
                f"context='completion' needs one-hot contexts e_j e_kᵀ (or their index "
                f"[j, k]); X has {int(nz[b])} non-zero entries summing to "
                f"{float(flat[b].sum())!r}{where}"
            )
        return ctx

    def add(self, X: Any, action: Any, reward: Any, weight: Any = 1.0) -> None:
        """Store one round (validated first; a rejected round changes nothing).

        Parameters
        ----------
        X : array_like of int of shape (2,) or (B, 2), or of shape (d1, d2) or (B, d1, d2)
            The context's index ``[j, k]``, or the one-hot matrix ``e_j e_kᵀ``.
        action : int or array_like of int, shape (B,)
        reward : float or array_like of shape (B,)
        weight : float or array_like of shape (B,), default 1.0
            E.g. ``1/pi_t(a_t)`` when the actions were not uniformly random.

        Raises
        ------
        RuntimeError
            If the buffer is full.
        ValueError
            On invalid input (an index out of range, a matrix that is not one-hot, ...).
        """
        if self.full:
            raise self._full_error(RuntimeError)
        B = self.n_trials
        if is_index_like(X, B):
            ctx = check_index(X, self.d1, self.d2, B)
        else:
            Xv = check_context(X, self.d1, self.d2, B)
            ctx = self._one_hot(Xv if B is not None else Xv[None])
        a = check_actions(action, self.n_actions, B)
        r = check_rewards(reward, B)
        wv = check_weights(weight, B)
        self.add_round(Round(ctx, a, r, None), wv)

    def add_round(self, round_: Round, weights: Any = 1.0) -> None:
        """Store one checked round (:meth:`add` is this behind the check of the raw
        inputs): its contexts a :class:`~lrbandit_gym.onehot.OneHotContexts` of ``B``
        contexts or a dense stack (B, d1, d2) (``B = 1`` unbatched), actions and rewards of
        shape (B,), with ``weights`` of shape (B,) or a scalar (its propensities are not
        read).

        Raises
        ------
        ValueError
            If the buffer is full, or a dense context is not one-hot; nothing is stored
            then.
        """
        if self.full:
            raise self._full_error(ValueError)
        ctx = self._one_hot(round_.contexts)
        i = self._n
        self._flat[i] = ctx.flat
        self._actions[i] = round_.actions
        self._rewards[i] = round_.rewards
        self._weights[i] = weights
        self._n += 1

    def release(self) -> None:
        """Give the storage up (the buffer is empty and full afterwards)."""
        B = self._flat.shape[1]
        self._flat = np.zeros((0, B), dtype=np.int64)
        self._actions = np.zeros((0, B), dtype=np.int64)
        self._rewards = np.zeros((0, B))
        self._weights = np.zeros((0, B))
        self._n = 0
        self.length = 0

    def data(self) -> tuple[OneHotContexts, np.ndarray, np.ndarray, np.ndarray]:
        """The stored ``(X, actions, rewards, weights)``: ``X`` as
        :class:`~lrbandit_gym.onehot.OneHotContexts` of shape ``(n, d1, d2)`` (batched
        ``(B, n, d1, d2)``), the others views of shape ``(n,)`` (``(B, n)``)."""
        n = self._n
        X = OneHotContexts.from_flat(self._flat[:n].T, self.d1, self.d2)
        parts = (X, self._actions[:n].T, self._rewards[:n].T, self._weights[:n].T)
        if self.n_trials is None:
            parts = tuple(p[0] for p in parts)
        return parts  # type: ignore[return-value]

    def state_dict(self) -> dict[str, Any]:
        """Configuration and stored rounds as plain numpy arrays and scalars (copies);
        ``index`` holds the contexts as ``(B, n, 2)`` pairs ``(j, k)``."""
        n = self._n
        return {
            "d1": self.d1,
            "d2": self.d2,
            "n_actions": self.n_actions,
            "length": self.length,
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "format": "index",
            "n": n,
            "index": np.stack(np.divmod(self._flat[:n].T, self.d2), axis=-1),
            "actions": self._actions[:n].T.copy(),
            "rewards": self._rewards[:n].T.copy(),
            "weights": self._weights[:n].T.copy(),
        }

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` against this buffer's configuration, changing nothing.

        Raises
        ------
        ValueError
            On a missing key, a configuration that differs from this buffer's, or arrays of
            the wrong shape or with invalid entries.
        """
        B = self._flat.shape[1]
        n, arrays = self._check_state(
            state,
            ("d1", "d2", "n_actions", "length", "n_trials", "format"),
            lambda n: {"index": (B, n, 2), "actions": (B, n), "rewards": (B, n), "weights": (B, n)},
            integer=("index", "actions"),
        )
        idx = arrays["index"]
        if ((idx < 0) | (idx >= np.array([self.d1, self.d2]))).any():
            raise ValueError(
                f"state['index'] must hold pairs (j, k) with 0 <= j < {self.d1} and "
                f"0 <= k < {self.d2}"
            )
        return {"n": n, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same configuration; everything
        is checked first (:meth:`validate_state_dict`), so a failure changes nothing."""
        checked = self.validate_state_dict(state)
        n = checked["n"]
        idx = checked["index"].astype(np.int64)
        self._flat[:n] = (idx[..., 0] * self.d2 + idx[..., 1]).T
        self._actions[:n] = checked["actions"].T
        self._rewards[:n] = checked["rewards"].T
        self._weights[:n] = checked["weights"].T
        self._n = n
