"""Nuclear-norm penalised least squares in factored form, by alternating ridge regressions.

For any ``M`` of rank ≤ r, ``‖M‖_* = min_{U Vᵀ = M} (‖U‖_F² + ‖V‖_F²)/2``, so the
warm-start objective of eq. (10) restricted to rank ≤ r,

    (1/(2W)) Σ_t w_t (y_t − <M, X_t>)² + λ ‖M‖_*,

equals ``(1/(2W)) Σ_t w_t (y_t − <U Vᵀ, X_t>)² + (λ/2)(‖U‖² + ‖V‖²)``, whose blocks are ridge
regressions (softImpute-ALS, Hastie, Mazumder, Lee & Zadeh 2015).  When the penalised
solution has rank ≤ r — the case of interest, since the truth has rank r — the factored
problem has the same optimum.  Each sweep costs two passes over the data instead of the
one pass per proximal-gradient iteration, and converges in a handful of sweeps from a
spectral start, so it is the solver for large batches of trials (the Monte Carlo studies).

Layout: a trial's contexts are processed as one ``(d1, n, d2)`` array, in which both
products a sweep needs are single GEMMs over all rounds and all arms at once,
``X V = (d1·n × d2)(d2 × K r)`` and ``Uᵀ X = (K r × d1)(d1 × n·d2)``.
:class:`agents.warm_start.dense.WarmStartBuffer` stores its contexts in that layout, so no copy of
the data is made; other inputs are transposed once per trial.
"""

from __future__ import annotations

import numpy as np

from agents.warm_start.alternating import alternate, arm_weights, data_penalty
from agents.warm_start.factored_completion import completion_factored_fit
from lrbandit_gym.onehot import OneHotContexts

__all__ = ["factored_nuclear_norm_fit"]


def _ridge_solve(A: list[np.ndarray], w: list[np.ndarray], y: list[np.ndarray], lam: np.ndarray):
    """Every arm's weighted ridge regression of ``y[k]`` on the columns of ``A[k]`` (p, m_k).

    The Gram matrices are accumulated in the features' precision (float32 for the buffer's
    contexts: a well-conditioned design of ~10³ rows) and solved in float64.
    """
    K, p = len(A), A[0].shape[0]
    G = np.empty((K, p, p))
    b = np.empty((K, p))
    for k in range(K):
        As = A[k] * np.sqrt(w[k])  # (p, m_k); As @ As.T is one SYRK (half a GEMM)
        G[k] = As @ As.T
        b[k] = A[k] @ (w[k] * y[k]).astype(A[k].dtype)
    idx = np.arange(p)
    G[:, idx, idx] += lam[:, None]
    return np.linalg.solve(G, b[..., None])[..., 0]


