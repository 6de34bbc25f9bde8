"""The products of a round's context with the estimator's factors, computed once a round.

In one round the policy predicts every arm's reward (``X V_a`` for all arms), the value
wrapper reads the same predictions, the inference wrappers snapshot the pulled arms'
products (``X V_a``, ``Xᵀ U_a``) and the estimator takes its step with the same products.
:class:`ProductCache` computes each of them once and hands it to all of them.  An entry is
keyed by the context's *fingerprint* ``<X, W>`` (fixed weights ``W`` in ``[1, 2)``, one
GEMV), so a caller may copy or reshape the context between the calls while a context edited
in place is recomputed; any change of the factors drops the
entry (:meth:`ProductCache.invalidate`).

Completion contexts in index form (:class:`~lrbandit_gym.onehot.OneHotContexts`) take the
same road at O((d1 + d2) r) cost: ``X V = e_j V[k]ᵀ`` and ``Xᵀ U = e_k U[j]ᵀ`` are gathers
(:func:`one_hot_products`), and the fingerprint of ``e_j e_kᵀ`` is the weight ``W[j, k]``,
exactly the fingerprint of the dense one-hot matrix, so both forms key the same entry.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lrbandit_gym import engine
from lrbandit_gym.onehot import OneHotContexts

__all__ = [
    "FINGERPRINT_SEED",
    "GEMV_MIN_SIZE",
    "ProductCache",
    "context_products",
    "one_hot_products",
]

#: Seed of the fixed weights that fingerprint a context.
FINGERPRINT_SEED = 20261126
#: Context size (``d1 * d2``) from which :func:`context_products` computes one unbatched
#: context's products column by column.
GEMV_MIN_SIZE = 40_000


def context_products(
    X: np.ndarray, U: np.ndarray, V: np.ndarray, xv: bool = True
) -> tuple[np.ndarray | None, np.ndarray]:
    """``X V`` and ``X^T U`` for stacks of contexts (B, d1, d2) and factors (B, d1, r), (B, d2, r).

    For one large context (``B = 1``, at least :data:`GEMV_MIN_SIZE` entries) r
    matrix-vector products, one per column, are faster than a matrix product with r (~3)
    columns; everything else is one stacked matmul per product.  (A batched run of large
    contexts therefore agrees with unbatched runs to rounding, not bit for bit.)  With
    ``xv=False`` only ``X^T U`` is computed and ``None`` stands for ``X V``.
    """
    if X.shape[0] > 1 or X[0].size < GEMV_MIN_SIZE:
        return (np.matmul(X, V) if xv else None), np.matmul(X.transpose(0, 2, 1), U)
    X2 = X[0]
    r = U.shape[2]
    XV = np.empty((1, X2.shape[0], r)) if xv else None
    XtU = np.empty((1, X2.shape[1], r))
    V_rows = np.ascontiguousarray(V[0].T)
    U_rows = np.ascontiguousarray(U[0].T)
    for j in range(r):
        if xv:
            XV[0, :, j] = X2 @ V_rows[j]
        XtU[0, :, j] = U_rows[j] @ X2
    return XV, XtU


def one_hot_products(
    ctx: OneHotContexts, U: np.ndarray, V: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``X V`` and ``Xᵀ U`` for one-hot contexts ``X_b = e_j e_kᵀ``: two gathers.

    ``X V = e_j V[k]ᵀ`` and ``Xᵀ U = e_k U[j]ᵀ``: arrays of shape (B, d1, r) and (B, d2, r)
    with one non-zero row each, equal to the dense products (which add only exact zeros
    to that row).  O((d1 + d2) r) per context.

    Parameters
    ----------
    ctx : OneHotContexts
        ``B`` contexts (``rows``, ``cols`` of shape (B,)).
    U, V : ndarray of shape (B, d1, r) and (B, d2, r)
    """
    B, d1, r = U.shape
    t = np.arange(B)
    XV = np.zeros((B, d1, r))
    XV[t, ctx.rows] = V[t, ctx.cols]
    XtU = np.zeros((B, V.shape[1], r))
    XtU[t, ctx.cols] = U[t, ctx.rows]
    return XV, XtU


