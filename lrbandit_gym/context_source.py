"""Where the simulator's contexts come from, beyond the paper's two laws, and their ``V*``.

:class:`ContextSource` draws the contexts of ``MatrixContextBandit-v0`` when its arguments ask
for a law other than the paper's (docs/method.md §1), and knows that law
(:mod:`lrbandit_gym.context_law`) and the exact optimal value under it:

* ``context_std`` and ``context_corr``: Gaussian contexts ``X = s L_R Z L_Cᵀ`` with ``Z``
  i.i.d. N(0, 1) and AR(1) correlations ``ρ^|i−j|`` between rows and between columns
  (:class:`~lrbandit_gym.context_law.KroneckerLaw`, ``R = s² AR(ρ_row)``,
  ``C = AR(ρ_col)``).  ``(<M_a, X>)_a`` is then Gaussian with covariance
  ``G_ab = tr(M_aᵀ R M_b C)`` and ``V*`` is the expected maximum of that vector, exactly as
  for the paper's law.
* ``entry_probs``: completion contexts revealing ``(j, k)`` with probability ``p_jk``
  (:class:`~lrbandit_gym.context_law.EntryLaw`); ``V* = Σ_jk p_jk max_a M_a[j, k]``.
* ``contexts``: a data set ``(N, d1, d2)`` (images, say), drawn from uniformly with
  replacement; the law is its exact second moment
  (:class:`~lrbandit_gym.context_law.SecondMomentLaw`) and ``V*`` the mean over the data
  set of ``max_a <M_a, X_i>``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lrbandit_gym.context_law import (
    ContextLaw,
    EntryLaw,
    KroneckerLaw,
    SecondMomentLaw,
    ar1_correlation,
)
from lrbandit_gym.input_checks import MAX_MAGNITUDE

__all__ = ["ContextSource"]

#: Largest ``d1 d2`` for which a data set's law is kept as its whole second moment.
DATASET_LAW_LIMIT = 4096


def _corr_pair(context_corr: Any) -> tuple[float, float]:
    pair = np.broadcast_to(np.asarray(context_corr, dtype=float), (2,))
    if not np.isfinite(pair).all() or (np.abs(pair) >= 1).any():
        raise ValueError(
            f"context_corr must be a correlation in (-1, 1), or a (row, column) pair of them; "
            f"got {context_corr!r}"
        )
    return float(pair[0]), float(pair[1])


class ContextSource:
    """The simulator's contexts under a law other than the paper's two.

    Parameters
    ----------
    d1, d2 : int
    context : {"gaussian", "completion"}
    context_std : float
        Gaussian contexts: the entries' standard deviation.
    context_corr : float or (float, float)
        Gaussian contexts: the AR(1) correlation of neighbouring rows and columns.
    entry_probs : array_like of shape (d1, d2) or None
        Completion contexts: how often each entry is revealed.
    contexts : array_like of shape (N, d1, d2) or None
        A data set to draw from.
    """

    def __init__(self, d1, d2, context, context_std, context_corr, entry_probs, contexts):
        self.d1, self.d2 = d1, d2
        self.kind = None
        self.law: ContextLaw | None = None
        std = float(context_std)
        if not (math.isfinite(std) and 0 < std <= 1e50):
            raise ValueError(f"context_std must be positive and finite; got {context_std!r}")
        rho = _corr_pair(context_corr)
        plain_gaussian = std == 1.0 and rho == (0.0, 0.0)
        if contexts is not None:
            if not plain_gaussian or entry_probs is not None:
                raise ValueError("contexts= takes no context_std, context_corr or entry_probs")
            data = np.array(contexts, dtype=float)
            if data.ndim != 3 or data.shape[1:] != (d1, d2) or data.shape[0] < 1:
                raise ValueError(
                    f"contexts must have shape (N, {d1}, {d2}) with N >= 1; got {data.shape}"
                )
            if not (np.abs(data) <= MAX_MAGNITUDE).all():
                raise ValueError("contexts must be finite, with entries at most MAX_MAGNITUDE")
            self.kind, self.data = "dataset", data
            self._flat = data.reshape(data.shape[0], -1)
            if d1 * d2 <= DATASET_LAW_LIMIT:
                self.law = SecondMomentLaw.of_contexts(data)
            return
        if context == "completion":
            if not plain_gaussian:
                raise ValueError("context_std and context_corr describe Gaussian contexts")
            if entry_probs is not None:
                self.law = EntryLaw(entry_probs)
                if self.law.probs.shape != (d1, d2):
                    raise ValueError(f"entry_probs must have shape ({d1}, {d2})")
                self.kind = "entries"
                self._p = self.law.probs.ravel()
            return
        if entry_probs is not None:
            raise ValueError("entry_probs describes completion contexts (context='completion')")
        if not plain_gaussian:
            R = std * std * ar1_correlation(d1, rho[0])
            C = ar1_correlation(d2, rho[1])
            self.law = KroneckerLaw(R, C)
            self.kind = "kronecker"
            self._Lr = np.linalg.cholesky(R)
            self._LcT = np.linalg.cholesky(C).T

    @property
    def active(self) -> bool:
        """Whether the contexts differ from the paper's two laws."""
        return self.kind is not None

    def draw(self, rng: np.random.Generator, batch: int, dtype, matrix: bool = True):
        """``(X, flat_index)`` as
        :meth:`lrbandit_gym.problem.BanditProblem.draw_contexts` returns them."""
        if self.kind == "kronecker":
            Z = rng.standard_normal((batch, self.d1, self.d2))
            return np.matmul(np.matmul(self._Lr, Z), self._LcT).astype(dtype, copy=False), None
        if self.kind == "dataset":
            idx = rng.integers(0, self.data.shape[0], size=batch)
            return self.data[idx].astype(dtype), None
        flat_index = rng.choice(self._p.size, size=batch, p=self._p)
        if not matrix:
            return None, flat_index
        x = np.zeros((batch, self.d1 * self.d2), dtype=dtype)
        x[np.arange(batch), flat_index] = 1
        return x.reshape(batch, self.d1, self.d2), flat_index

    def context_mean(self) -> np.ndarray:
        """``E[X]``, shape (d1, d2)."""
        if self.kind == "dataset":
            return self.data.mean(axis=0)
        if self.kind == "entries":
            return self.law.probs
        return np.zeros((self.d1, self.d2))

    def optimal_value(self, params: np.ndarray, gaussian_expected_max) -> float:
        """Exact ``V* = E[max_a <M_a, X>]`` under this source (module docstring)."""
        if self.kind == "dataset":
            flat = params.reshape(params.shape[0], -1)
            return float((self._flat @ flat.T).max(axis=1).mean())
        if self.kind == "entries":
            return float((params.max(axis=0) * self.law.probs).sum())
        law = self.law
        gram = np.einsum("aij,ik,bkl,jl->ab", params, law.row_cov, params, law.col_cov)
        if params.shape[0] == 2:
            var = gram[0, 0] + gram[1, 1] - 2 * gram[0, 1]
            return float(math.sqrt(max(var, 0.0)) / math.sqrt(2 * math.pi))
        return float(gaussian_expected_max(gram))
