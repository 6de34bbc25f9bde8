"""The contexts' second moment estimated as they arrive, per trial, and its whitening.

An :class:`~lrbandit_gym.context_law.EstimatedLaw` is kept here: running sums of the
contexts every round (the warm start's included: contexts arrive whatever the arm), and the
whitening operator ``Σ̂⁻¹`` computed from them.  Round ``t`` is whitened by the estimate of
the rounds before it, so the correction stays predictable; the operator is recomputed when
the rounds seen have grown by :data:`REFRESH_GROWTH` since the last time, which costs
``O(log n)`` decompositions in all and keeps the per-round cost that of one whitening.

* ``"kronecker"`` (with a mean): ``μ̂ = S_X/n``, ``A_r = S_{XXᵀ}/n − μ̂μ̂ᵀ``,
  ``A_c = S_{XᵀX}/n − μ̂ᵀμ̂``, ``τ = S_{‖X‖²}/n − ‖μ̂‖²``; since
  ``E[X Xᵀ] − μμᵀ = tr(C) R``, ``E[Xᵀ X] − μᵀμ = tr(R) C`` and ``E‖X − μ‖² = tr(R) tr(C)``,
  ``R ⊗ C = (A_r ⊗ A_c)/τ``, whitened as ``τ A_r⁻¹ X A_c⁻¹`` and one Sherman-Morrison step
  for the mean (:class:`~lrbandit_gym.context_law.KroneckerLaw`).
* ``"full"``: ``Σ̂ = S_{vec X vec Xᵀ}/n`` and its pseudo-inverse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lrbandit_gym.context_law import EstimatedLaw, condition_number, pseudo_inverse
from lrbandit_gym.onehot import OneHotContexts

__all__ = ["REFRESH_GROWTH", "RunningSecondMoment"]

#: The whitening operator is recomputed once the rounds seen exceed the last computation's
#: count by this factor (and at least one round).
REFRESH_GROWTH = 1.02


class RunningSecondMoment:
    """Running estimate of ``Σ = E[vec X vec Xᵀ]`` for ``B`` trials, and its whitening.

    Parameters
    ----------
    law : EstimatedLaw
        Its ``structure`` ("kronecker" or "full") and sizes.
    n_trials : int
        ``B`` (1 for an unbatched core).
    """

    name = "estimated"
    estimated = True
    isotropic_scale = None

    def __init__(self, law: EstimatedLaw, n_trials: int) -> None:
        self.law = law
        self.d1, self.d2 = law.d1, law.d2
        self.structure = law.structure
        B, d1, d2 = n_trials, self.d1, self.d2
        self.n = 0
        self.refreshed_at = 0
        if self.structure == "kronecker":
            self._sums = {
                "sum_x": np.zeros((B, d1, d2)),
                "sum_rows": np.zeros((B, d1, d1)),
                "sum_cols": np.zeros((B, d2, d2)),
                "sum_sq": np.zeros(B),
            }
            self._op = {
                "row_inv": np.zeros((B, d1, d1)),
                "col_inv": np.zeros((B, d2, d2)),
                "mean_white": np.zeros((B, d1, d2)),
                "mean_gain": np.zeros(B),
                "mean": np.zeros((B, d1, d2)),
                "row_factor": np.zeros((B, d1, d1)),
                "col_factor": np.zeros((B, d2, d2)),
            }
        else:
            p = d1 * d2
            self._sums = {"sum_xx": np.zeros((B, p, p))}
            self._op = {"inverse": np.zeros((B, p, p)), "second_moment": np.zeros((B, p, p))}

    def describe(self) -> str:
        return self.law.describe()

    # ------------------------------------------------------------------ the estimate
    def observe(self, X: np.ndarray | OneHotContexts) -> None:
        """Add one round's contexts, ``(B, d1, d2)`` (one-hot contexts as matrices)."""
        if isinstance(X, OneHotContexts):
            X = X.dense()
        s = self._sums
        if self.structure == "kronecker":
            s["sum_x"] += X
            s["sum_rows"] += np.matmul(X, X.swapaxes(-1, -2))
            s["sum_cols"] += np.matmul(X.swapaxes(-1, -2), X)
            s["sum_sq"] += np.einsum("bij,bij->b", X, X)
        else:
            flat = X.reshape(X.shape[0], -1)
            s["sum_xx"] += flat[:, :, None] * flat[:, None, :]
        self.n += 1

    def _refresh(self) -> None:
        n, s, op = self.n, self._sums, self._op
        if self.structure == "kronecker":
            mu = s["sum_x"] / n
            A_r = s["sum_rows"] / n - np.matmul(mu, mu.swapaxes(-1, -2))
            A_c = s["sum_cols"] / n - np.matmul(mu.swapaxes(-1, -2), mu)
            tau = s["sum_sq"] / n - np.einsum("bij,bij->b", mu, mu)
            op["row_inv"] = pseudo_inverse(A_r) * tau[:, None, None]
            op["col_inv"] = pseudo_inverse(A_c)
            white = np.matmul(np.matmul(op["row_inv"], mu), op["col_inv"])
            op["mean_white"] = white
            op["mean_gain"] = 1.0 / (1.0 + np.einsum("bij,bij->b", mu, white))
            op["mean"] = mu
            op["row_factor"] = A_r / np.where(tau > 0, tau, 1.0)[:, None, None]
            op["col_factor"] = A_c
        else:
            op["second_moment"] = s["sum_xx"] / n
            op["inverse"] = pseudo_inverse(op["second_moment"])
        self.refreshed_at = n

    def condition_numbers(self) -> np.ndarray:
        """The estimate's condition number on its range per trial, ``(B,)`` (1 before any
        context)."""
        if self.refreshed_at == 0:
            return np.ones(self._sums[next(iter(self._sums))].shape[0])
        op = self._op
        if self.structure == "kronecker":
            return condition_number(op["row_factor"]) * condition_number(op["col_factor"])
        return condition_number(op["second_moment"])

    def mean_scale(self) -> np.ndarray:
        """``tr(Σ̂⁺)/(d1 d2)`` per trial, ``(B,)``, of the operator the last whitening used
        (:meth:`lrbandit_gym.context_law.ContextLaw.mean_scale`); NaN before any."""
        op, D = self._op, self.d1 * self.d2
        if self.refreshed_at == 0:
            return np.full(self._sums[next(iter(self._sums))].shape[0], np.nan)
        if self.structure == "kronecker":
            trace = np.trace(op["row_inv"], axis1=-2, axis2=-1) * np.trace(
                op["col_inv"], axis1=-2, axis2=-1
            )
            trace = trace - np.square(op["mean_white"]).sum(axis=(-1, -2)) * op["mean_gain"]
            return trace / D
        return np.trace(op["inverse"], axis1=-2, axis2=-1) / D

    def _current(self) -> None:
        if self.n == 0:
            raise RuntimeError("the estimated context law has seen no context yet")
        if self.n >= max(self.refreshed_at + 1, REFRESH_GROWTH * self.refreshed_at):
            self._refresh()

    def whiten(self, X: np.ndarray) -> np.ndarray:
        """``Σ̂⁻¹ vec X`` per trial, ``X`` of shape ``(B, d1, d2)`` (or ``(B, k, d1, d2)``),
        with the estimate of the contexts observed so far."""
        self._current()
        op = self._op
        lead = (slice(None),) + (None,) * (X.ndim - 3)
        if self.structure == "kronecker":
            out = np.matmul(np.matmul(op["row_inv"][lead], X), op["col_inv"][lead])
            proj = np.einsum("b...ij,bij->b...", X, op["mean_white"]) * op["mean_gain"][lead]
            return out - proj[..., None, None] * op["mean_white"][lead]
        flat = X.reshape(*X.shape[:-2], -1)
        return np.einsum("b...p,bpq->b...q", flat, op["inverse"]).reshape(X.shape)

    def range_part(self, A: np.ndarray) -> np.ndarray:
        """``Σ̂⁺Σ̂ vec A`` per trial for ``A`` (k, d1, d2), shape (B, k, d1, d2): the part of
        each ``A`` along directions the contexts so far take
        (:meth:`lrbandit_gym.context_law.ContextLaw.range_part`)."""
        self._current()
        op = self._op
        if self.structure == "kronecker":  # the centred Kronecker part, and the mean
            S_A = np.matmul(np.matmul(op["row_factor"][:, None], A), op["col_factor"][:, None])
            mu = op["mean"]
            S_A = S_A + np.einsum("kij,bij->bk", A, mu)[..., None, None] * mu[:, None]
            return self.whiten(S_A)
        a = A.reshape(A.shape[0], -1)
        flat = np.einsum("kp,bpq,bqs->bks", a, op["second_moment"], op["inverse"])
        return flat.reshape(-1, *A.shape)

    def predicted_moment(self, A: np.ndarray) -> np.ndarray:
        """``vec Aᵀ Σ̂ vec A`` per trial for probes ``A`` (k, d1, d2), shape (B, k)."""
        self._current()
        op = self._op
        if self.structure == "kronecker":
            R, C, mu = op["row_factor"][:, None], op["col_factor"][:, None], op["mean"]
            out = np.einsum("kij,bkij->bk", A, np.matmul(np.matmul(R, A), C))
            return out + np.einsum("kij,bij->bk", A, mu) ** 2
        a = A.reshape(A.shape[0], -1)
        return np.einsum("kp,bpq,kq->bk", a, op["second_moment"], a)

    # ------------------------------------------------------------------ persistence
    def _arrays(self) -> dict[str, np.ndarray]:
        return {
            **{f"law_{k}": v for k, v in self._sums.items()},
            **{f"law_op_{k}": v for k, v in self._op.items()},
        }

    def state_dict(self) -> dict[str, Any]:
        """Copies of the sums, the operator in use and the counts."""
        state: dict[str, Any] = {k: v.copy() for k, v in self._arrays().items()}
        state["law_n"] = int(self.n)
        state["law_refreshed_at"] = int(self.refreshed_at)
        return state

    def check_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Validated copies of ``state``'s law entries, changing nothing.

        Raises
        ------
        ValueError
            Naming the key that is missing, of the wrong shape or not finite.
        """
        out: dict[str, Any] = {}
        for name, now in self._arrays().items():
            if name not in state:
                raise ValueError(f"state lacks {name!r} (the estimated context law's sums)")
            arr = np.array(state[name], dtype=float)
            if arr.shape != now.shape or not np.isfinite(arr).all():
                raise ValueError(f"state[{name!r}] must be a finite array of shape {now.shape}")
            out[name] = arr
        for name in ("law_n", "law_refreshed_at"):
            value = state.get(name)
            if isinstance(value, np.ndarray) and value.ndim == 0:
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValueError(f"state[{name!r}] must be a non-negative integer; got {value!r}")
            out[name] = int(value)
        if out["law_refreshed_at"] > out["law_n"]:
            raise ValueError("state['law_refreshed_at'] exceeds state['law_n']")
        return out

    def load(self, checked: Mapping[str, Any]) -> None:
        """Assign what :meth:`check_state` returned (cannot fail)."""
        for key in self._sums:
            self._sums[key] = checked[f"law_{key}"]
        for key in self._op:
            self._op[key] = checked[f"law_op_{key}"]
        self.n = checked["law_n"]
        self.refreshed_at = checked["law_refreshed_at"]