class ProductCache:
    """The current round's context products, shared by predict, the wrappers and the step.

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    n_trials : int or None
        ``None`` for an unbatched estimator: the pulled arm's factors are then returned as
        views of the storage (basic indexing, cheaper); batched, as gathered copies.

    Attributes
    ----------
    weights : ndarray of shape (d1 * d2,)
        The fingerprint's fixed weights, in ``[1, 2)``.
    """

    def __init__(self, d1: int, d2: int, n_trials: int | None) -> None:
        self.weights = np.random.default_rng(FINGERPRINT_SEED).uniform(1.0, 2.0, d1 * d2)
        self._unbatched = n_trials is None
        self._trials = np.arange(1 if n_trials is None else n_trials)
        self._entry: dict[str, Any] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the cache holds: the fingerprint's weights and the round's
        products (unbatched, the pulled arm's ``U`` and ``V`` are views of the factors and
        count nothing here)."""
        total = self.weights.nbytes + self._trials.nbytes
        entry = self._entry or {}
        total += sum(entry[k].nbytes for k in ("fp", "XV", "preds") if k in entry)
        if "pulled" in entry:
            a, U, V, XV, XtU = entry["pulled"]
            total += a.nbytes + XV.nbytes + XtU.nbytes
            if not self._unbatched:  # gathered copies
                total += U.nbytes + V.nbytes
        return total

    def invalidate(self) -> None:
        """Forget the products: the factors changed."""
        self._entry = None

    def fingerprint(self, Xb: np.ndarray | OneHotContexts) -> np.ndarray:
        """Per-trial ``<X, W>`` of a (B, d1, d2) stack, shape (B,) (one GEMV; for one-hot
        contexts in index form, the weights at their indices).

        It tells whether a context is the one the products were computed for.
        """
        if isinstance(Xb, OneHotContexts):
            return self.weights[Xb.flat]
        with np.errstate(over="ignore", invalid="ignore"):  # callers check it is finite
            return Xb.reshape(Xb.shape[0], -1) @ self.weights

    def _entry_for(self, Xb: np.ndarray | OneHotContexts, fp: np.ndarray | None) -> dict[str, Any]:
        """The entry for context ``Xb`` (``fp``: its fingerprint, if the caller has it)."""
        if fp is None:
            fp = self.fingerprint(Xb)
        key = fp.tolist()  # compared as Python floats: a NaN equals nothing
        entry = self._entry
        if entry is None or entry["key"] != key:
            entry = self._entry = {"fp": fp, "key": key}
        return entry

    def all_arm_products(
        self, Xb: np.ndarray, V_cat: np.ndarray, fp: np.ndarray | None = None
    ) -> np.ndarray:
        """``X V_a`` for every arm, shape (B, d1, K, r): one product of ``Xb`` (B, d1, d2)
        with the arms' ``V`` factors side by side, ``V_cat`` (B, d2, K, r)."""
        entry = self._entry_for(Xb, fp)
        if "XV" not in entry:
            B, d2, K, r = V_cat.shape
            entry["XV"] = np.matmul(Xb, V_cat.reshape(B, d2, K * r)).reshape(B, -1, K, r)
        return entry["XV"]

    def predictions(
        self,
        Xb: np.ndarray | OneHotContexts,
        U_all: np.ndarray,
        V_all: np.ndarray,
        V_cat: np.ndarray,
        fp: np.ndarray | None = None,
    ) -> np.ndarray:
        """``<U_a V_aᵀ, X>`` for every arm, (B, K), kept for the round: the policy's
        prediction and the value wrapper's read the same (a copy each).

        Dense contexts read the all-arm product (:meth:`all_arm_products`) against ``U_all``
        (B, K, d1, r) (the compiled kernel when numba runs); one-hot contexts ``e_j e_kᵀ``
        (:class:`~lrbandit_gym.onehot.OneHotContexts`) take ``U_a[j] · V_a[k]``, O(K r).
        ``V_cat`` is ``V_all`` side by side, (B, d2, K, r).
        """
        entry = self._entry  # this round's entry, its key compared here (the common case)
        if fp is None or entry is None or entry["key"] != fp.tolist():
            entry = self._entry_for(Xb, fp)
        preds = entry.get("preds")
        if preds is None:
            if isinstance(Xb, OneHotContexts):
                if self._unbatched:  # basic indexing: views
                    Uj, Vk = U_all[0, :, int(Xb.rows[0])], V_all[0, :, int(Xb.cols[0])]
                    preds = (Uj * Vk).sum(axis=-1)[None]
                else:
                    t = self._trials
                    preds = np.einsum("bkr,bkr->bk", U_all[t, :, Xb.rows], V_all[t, :, Xb.cols])
            else:
                XV = self.all_arm_products(Xb, V_cat, entry["fp"])
                if engine.compiled():
                    from agents.estimator import kernels

                    preds = np.empty((XV.shape[0], U_all.shape[1]))
                    kernels.predictions(XV, U_all, preds)
                else:
                    preds = np.einsum("bikr,bkir->bk", XV, U_all)
            entry["preds"] = preds
        return preds.copy()

    def pulled(
        self,
        Xb: np.ndarray,
        a: np.ndarray,
        U_all: np.ndarray,
        V_all: np.ndarray,
        fp: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The pulled arms' factors and products for context ``Xb`` (B, d1, d2).

        Parameters
        ----------
        Xb : ndarray of shape (B, d1, d2), or OneHotContexts
            The contexts (one-hot ones in index form: :func:`one_hot_products`).
        a : ndarray of int, shape (B,)
            The pulled arms.
        U_all, V_all : ndarray of shape (B, K, d1, r), (B, K, d2, r)
            Every arm's factors.
        fp : ndarray of shape (B,), optional
            The fingerprint of ``Xb``, if the caller has it.

        Returns
        -------
        U, V : ndarray of shape (B, d1, r), (B, d2, r)
            ``U_all[b, a[b]]``, ``V_all[b, a[b]]`` (views of them when unbatched).
        XV, XtU : ndarray of shape (B, d1, r), (B, d2, r)
            ``X V_a`` (taken from :meth:`all_arm_products` when that ran on this context)
            and ``Xᵀ U_a``.
        """
        entry = self._entry  # this round's entry, its key compared here (the common case)
        if fp is None or entry is None or entry["key"] != fp.tolist():
            entry = self._entry_for(Xb, fp)
        arms = a.tolist()
        if entry.get("arms") == arms:
            return entry["pulled"][1:]
        if self._unbatched:
            a0 = int(a[0])
            U, V = U_all[0, a0][None], V_all[0, a0][None]
        else:
            U, V = U_all[self._trials, a], V_all[self._trials, a]  # gathered copies
        if isinstance(Xb, OneHotContexts):
            XV, XtU = one_hot_products(Xb, U, V)
        elif "XV" in entry:  # the all-arm product has run on this context
            XV = entry["XV"][self._trials, :, a, :]
            XtU = context_products(Xb, U, V, xv=False)[1]
        else:
            XV, XtU = context_products(Xb, U, V)
        entry["pulled"] = (np.array(a, copy=True), U, V, XV, XtU)
        entry["arms"] = arms
        return U, V, XV, XtU
