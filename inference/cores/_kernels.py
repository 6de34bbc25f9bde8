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
    "dense_design",
    "one_hot_design",
    "one_hot_round_design",
    "one_hot_terms",
    "one_hot_write",
    "probe_moments",
    "replace_held",
    "round_design",
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
        _inverse_squares(sq[b], q)
        res = reward[b] - pred
        res_out[b] = res
        _dense_g(
            U[b], V[b], XV[b], XtU[b], P, q, kappa, x_rows, y_rows, Xs, Ys, Sw, av, bv, Pb, g_out[b]
        )
        w = weight[b]
        if bad < 0 and _refused(sigma_sum[b, k], S2_sum[b, k], w, res, c * w, g_out[b], limit):
            bad = b
    return bad


@njit(cache=True)
def _column_squares(U, sq):
    """The squared column norms of ``U`` (d, r) into ``sq`` (r,): ``D`` of balanced factors."""
    for s in range(U.shape[1]):
        t = 0.0
        for i in range(U.shape[0]):
            t += U[i, s] * U[i, s]
        sq[s] = t


@njit(cache=True)
def _inverse_squares(sq, q):
    """``q = D^{-1}`` from the squared column norms ``sq`` (r,) of balanced factors; columns
    below ``EIG_FLOOR`` times the largest get 0 (they leave the basis)."""
    top = 0.0
    for s in range(sq.shape[0]):
        top = max(top, sq[s])
    for s in range(sq.shape[0]):
        keep = sq[s] > EIG_FLOOR * top and top > 0.0
        q[s] = 1.0 / sq[s] if keep else 0.0  # (D^{-1/2})^2


@njit(cache=True)
def _row_dot(A, rows, s, B, ll):
    """``Σ_i A[rows[i], s] · B[i, ll]``: column ``s`` of ``A`` read at a target's support
    rows against column ``ll`` of its singular vectors there."""
    t = 0.0
    for i in range(rows.shape[0]):
        t += A[rows[i], s] * B[i, ll]
    return t


@njit(cache=True)
def _dense_g(U, V, XV, XtU, P, q, kappa, x_rows, y_rows, Xs, Ys, Sw, av, bv, Pb, g_row):
    """``<G, X>`` of every target into ``g_row`` (n_T,) for one arm's balanced factors ``U``
    (d1, r), ``V`` (d2, r), ``XV = X V``, ``XtU = Xᵀ U`` (read at the rows ``x_rows``,
    ``y_rows`` only), ``P = Uᵀ X V`` and ``q = D^{-1}``; ``av``, ``bv``, ``Pb`` scratch."""
    r = U.shape[1]
    R = Xs.shape[1]
    for ll in range(R):
        for s in range(r):
            av[s, ll] = _row_dot(U, x_rows, s, Xs, ll) * q[s]
            bv[s, ll] = _row_dot(V, y_rows, s, Ys, ll) * q[s]
    for m in range(Sw.shape[1]):
        g = 0.0
        for ll in range(R):
            if Sw[ll, m] == 0.0:
                continue
            # <x y^T, P_U X> + <x y^T, X P_V> - kappa <x y^T, P_U X P_V>
            t1 = 0.0
            for s in range(r):
                utxy = _row_dot(XtU, y_rows, s, Ys, ll)
                xtxv = _row_dot(XV, x_rows, s, Xs, ll)
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
        g_row[m] = g


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
    B = U.shape[0]
    r = U.shape[2]
    q = np.empty(r)
    term = np.empty(Xs.shape[1])
    bad = -1
    for b in range(B):
        j = rows[b]
        k = cols[b]
        arm = action[b]
        pred = 0.0
        for s in range(r):
            pred += U[b, j, s] * V[b, k, s]
        _inverse_squares(sq[b], q)
        _one_hot_g(
            U[b], V[b], j, k, q, kappa, Xs_full, Ys_full, x_rows, y_rows, Xs, Ys, Sw, term, g_out[b]
        )
        res = reward[b] - pred
        res_out[b] = res
        w = weight[b]
        if bad < 0 and _refused(sigma_sum[b, arm], S2_sum[b, arm], w, res, c * w, g_out[b], limit):
            bad = b
    return bad


