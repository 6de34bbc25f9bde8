"""The law of the contexts, as the debiasing reads it: their second moment.

Every correction of Algorithm 2 multiplies the round's residual by ``Σ⁻¹ vec X_t``, where
``Σ = E[vec X vec Xᵀ]`` is the contexts' second moment (not centred: a mean is part of it),
because then, for any fixed ``A``,

    E[<A, X> Σ⁻¹ vec X] = Σ⁻¹ Σ vec A = vec A                              (docs/method.md §1)

whatever the law (docs/method.md §4).  The paper's contexts have i.i.d. N(0, 1) entries
(``Σ = I``) and Appendix C's a uniformly drawn single entry (``Σ = I/(d1 d2)``): for those two
the correction is a scalar ``c`` times ``X_t``, which is what :class:`IsotropicLaw` keeps.
Every other law here whitens the context by its own ``Σ``:

* :class:`KroneckerLaw`: the matrix-normal model ``Cov(X_ij, X_kl) = R_ik C_jl`` (correlated
  rows and columns, as neighbouring pixels are), optionally with a mean; whitening is
  ``R⁻¹ X C⁻¹`` at ``O(d1 d2 (d1 + d2))`` a round;
* :class:`SecondMomentLaw`: any ``Σ``, given whole (``d1 d2 x d1 d2``, for small contexts);
* :class:`EntryLaw`: completion contexts whose entry ``(j, k)`` is revealed with probability
  ``p_jk`` (real rating data is not uniform): ``Σ = diag(p)``;
* :class:`EstimatedLaw`: ``Σ`` estimated from the contexts themselves as they arrive (they
  arrive every round, whatever the arm), by the inference cores
  (:mod:`inference.cores.running_law`).

``vec`` is numpy's row-major ``X.reshape(-1)`` throughout.  A singular ``Σ`` (a pixel that is
always 0) is inverted on its range: the directions no context ever takes are not identified
by the data, and a target with a component there is only as good as the low-rank estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ContextLaw",
    "EntryLaw",
    "EstimatedLaw",
    "IsotropicLaw",
    "KroneckerLaw",
    "SecondMomentLaw",
    "CONDITION_LIMIT",
    "ar1_correlation",
    "as_context_law",
    "condition_number",
    "law_from_arrays",
    "pseudo_inverse",
]

#: Eigenvalues below this fraction of the largest are treated as zero when ``Σ`` (or a
#: factor) is inverted: such directions are outside the contexts' span.
RANGE_FLOOR = 1e-10


def pseudo_inverse(S: np.ndarray, floor: float = RANGE_FLOOR) -> np.ndarray:
    """Symmetric pseudo-inverse of a stack of positive semi-definite matrices ``(..., p, p)``,
    dropping eigenvalues at or below ``floor`` times the largest."""
    w, Q = np.linalg.eigh(S)
    top = w.max(axis=-1, keepdims=True)
    keep = (w > floor * top) & (top > 0)
    inv = np.where(keep, 1.0 / np.where(keep, w, 1.0), 0.0)
    return np.matmul(Q * inv[..., None, :], Q.swapaxes(-1, -2))


def condition_number(S: np.ndarray, floor: float = RANGE_FLOOR) -> np.ndarray:
    """Largest over smallest eigenvalue of a stack of positive semi-definite matrices
    ``(..., p, p)`` on their range (eigenvalues at or below ``floor`` times the largest,
    directions no context takes, left out); 1 for a zero matrix."""
    w = np.linalg.eigvalsh(S)
    top = w[..., -1]
    kept = np.where(w > floor * top[..., None], w, np.inf).min(axis=-1)
    return np.where(top > 0, top / np.where(np.isfinite(kept), kept, top), 1.0)


#: Condition number of the second moment (on its range) above which the parameter
#: intervals warn: the contexts barely vary along some directions, the low-rank estimate is
#: poorly identified there, and on real images the intervals miss (docs/method.md §11).
#: AR(1) correlations of 0.9 between rows and between columns give 4.5·10⁴ at 20 × 20
#: (estimated: up to 6.3·10⁴; at most 1.3·10⁵ at any size) and cover; the digits images
#: give 4.2·10⁶, and an estimate from 1300 of them at least 6.4·10⁵, and do not.
CONDITION_LIMIT = 3e5


def ar1_correlation(d: int, rho: float) -> np.ndarray:
    """The AR(1) correlation matrix ``rho^|i - j|`` of size ``d``."""
    idx = np.arange(d)
    return float(rho) ** np.abs(idx[:, None] - idx[None, :])


def _square(matrix: Any, d: int, name: str) -> np.ndarray:
    a = np.array(matrix, dtype=float)
    if a.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}); got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite; got NaN or inf entries")
    if not np.allclose(a, a.T, rtol=1e-10, atol=1e-12 * max(1.0, float(np.abs(a).max()))):
        raise ValueError(f"{name} must be symmetric")
    a = (a + a.T) / 2
    w = np.linalg.eigvalsh(a)
    if w[0] < -1e-10 * max(w[-1], 0.0) or w[-1] <= 0:
        raise ValueError(
            f"{name} must be positive semi-definite and non-zero; its eigenvalues run from "
            f"{w[0]:.3g} to {w[-1]:.3g}"
        )
    return a


class ContextLaw:
    """The contexts' second moment ``Σ = E[vec X vec Xᵀ]``, as the debiasing uses it.

    Subclasses implement :meth:`whiten`; :attr:`isotropic_scale` is ``c`` where
    ``Σ = I / c`` (then the correction is ``c·X``, the paper's arithmetic, bit for bit).
    """

    #: Name written into logs and messages.
    name: str = "law"
    #: ``c`` with ``Σ = I/c``, or None when ``Σ`` is not a multiple of the identity.
    isotropic_scale: float | None = None
    #: Whether the law is estimated from the contexts as they arrive.
    estimated: bool = False

    def __init__(self, d1: int, d2: int) -> None:
        self.d1, self.d2 = int(d1), int(d2)

    def whiten(self, X: np.ndarray) -> np.ndarray:
        """``Σ⁻¹ vec X`` as matrices, for a stack ``X`` of shape ``(B, d1, d2)``."""
        raise NotImplementedError

    def predicted_moment(self, A: np.ndarray) -> np.ndarray:
        """``E<A, X>² = vec Aᵀ Σ vec A`` for a stack of probes ``(k, d1, d2)``, shape (k,)
        (what the context check predicts for its probes, :mod:`inference.cores.context_check`)."""
        raise NotImplementedError

    def condition_number(self) -> float:
        """The condition number of ``Σ`` on its range (:func:`condition_number`)."""
        return 1.0

    def mean_scale(self) -> float:
        """``tr(Σ⁺)/(d1 d2)``, the mean of ``Σ⁺``'s diagonal: the variance an entry of a
        least-squares fit of ``M`` carries per observation and unit noise variance (``c``
        under ``Σ = I/c``).  The parameter intervals size the one-step read-out's remainder
        with it (:mod:`inference.cores.remainder`)."""
        raise NotImplementedError

    def range_part(self, A: np.ndarray) -> np.ndarray:
        """``Σ⁺Σ vec A`` as matrices, for a stack ``A`` of shape ``(k, d1, d2)``: the part of
        each ``A`` along directions the contexts take.  ``<M, A>`` is identified by the
        contexts without the low-rank model only when ``A`` is its own range part."""
        return A

    def entry_scale(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``Σ⁻¹`` on the one-hot context ``e_j e_kᵀ`` is ``s_jk e_j e_kᵀ``: ``s`` per trial.

        Only laws whose ``Σ`` is diagonal have this; others raise ``TypeError``."""
        raise TypeError(f"the {self.name!r} law does not whiten one-hot contexts entrywise")

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays that describe the law (saved with a log), by key."""
        return {}

    def describe(self) -> str:
        """A short phrase for messages."""
        return repr(self.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()}, d1={self.d1}, d2={self.d2})"


class IsotropicLaw(ContextLaw):
    """``Σ = I / c``: the paper's i.i.d. N(0, 1) entries (``"gaussian"``, ``c = 1``) or
    Appendix C's uniformly revealed entry (``"completion"``, ``c = d1 d2``)."""

    def __init__(self, d1: int, d2: int, name: str = "gaussian") -> None:
        super().__init__(d1, d2)
        if name not in ("gaussian", "completion"):
            raise ValueError(f"name must be 'gaussian' or 'completion'; got {name!r}")
        self.name = name
        self.isotropic_scale = float(self.d1 * self.d2) if name == "completion" else 1.0

    def whiten(self, X: np.ndarray) -> np.ndarray:
        return self.isotropic_scale * X

    def predicted_moment(self, A: np.ndarray) -> np.ndarray:
        return np.einsum("kij,kij->k", A, A) / self.isotropic_scale

    def entry_scale(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return np.full(np.shape(rows), self.isotropic_scale)

    def mean_scale(self) -> float:
        return self.isotropic_scale


class KroneckerLaw(ContextLaw):
    """Matrix-normal contexts: ``Cov(X_ij, X_kl) = R_ik C_jl`` and mean ``μ``.

    ``Σ = R ⊗ C + vec μ vec μᵀ`` (row-major ``vec``).  With ``μ = 0``,
    ``E[X Xᵀ] = tr(C) R`` and ``E[Xᵀ X] = tr(R) C``.  Whitening is ``R⁻¹ X C⁻¹`` and, with a
    mean, one Sherman-Morrison correction: ``O(d1 d2 (d1 + d2))`` a round.

    Parameters
    ----------
    row_cov : array_like of shape (d1, d1)
        ``R``, positive semi-definite.
    col_cov : array_like of shape (d2, d2)
        ``C``, positive semi-definite.  Only ``R ⊗ C`` matters: ``(sR, C/s)`` is the same law.
    mean : array_like of shape (d1, d2), optional
        ``μ = E[X]``; default zero.
    """

    name = "kronecker"

    def __init__(self, row_cov: Any, col_cov: Any, mean: Any = None) -> None:
        r = np.asarray(row_cov)
        c = np.asarray(col_cov)
        if r.ndim != 2 or c.ndim != 2:
            raise ValueError(
                f"row_cov and col_cov must be square matrices; got shapes {r.shape}, {c.shape}"
            )
        super().__init__(r.shape[0], c.shape[0])
        self.row_cov = _square(r, self.d1, "row_cov")
        self.col_cov = _square(c, self.d2, "col_cov")
        self._row_inv = pseudo_inverse(self.row_cov)
        self._col_inv = pseudo_inverse(self.col_cov)
        self.mean = None
        if mean is not None:
            m = np.array(mean, dtype=float)
            if m.shape != (self.d1, self.d2) or not np.isfinite(m).all():
                raise ValueError(f"mean must be a finite ({self.d1}, {self.d2}) array")
            self.mean = m
            self._mean_white = self._row_inv @ m @ self._col_inv  # S⁻¹ μ, S = R ⊗ C
            self._mean_gain = 1.0 / (1.0 + float(np.sum(m * self._mean_white)))

    def condition_number(self) -> float:
        return float(condition_number(self.row_cov) * condition_number(self.col_cov))

    def mean_scale(self) -> float:
        # tr((S + μμᵀ)⁺) = tr(R⁺) tr(C⁺) − ‖S⁺μ‖²/(1 + μᵀS⁺μ), S = R ⊗ C
        trace = float(np.trace(self._row_inv) * np.trace(self._col_inv))
        if self.mean is not None:
            trace -= float(np.sum(self._mean_white**2)) * self._mean_gain
        return trace / (self.d1 * self.d2)

    def range_part(self, A: np.ndarray) -> np.ndarray:
        # range(R ⊗ C + vec μ vec μᵀ) = range(R ⊗ C) + span(μ), μ in range(R ⊗ C) or not.
        P_r, P_c = self._row_inv @ self.row_cov, self.col_cov @ self._col_inv
        out = np.matmul(np.matmul(P_r, A), P_c)
        if self.mean is not None:
            rest = self.mean - P_r @ self.mean @ P_c
            norm2 = float(np.sum(rest * rest))
            if norm2 > RANGE_FLOOR * float(np.sum(self.mean * self.mean)):
                out = out + np.einsum("kij,ij->k", A, rest)[:, None, None] * rest / norm2
        return out

    def whiten(self, X: np.ndarray) -> np.ndarray:
        out = np.matmul(np.matmul(self._row_inv, X), self._col_inv)
        if self.mean is not None:  # (S + μμᵀ)⁻¹ x = S⁻¹x − S⁻¹μ (μᵀS⁻¹x)/(1 + μᵀS⁻¹μ)
            proj = np.einsum("ij,bij->b", self._mean_white, X) * self._mean_gain
            out -= proj[:, None, None] * self._mean_white
        return out

    def predicted_moment(self, A: np.ndarray) -> np.ndarray:
        out = np.einsum("kij,kij->k", A, np.matmul(np.matmul(self.row_cov, A), self.col_cov))
        if self.mean is not None:
            out = out + np.einsum("kij,ij->k", A, self.mean) ** 2
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"context_row_cov": self.row_cov, "context_col_cov": self.col_cov}
        if self.mean is not None:
            out["context_mean"] = self.mean
        return out

    def describe(self) -> str:
        mean = ", with a mean" if self.mean is not None else ""
        return f"'kronecker' (row and column covariances{mean})"


class SecondMomentLaw(ContextLaw):
    """Any law, given by its whole second moment ``Σ = E[vec X vec Xᵀ]`` (row-major ``vec``),
    of shape ``(d1 d2, d1 d2)``; whitening costs ``O((d1 d2)²)`` a round.

    Parameters
    ----------
    second_moment : array_like of shape (d1 * d2, d1 * d2)
        Positive semi-definite.
    shape : tuple of int
        ``(d1, d2)``.
    """

    name = "second_moment"

    def __init__(self, second_moment: Any, shape: tuple[int, int]) -> None:
        d1, d2 = (int(s) for s in shape)
        super().__init__(d1, d2)
        self.second_moment = _square(second_moment, d1 * d2, "second_moment")
        self._inv = pseudo_inverse(self.second_moment)

    @classmethod
    def of_contexts(cls, contexts: Any) -> SecondMomentLaw:
        """The exact second moment of a data set ``(N, d1, d2)`` drawn from uniformly."""
        X = np.asarray(contexts, dtype=float)
        flat = X.reshape(X.shape[0], -1)
        return cls(flat.T @ flat / X.shape[0], X.shape[1:])

    def condition_number(self) -> float:
        return float(condition_number(self.second_moment))

    def mean_scale(self) -> float:
        return float(np.trace(self._inv)) / (self.d1 * self.d2)

    def whiten(self, X: np.ndarray) -> np.ndarray:
        flat = X.reshape(X.shape[0], -1)
        return (flat @ self._inv).reshape(X.shape)

    def range_part(self, A: np.ndarray) -> np.ndarray:
        flat = A.reshape(A.shape[0], -1)
        return (flat @ self.second_moment @ self._inv).reshape(A.shape)

    def predicted_moment(self, A: np.ndarray) -> np.ndarray:
        a = A.reshape(A.shape[0], -1)
        return np.einsum("kp,pq,kq->k", a, self.second_moment, a)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"context_second_moment": self.second_moment}

    def describe(self) -> str:
        return "'second_moment' (a given Σ)"


