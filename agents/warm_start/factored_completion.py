"""The factored warm-start fit of eq. (10) for completion contexts, from their indices.

:func:`agents.warm_start.factored.factored_nuclear_norm_fit` solves the rank-≤ r nuclear-norm
penalised least squares of eq. (10) by alternating ridge regressions on dense contexts.
With completion contexts ``X_t = e_{j_t} e_{k_t}ᵀ`` the same sweeps need no matrix at all:
``<U Vᵀ, X_t> = U[j_t] · V[k_t]``, so the U-step's normal equations split into one ``r x r``
system per row ``i`` of ``U``,

    (Σ_{t: j_t = i} ω_t V[k_t] V[k_t]ᵀ + λ I) U[i] = Σ_{t: j_t = i} ω_t y_t V[k_t],

(the dense path's ``(d1 r) x (d1 r)`` system is block diagonal with exactly these blocks),
and the V-step into one per row of ``V``.  The spectral start ``c Σ_t ω_t y_t X_t`` is a
scatter of the weighted rewards, and the noise level of the penalty reads
``<M_0, X_t> = M_0[j_t, k_t]``.  A sweep costs O(n r² + (d1 + d2) r³) instead of
O(n d1 d2 r), and the data take 8 bytes of index per round instead of a ``d1 x d2``
matrix (:class:`agents.warm_start.completion.CompletionWarmStartBuffer`).  The numbers are the
dense path's up to rounding (``tests/test_completion.py`` compares them).
"""

from __future__ import annotations

import numpy as np

from agents.warm_start.alternating import alternate, arm_weights, data_penalty
from lrbandit_gym.onehot import OneHotContexts

__all__ = ["completion_factored_fit"]


def _row_systems(
    rows: np.ndarray, F: np.ndarray, w: np.ndarray, y: np.ndarray, d: int, lam: float
) -> np.ndarray:
    """Solve, for every row ``i < d``, the ridge regression of ``y`` on the features ``F``
    of the rounds with ``rows == i`` (weights ``w``, ridge ``lam``): returns (d, r)."""
    r = F.shape[1]
    G = np.empty((d, r, r))
    b = np.empty((d, r))
    wF = w[:, None] * F
    for s in range(r):
        b[:, s] = np.bincount(rows, weights=wF[:, s] * y, minlength=d)
        for u in range(s, r):
            G[:, s, u] = np.bincount(rows, weights=wF[:, s] * F[:, u], minlength=d)
            G[:, u, s] = G[:, s, u]
    idx = np.arange(r)
    G[:, idx, idx] += lam
    return np.linalg.solve(G, b[..., None])[..., 0]


def _fit_trial(
    rows: np.ndarray,
    cols: np.ndarray,
    actions: np.ndarray,
    y: np.ndarray,
    omega: np.ndarray,
    n_eff: np.ndarray,
    d1: int,
    d2: int,
    rank: int,
    context_scale: float,
    penalty_scale: float,
    penalty: np.ndarray | None,
    penalised_sweeps: int,
    refit_sweeps: int,
) -> np.ndarray:
    """One trial's fit from its indices; returns (K, d1, d2) (the dense path's
    ``_fit_trial`` on the one-hot contexts)."""
    K, r = omega.shape[1], rank
    sel = [np.flatnonzero(actions == k) for k in range(K)]
    jr = [rows[s] for s in sel]
    kc = [cols[s] for s in sel]
    w = [omega[s, k] for k, s in enumerate(sel)]
    yk = [y[s] for s in sel]
    # Spectral start: c Σ ω y X per arm, then its top r (one arm at a time: the d1 x d2
    # matrices and their SVD are the fit's largest temporaries).
    U = np.empty((K, d1, r))
    V = np.empty((K, d2, r))
    sigma = np.empty(K)
    for k in range(K):
        M0 = context_scale * np.bincount(
            jr[k] * d2 + kc[k], weights=w[k] * yk[k], minlength=d1 * d2
        ).reshape(d1, d2)
        u, s, vt = np.linalg.svd(M0, full_matrices=False)
        root = np.sqrt(s[:r])
        U[k] = u[:, :r] * root
        V[k] = vt[:r].T * root
        sigma[k] = np.sqrt((w[k] * (yk[k] - M0[jr[k], kc[k]]) ** 2).sum())
        del M0, u, vt
    if penalty is not None:
        lam = np.asarray(penalty, dtype=float)
    else:
        lam = data_penalty(sigma, n_eff, d1, d2, penalty_scale)

    def sweep(U, V, lam):
        U = np.stack([_row_systems(jr[k], V[k][kc[k]], w[k], yk[k], d1, lam[k]) for k in range(K)])
        V = np.stack([_row_systems(kc[k], U[k][jr[k]], w[k], yk[k], d2, lam[k]) for k in range(K)])
        return U, V

    return alternate(sweep, U, V, lam, penalised_sweeps, refit_sweeps)


def completion_factored_fit(
    X: OneHotContexts,
    actions: np.ndarray,
    rewards: np.ndarray,
    n_actions: int,
    rank: int,
    *,
    weights: np.ndarray | None = None,
    context_scale: float = 1.0,
    penalty_scale: float = 0.5,
    penalised_sweeps: int = 1,
    refit_sweeps: int = 3,
    penalty: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`agents.warm_start.factored.factored_nuclear_norm_fit` for one-hot contexts given as
    indices (see the module docstring); the same arguments, with ``X`` a
    :class:`~lrbandit_gym.onehot.OneHotContexts` of shape ``(B, n, d1, d2)``.

    Returns
    -------
    ndarray (B, K, d1, d2)
        The fitted ``U Vᵀ`` per trial and arm; zero for an arm without rounds of positive
        weight.
    """
    B, n, d1, d2 = X.shape
    # Imported here: agents.warm_start.factored dispatches index contexts to this module.
    omega, n_eff, y, lam = arm_weights(actions, rewards, n_actions, weights, penalty)
    out = np.empty((B, n_actions, d1, d2))
    for b in range(B):
        out[b] = _fit_trial(
            X.rows[b],
            X.cols[b],
            actions[b],
            y[b],
            omega[b],
            n_eff[b],
            d1,
            d2,
            rank,
            context_scale,
            penalty_scale,
            None if lam is None else lam[b],
            penalised_sweeps,
            refit_sweeps,
        )
    return out
