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
"""

from __future__ import annotations

import numpy as np

__all__ = ["factored_nuclear_norm_fit"]


def _ridge_half_step(Z, wg, yg, lam):
    """Every arm's ridge regression of ``yg`` on features ``Z`` (B, K, m, d, r), weights ``wg``.

    The Gram matrices are accumulated in float32 (a well-conditioned design of ~10³ rows; the
    solve is float64), which halves the dominant cost.
    """
    B, K, m, d, r = Z.shape
    Z = Z.reshape(B, K, m, d * r).astype(np.float32, copy=False)
    Zw = Z * wg[..., None].astype(np.float32)
    G = np.matmul(Zw.swapaxes(-1, -2), Z).astype(np.float64)  # (B, K, d r, d r)
    b = np.matmul(Zw.swapaxes(-1, -2).astype(np.float64), yg[..., None])[..., 0]
    idx = np.arange(d * r)
    G[..., idx, idx] += lam[..., None]
    return np.linalg.solve(G, b[..., None])[..., 0].reshape(B, K, d, r)


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
    penalised_sweeps: int = 2,
    refit_sweeps: int = 3,
    penalty: np.ndarray | None = None,
) -> np.ndarray:
    """Rank-≤ r nuclear-norm penalised least squares per arm, batched over trials.

    Parameters
    ----------
    X : ndarray (B, n, d1, d2)
        Contexts (float32 or float64; float32 halves the memory traffic).
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
        The fitted ``U Vᵀ`` per trial and arm.
    """
    B, n, d1, d2 = X.shape
    K, r = n_actions, rank
    w = np.ones((B, n)) if weights is None else np.asarray(weights, dtype=float)
    W = (actions[..., None] == np.arange(K)) * w[..., None]  # (B, n, K)
    total = W.sum(axis=1)  # (B, K)
    omega = W / np.where(total > 0, total, 1.0)[:, None, :]
    Wk = omega.transpose(0, 2, 1)  # normalised weights per arm, (B, K, n)
    n_eff = np.where((W**2).sum(1) > 0, total**2 / np.maximum((W**2).sum(1), 1e-300), 0.0)
    y = np.asarray(rewards, dtype=float)
    Xf = X.reshape(B, n, d1 * d2)

    # Spectral start: c Σ ω y X (unbiased for M under uniform sampling), top-r factors.
    M0 = np.matmul(Xf.transpose(0, 2, 1), (Wk.transpose(0, 2, 1) * y[..., None]).astype(Xf.dtype))
    M0 = context_scale * M0.transpose(0, 2, 1).reshape(B, K, d1, d2)
    u, s, vt = np.linalg.svd(M0, full_matrices=False)
    root = np.sqrt(s[..., None, :r])
    U = u[..., :r] * root
    V = vt[..., :r, :].swapaxes(-1, -2) * root

    # Group each trial's rounds by arm, padded to the largest count with zero weight, so
    # every pass touches each round once, for its own arm only.
    order = np.argsort(actions, axis=1, kind="stable")
    counts = (actions[..., None] == np.arange(K)).sum(axis=1)  # (B, K)
    m = max(int(counts.max()), 1)
    slot = np.arange(m)
    valid = slot < counts[..., None]  # (B, K, m)
    pos = np.where(valid, (np.cumsum(counts, axis=1) - counts)[..., None] + slot, 0)
    rounds = np.take_along_axis(order, pos.reshape(B, K * m), axis=1).reshape(B, K, m)
    trial = np.arange(B)[:, None, None]
    Xg = X[trial, rounds]  # (B, K, m, d1, d2)
    wg = np.where(valid, omega[trial, rounds, np.arange(K)[None, :, None]], 0.0)
    yg = y[trial, rounds]

    def sweep(U, V, lam):
        U = _ridge_half_step(np.matmul(Xg, V[:, :, None].astype(X.dtype)), wg, yg, lam)
        Ut = U[:, :, None].astype(X.dtype)
        return U, _ridge_half_step(np.matmul(Xg.swapaxes(-1, -2), Ut), wg, yg, lam)

    if penalty is not None:
        lam = np.broadcast_to(np.asarray(penalty, dtype=float), (B, K)).copy()
    else:
        # σ̂ from the spectral start's residuals errs high (it still holds signal), so the
        # penalty errs towards more shrinkage, which the refit below removes.
        pred = np.matmul(Xf, M0.reshape(B, K, -1).transpose(0, 2, 1).astype(Xf.dtype))
        sigma = np.sqrt((omega * (y[..., None] - pred) ** 2).sum(axis=1))
        rate = (np.sqrt(d1) + np.sqrt(d2)) / np.sqrt(np.maximum(n_eff, 1.0))
        lam = penalty_scale * sigma * rate
    for _ in range(penalised_sweeps):
        U, V = sweep(U, V, lam)
    # Refit: unpenalised sweeps from the penalised solution remove its shrinkage (the role
    # of the tangent-space refit in the proximal-gradient path); 1e-10 keeps the systems
    # non-singular for an arm with too few rounds.
    for _ in range(refit_sweeps):
        U, V = sweep(U, V, np.full((B, K), 1e-10))
    return np.matmul(U, V.swapaxes(-1, -2))