class EntryLaw(ContextLaw):
    """Completion contexts ``e_j e_kᵀ`` whose entry ``(j, k)`` is revealed with probability
    ``p_jk``: ``Σ = diag(p)``, so the correction is ``X / p_jk``.

    Parameters
    ----------
    probs : array_like of shape (d1, d2)
        Non-negative, summing to 1 (rescaled if they sum to another positive number, such
        as counts).  An entry of probability 0 is never revealed and not identified.
    """

    name = "entries"

    def __init__(self, probs: Any) -> None:
        p = np.array(probs, dtype=float)
        if p.ndim != 2:
            raise ValueError(f"probs must be a (d1, d2) array; got shape {p.shape}")
        super().__init__(*p.shape)
        if not np.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
            raise ValueError("probs must be finite, non-negative and not all zero")
        self.probs = p / p.sum()
        with np.errstate(divide="ignore"):
            self._inv = np.where(self.probs > 0, 1.0 / self.probs, 0.0)

    @classmethod
    def of_counts(cls, rows: Any, cols: Any, shape: tuple[int, int]) -> EntryLaw:
        """The frequencies of the revealed entries ``(rows[t], cols[t])``."""
        counts = np.zeros(shape)
        np.add.at(counts, (np.asarray(rows), np.asarray(cols)), 1.0)
        return cls(counts)

    def condition_number(self) -> float:
        p = self.probs[self.probs > 0]
        return float(p.max() / p.min())

    def mean_scale(self) -> float:
        return float(self._inv.sum()) / (self.d1 * self.d2)

    def whiten(self, X: np.ndarray) -> np.ndarray:
        return X * self._inv

    def range_part(self, A: np.ndarray) -> np.ndarray:
        return A * (self.probs > 0)

    def entry_scale(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return self._inv[rows, cols]

    def predicted_moment(self, A: np.ndarray) -> np.ndarray:
        return np.einsum("kij,ij,kij->k", A, self.probs, A)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"context_entry_probs": self.probs}

    def describe(self) -> str:
        return "'entries' (given entry frequencies)"


