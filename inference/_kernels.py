"""Compiled (numba) kernels of the online debiasing (engine "numba", :mod:`lrbandit_gym.engine`).

:func:`absorb_balanced` runs, one trial at a time, what
:meth:`inference.linear_form._DebiasedLinearForm.absorb_parts` does with stacked numpy calls
for balanced factors (as :class:`agents.LowRankSGD` stores them): queueing the held
estimates of the arms that moved (:mod:`inference.held_queue`), then the pulled arm's
residual, ``<G_t, X_t>`` from the targets' singular triplets
(:mod:`inference.tangent_space`), the ``sigma^2`` and ``S^2`` sums and the correction term
of Algorithm 2, in one loop over trials.  Imported only when numba runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from inference._thresholds import EIG_FLOOR

if TYPE_CHECKING:
    from inference.held_queue import DebiasedSum
    from inference.tangent_space import TargetTriplets

__all__ = ["absorb_balanced", "absorb_round"]


def absorb_balanced(
    sums: DebiasedSum,
    triplets: TargetTriplets,
    changes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    Ua: np.ndarray,
    Va: np.ndarray,
    X: np.ndarray,
    action: np.ndarray,
    reward: np.ndarray,
    weight: np.ndarray,
    products: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    c: float,
    kappa: float,
    debias: bool,
    sigma_sum: np.ndarray,
    S2_sum: np.ndarray,
    pulls: np.ndarray,
) -> None:
    """One round of balanced factors into ``sums`` and the running sums, in place.

    The arguments are those of
    :meth:`inference.linear_form._DebiasedLinearForm.absorb_parts`, plus the state it
    updates: ``sums`` (the queue and accumulator of ``sum_t M_tilde``), the targets'
    ``triplets``, ``c``, ``kappa``, whether the correction is added (``debias``) and the
    ``sigma^2``, ``S^2`` and pull counts.
    """
    bi, ki, U_new, V_new = changes
    if bi.size > 1 and (np.diff(bi) < 0).any():  # the kernel walks the changes by trial
        order = np.argsort(bi, kind="stable")
        bi, ki, U_new, V_new = bi[order], ki[order], U_new[order], V_new[order]
    XV, XtU, sq = products
    queued = absorb_round(
        bi,
        ki,
        U_new,
        V_new,
        sums.held,
        sums.last_U,
        sums.last_V,
        sums.ring_U,
        sums.ring_V,
        sums.ring_n,
        Ua,
        Va,
        XV,
        XtU,
        sq,
        X.reshape(X.shape[0], -1),
        action,
        reward,
        weight,
        c,
        kappa,
        triplets.x_rows,
        triplets.y_rows,
        triplets.Xs_sub,
        triplets.Ys_sub,
        triplets.Sw,
        debias,
        sigma_sum,
        S2_sum,
        sums.acc,
        pulls,
    )
    sums.advance(queued)


@njit(cache=True)
def _hold_trial(b, j, bi, ki, U_new, V_new, held, last_U, last_V, ring_U, ring_V, slot):
    """Trial ``b``'s changes ``j, j+1, ...`` (``bi`` sorted by trial).

    Queue ``held * U V^T`` of the old factors in ring ``slot`` (as transposed factors, see
    :meth:`inference.held_queue.DebiasedSum.hold`), store the new ones, reset their count;
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
    U,
    V,
    XV,
    XtU,
    sq,
    X,
    action,
    reward,
    weight,
    c,
    kappa,
    x_rows,
    y_rows,
    Xs,
    Ys,
    Sw,
    debias,
    sigma_sum,
    S2_sum,
    acc,
    pulls,
):
    """One round for every trial, in place: first the arms that moved (``bi``, ``ki``
    sorted by trial, new factors ``U_new``, ``V_new``; see :func:`_hold_trial`), then the
    pulled arm's part.

    ``U`` (B, d1, r), ``V`` (B, d2, r): the pulled arms' balanced factors, ``sq`` (B, r)
    their squared column norms (the singular values); ``XV = X V``, ``XtU = X^T U``;
    ``X`` (B, d1*d2) the contexts; ``x_rows``/``y_rows`` and ``Xs`` (nx, R), ``Ys`` (ny, R)
    the rows of the targets' singular vectors in their support, ``Sw`` (R, n_T) their
    weights.  Adds ``w res^2`` to ``sigma_sum``, ``(c w)^2 <G, X>^2`` to ``S2_sum``,
    ``c w res X`` to the arm's row of ``acc`` (if ``debias``) and ``w > 0`` to ``pulls``.
    """
    B, d1, r = U.shape
    R = Xs.shape[1]
    nT = Sw.shape[1]
    D = X.shape[1]
    P = np.empty((r, r))
    q = np.empty(r)
    av = np.empty((r, R))
    bv = np.empty((r, R))
    Pb = np.empty(r)
    j = 0
    queued = False
    for b in range(B):
        j, q_b = _hold_trial(b, j, bi, ki, U_new, V_new, held, last_U, last_V, ring_U, ring_V, slot)
        queued |= q_b
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
        w = weight[b]
        cw = c * w
        sigma_sum[b, k] += w * res * res
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
            S2_sum[b, k, m] += cw * cw * g * g
        coef = cw * res
        if debias and coef != 0.0:
            for i in range(D):
                acc[b, k, i] += coef * X[b, i]
        if w > 0.0:
            pulls[b, k] += 1
    return queued