@njit(cache=True)
def _one_hot_g(U, V, j, k, q, kappa, Xs_full, Ys_full, x_rows, y_rows, Xs, Ys, Sw, term, g_row):
    """``<G, e_j e_kᵀ>`` of every target into ``g_row`` (n_T,) for one arm's balanced
    factors ``U`` (d1, r), ``V`` (d2, r) and ``q = D^{-1}``; ``term`` (R,) scratch."""
    r = U.shape[1]
    for ll in range(Xs.shape[1]):
        alpha = 0.0
        beta = 0.0
        for s in range(r):
            alpha += _row_dot(U, x_rows, s, Xs, ll) * q[s] * U[j, s]
            beta += _row_dot(V, y_rows, s, Ys, ll) * q[s] * V[k, s]
        term[ll] = Ys_full[k, ll] * alpha + Xs_full[j, ll] * beta - kappa * alpha * beta
    for m in range(Sw.shape[1]):
        g = 0.0
        for ll in range(Xs.shape[1]):
            g += term[ll] * Sw[ll, m]
        g_row[m] = g


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


@njit(cache=True)
def _arm_factors(b, k, last_U, last_V, bi, ki, U_new, V_new):
    """Arm ``k``'s factors in trial ``b`` before the round: the change's, if it moved."""
    for n in range(bi.shape[0]):
        if bi[n] == b and ki[n] == k:
            return U_new[n], V_new[n]
    return last_U[b, k], last_V[b, k]


@njit(cache=True)
def _computes(b, k, action, factors, limit):
    """Whether trial ``b``'s arm ``k`` needs its own ``<G, X_t>``: not pulled, and its
    ``1/π`` at most ``limit`` (the all-rounds term)."""
    return k != action[b] and factors[b, k] <= limit


@njit(cache=True)
def _write_trial_design(b, action, g_pulled, g_arms, factors, limit, weight, c, S2_sum, out):
    """Trial ``b``'s ``S2_sum`` plus its design terms into ``out``
    (inference.cores.design_variance): ``c² g² / π`` where ``1/π <= limit`` (``g`` the
    pulled arm's ``g_pulled[b]``, another arm's ``g_arms[k]``), the pulled arm's
    ``(c w g)²`` below, nothing for the other arms below; returns whether a sum is not
    finite."""
    a = action[b]
    cw = c * weight[b]
    bad = False
    for k in range(factors.shape[1]):
        f = factors[b, k]
        above = f <= limit
        for m in range(out.shape[2]):
            if k == a:
                gm = g_pulled[b, m]
                t = c * c * gm * gm * f if above else cw * cw * gm * gm
            else:
                gm = g_arms[k, m]
                t = c * c * gm * gm * f if above else 0.0
            out[b, k, m] = S2_sum[b, k, m] + t
            if not np.isfinite(out[b, k, m]):
                bad = True
    return bad


@njit(cache=True)
def dense_design(
    X, last_U, last_V, bi, ki, U_new, V_new, factors, floor, action, weight, g_pulled, c,
    kappa, x_rows, y_rows, Xs, Ys, Sw, S2_sum, out,
):  # fmt: skip
    """``S2_sum`` (B, K, n_T) plus every arm's design terms of one round into ``out``,
    nothing else written (inference.cores.design_variance); returns the first trial where a
    sum would not be finite, or -1.

    ``X`` (B, d1, d2); ``last_U`` (B, K, d1, r), ``last_V`` the held balanced factors and
    the round's changes ``bi``, ``ki`` (sorted by trial), ``U_new``, ``V_new``;
    ``factors`` (B, K) every arm's ``1/π_t``, ``floor`` the propensity from which an arm
    takes the all-rounds term; ``g_pulled`` (B, n_T) the pulled arm's ``<G_t, X_t>`` from
    :func:`round_terms`.  Arms below the floor that were not pulled cost nothing.
    """
    B, K, d1, r = last_U.shape
    limit = np.inf if floor == 0.0 else 1.0 / floor  # design_variance.largest_factor
    d2 = last_V.shape[2]
    R = Xs.shape[1]
    nT = Sw.shape[1]
    XtU = np.zeros((d2, r))
    P = np.empty((r, r))
    sq = np.empty(r)
    q = np.empty(r)
    av = np.empty((r, R))
    bv = np.empty((r, R))
    Pb = np.empty(r)
    g = np.empty((K, nT))
    bad = -1
    for b in range(B):
        for k in range(K):
            if _computes(b, k, action, factors, limit):
                U, V = _arm_factors(b, k, last_U, last_V, bi, ki, U_new, V_new)
                XV = np.dot(X[b], V)  # BLAS: the kernel's one O(d1 d2 r) product
                for n in range(y_rows.shape[0]):
                    y = y_rows[n]
                    for s in range(r):
                        t = 0.0
                        for i in range(d1):
                            t += X[b, i, y] * U[i, s]
                        XtU[y, s] = t
                _column_squares(U, sq)
                for s in range(r):
                    for u in range(r):
                        t = 0.0
                        for i in range(d1):
                            t += U[i, s] * XV[i, u]
                        P[s, u] = t
                _inverse_squares(sq, q)
                _dense_g(U, V, XV, XtU, P, q, kappa, x_rows, y_rows, Xs, Ys, Sw, av, bv, Pb, g[k])
        if _write_trial_design(b, action, g_pulled, g, factors, limit, weight, c, S2_sum, out):
            if bad < 0:
                bad = b
    return bad