class EstimatedLaw(ContextLaw):
    """``Σ`` estimated from the contexts as they arrive (every round, whatever the arm).

    A specification: each inference core keeps its own running estimate per trial
    (:class:`inference.cores.running_law.RunningSecondMoment`), from every context its wrapper
    sees (the warm start's included), and whitens round ``t`` by the estimate of the rounds
    before it.  ``structure``:

    * ``"kronecker"``: the matrix-normal model with a mean, ``d1² + d2² + d1 d2`` numbers,
      each estimated from many contexts' rows or columns: accurate after a few hundred
      rounds whatever the size;
    * ``"full"``: the whole ``Σ``, ``(d1 d2)²`` numbers, for laws without that structure
      (images); needs many more contexts than ``d1 d2``;
    * ``"auto"`` (default): ``"full"`` up to ``d1 d2 <= FULL_LIMIT``, else ``"kronecker"``.
    """

    name = "estimated"
    estimated = True
    #: Largest ``d1 d2`` for which ``structure="auto"`` estimates the whole ``Σ``.
    FULL_LIMIT = 100

    def __init__(self, d1: int, d2: int, structure: str = "auto") -> None:
        super().__init__(d1, d2)
        if structure not in ("auto", "kronecker", "full"):
            raise ValueError(f"structure must be 'auto', 'kronecker' or 'full'; got {structure!r}")
        if structure == "auto":
            structure = "full" if self.d1 * self.d2 <= self.FULL_LIMIT else "kronecker"
        self.structure = structure

    def whiten(self, X: np.ndarray) -> np.ndarray:
        raise TypeError("an estimated law whitens through its running estimate")

    def describe(self) -> str:
        return f"'estimated' ({self.structure} second moment from the contexts)"


