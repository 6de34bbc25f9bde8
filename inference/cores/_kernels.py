"""Compiled (numba) kernels of the online debiasing (engine "numba", :mod:`lrbandit_gym.engine`).

:func:`round_terms` and :func:`absorb_round` run, one trial at a time, what the two phases of
a round of :mod:`inference.cores.linear_form_round` do with stacked numpy calls
for balanced factors (as :class:`agents.LowRankSGD` stores them): queueing the held
estimates of the arms that moved (:mod:`inference.cores.debiased_sum`), then the pulled arm's
residual, ``<G_t, X_t>`` from the targets' singular triplets
(:mod:`inference.cores.tangent_space`), the ``sigma^2`` and ``S^2`` sums and the correction term
of Algorithm 2, in one loop over trials.  :func:`one_hot_terms` and :func:`one_hot_write` do
the pulled arm's part for completion contexts ``e_j e_kᵀ`` given by their index, at O(r)
per target triplet beyond the targets' support.  Imported only when numba runs.

Each kernel runs in two phases, as the estimator's step does (propose, then commit): the
first (:func:`round_terms`, :func:`one_hot_terms`) computes every trial's residual and
``<G_t, X_t>`` and checks that what the round adds keeps the running sums finite, writing
nothing; the second (:func:`absorb_round`, :func:`one_hot_write`) writes them, the same
arithmetic as one pass, so a round refused in the first phase changes nothing.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from inference.cores._thresholds import EIG_FLOOR

__all__ = [
    "absorb_round",
    "one_hot_terms",
    "one_hot_write",
    "replace_held",
    "round_terms",
]


@njit(cache=True)
def _refused(sigma, S2_row, w, res, cw, g_row, limit):
    """Whether a trial's round cannot be absorbed: the new ``sigma^2`` or ``S^2`` sum is not
    finite, or the correction's coefficient ``c w res`` exceeds ``limit`` (its product with
    a context entry, itself at most ``limit``, must stay finite)."""
    if not np.isfinite(sigma + w * res * res):
        return True
    coef = cw * res
    if not abs(coef) <= limit:
        return True
    for m in range(g_row.shape[0]):
        if not np.isfinite(S2_row[m] + cw * cw * g_row[m] * g_row[m]):
            return True
    return False


@njit(cache=True)
def _hold_trial(b, j, bi, ki, U_new, V_new, held, last_U, last_V, ring_U, ring_V, slot):
    """Trial ``b``'s changes ``j, j+1, ...`` (``bi`` sorted by trial).

    Queue ``held * U V^T`` of the old factors in ring ``slot`` (as transposed factors, see
    :meth:`inference.cores.debiased_sum.DebiasedSum.hold`), store the new ones, reset their count;
    then every arm of the trial is held one more round.  Returns the index of the next
    trial's changes and whether a term was queued.
    """
    K, d1, r = last_U.shape[1], last_U.shape[2], last_U.shape[3]
    d2 = last_V.shape[2]
    queued = False
    while j < bi.shape[0] and bi[j] == b:
        k = ki[j]
        h = held[b, k]
        if h > 0:
            queued = True
            for s in range(r):
                for i in range(d1):
                    ring_U[b, k, slot, s, i] = last_U[b, k, i, s] * h
                for i in range(d2):
                    ring_V[b, k, slot, s, i] = last_V[b, k, i, s]
        last_U[b, k] = U_new[j]
        last_V[b, k] = V_new[j]
        held[b, k] = 0
        j += 1
    for k in range(K):
        held[b, k] += 1
    return j, queued


@njit(cache=True)
def round_terms(
    U,
    V,
    XV,
    XtU,
    sq,
    action,
    reward,
    weight,
    c,
    kappa,
    limit,
    x_rows,
    y_rows,
    Xs,
    Ys,
    Sw,
    sigma_sum,
    S2_sum,
    res_out,
    g_out,
):
    """The pulled arm's terms of one round, every trial, nothing written but ``res_out``
    (B,) and ``g_out`` (B, n_T); returns the first trial the sums cannot absorb, or -1.

    ``U`` (B, d1, r), ``V`` (B, d2, r): the pulled arms' balanced factors, ``sq`` (B, r)
    their squared column norms (the singular values); ``XV = X V``, ``XtU = X^T U``;
    ``x_rows``/``y_rows`` and ``Xs`` (nx, R), ``Ys`` (ny, R) the rows of the targets'
    singular vectors in their support, ``Sw`` (R, n_T) their weights.
    """
    B, d1, r = U.shape
    R = Xs.shape[1]
    nT = Sw.shape[1]
    P = np.empty((r, r))
    q = np.empty(r)
    av = np.empty((r, R))
    bv = np.empty((r, R))
    Pb = np.empty(r)
    bad = -1
    for b in range(B):
        k = action[b]
        pred = 0.0
        for s in range(r):
            for u in range(r):
                t = 0.0
                for i in range(d1):
                    t += U[b, i, s] * XV[b, i, u]
                P[s, u] = t
            pred += P[s, s]
        top = 0.0
        for s in range(r):
            top = max(top, sq[b, s])
        for s in range(r):
            keep = sq[b, s] > EIG_FLOOR * top and top > 0.0
            q[s] = 1.0 / sq[b, s] if keep else 0.0  # (D^{-1/2})^2
        for ll in range(R):
            for s in range(r):
                ta = 0.0
                for i in range(x_rows.shape[0]):
                    ta += U[b, x_rows[i], s] * Xs[i, ll]
                av[s, ll] = ta * q[s]
                tb = 0.0
                for i in range(y_rows.shape[0]):
                    tb += V[b, y_rows[i], s] * Ys[i, ll]
                bv[s, ll] = tb * q[s]
        res = reward[b] - pred
        res_out[b] = res
        for m in range(nT):
            g = 0.0
            for ll in range(R):
                if Sw[ll, m] == 0.0:
                    continue
                # <x y^T, P_U X> + <x y^T, X P_V> - kappa <x y^T, P_U X P_V>
                t1 = 0.0
                for s in range(r):
                    utxy = 0.0
                    for i in range(y_rows.shape[0]):
                        utxy += XtU[b, y_rows[i], s] * Ys[i, ll]
                    xtxv = 0.0
                    for i in range(x_rows.shape[0]):
                        xtxv += XV[b, x_rows[i], s] * Xs[i, ll]
                    t1 += av[s, ll] * utxy + xtxv * bv[s, ll]
                for s in range(r):
                    pb = 0.0
                    for u in range(r):
                        pb += P[s, u] * bv[u, ll]
                    Pb[s] = pb
                t3 = 0.0
                for s in range(r):
                    t3 += av[s, ll] * Pb[s]
                g += (t1 - kappa * t3) * Sw[ll, m]
            g_out[b, m] = g
        w = weight[b]
        if bad < 0 and _refused(sigma_sum[b, k], S2_sum[b, k], w, res, c * w, g_out[b], limit):
            bad = b
    return bad


@njit(cache=True)
def absorb_round(
    bi,
    ki,
    U_new,
    V_new,
    held,
    last_U,
    last_V,
    ring_U,
    ring_V,
    slot,
    X,
    action,
    weight,
    c,
    res_in,
    g_in,
    debias,
    sigma_sum,
    S2_sum,
    acc,
    pulls,
):
    """One round for every trial, in place: first the arms that moved (``bi``, ``ki``
    sorted by trial, new factors ``U_new``, ``V_new``; see :func:`_hold_trial`), then the
    pulled arm's part from the terms of :func:`round_terms` (``res_in`` (B,), ``g_in``
    (B, n_T)).

    ``X`` (B, d1*d2) the contexts.  Adds ``w res^2`` to ``sigma_sum``, ``(c w)^2 <G, X>^2``
    to ``S2_sum``, ``c w res X`` to the arm's row of ``acc`` (if ``debias``) and ``w > 0``
    to ``pulls``.
    """
    B = X.shape[0]
    nT = g_in.shape[1]
    D = X.shape[1]
    j = np.int64(0)  # not the literal 0: one compiled _hold_trial, not two
    queued = False
    for b in range(B):
        j, q_b = _hold_trial(b, j, bi, ki, U_new, V_new, held, last_U, last_V, ring_U, ring_V, slot)
        queued |= q_b
        k = action[b]
        res = res_in[b]
        w = weight[b]
        cw = c * w
        sigma_sum[b, k] += w * res * res
        for m in range(nT):
            g = g_in[b, m]
            S2_sum[b, k, m] += cw * cw * g * g
        coef = cw * res
        if debias and coef != 0.0:
            for i in range(D):
                acc[b, k, i] += coef * X[b, i]
        if w > 0.0:
            pulls[b, k] += 1
    return queued


@njit(cache=True)
def one_hot_terms(
    rows,
    cols,
    U,
    V,
    sq,
    action,
    reward,
    weight,
    c,
    kappa,
    limit,
    Xs_full,
    Ys_full,
    x_rows,
    y_rows,
    Xs,
    Ys,
    Sw,
    sigma_sum,
    S2_sum,
    res_out,
    g_out,
):
    """:func:`round_terms` for ``X_b = e_j e_kᵀ``: writes ``res_out``, ``g_out`` only and
    returns the first trial the sums cannot absorb, or -1.

    With ``X = e_j e_kᵀ``: ``<M_hat, X> = U[j] · V[k]``, and for a triplet ``x yᵀ`` with
    ``α = (q Uᵀx) · U[j]`` and ``β = (q Vᵀy) · V[k]`` (``q = D^{-1}``, the squared inverse
    column norms), ``<x yᵀ, P_U X> = y_k α``, ``<x yᵀ, X P_V> = x_j β`` and
    ``<x yᵀ, P_U X P_V> = α β``.  ``Xs_full`` (d1, R), ``Ys_full`` (d2, R) are the triplets'
    vectors; ``Xs``, ``Ys`` their rows ``x_rows``, ``y_rows`` in the support.
    """
    B, d1, r = U.shape
    R = Xs.shape[1]
    nT = Sw.shape[1]
    q = np.empty(r)
    term = np.empty(R)
    bad = -1
    for b in range(B):
        j = rows[b]
        k = cols[b]
        arm = action[b]
        pred = 0.0
        for s in range(r):
            pred += U[b, j, s] * V[b, k, s]
        top = 0.0
        for s in range(r):
            top = max(top, sq[b, s])
        for s in range(r):
            keep = sq[b, s] > EIG_FLOOR * top and top > 0.0
            q[s] = 1.0 / sq[b, s] if keep else 0.0
        for ll in range(R):
            alpha = 0.0
            beta = 0.0
            for s in range(r):
                ta = 0.0
                for i in range(x_rows.shape[0]):
                    ta += U[b, x_rows[i], s] * Xs[i, ll]
                tb = 0.0
                for i in range(y_rows.shape[0]):
                    tb += V[b, y_rows[i], s] * Ys[i, ll]
                alpha += ta * q[s] * U[b, j, s]
                beta += tb * q[s] * V[b, k, s]
            term[ll] = Ys_full[k, ll] * alpha + Xs_full[j, ll] * beta - kappa * alpha * beta
        res = reward[b] - pred
        res_out[b] = res
        for m in range(nT):
            g = 0.0
            for ll in range(R):
                g += term[ll] * Sw[ll, m]
            g_out[b, m] = g
        w = weight[b]
        if bad < 0 and _refused(sigma_sum[b, arm], S2_sum[b, arm], w, res, c * w, g_out[b], limit):
            bad = b
    return bad


@njit(cache=True)
def one_hot_write(
    rows, cols, action, weight, c, res_in, g_in, debias, sigma_sum, S2_sum, acc, pulls, d2
):
    """The terms of :func:`one_hot_terms` into the sums, in place: ``acc`` is
    (B, K, d1 d2) and the correction ``c w res`` goes to entry ``j d2 + k``."""
    B = rows.shape[0]
    nT = g_in.shape[1]
    for b in range(B):
        arm = action[b]
        res = res_in[b]
        w = weight[b]
        cw = c * w
        sigma_sum[b, arm] += w * res * res
        for m in range(nT):
            g = g_in[b, m]
            S2_sum[b, arm, m] += cw * cw * g * g
        coef = cw * res
        if debias and coef != 0.0:
            acc[b, arm, rows[b] * d2 + cols[b]] += coef
        if w > 0.0:
            pulls[b, arm] += 1


@njit(cache=True)
def replace_held(acc, acc_cols, held, last_U, last_V, bi, ki, U_new, V_new, rows, cols):
    """:meth:`inference.cores.debiased_sum.DebiasedSum.hold`'s in-place replacement, compiled: for
    each change ``n`` (trial ``bi``, arm ``ki``) whose estimate moved only in row
    ``rows[n]`` and column ``cols[n]``, ``held * (M_new − M_old)`` is subtracted on that row
    (from ``acc`` (B, K, d1 d2)) and column (from ``acc_cols`` (B, K, d2 d1), transposed),
    then the new factors are stored."""
    d1, r = last_U.shape[2], last_U.shape[3]
    d2 = last_V.shape[2]
    for n in range(bi.shape[0]):
        b = bi[n]
        a = ki[n]
        j = rows[n]
        k = cols[n]
        h = float(held[b, a])
        for i in range(d2):  # row j, the entry (j, k) included
            new = 0.0
            old = 0.0
            for s in range(r):
                new += V_new[n, i, s] * U_new[n, j, s]
                old += last_V[b, a, i, s] * last_U[b, a, j, s]
            acc[b, a, j * d2 + i] -= h * (new - old)
        for i in range(d1):  # column k, without the entry (j, k)
            if i == j:
                continue
            new = 0.0
            old = 0.0
            for s in range(r):
                new += U_new[n, i, s] * V_new[n, k, s]
                old += last_U[b, a, i, s] * last_V[b, a, k, s]
            acc_cols[b, a, k * d1 + i] -= h * (new - old)
        last_U[b, a] = U_new[n]
        last_V[b, a] = V_new[n]