@njit(cache=True)
def one_hot_design(
    rows, cols, last_U, last_V, bi, ki, U_new, V_new, factors, floor, action, weight,
    g_pulled, c, kappa, Xs_full, Ys_full, x_rows, y_rows, Xs, Ys, Sw, S2_sum, out,
):  # fmt: skip
    """:func:`dense_design` for ``X_b = e_j e_kᵀ`` (``rows``, ``cols``), at O(r) per target
    triplet beyond the targets' support for each arm (:func:`one_hot_terms`)."""
    B, K, _, r = last_U.shape
    limit = np.inf if floor == 0.0 else 1.0 / floor  # design_variance.largest_factor
    nT = Sw.shape[1]
    sq = np.empty(r)
    q = np.empty(r)
    term = np.empty(Xs.shape[1])
    g = np.empty((K, nT))
    bad = -1
    for b in range(B):
        for k in range(K):
            if _computes(b, k, action, factors, limit):
                U, V = _arm_factors(b, k, last_U, last_V, bi, ki, U_new, V_new)
                _column_squares(U, sq)
                _inverse_squares(sq, q)
                _one_hot_g(
                    U, V, rows[b], cols[b], q, kappa, Xs_full, Ys_full, x_rows, y_rows, Xs,
                    Ys, Sw, term, g[k],
                )  # fmt: skip
        if _write_trial_design(b, action, g_pulled, g, factors, limit, weight, c, S2_sum, out):
            if bad < 0:
                bad = b
    return bad


@njit(cache=True)
def probe_moments(X, flat, sums, squares):
    """The context check's running sums (:mod:`inference.cores.context_check`), in place:
    ``u = X flat`` for contexts ``X`` (B, d1 d2) and probes ``flat`` (d1 d2, k), then
    ``u²`` into ``sums`` and ``u⁴`` into ``squares`` (B, k)."""
    k = flat.shape[1]
    for b in range(X.shape[0]):
        u = np.dot(X[b], flat)  # BLAS, as numpy's product
        for j in range(k):
            u2 = u[j] * u[j]
            sums[b, j] += u2
            squares[b, j] += u2 * u2


@njit(cache=True)
def round_design(
    U, V, XV, XtU, sq, action, reward, weight, c, kappa, limit, x_rows, y_rows, Xs, Ys, Sw,
    sigma_sum, S2_sum, res_out, g_out, X, last_U, last_V, bi, ki, U_new, V_new, factors,
    floor, sums,
):  # fmt: skip
    """:func:`round_terms`, then :func:`dense_design` on its ``g_out``, in one call;
    returns the first trial each refuses (-1 for none; the design is not computed for a
    refused round)."""
    bad = round_terms(
        U, V, XV, XtU, sq, action, reward, weight, c, kappa, limit, x_rows, y_rows, Xs, Ys,
        Sw, sigma_sum, S2_sum, res_out, g_out,
    )  # fmt: skip
    if bad >= 0:
        return bad, -1
    return -1, dense_design(
        X, last_U, last_V, bi, ki, U_new, V_new, factors, floor, action, weight, g_out, c,
        kappa, x_rows, y_rows, Xs, Ys, Sw, S2_sum, sums,
    )  # fmt: skip


@njit(cache=True)
def one_hot_round_design(
    rows, cols, U, V, sq, action, reward, weight, c, kappa, limit, Xs_full, Ys_full, x_rows,
    y_rows, Xs, Ys, Sw, sigma_sum, S2_sum, res_out, g_out, last_U, last_V, bi, ki, U_new,
    V_new, factors, floor, sums,
):  # fmt: skip
    """:func:`round_design` for completion contexts: :func:`one_hot_terms`, then
    :func:`one_hot_design`."""
    bad = one_hot_terms(
        rows, cols, U, V, sq, action, reward, weight, c, kappa, limit, Xs_full, Ys_full,
        x_rows, y_rows, Xs, Ys, Sw, sigma_sum, S2_sum, res_out, g_out,
    )  # fmt: skip
    if bad >= 0:
        return bad, -1
    return -1, one_hot_design(
        rows, cols, last_U, last_V, bi, ki, U_new, V_new, factors, floor, action, weight,
        g_out, c, kappa, Xs_full, Ys_full, x_rows, y_rows, Xs, Ys, Sw, S2_sum, sums,
    )  # fmt: skip
