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


def _ridge_half_step(Z, Wk, y, lam_tot, r, K):
    """Solve every arm's ridge regression of ``y`` on the features ``Z`` (B, n, d, K·r)."""
    B, n, d, _ = Z.shape
    Z = Z.reshape(B, n, d, K, r).transpose(0, 3, 1, 2, 4).reshape(B, K, n, d * r)
    Zw = Z * Wk[..., None]  # (B, K, n, d r)
    G = np.matmul(Zw.swapaxes(-1, -2), Z)  # (B, K, d r, d r)
    b = np.matmul(Zw.swapaxes(-1, -2), y[:, None, :, None])[..., 0]
    idx = np.arange(d * r)
    G[..., idx, idx] += lam_tot[..., None]
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

    def sweep(U, V, lam):
        Vc = V.transpose(0, 2, 1, 3).reshape(B, 1, d2, K * r).astype(X.dtype)
        U = _ridge_half_step(np.matmul(X, Vc), Wk, y, lam, r, K)
        Uc = U.transpose(0, 2, 1, 3).reshape(B, 1, d1, K * r).astype(X.dtype)
        return U, _ridge_half_step(np.matmul(X.swapaxes(-1, -2), Uc), Wk, y, lam, r, K)

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
