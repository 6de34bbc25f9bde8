"""Proximal solver of eq. (10): FISTA with singular value thresholding, and the tangent refit.

For every arm ``a`` of every trial at once, :func:`fista` minimises

    (1 / (2 W_a)) Σ_{t: a_t = a} w_t (y_t − <M, X_t>)²  +  λ_a ‖M‖_*          (10)

(docs/method.md §3) by accelerated proximal gradient: a gradient step on the smooth part
(:class:`WeightedDesign`), then the nuclear norm's proximal map, singular value thresholding
(:func:`svt`).  :func:`tangent_refit` removes the nuclear norm's shrinkage by an unpenalised
weighted least-squares fit on the tangent space of the rank-r manifold at the solution, and
:func:`corrected_sigma` turns its residuals into a noise estimate.  :func:`proximal_fit`
combines them with the data-driven penalty of :mod:`agents.warm_start.fit` (its module
docstring states the rule); :func:`agents.warm_start.nuclear_norm_fit` validates the
input and calls it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "NuclearNormFit",
    "WeightedDesign",
    "corrected_sigma",
    "fista",
    "proximal_fit",
    "svt",
    "tangent_refit",
]

_N_MC = 4  # Monte Carlo draws for the gradient-noise scale
_SIGMA_RTOL = 0.05  # stop the noise fixed point when sigma_hat moves less than this
_MAX_SIGMA_ITER = 6
# Power iteration: on Marchenko-Pastur-like spectra the Rayleigh quotient approaches the top
# eigenvalue slowly from below, so the iteration stops early and the estimate is inflated
# instead (a larger L costs a few more FISTA iterations; a smaller one breaks stability).
_POWER_ITER = 12
_LIPSCHITZ_SAFETY = 1.3


@dataclass(frozen=True)
class NuclearNormFit:
    """Result of :func:`agents.warm_start.nuclear_norm_fit` with ``full_output=True`` (the
    proximal solver).

    Attributes
    ----------
    estimate : ndarray of shape (K, d1, d2) or (B, K, d1, d2)
        The fitted matrices (not rank-truncated).
    penalty : ndarray of shape (K,) or (B, K)
        ``lambda`` used for each arm.
    noise_std : ndarray of shape (K,) or (B, K)
        Noise level behind the penalty (given, or estimated; NaN when a penalty was given).
    noise_scale : ndarray of shape (K,) or (B, K)
        ``s``: operator norm of the gradient noise per unit noise level.
    n_obs : ndarray of shape (K,) or (B, K)
        Rounds with positive weight per arm.
    n_iter : int
        Proximal-gradient iterations of the last fit.
    converged : bool
        Whether every fit met ``tol`` within ``max_iter``.
    refit : bool
        Whether the tangent-space refit was applied.
    """

    estimate: np.ndarray
    penalty: np.ndarray
    noise_std: np.ndarray
    noise_scale: np.ndarray
    n_obs: np.ndarray
    n_iter: int
    converged: bool
    refit: bool


def svt(A: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Singular value thresholding of a (..., d1, d2) stack by ``tau`` (...,): the proximal
    map of ``tau ‖·‖_*``."""
    u, s, vt = np.linalg.svd(A, full_matrices=False)
    s = np.maximum(s - tau[..., None], 0.0)
    return np.matmul(u * s[..., None, :], vt), s