#: The names :func:`as_context_law` takes.
LAW_NAMES = ("gaussian", "completion", "estimated", "estimated-kronecker", "estimated-full")


def as_context_law(spec: Any, d1: int, d2: int) -> ContextLaw:
    """A :class:`ContextLaw` from a name or a law.

    Parameters
    ----------
    spec : str or ContextLaw
        ``"gaussian"``, ``"completion"``, ``"estimated"`` (``structure="auto"``),
        ``"estimated-kronecker"`` or ``"estimated-full"`` (estimated with that structure),
        or a law of shape ``(d1, d2)``.
    """
    if isinstance(spec, ContextLaw):
        if (spec.d1, spec.d2) != (int(d1), int(d2)):
            raise ValueError(
                f"context_law has shape ({spec.d1}, {spec.d2}); the contexts are ({d1}, {d2})"
            )
        return spec
    if spec in ("gaussian", "completion"):
        return IsotropicLaw(d1, d2, spec)
    if spec == "estimated":
        return EstimatedLaw(d1, d2)
    if spec in ("estimated-kronecker", "estimated-full"):
        return EstimatedLaw(d1, d2, spec.split("-")[1])
    raise ValueError(f"context_law must be one of {LAW_NAMES} or a ContextLaw; got {spec!r}")


def law_from_arrays(name: str, arrays: dict[str, Any], d1: int, d2: int) -> ContextLaw:
    """Rebuild a law saved as :attr:`ContextLaw.name` and :meth:`ContextLaw.arrays`."""
    if name == "kronecker":
        return KroneckerLaw(
            arrays["context_row_cov"], arrays["context_col_cov"], arrays.get("context_mean")
        )
    if name == "second_moment":
        return SecondMomentLaw(arrays["context_second_moment"], (d1, d2))
    if name == "entries":
        return EntryLaw(arrays["context_entry_probs"])
    return as_context_law(name, d1, d2)
