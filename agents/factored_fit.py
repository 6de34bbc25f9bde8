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
:class:`agents.warm_start_buffer.WarmStartBuffer` stores its contexts in that layout, so no copy of
the data is made; other inputs are transposed once per trial.
"""

from __future__ import annotations

import numpy as np

from lrbandit_gym.onehot import OneHotContexts

__all__ = ["RIDGE_FLOOR", "alternate", "arm_weights", "data_penalty", "factored_nuclear_norm_fit"]

#: Ridge of the unpenalised refit sweeps (and of arms whose penalty is zero): keeps the
#: systems of an arm with few or no rounds non-singular.
RIDGE_FLOOR = 1e-10


def data_penalty(
    sigma: np.ndarray, n_eff: np.ndarray, d1: int, d2: int, penalty_scale: float
) -> np.ndarray:
    """The data-driven ``λ = C σ̂ (√d1 + √d2)/√n_eff`` per arm (Negahban & Wainwright's rate).

    An arm without rounds (or whose spectral start fits exactly, e.g. all rewards 0) has
    ``σ̂ = 0`` and an all-zero system: it gets :data:`RIDGE_FLOOR`, which keeps it solvable
    (its estimate is then exactly zero).  Every other arm keeps its penalty.
    """
    rate = (np.sqrt(d1) + np.sqrt(d2)) / np.sqrt(np.maximum(n_eff, 1.0))
    lam = penalty_scale * sigma * rate
    return np.where(lam > 0, lam, RIDGE_FLOOR)


def alternate(sweep, U, V, lam, penalised_sweeps: int, refit_sweeps: int) -> np.ndarray:
    """Run ``sweep(U, V, lam) -> (U, V)`` with the penalty, then without it, and return
    every arm's ``U Vᵀ``.

    The unpenalised refit sweeps from the penalised solution remove its shrinkage (the
    role of the tangent-space refit in the proximal-gradient path).
    """
    for _ in range(penalised_sweeps):
        U, V = sweep(U, V, lam)
    for _ in range(refit_sweeps):
        U, V = sweep(U, V, np.full(len(lam), RIDGE_FLOOR))
    return np.matmul(U, V.swapaxes(-1, -2))


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
        view of ``(B, d1, n, d2)`` storage (as :class:`~agents.warm_start_buffer.WarmStartBuffer`
        returns) is used without a copy.  One-hot contexts in index form are fitted by
        :func:`agents.completion_fit.completion_factored_fit`, without a matrix.
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
        from agents.completion_fit import completion_factored_fit

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


def arm_weights(
    actions: np.ndarray,
    rewards: np.ndarray,
    n_actions: int,
    weights: np.ndarray | None,
    penalty: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """What both factored fits (dense and index contexts) need per trial and arm.

    Parameters
    ----------
    actions, rewards : ndarray of shape (B, n)
    n_actions : int
    weights : ndarray of shape (B, n) or None (all 1)
    penalty : array_like broadcastable to (B, K), or None

    Returns
    -------
    omega : ndarray (B, n, K)
        Each arm's rounds' weights, normalised to sum to 1 (0 off the arm).
    n_eff : ndarray (B, K)
        Kish effective number of rounds per arm, ``(Σw)²/Σw²`` (0 without rounds).
    y : ndarray (B, n)
        The rewards as float.
    lam : ndarray (B, K) or None
        The penalty per trial and arm.
    """
    B, n = actions.shape
    w = np.ones((B, n)) if weights is None else np.asarray(weights, dtype=float)
    W = (actions[..., None] == np.arange(n_actions)) * w[..., None]  # (B, n, K)
    total = W.sum(axis=1)  # (B, K)
    omega = W / np.where(total > 0, total, 1.0)[:, None, :]  # normalised weights per arm
    n_eff = np.where((W**2).sum(1) > 0, total**2 / np.maximum((W**2).sum(1), 1e-300), 0.0)
    y = np.asarray(rewards, dtype=float)
    lam = None
    if penalty is not None:
        lam = np.broadcast_to(np.asarray(penalty, dtype=float), (B, n_actions))
    return omega, n_eff, y, lam