class WeightedDesign:
    """The weighted design of all arms: flattened contexts and per-arm weights.

    ``omega`` holds each arm's weights normalised to sum to one (``w_t / W_a`` on its rounds,
    0 elsewhere), so the smooth part of eq. (10) is ``(1/2) Σ_t omega_t (y_t − <M, X_t>)²``.
    """

    def __init__(self, X: np.ndarray, acts: np.ndarray, y: np.ndarray, w: np.ndarray, K: int):
        B, n, d1, d2 = X.shape
        self.shape = (B, K, d1, d2)
        # float64 matvecs: float32 rounding (~1e-7) would stall the convergence test at
        # small tolerances.
        self.Xf = X.reshape(B, n, d1 * d2).astype(np.float64, copy=False)
        self.XfT = self.Xf.transpose(0, 2, 1)
        self.y = y
        mask = acts[..., None] == np.arange(K)  # (B, n, K)
        raw = np.where(mask, w[..., None], 0.0)
        total = raw.sum(axis=1)  # (B, K)
        self.total = total
        self.omega = raw / np.where(total > 0, total, 1.0)[:, None, :]
        sq = (raw**2).sum(axis=1)
        self.n_eff = np.where(sq > 0, total**2 / np.where(sq > 0, sq, 1.0), 0.0)
        self.n_obs = (raw > 0).sum(axis=1)

    def apply(self, M: np.ndarray) -> np.ndarray:
        """Predictions ``<M_k, X_t>`` for every round and arm: (B, n, K)."""
        B, K, d1, d2 = self.shape
        return np.matmul(self.Xf, M.reshape(B, K, d1 * d2).transpose(0, 2, 1))

    def adjoint(self, R: np.ndarray) -> np.ndarray:
        """``sum_t R[t, k] X_t`` for every arm: (B, K, d1, d2)."""
        B, K, d1, d2 = self.shape
        G = np.matmul(self.XfT, R)  # (B, p, K)
        return G.transpose(0, 2, 1).reshape(B, K, d1, d2)

    def gradient(self, M: np.ndarray) -> np.ndarray:
        """Gradient of the smooth part of eq. (10) per arm: (B, K, d1, d2)."""
        return self.adjoint(self.omega * (self.apply(M) - self.y[..., None]))

    def weighted_rss(self, M: np.ndarray) -> np.ndarray:
        """``Σ_t omega_t (<M_k, X_t> − y_t)²`` per arm: (B, K)."""
        res = self.apply(M) - self.y[..., None]
        return (self.omega * res**2).sum(axis=1)  # (B, K)

    def lipschitz(self, context: str, rng: np.random.Generator) -> np.ndarray:
        """Largest eigenvalue of ``sum_t omega_t x_t x_t^T`` per arm: (B, K)."""
        B, K, d1, d2 = self.shape
        if context == "completion":
            # One-hot rows: the Hessian is diagonal with the weight mass of each entry.
            mass = np.matmul((self.Xf**2).transpose(0, 2, 1), self.omega)  # (B, p, K)
            L = mass.max(axis=1)
        else:
            # The same start for every trial keeps a batched fit equal to per-trial fits.
            v = np.array(np.broadcast_to(rng.standard_normal((K, d1, d2)), (B, K, d1, d2)))
            L = np.zeros((B, K))
            running = np.ones((B, K), dtype=bool)
            for _ in range(_POWER_ITER):
                v /= np.maximum(np.linalg.norm(v, axis=(2, 3), keepdims=True), 1e-300)
                Hv = self.adjoint(self.omega * self.apply(v))
                L_new = (v * Hv).sum(axis=(2, 3))
                moved = np.abs(L_new - L) > 1e-4 * np.abs(L_new)
                L = np.where(running, L_new, L)
                v = np.where(running[..., None, None], Hv, v)
                running &= moved
                if not running.any():
                    break
            L = L * _LIPSCHITZ_SAFETY  # the Rayleigh quotient approaches from below
        return np.where(L > 0, L, 1.0)

    def noise_scale(self, rng: np.random.Generator) -> np.ndarray:
        """Monte Carlo ``E ‖sum_t omega_t g_t X_t‖_op`` per arm: (B, K)."""
        B, K, d1, d2 = self.shape
        n = self.Xf.shape[1]
        # The same draws for every trial (and, row by row, for any prefix of the rounds)
        # keep batched and per-trial fits, and fits with zero-weighted tails, equal.
        g = rng.standard_normal((n, _N_MC))
        R = (self.omega[:, :, :, None] * g[None, :, None, :]).reshape(B, n, K * _N_MC)
        G = np.matmul(self.XfT, R)
        G = G.transpose(0, 2, 1).reshape(B, K, _N_MC, d1, d2)
        return np.linalg.norm(G, ord=2, axis=(3, 4)).mean(axis=2)


