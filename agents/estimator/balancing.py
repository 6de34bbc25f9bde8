"""Balancing of factor pairs without forming ``U V^T`` (Lemma 2.1, docs/method.md §3).

A pair ``(U, V)`` is *balanced* when ``U^T U = V^T V = D`` is diagonal: it is then
``(W_U D^{1/2}, W_V D^{1/2})`` for the top-r SVD ``W_U D W_V^T`` of ``U V^T``, which is the
form eq. (8) takes its step from.  Both routes below reach it with ``r x r`` decompositions
at O((d1 + d2) r^2 + r^3) cost per pair instead of a d1 x d2 SVD:

* :func:`balance`: a Cholesky factor and one symmetric eigendecomposition (the fast route);
* :func:`balance_eig`: two eigendecompositions and an SVD, robust to rank-deficient factors.

:func:`balance` sends each nearly rank-deficient pair to :func:`balance_eig`, per pair, so
a batch gives the same numbers as its pairs one by one.  The compiled kernels
(:mod:`agents.estimator.kernels`) use the same thresholds, so both engines send the same pairs to
the eigen route.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CHOL_FLOOR",
    "DIVERGED",
    "EIG_FLOOR",
    "TINY",
    "WEAK_FLOOR",
    "balance",
    "balance_eig",
]

#: Relative floor for the eigenvalues of ``U^T U`` and ``V^T V`` in :func:`balance_eig`: a
#: null direction of a rank-deficient factor is raised to it instead of being inverted as ~0.
EIG_FLOOR = 1e-13
#: Cholesky jitter of :func:`balance`, as a fraction of the largest diagonal entry of
#: ``U^T U``: it keeps the factorisation defined.  Pairs whose squared pivots fall below
#: ``1e3`` times it are balanced by :func:`balance_eig` instead.
CHOL_FLOOR = 1e-15
#: Pairs whose eigenvalues (squared singular values) fall below this fraction of the largest
#: are balanced by :func:`balance_eig` instead.
WEAK_FLOOR = 1e-20
#: The smallest positive float64, added to floors so that they stay positive for zero factors.
TINY = np.finfo(np.float64).tiny
#: The message of the ``FloatingPointError`` raised when a step produced non-finite factors.
DIVERGED = (
    "LowRankSGD step produced non-finite factors (the iteration diverged): the step size is "
    "too large for the scale of the contexts/rewards; reduce step_scale"
)


def balance(U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Balance stacks of factor pairs without forming ``U V^T`` (Lemma 2.1).

    Returns ``(U T_U, V T_V, sv)`` with ``T_U T_V^T = I`` (the product is unchanged) and
    ``(U T_U)^T (U T_U) = (V T_V)^T (V T_V) = diag(sv)``: the pair ``(W_U D^{1/2},
    W_V D^{1/2})`` for the top-r SVD ``W_U D W_V^T`` of ``U V^T``.  Cost O((d1 + d2) r^2 + r^3)
    per pair.

    With the Cholesky factor ``U^T U = L L^T`` and the eigendecomposition
    ``L^T (V^T V) L = Q Λ Q^T`` (eigenvalues decreasing), ``T_U = L^{-T} Q Λ^{1/4}`` and
    ``T_V = L Q Λ^{-1/4}``, ``sv = Λ^{1/2}``: one ``r x r`` Cholesky, inverse and symmetric
    eigendecomposition per pair.  Pairs where ``U`` or ``V`` is (nearly) rank-deficient —
    a squared Cholesky pivot below ``1e3 * CHOL_FLOOR`` of the largest diagonal entry, or an
    eigenvalue below ``WEAK_FLOOR`` of the largest — take the eigendecomposition route of
    :func:`balance_eig` instead, which handles null directions.  The choice is made per
    pair, so a batch gives the same numbers as its pairs one by one.

    Parameters
    ----------
    U : ndarray of shape (N, d1, r)
    V : ndarray of shape (N, d2, r)

    Returns
    -------
    U_bal : ndarray of shape (N, d1, r)
    V_bal : ndarray of shape (N, d2, r)
    sv : ndarray of shape (N, r)
        The diagonal of ``D`` (singular values of ``U V^T``, decreasing).

    Raises
    ------
    FloatingPointError
        With :data:`DIVERGED`, if a pair is not finite or cannot be balanced.
    """
    n, _, r = U.shape
    gram = np.empty((2, n, r, r))
    np.matmul(U.transpose(0, 2, 1), U, out=gram[0])
    np.matmul(V.transpose(0, 2, 1), V, out=gram[1])
    if not np.isfinite(gram).all():
        raise FloatingPointError(DIVERGED)
    # Positive definite by construction unless U is rank-deficient; pivots of such pairs are
    # replaced below, so the factorisation of the others never fails.
    scale = np.diagonal(gram[0], axis1=-2, axis2=-1).max(axis=-1)
    safe = gram[0] + (TINY + CHOL_FLOOR * scale)[:, None, None] * np.eye(r)
    L = np.linalg.cholesky(safe)
    pivots = np.diagonal(L, axis1=-2, axis2=-1) ** 2
    with np.errstate(over="ignore", invalid="ignore"):
        S = np.matmul(L.transpose(0, 2, 1), np.matmul(gram[1], L))
    overflow = ~np.isfinite(S).all(axis=(1, 2))  # huge but finite Grams: eigen route below
    if overflow.any():
        S[overflow] = np.eye(r)
    lam, Q = np.linalg.eigh(S)
    lam, Q = lam[:, ::-1], Q[:, :, ::-1]  # decreasing
    weak = (
        overflow
        | (pivots.min(axis=-1) <= 1e3 * CHOL_FLOOR * scale)
        | ~(lam[:, -1] > WEAK_FLOOR * lam[:, 0])
    )
    root4 = np.sqrt(np.sqrt(np.where(weak[:, None], 1.0, lam)))[:, None, :]
    T_U = np.matmul(np.linalg.inv(L).transpose(0, 2, 1), Q) * root4
    T_V = np.matmul(L, Q) / root4
    U_bal, V_bal, sv = np.matmul(U, T_U), np.matmul(V, T_V), np.sqrt(np.maximum(lam, 0.0))
    if weak.any():
        with np.errstate(over="ignore", invalid="ignore"):  # checked below
            try:
                U_w, V_w, sv_w = balance_eig(U[weak], V[weak], gram[:, weak])
            except np.linalg.LinAlgError:
                raise FloatingPointError(DIVERGED) from None
        if not (np.isfinite(U_w).all() and np.isfinite(V_w).all() and np.isfinite(sv_w).all()):
            raise FloatingPointError(DIVERGED)
        U_bal[weak], V_bal[weak], sv[weak] = U_w, V_w, sv_w
    return U_bal, V_bal, sv


