"""``<M_hat, X_t>`` and ``<G_t, X_t>`` for the pulled arm, without a ``d1 x d2`` projector.

``S_hat_i^2`` (eq. (14), docs/method.md §4) needs ``<G_t, X_t>`` with ``G_t`` the projection
of a target ``T`` built from the column and row spaces of ``M_hat_{a_t,t-1} = U V^T``:

``<G, X> = <T, X P_V> + <T, P_U X> - kappa <T, P_U X P_V>``

with ``kappa = 2`` for the paper's ``G = P_U⊥ T P_V + P_U T P_V⊥`` and ``kappa = 1`` for the
tangent-space projection ``G = T - P_U⊥ T P_V⊥``.  Orthonormal bases come from the ``r x r``
Gram matrices (``Q_U = U L^{-T}`` from ``U^T U = L L^T``, or ``U R_U D_U^{-1/2}`` from its
eigendecomposition when ill-conditioned; ``U D^{-1/2}`` for balanced factors, whose Gram
matrices are diagonal).  Each term is evaluated from ``X Q_V`` (d1 x r), ``Q_U^T X``
(r x d2) and the targets' singular triplets ``T = sum_l s_l x_l y_l^T`` (computed once),
e.g. ``<x y^T, P_U X> = (Q_U^T x) . (Q_U^T X y)``.  Only the rows in the triplets' support
are read: ``O(r^2)`` per triplet for ``e_i e_j^T`` targets, ``O(r (d1 + d2))`` for dense
ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from inference.cores._thresholds import CHOL_FLOOR, EIG_FLOOR, TARGET_FLOOR

__all__ = ["TargetTriplets", "basis_transform", "inverse_column_norms", "pulled_arm_terms"]


def inverse_column_norms(F: np.ndarray, sq: np.ndarray | None = None) -> np.ndarray:
    """``diag(FᵀF)^{-1/2}`` as (B, r) for factors with orthogonal columns.

    ``F * s[:, None, :]`` is then orthonormal; columns with a squared norm below
    ``EIG_FLOOR`` times the largest get 0 (they leave the basis).

    Parameters
    ----------
    F : ndarray of shape (B, d, r)
    sq : ndarray of shape (B, r), optional
        The squared column norms when known (the singular values, for balanced factors).
    """
    if sq is None:
        sq = np.einsum("bir,bir->br", F, F)
    top = sq.max(axis=-1, keepdims=True)
    keep = (sq > EIG_FLOOR * top) & (top > 0)
    return np.where(keep, 1.0 / np.sqrt(np.where(keep, sq, 1.0)), 0.0)


def basis_transform(F: np.ndarray) -> np.ndarray:
    """``r x r`` matrices ``S`` such that ``Q = F S`` is an orthonormal basis of ``col(F)``.

    Works on the Gram matrix ``F^T F`` only (never a ``d x d`` decomposition): ``S = L^{-T}``
    from its Cholesky factor, which is cheaper than ``eigh`` on a stack of ``r x r``
    matrices, or ``S = R diag(lam^{-1/2})`` from its eigendecomposition for ill-conditioned
    or rank-deficient trials, where directions with ``lam <= EIG_FLOOR * max(lam)`` give
    zero columns.  The projection ``Q Q^T`` does not depend on which basis is used.

    Parameters
    ----------
    F : ndarray of shape (B, d, r)

    Returns
    -------
    S : ndarray of shape (B, r, r)
    """
    gram = np.matmul(F.swapaxes(-1, -2), F)
    scale = np.diagonal(gram, axis1=-2, axis2=-1).max(axis=-1)
    try:
        L = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError:
        weak = np.ones(gram.shape[0], dtype=bool)
        S = np.empty_like(gram)
    else:
        pivots = np.diagonal(L, axis1=-2, axis2=-1)
        weak = ~(pivots.min(axis=-1) ** 2 > CHOL_FLOOR * scale)
        S = np.linalg.inv(L).swapaxes(-1, -2)
    if weak.any():
        lam, R = np.linalg.eigh(gram[weak])
        top = lam[:, -1:]
        keep = (lam > EIG_FLOOR * top) & (top > 0)
        inv_root = np.where(keep, 1.0 / np.sqrt(np.where(keep, lam, 1.0)), 0.0)
        S[weak] = R * inv_root[:, None, :]
    return S


@dataclasses.dataclass(frozen=True, eq=False)
class TargetTriplets:
    """The singular triplets of every target: ``T_k = sum_{l in k} s_l x_l y_l^T``.

    Attributes
    ----------
    Xs : ndarray of shape (d1, R)
    Ys : ndarray of shape (d2, R)
    Sw : ndarray of shape (R, n_T)
        ``Sw[l, k] = s_l`` if triplet ``l`` belongs to target ``k``, else 0.
    x_rows, y_rows : ndarray of int
        The rows of ``Xs`` and ``Ys`` that are not zero in some triplet (their support).
    Xs_sub, Ys_sub : ndarray of shape (len(x_rows), R) and (len(y_rows), R)
        ``Xs`` and ``Ys`` restricted to that support (C-contiguous).
    """

    Xs: np.ndarray
    Ys: np.ndarray
    Sw: np.ndarray
    x_rows: np.ndarray
    y_rows: np.ndarray
    Xs_sub: np.ndarray
    Ys_sub: np.ndarray

    @classmethod
    def from_targets(cls, T: np.ndarray) -> TargetTriplets:
        """Factor a stack of targets ``T`` of shape (n_T, d1, d2).

        Singular values below ``TARGET_FLOOR`` times a target's largest are dropped; only
        zero targets keep one zero triplet, so that the shapes stay valid.
        """
        xs, ys, cols = [], [], []
        nT = T.shape[0]
        for k in range(nT):
            u, sv, vt = np.linalg.svd(T[k], full_matrices=False)
            keep = sv > TARGET_FLOOR * sv[0] if sv[0] > 0 else np.zeros(sv.shape, dtype=bool)
            for j in np.flatnonzero(keep):
                xs.append(u[:, j])
                ys.append(vt[j])
                col = np.zeros(nT)
                col[k] = sv[j]
                cols.append(col)
        if not xs:
            xs, ys, cols = [np.zeros(T.shape[1])], [np.zeros(T.shape[2])], [np.zeros(nT)]
        Xs, Ys = np.stack(xs, axis=1), np.stack(ys, axis=1)
        x_rows = np.flatnonzero((Xs != 0).any(axis=1))
        y_rows = np.flatnonzero((Ys != 0).any(axis=1))
        return cls(
            Xs=Xs,
            Ys=Ys,
            Sw=np.stack(cols),
            x_rows=x_rows,
            y_rows=y_rows,
            Xs_sub=np.ascontiguousarray(Xs[x_rows]),
            Ys_sub=np.ascontiguousarray(Ys[y_rows]),
        )

    def tangent_terms(self, U, V, XV, XtU, P, q, kappa: float) -> np.ndarray:
        """``<x_l y_lᵀ, P_U X + X P_V − kappa P_U X P_V>`` for every triplet, (B, R).

        ``U`` (B, d1, r) and ``V`` (B, d2, r) have orthogonal columns with
        ``Q_U = U diag(q)^{1/2}`` and ``Q_V = V diag(q)^{1/2}`` orthonormal bases (``q = 0``
        drops a column); ``XV = X V``, ``XtU = Xᵀ U``, ``P = Uᵀ X V``.  With
        ``a = Uᵀ x``, ``b = Vᵀ y``: ``<x yᵀ, P_U X> = Σ_s q_s a_s (Uᵀ X y)_s``,
        ``<x yᵀ, X P_V> = Σ_s (xᵀ X V)_s q_s b_s`` and
        ``<x yᵀ, P_U X P_V> = (q a)ᵀ P (q b)``.
        """
        xr, yr, Xs, Ys = self.x_rows, self.y_rows, self.Xs_sub, self.Ys_sub
        a = np.matmul(U[:, xr].swapaxes(-1, -2), Xs) * q[:, :, None]  # q·Uᵀx, (B, r, R)
        b = np.matmul(V[:, yr].swapaxes(-1, -2), Ys) * q[:, :, None]  # q·Vᵀy
        UtXy = np.matmul(XtU[:, yr].swapaxes(-1, -2), Ys)  # Uᵀ X y, (B, r, R)
        xtXV = np.matmul(XV[:, xr].swapaxes(-1, -2), Xs)  # (xᵀ X V)ᵀ, (B, r, R)
        return (
            np.einsum("bsl,bsl->bl", a, UtXy)
            + np.einsum("bsl,bsl->bl", xtXV, b)
            - kappa * np.einsum("bsl,bsl->bl", a, np.matmul(P, b))
        )


def pulled_arm_terms(
    Ua: np.ndarray,
    Va: np.ndarray,
    X: np.ndarray,
    triplets: TargetTriplets,
    kappa: float,
    *,
    balanced: bool = False,
    products: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The prediction ``<M_hat, X_t>`` and ``<G_t, X_t>`` for every target, per trial.

    Parameters
    ----------
    Ua, Va : ndarray of shape (B, d1, r) and (B, d2, r)
        Factors of the pulled arms' estimates ``M_hat_{a_t,t-1} = Ua Vaᵀ``.
    X : ndarray of shape (B, d1, d2)
        Contexts.
    triplets : TargetTriplets
    kappa : float
        2 for the paper's projection, 1 for the tangent space.
    balanced : bool, default False
        True promises ``UaᵀUa = VaᵀVa`` diagonal (as :class:`agents.LowRankSGD` stores
        them): the bases are then ``U D^{-1/2}``, without an ``r x r`` factorisation.
    products : tuple of ndarray, optional
        ``(X Va, Xᵀ Ua, D_a)`` when already computed (shapes (B, d1, r), (B, d2, r),
        (B, r)); ``D_a``, the singular values, is only read with ``balanced=True``.

    Returns
    -------
    pred : ndarray of shape (B,)
    g : ndarray of shape (B, n_T)
    """
    if products is None:
        XV = np.matmul(X, Va)  # (B, d1, r)
        XtU = np.matmul(X.swapaxes(-1, -2), Ua)  # (B, d2, r)
        sq = None
    else:
        XV, XtU, sq = products
    if balanced:  # Q = F diag(s), s = D^{-1/2}: no r x r factorisation
        P = np.matmul(Ua.swapaxes(-1, -2), XV)  # U^T X V, (B, r, r)
        pred = np.einsum("bss->b", P)
        s = inverse_column_norms(Ua, sq)  # the same for V: U^T U = V^T V = diag(sq)
        g = triplets.tangent_terms(Ua, Va, XV, XtU, P, s * s, kappa) @ triplets.Sw
        return pred, g
    pred = np.einsum("bir,bir->b", Ua, XV)
    Su = basis_transform(Ua)  # Q_U = U Su
    Sv = basis_transform(Va)  # Q_V = V Sv
    XQv = np.matmul(XV, Sv)
    Qu = np.matmul(Ua, Su)
    P = np.matmul(Qu.swapaxes(-1, -2), XQv)
    ones = np.ones(Ua.shape[::2])
    terms = triplets.tangent_terms(Qu, np.matmul(Va, Sv), XQv, np.matmul(XtU, Su), P, ones, kappa)
    return pred, terms @ triplets.Sw
