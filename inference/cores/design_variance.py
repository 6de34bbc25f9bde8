"""The design part ``Ŝ²`` of a parameter's variance, from every round (docs/method.md §13).

Eq. (14) sums over the rounds that pulled arm ``i``::

    n Ŝ²_i = Σ_t 1{a_t = i}/π_t(i)² · c² <G_{i,t}, X_t>²            (design_variance="pulled")

Its conditional mean given the past is ``E[c² <G_{i,t}, X>² / π_t(i | X)]``, because the
indicator averages to ``π_t(i | X_t)``.  Every round's context and arm ``i``'s propensity in
it give the same conditional mean without the indicator::

    n Ŝ²_all,i = Σ_t c² <G_{i,t}, X_t>² / π_t(i | X_t)               (design_variance="all-rounds")

Both estimate the same predictable variance (the martingale CLT's normaliser).  Eq. (14)
rests on the rounds that pulled the arm: an arm explored with probability ``ε/K`` leaves a
handful of terms of weight ``1/π²``, and a single-entry target under completion contexts
counts only the rounds that reveal its row or column, so ``Ŝ`` is small by chance in some
trials and their intervals under-cover.  The all-rounds sum has a term every round.  It
needs every arm's propensity in every round, and it suits policies with an exploration
floor: where an arm's propensity is tiny in some contexts (a softmax policy at a low
temperature), those contexts dominate its conditional mean although the arm is almost never
pulled there, and the interval becomes far wider than the estimate's spread
(docs/reproduction.md, "Where few rounds carry an arm").

:func:`all_rounds_terms` computes one round's terms for every trial, arm and target from the
arms' factors before the round, ``G = T − P_U⊥ T P_V⊥`` ("tangent"), ``P_U⊥ T P_V + P_U T
P_V⊥`` ("paper") or ``T`` ("none").
"""

from __future__ import annotations

import numpy as np

from lrbandit_gym.onehot import OneHotContexts

__all__ = ["DESIGN_VARIANCES", "all_rounds_terms", "all_rounds_terms_reference"]

#: The design variances of :class:`~inference.cores.linear_form.LinearFormInference`.
DESIGN_VARIANCES = ("pulled", "all-rounds")

#: Gram eigenvalues below this times the largest count as zero (the bases of a rank-deficient
#: factor, as for the pulled arm's ``G_t``).
_RCOND = 1e-12


def all_rounds_terms_reference(X, M, T, propensities, rank, c=1.0, projection="tangent"):
    """One round's ``c² <G_i, X>² / π(i)`` in plain numpy: ``X`` (d1, d2), ``M`` (K, d1, d2)
    the estimates before the round, ``T`` (n_T, d1, d2), ``propensities`` (K,); returns
    (K, n_T).  :func:`all_rounds_terms` is the batched path the core runs."""
    out = np.zeros((len(M), len(T)))
    for i, Mi in enumerate(M):
        W, _, Zt = np.linalg.svd(Mi)
        P_U, P_V = W[:, :rank] @ W[:, :rank].T, Zt[:rank].T @ Zt[:rank]
        for k, Tk in enumerate(T):
            if projection == "none":
                G = Tk
            else:  # G = T − P_U⊥ T P_V⊥ ("tangent"), or without P_U T P_V ("paper")
                G = P_U @ Tk + Tk @ P_V - (1 if projection == "tangent" else 2) * P_U @ Tk @ P_V
            out[i, k] = c * c * np.sum(G * X) ** 2 / propensities[i]
    return out


def _bases_gram(F: np.ndarray) -> np.ndarray:
    """``(FᵀF)⁺`` of stacks of factors (..., d, r): ``P = F (FᵀF)⁺ Fᵀ`` projects on their
    column spaces."""
    return np.linalg.pinv(np.matmul(F.swapaxes(-1, -2), F), rcond=_RCOND, hermitian=True)