def fista(
    design: WeightedDesign,
    lam: np.ndarray,
    L: np.ndarray,
    M0: np.ndarray,
    max_iter: int,
    tol: float,
    active: np.ndarray | None = None,
) -> tuple[np.ndarray, int, bool]:
    """Accelerated proximal gradient with gradient-based adaptive restart, all arms at once.

    Each arm stops (its iterate is frozen) once it meets the tolerance, so the result for
    an arm does not depend on which other arms or trials share the call.  Arms with
    ``active`` False are returned unchanged.
    """
    M = M0.copy()
    Z = M0.copy()
    theta = np.ones(lam.shape)
    step = (1.0 / L)[..., None, None]
    tau = lam / L
    running = np.ones(lam.shape, dtype=bool) if active is None else active.copy()
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        if not running.any():
            break
        M_new, _ = svt(Z - step * design.gradient(Z), tau)
        delta = M_new - M
        # O'Donoghue & Candes restart: drop momentum where it points uphill.
        uphill = ((Z - M_new) * delta).sum(axis=(2, 3)) > 0
        theta_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * theta**2))
        beta = np.where(uphill, 0.0, (theta - 1.0) / theta_new)
        run = running[..., None, None]
        Z = np.where(run, M_new + beta[..., None, None] * delta, Z)
        M = np.where(run, M_new, M)
        theta = np.where(running, np.where(uphill, 1.0, theta_new), theta)
        change = np.linalg.norm(delta, axis=(2, 3))
        size = np.linalg.norm(M_new, axis=(2, 3))
        running &= change > tol * np.maximum(size, 1e-12)
    return M, it, not running.any()