def balance_eig(
    U: np.ndarray, V: np.ndarray, gram: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`balance` through eigendecompositions, robust to rank-deficient factors.

    With ``U^T U = R_U D_U R_U^T`` and ``V^T V = R_V D_V R_V^T`` and
    ``D_U^{1/2} R_U^T R_V D_V^{1/2} = Q_U D Q_V^T`` (r x r SVD), ``T_U = R_U D_U^{-1/2} Q_U
    D^{1/2}`` and ``T_V = R_V D_V^{-1/2} Q_V D^{1/2}``: the route printed in Algorithm 1.
    Eigenvalues below :data:`EIG_FLOOR` times the largest are raised to that floor instead
    of being inverted as ~0: a null direction of ``U`` (rank-deficient estimate) then comes
    out multiplied by a ~0 singular value rather than as NaN.

    Parameters
    ----------
    U : ndarray of shape (N, d1, r)
    V : ndarray of shape (N, d2, r)
    gram : ndarray of shape (2, N, r, r)
        ``U^T U`` and ``V^T V``.

    Returns
    -------
    U_bal, V_bal, sv
        As :func:`balance`.  Not checked for finiteness (the caller does).
    """
    evals, evecs = np.linalg.eigh(gram)  # (2, N, r) increasing, (2, N, r, r)
    evals = np.maximum(evals, EIG_FLOOR * evals[..., -1:] + TINY)
    root = np.sqrt(evals)[..., None, :]
    scaled = evecs * root  # R D^{1/2}
    Q_U, sv, Q_Vt = np.linalg.svd(np.matmul(scaled[0].transpose(0, 2, 1), scaled[1]))
    sqrt_sv = np.sqrt(sv)[:, None, :]
    inv = evecs / root  # R D^{-1/2}
    T_U = np.matmul(inv[0], Q_U * sqrt_sv)
    T_V = np.matmul(inv[1], Q_Vt.transpose(0, 2, 1) * sqrt_sv)
    return np.matmul(U, T_U), np.matmul(V, T_V), sv