def all_rounds_terms(
    U: np.ndarray,
    V: np.ndarray,
    X: np.ndarray,
    T: np.ndarray,
    factors: np.ndarray,
    c: float,
    projection: str,
) -> np.ndarray:
    """``c² <G_{i,t}, X_t>² / π_t(i)`` for every trial, arm and target, shape (B, K, n_T).

    ``U`` (B, K, d1, r), ``V`` (B, K, d2, r): every arm's factors before the round; ``X``
    (B, d1, d2) the contexts, or completion contexts in index form; ``T`` (n_T, d1, d2);
    ``factors`` (B, K) the ``1/π_t(i)`` of every arm.  ``<G, X>`` goes through r-column
    products: with ``A = (UᵀU)⁺`` and ``C = (VᵀV)⁺``, ``<P_U T, X> = <Uᵀ T, A Uᵀ X>``,
    ``<T P_V, X> = <T V, X V C>`` and ``<P_U T P_V, X> = <Uᵀ T V, A Uᵀ X V C>``; for
    ``X = e_j e_kᵀ`` it is ``G[j, k]``, from column ``j`` of ``P_U`` and column ``k`` of
    ``P_V``.
    """
    if isinstance(X, OneHotContexts):
        gx = _one_hot_gx(U, V, X.rows, X.cols, T, projection)
    elif projection == "none":
        gx = np.broadcast_to(np.einsum("bij,tij->bt", X, T)[:, None], factors.shape + T.shape[:1])
    else:
        A, C = _bases_gram(U), _bases_gram(V)  # (B, K, r, r)
        UX = np.matmul(A, np.matmul(U.swapaxes(-1, -2), X[:, None]))  # A Uᵀ X (B, K, r, d2)
        XV = np.matmul(np.matmul(X[:, None], V), C)  # X V C (B, K, d1, r)
        UT = np.einsum("bkir,tij->bktrj", U, T)  # Uᵀ T (B, K, n_T, r, d2)
        TV = np.einsum("tij,bkjr->bktir", T, V)  # T V (B, K, n_T, d1, r)
        UTV = np.matmul(UT, V[:, :, None])  # Uᵀ T V (B, K, n_T, r, r)
        UXV = np.matmul(UX, np.matmul(V, C))  # A Uᵀ X V C (B, K, r, r)
        both = 1.0 if projection == "tangent" else 2.0
        gx = (
            np.einsum("bktrj,bkrj->bkt", UT, UX)
            + np.einsum("bktir,bkir->bkt", TV, XV)
            - both * np.einsum("bktrs,bkrs->bkt", UTV, UXV)
        )
    return (c * c) * gx * gx * factors[:, :, None]


def _one_hot_gx(U, V, rows, cols, T, projection) -> np.ndarray:
    """``G_i[j, k]`` for ``X = e_j e_kᵀ`` (``rows`` j, ``cols`` k, shape (B,)): (B, K, n_T)."""
    trials = np.arange(len(rows))
    Tjk = T[:, rows, cols].T  # T[j, k] (B, n_T)
    if projection == "none":
        return np.broadcast_to(Tjk[:, None], (U.shape[0], U.shape[1], T.shape[0]))
    A, C = _bases_gram(U), _bases_gram(V)
    # Column j of P_U = U A U[j]ᵀ and column k of P_V = V C V[k]ᵀ, every arm (B, K, d).
    pu = np.einsum("bkir,bkrs,bks->bki", U, A, U[trials, :, rows])
    pv = np.einsum("bklr,bkrs,bks->bkl", V, C, V[trials, :, cols])
    put = np.einsum("bki,tib->bkt", pu, T[:, :, cols])  # (P_U T)[j, k]
    tpv = np.einsum("tbl,bkl->bkt", T[:, rows, :], pv)  # (T P_V)[j, k]
    putpv = np.einsum("bki,til,bkl->bkt", pu, T, pv, optimize=True)  # (P_U T P_V)[j, k]
    both = 1.0 if projection == "tangent" else 2.0
    return put + tpv - both * putpv