def _fit_trial(
    X: np.ndarray,
    actions: np.ndarray,
    y: np.ndarray,
    omega: np.ndarray,
    n_eff: np.ndarray,
    rank: int,
    context_scale: float,
    penalty_scale: float,
    penalty: np.ndarray | None,
    penalised_sweeps: int,
    refit_sweeps: int,
) -> np.ndarray:
    """One trial's fit from contexts ``X`` in ``(d1, n, d2)`` layout; returns (K, d1, d2)."""
    d1, n, d2 = X.shape
    K, r, dt = omega.shape[1], rank, X.dtype
    rows = [np.flatnonzero(actions == k) for k in range(K)]
    # Each arm's rounds as one (d1, m_k, d2) block: both products of a sweep are then one
    # GEMM over the block, (d1·m × d2)(d2 × r) and (r × d1)(d1 × m·d2).
    Xk = [np.take(X, rows[k], axis=1) for k in range(K)]
    w = [omega[rows[k], k].astype(dt) for k in range(K)]
    yk = [y[rows[k]] for k in range(K)]
    m = [len(rk) for rk in rows]
    # Spectral start: c Σ ω y X per arm (unbiased for M under uniform sampling), top r.
    M0 = np.stack(
        [context_scale * np.matmul((w[k] * yk[k]).astype(dt), Xk[k]) for k in range(K)]
    ).astype(np.float64)  # (K, d1, d2)
    u, s, vt = np.linalg.svd(M0, full_matrices=False)
    root = np.sqrt(s[:, None, :r])
    U = u[..., :r] * root  # (K, d1, r)
    V = vt[:, :r, :].swapaxes(-1, -2) * root  # (K, d2, r)
    if penalty is not None:
        lam = np.asarray(penalty, dtype=float)
    else:
        # σ̂ from the spectral start's residuals errs high (it still holds signal), so the
        # penalty errs towards more shrinkage, which the refit below removes.
        sigma = np.empty(K)
        for k in range(K):
            pred = np.matmul(Xk[k], M0[k].astype(dt)[:, :, None])[..., 0].sum(axis=0)  # (m,)
            sigma[k] = np.sqrt((w[k] * (yk[k] - pred) ** 2).sum())
        lam = data_penalty(sigma, n_eff, d1, d2, penalty_scale)

    def sweep(U, V, lam):
        # U-step: features vec(X_t V_k), ordered (i, s), as the columns of A (d1 r, m_k).
        A = [
            (Xk[k].reshape(-1, d2) @ V[k].astype(dt))
            .reshape(d1, m[k], r)
            .transpose(0, 2, 1)
            .reshape(d1 * r, m[k])
            for k in range(K)
        ]
        U = _ridge_solve(A, w, yk, lam).reshape(K, d1, r)
        # V-step: features vec(X_tᵀ U_k), ordered (s, j): (r × d1)(d1 × m·d2) -> (r, m, d2).
        A = [
            (U[k].T.astype(dt) @ Xk[k].reshape(d1, -1))
            .reshape(r, m[k], d2)
            .transpose(0, 2, 1)
            .reshape(r * d2, m[k])
            for k in range(K)
        ]
        return U, _ridge_solve(A, w, yk, lam).reshape(K, r, d2).swapaxes(-1, -2)

    return alternate(sweep, U, V, lam, penalised_sweeps, refit_sweeps)


def factored_nuclear_norm_fit(
    X: np.ndarray,
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
    """Rank-≤ r nuclear-norm penalised least squares per arm, batched over trials.

    Parameters
    ----------
    X : ndarray (B, n, d1, d2), or OneHotContexts
        Contexts (float32 or float64; float32 halves the memory traffic).  A transposed
        view of ``(B, d1, n, d2)`` storage (as :class:`~agents.warm_start.dense.WarmStartBuffer`
        returns) is used without a copy.  One-hot contexts in index form are fitted by
        :func:`agents.warm_start.factored_completion.completion_factored_fit`, without a matrix.
    actions, rewards : ndarray (B, n)
    n_actions, rank : int
    weights : ndarray (B, n), optional
        Per-round weights (``1/π`` for adaptively collected data); default 1.
    context_scale : float
        ``c`` of Appendix C, for the spectral start ``c·Σ w y X / W``.
    penalty_scale : float
        ``C`` in the data-driven ``λ = C σ̂ (√d1 + √d2)/√n_eff`` (Negahban & Wainwright's
        rate), with ``σ̂`` from the residuals of the spectral start.
    penalised_sweeps, refit_sweeps : int
        Alternating sweeps with the penalty, then without it (the refit that removes the
        nuclear norm's shrinkage, as the tangent refit does for the proximal path).
    penalty : ndarray (B, K), optional
        A fixed ``λ`` instead of the data-driven one.

    Returns
    -------
    ndarray (B, K, d1, d2)
        The fitted ``U Vᵀ`` per trial and arm; zero for an arm without rounds of positive
        weight.
    """
    if isinstance(X, OneHotContexts):  # completion contexts as indices: no matrix at all
        return completion_factored_fit(
            X,
            actions,
            rewards,
            n_actions,
            rank,
            weights=weights,
            context_scale=context_scale,
            penalty_scale=penalty_scale,
            penalised_sweeps=penalised_sweeps,
            refit_sweeps=refit_sweeps,
            penalty=penalty,
        )
    B, n, d1, d2 = X.shape
    omega, n_eff, y, lam = arm_weights(actions, rewards, n_actions, weights, penalty)
    out = np.empty((B, n_actions, d1, d2))
    for b in range(B):
        out[b] = _fit_trial(
            X[b].transpose(1, 0, 2),
            actions[b],
            y[b],
            omega[b],
            n_eff[b],
            rank,
            context_scale,
            penalty_scale,
            None if lam is None else lam[b],
            penalised_sweeps,
            refit_sweeps,
        )
    return out
