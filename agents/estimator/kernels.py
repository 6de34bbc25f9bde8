"""Compiled (numba) kernels of :class:`agents.estimator.LowRankSGD`'s round (engine "numba").

One loop over trials runs what the numpy engine does with stacked calls
(:meth:`LowRankSGD.propose_step <agents.estimator.LowRankSGD.propose_step>`,
:func:`agents.estimator.balancing.balance`): the residual, the weighted SGD step of eq. (8) and the
balancing of Lemma 2.1 by an ``r x r`` Cholesky factor and a cyclic Jacobi
eigendecomposition, then the write-back of the pulled arms.  Pairs that the numpy engine
balances by its eigendecomposition route (nearly rank-deficient factors) are flagged and
left to it, so both engines treat them alike.  Imported only when numba runs
(:mod:`lrbandit_gym.engine`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# balance()'s thresholds, so that both engines send the same pairs to the eigen route.
from agents.estimator.balancing import CHOL_FLOOR, DIVERGED, TINY, WEAK_FLOOR, balance

_JACOBI_SWEEPS = 60

OK, WEAK, NONFINITE = 0, 1, 2  # per-trial status of sgd_step


@njit(cache=True)
def _rotate_columns(M, p, q, c, s):
    """Columns ``p``, ``q`` of ``M`` <- their plane rotation by ``(c, s)``, in place."""
    for k in range(M.shape[0]):
        mkp = M[k, p]
        mkq = M[k, q]
        M[k, p] = c * mkp - s * mkq
        M[k, q] = s * mkp + c * mkq


@njit(cache=True)
def symmetric_eigen(S, Q, lam):
    """Eigendecomposition of the symmetric ``S`` (r x r, overwritten) by cyclic Jacobi
    rotations: ``S = Q diag(lam) Q^T`` with eigenvalues in no particular order."""
    r = S.shape[0]
    for i in range(r):
        for j in range(r):
            Q[i, j] = 1.0 if i == j else 0.0
    for _ in range(_JACOBI_SWEEPS):
        off = 0.0
        diag = 0.0
        for i in range(r):
            diag += S[i, i] * S[i, i]
            for j in range(i + 1, r):
                off += S[i, j] * S[i, j]
        if not off > 1e-30 * diag:
            break
        for p in range(r - 1):
            for q in range(p + 1, r):
                apq = S[p, q]
                if apq == 0.0:
                    continue
                theta = (S[q, q] - S[p, p]) / (2.0 * apq)
                t = 1.0 / (abs(theta) + np.sqrt(theta * theta + 1.0))
                if theta < 0.0:
                    t = -t
                c = 1.0 / np.sqrt(t * t + 1.0)
                s = t * c
                _rotate_columns(S, p, q, c, s)  # S <- J^T S J
                _rotate_columns(S.T, p, q, c, s)
                S[p, q] = 0.0  # annihilated (what remains of it is rounding)
                S[q, p] = 0.0
                _rotate_columns(Q, p, q, c, s)  # Q <- Q J
    for i in range(r):
        lam[i] = S[i, i]


@njit(cache=True)
def _gram(F, G):
    """``G = F^T F`` for one factor ``F`` (d, r).  Each entry is one running sum over the
    rows in order, kept in a register."""
    d, r = F.shape
    for i in range(r):
        for j in range(i, r):
            acc = 0.0
            for k in range(d):
                acc += F[k, i] * F[k, j]
            G[i, j] = acc
            G[j, i] = acc


@njit(cache=True)
def _apply(F, T):
    """``F <- F T`` in place.

    Each entry is the sum over ``i`` in order, as a row-by-row product would compute it,
    but the inner loop runs down the rows, where the iterations are independent."""
    d, r = F.shape
    out = np.zeros((r, d))
    for j in range(r):
        for i in range(r):
            t = T[i, j]
            for k in range(d):
                out[j, k] += F[k, i] * t
    for k in range(d):
        for j in range(r):
            F[k, j] = out[j, k]


@njit(cache=True)
def balance_pair(U, V, sv, work):
    """Balance one pair in place (see :func:`agents.estimator.balancing.balance`); returns the
    status.

    ``U`` (d1, r), ``V`` (d2, r), ``sv`` (r,) receives the singular values (decreasing);
    ``work`` is scratch of shape (10, r, r).  With status ``WEAK`` or ``NONFINITE`` the
    pair is left as it was.
    """
    _gram(U, work[0])
    _gram(V, work[1])
    status = balance_transforms(sv, work)
    if status == OK:
        _apply(U, work[6])
        _apply(V, work[7])
    return status


@njit(cache=True)
def balance_transforms(sv, work):
    """:func:`balance_pair` from the Gram matrices ``work[0] = UᵀU`` and ``work[1] = VᵀV``:
    fills ``T_U`` (``work[6]``), ``T_V`` (``work[7]``) and ``sv``, and returns the status
    (the factors are the caller's to transform)."""
    r = work.shape[1]
    Gu, Gv, L, Li, S, Q, TU, TV, tmp = (
        work[0],
        work[1],
        work[2],
        work[3],
        work[4],
        work[5],
        work[6],
        work[7],
        work[8],
    )
    lam = work[9, 0]
    for i in range(r):
        for j in range(r):
            if not (np.isfinite(Gu[i, j]) and np.isfinite(Gv[i, j])):
                return NONFINITE
    scale = 0.0
    for i in range(r):
        scale = max(scale, Gu[i, i])
    jitter = TINY + CHOL_FLOOR * scale
    min_pivot = np.inf
    for j in range(r):  # Cholesky of Gu + jitter I (lower)
        s = Gu[j, j] + jitter
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0.0:
            return WEAK
        min_pivot = min(min_pivot, s)
        L[j, j] = np.sqrt(s)
        for i in range(j + 1, r):
            s2 = Gu[i, j]
            for k in range(j):
                s2 -= L[i, k] * L[j, k]
            L[i, j] = s2 / L[j, j]
        for i in range(j):
            L[i, j] = 0.0
    if min_pivot <= 1e3 * CHOL_FLOOR * scale:
        return WEAK
    for i in range(r):  # S = L^T Gv L
        for j in range(r):
            s = 0.0
            for k in range(r):
                s += Gv[i, k] * L[k, j]
            tmp[i, j] = s
    for i in range(r):
        for j in range(r):
            s = 0.0
            for k in range(r):
                s += L[k, i] * tmp[k, j]
            S[i, j] = s
            if not np.isfinite(s):
                return WEAK
    symmetric_eigen(S, Q, lam)
    for i in range(r):  # sort decreasing: selection sort of the columns of Q
        best = i
        for j in range(i + 1, r):
            if lam[j] > lam[best]:
                best = j
        if best != i:
            lam[i], lam[best] = lam[best], lam[i]
            for k in range(r):
                Q[k, i], Q[k, best] = Q[k, best], Q[k, i]
    if not lam[r - 1] > WEAK_FLOOR * lam[0]:
        return WEAK
    for j in range(r):  # Li = L^{-1}, lower triangular
        for i in range(r):
            Li[i, j] = 0.0
        Li[j, j] = 1.0 / L[j, j]
        for i in range(j + 1, r):
            s = 0.0
            for k in range(j, i):
                s -= L[i, k] * Li[k, j]
            Li[i, j] = s / L[i, i]
    for j in range(r):  # T_U = L^{-T} Q lam^{1/4}, T_V = L Q lam^{-1/4}
        root4 = np.sqrt(np.sqrt(lam[j]))
        for i in range(r):
            s1 = 0.0
            s2 = 0.0
            for k in range(r):
                s1 += Li[k, i] * Q[k, j]
                s2 += L[i, k] * Q[k, j]
            TU[i, j] = s1 * root4
            TV[i, j] = s2 / root4
        sv[j] = np.sqrt(lam[j])
    return OK


@njit(cache=True)
def sgd_step(U, V, a, y, coef, XV, XtU, U_new, V_new, sv_new, res, status):
    """Algorithm 1's step for every trial, into new arrays (the state is not touched).

    ``U`` (B, K, d1, r), ``V`` (B, K, d2, r): the stored factors; ``a``, ``y``, ``coef``
    (B,): pulled arm, reward and ``eta_t c / pi_t(a_t)``; ``XV`` (B, d1, r), ``XtU``
    (B, d2, r): the products for the pulled arm.  Fills ``res`` with the residuals,
    ``U_new``/``V_new``/``sv_new`` with the balanced stepped factors and ``status`` per
    trial (``WEAK``: ``U_new``, ``V_new`` hold the stepped factors, not balanced).
    """
    B, _, d1, r = U.shape
    d2 = V.shape[2]
    n1 = d1 * r
    n2 = d2 * r
    work = np.empty((10, r, r))
    for b in range(B):
        k = a[b]
        Uf = U[b, k].reshape(n1)
        Vf = V[b, k].reshape(n2)
        xv = XV[b].reshape(n1)
        xtu = XtU[b].reshape(n2)
        un = U_new[b].reshape(n1)
        vn = V_new[b].reshape(n2)
        pred = 0.0
        for i in range(n1):
            pred += xv[i] * Uf[i]
        res[b] = y[b] - pred
        step = coef[b] * res[b]
        for i in range(n1):
            un[i] = Uf[i] + step * xv[i]
        for i in range(n2):
            vn[i] = Vf[i] + step * xtu[i]
        status[b] = balance_pair(U_new[b], V_new[b], sv_new[b], work)


@njit(cache=True)
def _apply_into(F, T, out):
    """``out <- F T`` (as :func:`_apply`, into another array)."""
    d, r = F.shape
    for k in range(d):
        for j in range(r):
            out[k, j] = 0.0
    for j in range(r):
        for i in range(r):
            t = T[i, j]
            for k in range(d):
                out[k, j] += F[k, i] * t


@njit(cache=True)
def one_hot_step(U, V, sv, a, rows, cols, y, coef, U_new, V_new, sv_new, res, status):
    """:func:`sgd_step` for completion contexts ``X_b = e_j e_kᵀ`` (``rows`` j, ``cols`` k).

    ``res = y − U[j] · V[k]``; only row ``j`` of ``U`` and row ``k`` of ``V`` move
    (``X V = e_j V[k]ᵀ``, ``Xᵀ U = e_k U[j]ᵀ``), so the Gram matrices of the stepped
    factors follow from the stored ones, ``UᵀU = VᵀV = diag(sv)`` (balanced), by replacing
    one row's outer product: O(r²) instead of O(d r²).  The balancing transforms are then
    applied while the new factors are written.  Same outputs as :func:`sgd_step` up to
    rounding."""
    B, _, d1, r = U.shape
    work = np.empty((10, r, r))
    u = np.empty(r)
    v = np.empty(r)
    for b in range(B):
        k = a[b]
        j = rows[b]
        c = cols[b]
        pred = 0.0
        for s in range(r):
            pred += U[b, k, j, s] * V[b, k, c, s]
        res[b] = y[b] - pred
        step = coef[b] * res[b]
        for s in range(r):
            u[s] = U[b, k, j, s] + step * V[b, k, c, s]
            v[s] = V[b, k, c, s] + step * U[b, k, j, s]
        Gu, Gv = work[0], work[1]
        for s in range(r):
            for t in range(r):
                base = sv[b, k, s] if s == t else 0.0
                Gu[s, t] = base - U[b, k, j, s] * U[b, k, j, t] + u[s] * u[t]
                Gv[s, t] = base - V[b, k, c, s] * V[b, k, c, t] + v[s] * v[t]
        status[b] = balance_transforms(sv_new[b], work)
        if status[b] == OK:
            _apply_into(U[b, k], work[6], U_new[b])
            _apply_into(V[b, k], work[7], V_new[b])
            for t in range(r):
                su = 0.0
                sw = 0.0
                for s in range(r):
                    su += u[s] * work[6, s, t]
                    sw += v[s] * work[7, s, t]
                U_new[b, j, t] = su
                V_new[b, c, t] = sw
        else:  # the stepped factors, for the caller's eigen route
            U_new[b] = U[b, k]
            V_new[b] = V[b, k]
            for s in range(r):
                U_new[b, j, s] = u[s]
                V_new[b, c, s] = v[s]


@njit(cache=True)
def write_pulled(U, V, sv, V_cat, counts, versions, a, U_new, V_new, sv_new):
    """Store the pulled arms' new factors (the scatter of
    :meth:`LowRankSGD.commit_step <agents.estimator.LowRankSGD.commit_step>`)."""
    for b in range(U.shape[0]):
        k = a[b]
        U[b, k] = U_new[b]
        V[b, k] = V_new[b]
        V_cat[b, :, k] = V_new[b]
        sv[b, k] = sv_new[b]
        counts[b, k] += 1
        versions[b, k] += 1


@njit(cache=True)
def predictions(XV, U, preds):
    """``preds[b, k] = <U_k, X V_k>`` from ``XV`` (B, d1, K, r) and ``U`` (B, K, d1, r): the
    predicted rewards ``<U_k V_k^T, X>`` of
    :meth:`LowRankSGD.predict <agents.estimator.LowRankSGD.predict>`."""
    B, d1, K, r = XV.shape
    for b in range(B):
        for k in range(K):
            p = 0.0
            for i in range(d1):
                for s in range(r):
                    p += XV[b, i, k, s] * U[b, k, i, s]
            preds[b, k] = p


def propose_pulled(U, V, a, y, coef, XV, XtU, one_hot=None, sv=None):
    """The arithmetic of
    :meth:`LowRankSGD.propose_step <agents.estimator.LowRankSGD.propose_step>` for every
    trial, from the products on: :func:`sgd_step`, nothing written to the state.

    Pairs the kernel flags as nearly rank-deficient are balanced by
    :func:`agents.estimator.balancing.balance`, as the numpy engine would.  With ``one_hot`` (the
    contexts' ``(rows, cols)``, completion contexts ``e_j e_kᵀ``) and ``sv`` (the stored
    singular values, (B, K, r)) the step reads the two rows it changes
    (:func:`one_hot_step`) instead of the products.

    Returns
    -------
    res : ndarray of shape (B,)
        The residuals.
    U_new, V_new : ndarray of shapes (B, d1, r) and (B, d2, r)
        The pulled arms' new balanced factors.
    sv_new : ndarray of shape (B, r)
        Their singular values (decreasing).

    Raises
    ------
    FloatingPointError
        If a pair diverged (non-finite factors).
    """
    B, r = len(a), U.shape[-1]
    a = np.ascontiguousarray(a, dtype=np.int64)
    U_new = np.empty((B, U.shape[2], r))
    V_new = np.empty((B, V.shape[2], r))
    sv_new = np.empty((B, r))
    res = np.empty(B)
    status = np.empty(B, dtype=np.int8)
    coef = np.broadcast_to(np.asarray(coef, dtype=np.float64), (B,))
    if one_hot is None:
        sgd_step(U, V, a, y, coef, XV, XtU, U_new, V_new, sv_new, res, status)
    else:
        one_hot_step(U, V, sv, a, *one_hot, y, coef, U_new, V_new, sv_new, res, status)
    if status.any():
        if (status == NONFINITE).any():
            raise FloatingPointError(DIVERGED)
        weak = status == WEAK
        U_new[weak], V_new[weak], sv_new[weak] = balance(U_new[weak], V_new[weak])
    return res, U_new, V_new, sv_new


def step_pulled(U, V, sv, V_cat, counts, versions, a, y, coef, XV, XtU):
    """:func:`propose_pulled`, then :func:`write_pulled`: one whole step.

    The state arrays (``U``, ``V``, ``sv``, ``V_cat``, ``counts``, ``versions``) change
    only after every pair is balanced.  Returns the residuals (B,).

    Raises
    ------
    FloatingPointError
        If a pair diverged (non-finite factors); the state is then unchanged.
    """
    res, U_new, V_new, sv_new = propose_pulled(U, V, a, y, coef, XV, XtU)
    # ---- nothing below raises: the state changes only now ----------------------------
    a = np.ascontiguousarray(a, dtype=np.int64)
    write_pulled(U, V, sv, V_cat, counts, versions, a, U_new, V_new, sv_new)
    return res