def tangent_refit(
    design: WeightedDesign, M: np.ndarray, rank: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares on the tangent space of the rank-r manifold at ``M``.

    The tangent space is ``{A Q_Vᵀ + Q_U Bᵀ}`` with ``Q_U``, ``Q_V`` the top-r singular
    vectors of ``M``: ``(d1 + d2) r − r²`` free parameters, in which the fit is linear (one
    Riemannian Gauss-Newton step).  Returns the refit, its weighted residual sum of squares
    and its degrees of freedom.
    """
    B, K, d1, d2 = design.shape
    r = rank
    u, _, vt = np.linalg.svd(M, full_matrices=False)
    Q_U = u[..., :r]  # (B, K, d1, r)
    Q_V = vt[..., :r, :].swapaxes(-1, -2)  # (B, K, d2, r)
    n = design.Xf.shape[1]
    X = design.Xf.reshape(B, 1, n, d1, d2).astype(np.float64, copy=False)
    XV = np.matmul(X.reshape(B, 1, n * d1, d2), Q_V).reshape(B, K, n, d1 * r)
    XtU = np.matmul(X.swapaxes(-1, -2).reshape(B, 1, n * d2, d1), Q_U).reshape(B, K, n, d2 * r)
    Phi = np.concatenate((XV, XtU), axis=3)  # (B, K, n, q)
    omega = design.omega.transpose(0, 2, 1)[..., None]  # (B, K, n, 1)
    PhiT = Phi.swapaxes(-1, -2)
    N = np.matmul(PhiT, omega * Phi)
    rhs = np.matmul(PhiT, omega * design.y[:, None, :, None])  # (B, K, q, 1)
    evals, evecs = np.linalg.eigh(N)
    keep = evals > 1e-10 * evals[..., -1:]
    inv = np.where(keep, 1.0 / np.where(keep, evals, 1.0), 0.0)
    coef = np.matmul(evecs, inv[..., None] * np.matmul(evecs.swapaxes(-1, -2), rhs))[..., 0]
    A = coef[..., : d1 * r].reshape(B, K, d1, r)
    Bm = coef[..., d1 * r :].reshape(B, K, d2, r)
    refit = np.matmul(A, Q_V.swapaxes(-1, -2)) + np.matmul(Q_U, Bm.swapaxes(-1, -2))
    fitted = (Phi @ coef[..., None])[..., 0]  # (B, K, n)
    rss = (omega[..., 0] * (fitted - design.y[:, None, :]) ** 2).sum(axis=2)
    df = keep.sum(axis=-1)
    return refit, rss, df


def corrected_sigma(rss: np.ndarray, df: np.ndarray, n_eff: np.ndarray) -> np.ndarray:
    """``sqrt(rss * n_eff / (n_eff - df))`` with the correction capped at 10x variance."""
    denom = np.maximum(n_eff - df, 0.1 * n_eff)
    return np.sqrt(rss * n_eff / np.where(denom > 0, denom, 1.0))


def proximal_fit(
    X: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    weights: np.ndarray,
    n_actions: int,
    *,
    batched: bool,
    context: str,
    penalty: np.ndarray | None,
    noise_std: np.ndarray | None,
    penalty_scale: float,
    rank: int | None,
    max_iter: int,
    tol: float,
    seed: int,
) -> NuclearNormFit:
    """Eq. (10) for every trial and arm by FISTA, with the data-driven penalty and the refit.

    Inputs are validated by :func:`agents.warm_start.nuclear_norm_fit` (whose module
    docstring gives the penalty rule and the refit): ``X`` (B, n, d1, d2), ``actions``,
    ``rewards`` and ``weights`` (B, n), ``penalty`` and ``noise_std`` (B, K) or None.
    ``batched`` False drops the trial axis of the result.  An arm without a round of
    positive weight gets a zero estimate.
    """
    B, n, d1, d2 = X.shape
    K = n_actions
    design = WeightedDesign(X, actions, rewards, weights, K)
    empty = design.total <= 0  # zero estimates (nuclear_norm_fit warns about them)
    rng = np.random.default_rng(seed)
    L = design.lipschitz(context, rng)
    scale = design.noise_scale(rng)
    do_refit = rank is not None
    if do_refit:
        df_refit = rank * (d1 + d2) - rank * rank
        small = (design.n_eff <= df_refit + 10) & ~empty
        if small.any():
            warnings.warn(
                f"too few rounds per arm for the rank-{rank} refit (need > {df_refit + 10}, "
                f"have {float(design.n_eff[small].min()):.0f}); skipping it",
                RuntimeWarning,
                stacklevel=3,
            )
            do_refit = False
    refit_rank = rank if do_refit else None

    def solve(
        lam: np.ndarray,
        M_start: np.ndarray,
        tol_fit: float,
        active: np.ndarray | None = None,
        need_sigma: bool = True,
    ):
        return _solve(design, lam, L, M_start, max_iter, tol_fit, refit_rank, active, need_sigma)

    M = np.zeros((B, K, d1, d2))
    if penalty is not None:
        lam = penalty
        sigma = np.full((B, K), np.nan)
        M, out, its, conv, _ = solve(lam, M, tol, need_sigma=False)
    else:
        if noise_std is not None:
            sigma = noise_std
        else:
            sigma, M = _noise_fixed_point(solve, design, scale, penalty_scale, empty, M, tol)
        lam = penalty_scale * sigma * scale
        M, out, its, conv, _ = solve(lam, M, tol, need_sigma=False)
    out = np.where(empty[..., None, None], 0.0, out)

    def shape_out(a: np.ndarray) -> np.ndarray:
        return a if batched else a[0]

    return NuclearNormFit(
        estimate=shape_out(out),
        penalty=shape_out(lam),
        noise_std=shape_out(sigma),
        noise_scale=shape_out(scale),
        n_obs=shape_out(design.n_obs),
        n_iter=int(its),
        converged=bool(conv),
        refit=do_refit,
    )


def _solve(
    design: WeightedDesign,
    lam: np.ndarray,
    L: np.ndarray,
    M_start: np.ndarray,
    max_iter: int,
    tol: float,
    refit_rank: int | None,
    active: np.ndarray | None,
    need_sigma: bool,
) -> tuple[np.ndarray, np.ndarray, int, bool, np.ndarray | None]:
    """One FISTA fit of eq. (10) with penalty ``lam``, its refit and its noise estimate.

    Returns the penalised fit (the next fit's start), the estimate (the refit on the
    rank-``refit_rank`` tangent space, or the fit itself without a rank), the iterations,
    whether every arm converged, and ``sigma_hat`` (None when not ``need_sigma`` and there
    is no refit).
    """
    B, K, d1, d2 = design.shape
    M_fit, its, conv = fista(design, lam, L, M_start, max_iter, tol, active)
    if refit_rank is not None:
        refit, rss, df = tangent_refit(design, M_fit, refit_rank)
        return M_fit, refit, its, conv, corrected_sigma(rss, df, design.n_eff)
    if not need_sigma:
        return M_fit, M_fit, its, conv, None
    # No target rank: estimate the noise from a rank-k tangent refit, k the number of
    # singular values of the fit above the penalty (the plain residuals carry the
    # shrinkage bias, which would feed a too-large sigma back into the penalty; the
    # fit's exact rank counts noise directions barely above the threshold, and at
    # small penalties leaves too few residual degrees of freedom).  Fall back to the
    # df-corrected residuals of the fit if even that k is too large.
    sv = np.linalg.svd(M_fit, compute_uv=False)
    k_sig = (sv > lam[..., None]).sum(axis=-1)
    ok = (k_sig >= 1) & (design.n_eff > k_sig * (d1 + d2) - k_sig**2 + 10)
    rss = design.weighted_rss(M_fit)
    k_fit = (sv > 1e-10).sum(axis=-1)
    df = k_fit * (d1 + d2 - k_fit)
    for k in np.unique(k_sig[ok]):  # a few distinct ranks; per arm, batch-independent
        _, rss_k, df_k = tangent_refit(design, M_fit, int(k))
        use = ok & (k_sig == k)
        rss = np.where(use, rss_k, rss)
        df = np.where(use, df_k, df)
    return M_fit, M_fit, its, conv, corrected_sigma(rss, df, design.n_eff)


def _noise_fixed_point(
    solve: Callable[..., tuple],
    design: WeightedDesign,
    scale: np.ndarray,
    penalty_scale: float,
    empty: np.ndarray,
    M: np.ndarray,
    tol: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``sigma_hat`` per arm by the scaled-lasso type fixed point, and the last fit.

    Starts from the signal-inflated ``sqrt(Σ omega y²)`` and alternates fit and noise
    estimate, each fit warm started from the last (a continuation path), until
    ``sigma_hat`` moves by less than ``_SIGMA_RTOL``.
    """
    sigma = np.sqrt((design.omega * design.y[..., None] ** 2).sum(axis=1))
    settled = empty.copy()
    for _ in range(_MAX_SIGMA_ITER):
        lam = penalty_scale * sigma * scale
        M, _, _, _, sigma_new = solve(lam, M, max(tol, 1e-3), ~settled)
        trivial = np.linalg.norm(M, axis=(2, 3)) == 0
        # A zero fit re-estimates sigma as the signal-inflated start: halve instead.
        sigma_new = np.where(trivial, 0.5 * sigma, sigma_new)
        # Arms freeze once settled, so a batched fit equals per-trial fits.
        now = np.abs(sigma_new - sigma) <= _SIGMA_RTOL * sigma
        sigma = np.where(settled, sigma, sigma_new)
        settled |= now
        if settled.all():
            break
    return np.where(empty, 0.0, sigma), M
