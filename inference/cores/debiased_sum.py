"""The running sum ``sum_t M_tilde_{i,t}`` of Algorithm 2, with held estimates queued.

``sum_t M_tilde_{i,t} = sum_t M_hat_{i,t-1} + sum_t c 1{a_t=i}/pi_t(i) res_t X_t`` (eq. (11),
docs/method.md §4) for every trial and arm, at a per-round cost that does not grow with
``K`` or ``n``:

* ``sum_t M_hat_{i,t-1}``: an estimate only changes when its arm is pulled, so each arm keeps
  the factors it was last given and a count of rounds they have been *held*.  Factors that
  differ from the stored ones first queue ``held * U V^T`` (as transposed factors, never as
  a ``d1 x d2`` matrix), and one GEMM of inner size ``RING * r`` adds the queue to the
  accumulator every ``RING`` rounds.  With an SGD agent only the previous round's pulled arm
  changes: one factor pair per trial per round is queued, not ``K``.
* The correction ``c 1{a_t=i}/pi_t(i) res_t X_t`` goes straight into the accumulator, only
  into the pulled arm's row.

At read-out the accumulator, the queue and the factors still held are added up.

Completion contexts (``X_t = e_j e_kᵀ``) need neither the queue nor a pass over the
accumulator.  The correction is one entry, ``acc[j, k]``.  An SGD step on ``e_j e_kᵀ``
changes ``M_hat = U Vᵀ`` only in row ``j`` and column ``k`` (docs/method.md §3), so when the
caller says so (``support`` in :meth:`DebiasedSum.hold`) the new estimate replaces the old
one *in place*: ``held * (M_old − M_new)`` is added to the accumulator on that row and
column only (the column to a transposed accumulator, ``acc_cols``, where it is contiguous
too), and the count of rounds held goes on.  The invariant ``sum = acc + queued +
held * U Vᵀ`` is the same, so both kinds of change mix freely; this is the identity
``Σ_{t≤n} M_hat_t = n M_hat_n − Σ_s (s − 1) Δ_s`` with ``Δ_s`` the change at round ``s``,
kept at O((d1 + d2) r) per round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.linalg.blas import daxpy as _daxpy

from agents.state import plain
from lrbandit_gym import engine
from lrbandit_gym.onehot import OneHotContexts

__all__ = ["RING", "DebiasedSum", "add_rows"]

# Rounds of held * U V^T terms queued before they are added to the accumulators in one GEMM
# (a bounded buffer of factors, never of contexts).
RING = 16

# Up to this many in-place replacements in a round are made one by one with slices (one
# trial's few changes); more (a batch of trials) with one gather and scatter.
_LOOP_CHANGES = 4

# Arrays of the state, in the order of the persisted state.
_ARRAYS = ("acc", "held", "last_U", "last_V", "ring_U", "ring_V")


def add_rows(
    acc: np.ndarray, rows: np.ndarray, values: np.ndarray, scale: np.ndarray | None = None
) -> None:
    """``acc[rows[j]] += scale[j] * values[j]`` for unique ``rows``, in place.

    One BLAS ``daxpy`` per row touches one contiguous row that stays in cache, where a
    fancy-index ``+=`` gathers and scatters ``B x d1 x d2`` temporaries.  ``acc`` must be
    C-contiguous float64 so that ``daxpy`` updates its rows in place.
    """
    if scale is None:
        scale = np.ones(len(rows))
    for j, (row, s) in enumerate(zip(rows.tolist(), scale.tolist(), strict=True)):
        if s != 0.0:
            _daxpy(values[j], acc[row], a=s)


class DebiasedSum:
    """``sum_t M_tilde_{i,t}`` for ``B`` trials and ``K`` arms (see the module docstring).

    Attributes
    ----------
    acc : ndarray of shape (B, K, d1 * d2)
        The sum minus the queued and the held parts.
    held : ndarray of int64, shape (B, K)
        Rounds the stored factors have been held (their estimate is in no other part yet).
    last_U, last_V : ndarray of shape (B, K, d1, r) and (B, K, d2, r)
        The factors each arm was last given.
    ring_U, ring_V : ndarray of shape (B, K, RING, r, d1) and (B, K, RING, r, d2)
        Queued ``held * U V^T`` terms as transposed factors, slot-major; slots at and after
        ``ring_n`` hold zeros in ``ring_U``.
    ring_n : int
        Rounds queued since the last flush, in ``[0, RING)``.
    initialized : bool
        Whether factors were ever stored (before, every arm counts as changed).
    acc_cols : ndarray of shape (B, K, d2 * d1), or None
        The columns of the in-place replacements, transposed (column ``k`` is the
        contiguous block ``k``): part of the sum, allocated at the first such replacement.
    """

    def __init__(self, B: int, K: int, d1: int, d2: int, r: int) -> None:
        self.shape = (B, K, d1, d2, r)
        self.acc = np.zeros((B, K, d1 * d2))
        self.held = np.zeros((B, K), dtype=np.int64)
        self.last_U = np.zeros((B, K, d1, r))
        self.last_V = np.zeros((B, K, d2, r))
        self.ring_U = np.zeros((B, K, RING, r, d1))
        self.ring_V = np.zeros((B, K, RING, r, d2))
        self.ring_n = 0
        self.initialized = False
        self.acc_cols: np.ndarray | None = None

    # ------------------------------------------------------------------ one round
    def changed(self, U: np.ndarray, V: np.ndarray) -> np.ndarray:
        """(B, K) mask of the arms whose factors differ (exactly) from the stored ones;
        every arm before the first round."""
        if not self.initialized:
            return np.ones(self.held.shape, dtype=bool)
        return (U != self.last_U).any(axis=(2, 3)) | (V != self.last_V).any(axis=(2, 3))

    def hold(
        self,
        bi: np.ndarray,
        ki: np.ndarray,
        U_new: np.ndarray,
        V_new: np.ndarray,
        support: np.ndarray | None = None,
    ) -> None:
        """Arms ``(bi, ki)`` got the factors ``U_new``, ``V_new``: their old ones leave
        ``held * U V^T`` in the queue; then every arm is held one more round.

        ``support`` (m, 2), optional: for each change, ``(j, k)`` such that the new
        estimate differs from the stored one only in row ``j`` and column ``k`` (a step on
        the completion context ``e_j e_kᵀ``; ``(-1, -1)``: not known).  Such a change is
        made in place, at O((d1 + d2) r) (see the module docstring).
        """
        if support is not None and bi.size and self.initialized:
            known = support[:, 0] >= 0
            if known.all():
                self._replace(bi, ki, U_new, V_new, support)
                bi = bi[:0]
            elif known.any():
                self._replace(bi[known], ki[known], U_new[known], V_new[known], support[known])
                rest = ~known
                bi, ki, U_new, V_new = bi[rest], ki[rest], U_new[rest], V_new[rest]
        if bi.size:
            held = self.held[bi, ki]
            live = held > 0
            if live.any():
                b2, k2, h = bi[live], ki[live], held[live]
                queued = self.last_U[b2, k2]
                if (h != 1).any():
                    queued *= h[:, None, None]
                s = self.ring_n
                self.ring_U[b2, k2, s] = queued.swapaxes(-1, -2)
                self.ring_V[b2, k2, s] = self.last_V[b2, k2].swapaxes(-1, -2)
                self.advance(True)
            self.last_U[bi, ki] = U_new
            self.last_V[bi, ki] = V_new
            self.held[bi, ki] = 0
        self.held += 1
        self.initialized = True

    def _replace(
        self,
        bi: np.ndarray,
        ki: np.ndarray,
        U_new: np.ndarray,
        V_new: np.ndarray,
        support: np.ndarray,
    ) -> None:
        """Replace held estimates that changed only in row ``j`` and column ``k``:
        ``acc += held * (M_old − M_new)`` on that row and column, new factors stored, the
        count of rounds held kept."""
        _, K, d1, d2, _ = self.shape
        if self.acc_cols is None:
            self.acc_cols = np.zeros((self.acc.shape[0], K, d2 * d1))
        if engine.compiled():
            from inference.cores import _kernels

            _kernels.replace_held(
                self.acc,
                self.acc_cols,
                self.held,
                self.last_U,
                self.last_V,
                bi,
                ki,
                U_new,
                V_new,
                np.ascontiguousarray(support[:, 0]),
                np.ascontiguousarray(support[:, 1]),
            )
            return
        acc = self.acc.reshape(-1, d1, d2)  # (B K, d1, d2), a view
        cols = self.acc_cols.reshape(-1, d2, d1)  # (B K, d2, d1): column k is row k
        if len(bi) <= _LOOP_CHANGES:  # a few changes (one trial): slices, no gathers
            changes = zip(bi.tolist(), ki.tolist(), *support.T.tolist(), strict=True)
            for n, (b, a, j, k) in enumerate(changes):
                U_old, V_old = self.last_U[b, a], self.last_V[b, a]
                # Row j and column k of M_new − M_old; the entry (j, k) is in the row.
                row = V_new[n] @ U_new[n, j] - V_old @ U_old[j]
                col = U_new[n] @ V_new[n, k] - U_old @ V_old[k]
                col[j] = 0.0
                h = float(self.held[b, a])
                acc[b * K + a, j] -= h * row
                cols[b * K + a, k] -= h * col
                U_old[...] = U_new[n]
                V_old[...] = V_new[n]
            return
        m = len(bi)
        t = np.arange(m)
        j, k = support[:, 0], support[:, 1]
        U_old, V_old = self.last_U[bi, ki], self.last_V[bi, ki]
        row = np.matmul(V_new, U_new[t, j][..., None])[..., 0]
        row -= np.matmul(V_old, U_old[t, j][..., None])[..., 0]
        col = np.matmul(U_new, V_new[t, k][..., None])[..., 0]
        col -= np.matmul(U_old, V_old[t, k][..., None])[..., 0]
        col[t, j] = 0.0
        held = self.held[bi, ki].astype(float)[:, None]
        pair = (bi * K + ki)[:, None]
        acc[pair, j[:, None], np.arange(d2)] -= held * row
        cols[pair, k[:, None], np.arange(d1)] -= held * col
        self.last_U[bi, ki] = U_new
        self.last_V[bi, ki] = V_new

    def advance(self, queued: bool) -> None:
        """Close this round's queue slot if a term was queued in it; flush a full queue."""
        self.initialized = True
        if queued:
            self.ring_n += 1
            if self.ring_n == RING:
                self.flush()

    def add_correction(
        self, action: np.ndarray, X: np.ndarray | OneHotContexts, coef: np.ndarray
    ) -> None:
        """Add ``coef[b] X[b]`` to the sum of trial ``b``'s pulled arm ``action[b]`` (one
        entry per trial for one-hot contexts in index form)."""
        B, K = self.acc.shape[:2]
        if isinstance(X, OneHotContexts):
            self.acc[np.arange(B), action, X.flat] += coef
            return
        rows = np.arange(B) * K + action
        add_rows(self.acc.reshape(B * K, -1), rows, X.reshape(B, -1), coef)

    def flush(self) -> None:
        """Add the queue to the accumulator (one GEMM per trial and arm) and empty it."""
        B, K = self.acc.shape[:2]
        self.acc += self.queued_sum().reshape(B, K, -1)
        self.ring_U[...] = 0.0  # V slots are multiplied by these zeros until rewritten
        self.ring_n = 0

    # ------------------------------------------------------------------ read-out
    def queued_sum(self, arm: int | slice = slice(None)) -> np.ndarray:
        """Sum of the queued ``held * U V^T`` terms, shape (B, [K,] d1, d2)."""
        _, _, d1, d2, r = self.shape
        U, V = self.ring_U[:, arm], self.ring_V[:, arm]  # (B, [K,] L, r, d)
        lead = U.shape[:-3]
        return np.matmul(
            U.reshape(*lead, RING * r, d1).swapaxes(-1, -2), V.reshape(*lead, RING * r, d2)
        )

    def total(self, arm: int) -> np.ndarray:
        """``sum_t M_tilde_{arm,t}`` of every trial, shape (B, d1, d2)."""
        _, _, d1, d2, _ = self.shape
        held = self.held[:, arm].astype(float)[:, None, None]
        out = (
            self.acc[:, arm].reshape(-1, d1, d2)
            + self.queued_sum(arm)
            + np.matmul(self.last_U[:, arm] * held, self.last_V[:, arm].swapaxes(-1, -2))
        )
        if self.acc_cols is not None:
            out += self.acc_cols[:, arm].reshape(-1, d2, d1).swapaxes(-1, -2)
        return out

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """The state as copies: the arrays, ``ring_n`` and ``initialized``."""
        state: dict[str, Any] = {key: getattr(self, key).copy() for key in _ARRAYS}
        if self.acc_cols is not None:  # persisted folded into acc (one layout)
            _, K, d1, d2, _ = self.shape
            B = self.acc.shape[0]
            cols = self.acc_cols.reshape(B, K, d2, d1).swapaxes(-1, -2)
            state["acc"] += cols.reshape(B, K, d1 * d2)
        state["ring_n"] = int(self.ring_n)
        state["initialized"] = bool(self.initialized)
        return state

    @staticmethod
    def check_ring_n(ring_n: Any) -> int:
        """Validate a persisted ``ring_n`` (also the 0-d array ``np.load`` gives back)."""
        ring_n = plain(ring_n)
        if isinstance(ring_n, bool) or not isinstance(ring_n, int | np.integer):
            raise ValueError(f"state['ring_n'] must be an integer, got {ring_n!r}")
        if not 0 <= ring_n < RING:
            raise ValueError(f"state['ring_n'] must be in [0, {RING}), got {ring_n!r}")
        return int(ring_n)

    def load(self, arrays: Mapping[str, np.ndarray], ring_n: int, initialized: bool) -> None:
        """Replace the state by already validated copies (see :meth:`state_dict`)."""
        for key in _ARRAYS:
            setattr(self, key, arrays[key])
        self.ring_n = ring_n
        self.initialized = initialized
        self.acc_cols = None
