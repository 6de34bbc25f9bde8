"""Nuclear-norm warm start for the low-rank SGD (eq. (10), ALGORITHMS.md §3).

Algorithm 1 needs an initial estimate ``M_init`` with ``‖M_init - M‖_F`` of the order of the
noise level.  The paper obtains it from a nuclear-norm penalised least-squares fit
(Negahban & Wainwright, 2011) on an exploration phase with uniformly random actions and
leaves the phase's length unstated.  This module provides

* :func:`nuclear_norm_fit` / :func:`fit_nuclear_norm`: for every arm ``a``,

  ``min_M  (1 / (2 W_a)) sum_{t: a_t = a} w_t (y_t - <M, X_t>)^2 + lambda_a ‖M‖_*``,

  ``W_a = sum_{t: a_t = a} w_t`` (``= n_a`` for unit weights), solved by accelerated
  proximal gradient (FISTA with adaptive restart) and singular value thresholding,
  vectorised over trials and arms;
* :class:`WarmStartBuffer`: a preallocated, bounded store for the exploration rounds;
* :data:`DEFAULT_WARM_START_ROUNDS`: an exploration length that meets the paper's
  initialisation condition in the paper's setting (see its documentation).

Penalty (``penalty=None``)
--------------------------
``lambda_a = penalty_scale * sigma_hat_a * s_a`` where ``s_a = E ‖sum_t omega_t g_t X_t‖_op``
(``omega_t`` the normalised weights, ``g_t ~ N(0, 1)``) is the operator norm of the
gradient noise per unit noise level, estimated by Monte Carlo on the observed design
(a few draws; the operator norm concentrates sharply).  For Gaussian contexts this is
``≈ (sqrt(d1) + sqrt(d2)) / sqrt(n_a)``, the rate of Negahban & Wainwright; computing it
from the design makes the same rule right for completion contexts (one-hot ``X``) and for
unequal weights without separate formulas.

``sigma_hat_a`` comes from a scaled-lasso type fixed point: start from the signal-inflated
``sqrt(sum omega y^2)``, fit, re-estimate ``sigma`` from residuals, refit with the new
penalty (warm started: the sequence of fits doubles as a continuation path), until it
moves by less than 5%.  Starting from above avoids the spurious tiny-noise fixed points
of an overfitted start.  The residuals are those of an unpenalised least-squares refit on
the tangent space of the rank-k manifold at the fit (``k`` the target rank, or without
one the number of singular values above ``lambda``), divided by the residual degrees of
freedom ``n_eff - (k (d1 + d2) - k^2)``: the fit's own residuals carry its shrinkage bias,
which fed back into the penalty stalls the fixed point at a too-large ``sigma`` (measured
in the paper's setting with 1500 rounds and no rank: ``sigma_hat = 0.36`` instead of 0.1
and error 0.29 instead of 0.16).  With it ``sigma_hat`` is within a few percent of
``sigma`` from 1500 rounds on.

``penalty_scale = 0.5``: with the refit the error does not depend on it (0.063-0.065 for
0.25, 0.5 and 1, paper setting, 2000 rounds); without it, smaller is better but slower to
converge (0.107 at 0.25, 0.112 at 0.5, 0.150 at 1 with one arm of 4 seeds failing at
error 1.05), so 0.5 is the compromise (below the textbook 1-2, whose bound is loose by the
shrinkage bias it creates).

Refit (``rank`` given)
----------------------
Nuclear-norm estimates are biased towards zero by ``~lambda`` per singular value.  With
the target rank known, the fit is followed by an unpenalised weighted least-squares refit
on the tangent space of the rank-r manifold at the fit (``M = A Q_V^T + Q_U B^T``,
``(d1 + d2) r - r^2`` free parameters; one Riemannian Gauss-Newton step).  This removes
the shrinkage and makes the result insensitive to the penalty; the residuals of this
linear fit also give a clean noise estimate for the penalty rule.  The refit estimate has
rank ``<= 2r``; :meth:`agents.estimator.LowRankSGD.initialize` truncates it to rank r.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.factored_fit import factored_nuclear_norm_fit
from lrbandit_gym.validation import (
    check_actions,
    check_choice,
    check_context,
    check_finite,
    check_positive_float,
    check_positive_int,
    check_rewards,
    check_weights,
)

__all__ = [
    "DEFAULT_PENALTY_SCALE",
    "DEFAULT_WARM_START_ROUNDS",
    "NuclearNormFit",
    "WarmStartBuffer",
    "fit_nuclear_norm",
    "nuclear_norm_fit",
    "reuse_buffer_memory",
]

#: Exploration rounds (all arms together, uniformly random actions) for the warm start.
#:
#: Measured in the paper's setting (d1 = d2 = 50, r = 3, K = 2, sigma = 0.1, Gaussian
#: contexts, unit singular values), 10 seeds, ``‖trunc_r(M_init_a) - M_a‖_F`` median (max):
#:
#: ========  =====================  =====================
#: rounds    ``rank=3`` (refit)     ``rank=None``
#: ========  =====================  =====================
#: 1000      0.136 (0.163)          0.536 (0.776)
#: 1500      0.079 (0.085)          0.163 (0.188)
#: 2000      0.065 (0.070)          0.112 (0.123)
#: 3000      0.048 (0.053)          0.073 (0.080)
#: ========  =====================  =====================
#:
#: 1000 rounds (500 per arm) are below the sample size at which nuclear-norm recovery
#: works.  From 2000 rounds with the refit, 3000 rounds of epsilon-greedy SGD (eps = 0.1)
#: end at a median error of 0.065 (max 0.079, 20 seeds); from 1000 rounds at 0.111.
DEFAULT_WARM_START_ROUNDS = 2000

#: Multiplier ``C`` in ``lambda = C * sigma_hat * s`` (see the module docstring).
DEFAULT_PENALTY_SCALE = 0.5

_CONTEXTS = ("gaussian", "completion")
_SOLVERS = ("factored", "proximal")
# Storage of released buffers kept for the next buffer of the same shape (see
# keep_buffer_memory); None: released storage is freed.
_SPARE_STORAGE: list[np.ndarray] | None = None
_N_MC = 4  # Monte Carlo draws for the gradient-noise scale
_SIGMA_RTOL = 0.05  # stop the noise fixed point when sigma_hat moves less than this
_MAX_SIGMA_ITER = 6
# Power iteration: on Marchenko-Pastur-like spectra the Rayleigh quotient reaches ~94% of
# the top eigenvalue after 10-12 steps and creeps up slowly after that, so stop early and
# overestimate instead (a 1.3x larger L costs ~15% more FISTA iterations, no stability).
_POWER_ITER = 12
_LIPSCHITZ_SAFETY = 1.3


@dataclass(frozen=True)
class NuclearNormFit:
    """Result of :func:`fit_nuclear_norm`.

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


# --------------------------------------------------------------------------- validation
def _validate(
    X: Any,
    actions: Any,
    rewards: Any,
    n_actions: Any,
    weights: Any,
    context: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, bool]:
    K = check_positive_int(n_actions, "n_actions")
    check_choice(context, "context", _CONTEXTS)
    Xa = np.asarray(X)
    if Xa.dtype.kind not in "iuf":
        raise ValueError(f"X must be a real array, got dtype {Xa.dtype}")
    if Xa.ndim not in (3, 4):
        raise ValueError(f"X must have shape (n, d1, d2) or (B, n, d1, d2), got shape {Xa.shape}")
    batched = Xa.ndim == 4
    if not batched:
        Xa = Xa[None]
    B, n, d1, d2 = Xa.shape
    if n == 0 or d1 == 0 or d2 == 0:
        raise ValueError(f"X must have at least one round and a non-empty matrix, got {Xa.shape}")
    if Xa.dtype != np.float32:
        Xa = Xa.astype(np.float64, copy=False)
    check_finite(Xa if batched else Xa[0], "X", batched=batched)
    lead = (B, n) if batched else (n,)

    def first_bad(bad: np.ndarray) -> str:
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return f" at index {idx if batched else idx[1:]}"

    acts = np.asarray(actions)
    if acts.shape != lead:
        raise ValueError(f"actions must have shape {lead}, got shape {acts.shape}")
    acts = acts.reshape(B, n)
    if acts.dtype.kind not in "iu":
        raise ValueError(f"actions must be integers in [0, {K}), got dtype {acts.dtype}")
    bad = (acts < 0) | (acts >= K)
    if bad.any():
        raise ValueError(
            f"actions must be in [0, {K}), got {acts[bad][0].item()!r}{first_bad(bad)}"
        )
    try:
        rew = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"rewards must be a real array, got {rewards!r}") from None
    if rew.shape != lead:
        raise ValueError(f"rewards must have shape {lead}, got shape {rew.shape}")
    rew = rew.reshape(B, n)
    if not np.isfinite(rew).all():
        bad = ~np.isfinite(rew)
        raise ValueError(f"rewards must be finite, got {rew[bad][0].item()!r}{first_bad(bad)}")
    if weights is None:
        w = np.ones((B, n))
    else:
        try:
            w = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"weights must be a real array, got {weights!r}") from None
        if w.shape != lead:
            raise ValueError(f"weights must have shape {lead}, got shape {w.shape}")
        w = w.reshape(B, n)
        bad = ~np.isfinite(w) | (w < 0)
        if bad.any():
            raise ValueError(
                f"weights must be finite and >= 0, got {w[bad][0].item()!r}{first_bad(bad)}"
            )
    if context == "completion":
        flat = Xa.reshape(B, n, d1 * d2)
        ok = (np.count_nonzero(flat, axis=2) == 1) & np.isclose(flat.sum(axis=2), 1.0)
        if not ok.all():
            b, t = (int(i) for i in np.argwhere(~ok)[0])
            where = f"X[{b}, {t}]" if batched else f"X[{t}]"
            raise ValueError(
                f"context='completion' needs one-hot contexts e_j e_k^T; {where} has "
                f"{int(np.count_nonzero(flat[b, t]))} non-zero entries summing to "
                f"{float(flat[b, t].sum())!r}"
            )
    return Xa, acts, rew, w, K, batched


# --------------------------------------------------------------------------- numerics
def _svt(A: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Singular value thresholding of a (..., d1, d2) stack by ``tau`` (...,)."""
    u, s, vt = np.linalg.svd(A, full_matrices=False)
    s = np.maximum(s - tau[..., None], 0.0)
    return np.matmul(u * s[..., None, :], vt), s


class _Design:
    """The weighted design of all arms: flattened contexts and per-arm weights."""

    def __init__(self, X: np.ndarray, acts: np.ndarray, y: np.ndarray, w: np.ndarray, K: int):
        B, n, d1, d2 = X.shape
        self.shape = (B, K, d1, d2)
        # float64 matvecs: float32 ones are no faster here (measured) and their rounding
        # (~1e-7) would stall the convergence test at small tolerances.
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
        return self.adjoint(self.omega * (self.apply(M) - self.y[..., None]))

    def weighted_rss(self, M: np.ndarray) -> np.ndarray:
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


def _fista(
    design: _Design,
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
        M_new, _ = _svt(Z - step * design.gradient(Z), tau)
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


def _tangent_refit(
    design: _Design, M: np.ndarray, rank: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares on the tangent space of the rank-r manifold at ``M``.

    Returns the refit, its weighted residual sum of squares and its degrees of freedom.
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


def _corrected_sigma(rss: np.ndarray, df: np.ndarray, n_eff: np.ndarray) -> np.ndarray:
    """``sqrt(rss * n_eff / (n_eff - df))`` with the correction capped at 10x variance."""
    denom = np.maximum(n_eff - df, 0.1 * n_eff)
    return np.sqrt(rss * n_eff / np.where(denom > 0, denom, 1.0))


# --------------------------------------------------------------------------- public API
def fit_nuclear_norm(
    X: Any,
    actions: Any,
    rewards: Any,
    n_actions: int,
    *,
    weights: Any = None,
    context: str = "gaussian",
    penalty: Any = None,
    penalty_scale: float = DEFAULT_PENALTY_SCALE,
    noise_std: Any = None,
    rank: int | None = None,
    max_iter: int = 1000,
    tol: float = 1e-5,
    seed: int = 0,
) -> NuclearNormFit:
    """Nuclear-norm penalised least squares per arm, with diagnostics (eq. (10) warm start).

    For each arm ``a`` minimises
    ``(1 / (2 W_a)) sum_{t: a_t = a} w_t (y_t - <M, X_t>)^2 + lambda_a ‖M‖_*`` with
    ``W_a = sum_{t: a_t = a} w_t`` by FISTA with singular value thresholding (see the module
    docstring for the penalty rule and the optional refit).

    Parameters
    ----------
    X : array_like of shape (n, d1, d2) or (B, n, d1, d2)
        Contexts (e.g. float32 from :class:`WarmStartBuffer`; the fit itself runs in
        float64).
    actions : array_like of int, shape (n,) or (B, n)
    rewards : array_like of shape (n,) or (B, n)
    n_actions : int
        Number of arms ``K``.
    weights : array_like of shape (n,) or (B, n), optional
        Non-negative per-round weights, e.g. ``1/pi_t(a_t)`` for adaptively collected data.
        Rescaling an arm's weights leaves its fit unchanged; zero-weight rounds are
        ignored exactly.
    context : {"gaussian", "completion"}, default "gaussian"
        "completion" requires one-hot contexts and uses the exact (diagonal) curvature.
    penalty : float or array_like of shape (K,) or (B, K), optional
        ``lambda``; None for the data-driven rule.
    penalty_scale : float, default 0.5
        ``C`` in the data-driven rule ``lambda = C sigma_hat s``.
    noise_std : float or array_like of shape (K,) or (B, K), optional
        Known noise level; skips the noise estimate of the data-driven rule.
    rank : int, optional
        Target rank; if given, refit on the rank-r tangent space (module docstring).
    max_iter : int, default 1000
        Proximal-gradient iterations per fit.
    tol : float, default 1e-5
        Stop when ``‖M_k - M_{k-1}‖_F <= tol ‖M_k‖_F`` for every arm.
    seed : int, default 0
        Seed of the power iteration and Monte Carlo draws (the fit is deterministic).

    Returns
    -------
    NuclearNormFit
    """
    Xa, acts, y, w, K, batched = _validate(X, actions, rewards, n_actions, weights, context)
    B, n, d1, d2 = Xa.shape
    penalty_scale = check_positive_float(penalty_scale, "penalty_scale")
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_positive_float(tol, "tol")
    if rank is not None:
        rank = check_positive_int(rank, "rank")
        if rank > min(d1, d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")

    def per_arm(value: Any, name: str) -> np.ndarray:
        arr = np.asarray(value, dtype=np.float64)
        shapes = [(), (K,)] + ([(B, K)] if batched else [])
        if arr.shape not in shapes:
            raise ValueError(
                f"{name} must be a scalar or of shape {' or '.join(map(str, shapes[1:]))}, "
                f"got shape {arr.shape}"
            )
        check_finite(arr, name)
        if (arr < 0).any():
            raise ValueError(f"{name} must be >= 0, got {arr.min()!r}")
        return np.broadcast_to(arr, (B, K)).copy()

    lam_given = None if penalty is None else per_arm(penalty, "penalty")
    sigma_given = None if noise_std is None else per_arm(noise_std, "noise_std")

    design = _Design(Xa, acts, y, w, K)
    empty = design.total <= 0
    if empty.any():
        b, k = (int(i) for i in np.argwhere(empty)[0])
        where = f" in trial {b}" if batched else ""
        warnings.warn(
            f"arm {k} has no rounds with positive weight{where}; its estimate is zero",
            RuntimeWarning,
            stacklevel=2,
        )
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
                stacklevel=2,
            )
            do_refit = False

    M = np.zeros((B, K, d1, d2))

    def fit_once(
        lam: np.ndarray,
        M_start: np.ndarray,
        tol_fit: float,
        active: np.ndarray | None = None,
        need_sigma: bool = True,
    ):
        M_fit, its, conv = _fista(design, lam, L, M_start, max_iter, tol_fit, active)
        if do_refit:
            refit, rss, df = _tangent_refit(design, M_fit, rank)
            return M_fit, refit, its, conv, _corrected_sigma(rss, df, design.n_eff)
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
            _, rss_k, df_k = _tangent_refit(design, M_fit, int(k))
            use = ok & (k_sig == k)
            rss = np.where(use, rss_k, rss)
            df = np.where(use, df_k, df)
        return M_fit, M_fit, its, conv, _corrected_sigma(rss, df, design.n_eff)

    if lam_given is not None:
        lam = lam_given
        sigma = np.full((B, K), np.nan)
        M, out, its, conv, _ = fit_once(lam, M, tol, need_sigma=False)
    else:
        if sigma_given is not None:
            sigma = sigma_given
        else:
            sigma = np.sqrt((design.omega * design.y[..., None] ** 2).sum(axis=1))
            settled = empty.copy()
            for _ in range(_MAX_SIGMA_ITER):
                lam = penalty_scale * sigma * scale
                M, _, _, _, sigma_new = fit_once(lam, M, max(tol, 1e-3), ~settled)
                trivial = np.linalg.norm(M, axis=(2, 3)) == 0
                # A zero fit re-estimates sigma as the signal-inflated start: halve instead.
                sigma_new = np.where(trivial, 0.5 * sigma, sigma_new)
                # Arms freeze once settled, so a batched fit equals per-trial fits.
                now = np.abs(sigma_new - sigma) <= _SIGMA_RTOL * sigma
                sigma = np.where(settled, sigma, sigma_new)
                settled |= now
                if settled.all():
                    break
            sigma = np.where(empty, 0.0, sigma)
        lam = penalty_scale * sigma * scale
        M, out, its, conv, _ = fit_once(lam, M, tol, need_sigma=False)
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


def nuclear_norm_fit(
    X: Any,
    actions: Any,
    rewards: Any,
    n_actions: int,
    *,
    weights: Any = None,
    context: str = "gaussian",
    penalty: Any = None,
    penalty_scale: float = DEFAULT_PENALTY_SCALE,
    noise_std: Any = None,
    rank: int | None = None,
    max_iter: int = 1000,
    tol: float = 1e-5,
    seed: int = 0,
    solver: str | None = None,
) -> np.ndarray:
    """Nuclear-norm warm start ``M_init`` for :meth:`LowRankSGD.initialize` (eq. (10)).

    Same arguments as :func:`fit_nuclear_norm`; returns only the estimate, of shape
    ``(K, d1, d2)`` or ``(B, K, d1, d2)`` (not rank-truncated).

    ``solver="factored"`` (the default when ``rank`` is given) minimises the same penalised
    objective restricted to rank ≤ r in factored form by alternating ridge regressions
    (:mod:`agents.factored_fit`), then refits without the penalty: about ten passes over the
    data instead of a few hundred, at the same accuracy in the paper's setting (median
    error 0.07 vs 0.065 after 2000 rounds), so it is what large Monte Carlo batches use.
    ``solver="proximal"`` runs :func:`fit_nuclear_norm` (FISTA, noise fixed point, tangent
    refit when ``rank`` is given); it is the default without ``rank``, since only the convex
    problem is then defined.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> M = np.stack([np.outer(rng.standard_normal(6), rng.standard_normal(5))] * 2)
    >>> X = rng.standard_normal((400, 6, 5)); a = rng.integers(0, 2, 400)
    >>> y = np.einsum("nij,nij->n", M[a], X) + 0.1 * rng.standard_normal(400)
    >>> nuclear_norm_fit(X, a, y, 2, rank=1).shape
    (2, 6, 5)
    """
    if solver is None:
        solver = "proximal" if rank is None else "factored"
    solver = check_choice(solver, "solver", _SOLVERS)
    if solver == "factored":
        if rank is None:
            raise ValueError("solver='factored' needs rank (it fits in rank-r factored form)")
        Xa, acts, y, w, K, batched = _validate(X, actions, rewards, n_actions, weights, context)
        rank = check_positive_int(rank, "rank")
        d1, d2 = Xa.shape[2:]
        if rank > min(d1, d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
        scale = float(d1 * d2) if context == "completion" else 1.0
        out = factored_nuclear_norm_fit(
            Xa,
            acts,
            y,
            K,
            rank,
            weights=w,
            context_scale=scale,
            penalty_scale=check_positive_float(penalty_scale, "penalty_scale"),
            penalty=None if penalty is None else np.asarray(penalty, dtype=float),
        )
        return out if batched else out[0]
    return fit_nuclear_norm(
        X,
        actions,
        rewards,
        n_actions,
        weights=weights,
        context=context,
        penalty=penalty,
        penalty_scale=penalty_scale,
        noise_std=noise_std,
        rank=rank,
        max_iter=max_iter,
        tol=tol,
        seed=seed,
    ).estimate


def _take_spare(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if _SPARE_STORAGE:
        for i, arr in enumerate(_SPARE_STORAGE):
            if arr.shape == shape and arr.dtype == dtype:
                return _SPARE_STORAGE.pop(i)
    # np.empty: pages are only touched as rounds arrive.
    return np.empty(shape, dtype=dtype)


def reuse_buffer_memory(enabled: bool = True) -> bool:
    """Keep the storage of released :class:`WarmStartBuffer` s for the next buffer of the
    same shape (``True``) or free it (``False``, the default); returns the previous setting.

    A Monte Carlo study runs one warm start per chunk of trials in each worker process; a
    125-trial buffer in the paper's setting is 2.5 GB, and touching that much fresh memory
    (the kernel zeroes every page) costs seconds per chunk, while reusing it costs nothing.
    The study workers switch this on for their lifetime (:mod:`lrbandit_gym.experiments.studies`);
    elsewhere an agent does not hold the memory after its warm start.  Switching it off
    frees the kept storage.
    """
    global _SPARE_STORAGE
    previous = _SPARE_STORAGE is not None
    if bool(enabled) != previous:
        _SPARE_STORAGE = [] if enabled else None
    return previous


class WarmStartBuffer:
    """Preallocated store for the exploration phase that feeds :func:`nuclear_norm_fit`.

    Memory is ``O(length * d1 * d2)`` per trial, allocated once.  Contexts are stored as
    float32 by default (half the memory; the fit is unaffected at the noise levels of
    interest: rounding perturbs ``<M, X>`` by ~1e-7 relative).

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    n_actions : int
        Number of arms ``K``.
    length : int
        Capacity in rounds (e.g. :data:`DEFAULT_WARM_START_ROUNDS`).
    n_trials : int or None, default None
        Batch size ``B`` (None: unbatched API, as in :class:`LowRankSGD`).
    dtype : {numpy.float32, numpy.float64}, default numpy.float32
        Storage type of the contexts.

    Examples
    --------
    >>> buf = WarmStartBuffer(4, 3, n_actions=2, length=2)
    >>> buf.add(np.ones((4, 3)), action=0, reward=1.0)
    >>> buf.full
    False
    """

    def __init__(
        self,
        d1: int,
        d2: int,
        n_actions: int,
        length: int,
        n_trials: int | None = None,
        *,
        dtype: Any = np.float32,
    ) -> None:
        self.d1 = check_positive_int(d1, "d1")
        self.d2 = check_positive_int(d2, "d2")
        self.n_actions = check_positive_int(n_actions, "n_actions")
        self.length = check_positive_int(length, "length")
        self.n_trials = None if n_trials is None else check_positive_int(n_trials, "n_trials")
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        B = 1 if self.n_trials is None else self.n_trials
        shape = (B, self.d1, self.length, self.d2)
        # Stored as (B, d1, length, d2): each trial's rounds of one arm are then one block
        # for the factored fit's GEMMs (agents.factored_fit); data() returns the
        # (B, n, d1, d2) view.  np.empty: pages are only touched as rounds arrive.
        self._X = _take_spare(shape, dt)
        self._actions = np.zeros((B, self.length), dtype=np.int64)
        self._rewards = np.zeros((B, self.length))
        self._weights = np.zeros((B, self.length))
        self._n = 0

    @property
    def n(self) -> int:
        """Rounds stored so far."""
        return self._n

    @property
    def full(self) -> bool:
        """Whether ``length`` rounds have been stored."""
        return self._n >= self.length

    def add(self, X: Any, action: Any, reward: Any, weight: Any = 1.0) -> None:
        """Store one round (validated first; a rejected round changes nothing).

        Parameters
        ----------
        X : array_like of shape (d1, d2) or (B, d1, d2)
        action : int or array_like of int, shape (B,)
        reward : float or array_like of shape (B,)
        weight : float or array_like of shape (B,), default 1.0
            E.g. ``1/pi_t(a_t)`` when the actions were not uniformly random.

        Raises
        ------
        RuntimeError
            If the buffer is full.
        ValueError
            On invalid input.
        """
        if self.full:
            raise RuntimeError(
                f"WarmStartBuffer is full ({self.length} rounds); call fit() or clear()"
            )
        B = self.n_trials
        Xv = check_context(X, self.d1, self.d2, B)
        a = check_actions(action, self.n_actions, B)
        r = check_rewards(reward, B)
        wv = check_weights(weight, B)
        self._store(Xv if B is not None else Xv[None], a, r, wv)

    def _store(self, X: np.ndarray, actions, rewards, weights) -> None:
        """Store one round already validated by the caller (``X`` of shape (B, d1, d2))."""
        i = self._n
        self._X[:, :, i] = X
        self._actions[:, i] = actions
        self._rewards[:, i] = rewards
        self._weights[:, i] = weights
        self._n += 1

    def clear(self) -> None:
        """Forget the stored rounds (the memory stays allocated)."""
        self._n = 0

    def release(self) -> None:
        """Give the storage up (the buffer is empty and full afterwards: ``length`` 0 is
        not allowed, so further :meth:`add` calls raise).

        With :func:`reuse_buffer_memory` on, the storage is kept for the next buffer of the
        same shape; otherwise it is freed as soon as no view of it is alive.
        """
        if _SPARE_STORAGE is not None and self._X.size:
            _SPARE_STORAGE.append(self._X)
        self._X = self._X[:, :, :0]
        self._n = 0
        self.length = 0

    def data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Views of the stored ``(X, actions, rewards, weights)`` in the public layout."""
        n = self._n
        parts = (
            self._X[:, :, :n].transpose(0, 2, 1, 3),
            self._actions[:, :n],
            self._rewards[:, :n],
            self._weights[:, :n],
        )
        if self.n_trials is None:
            parts = tuple(p[0] for p in parts)
        return parts  # type: ignore[return-value]

    def fit_result(self, **kwargs: Any) -> NuclearNormFit:
        """:func:`fit_nuclear_norm` on the stored rounds (keyword arguments forwarded)."""
        if self._n == 0:
            raise RuntimeError("WarmStartBuffer.fit called on an empty buffer; add rounds first")
        if "weights" in kwargs:
            raise ValueError("weights come from add(); do not pass weights to fit")
        X, a, r, w = self.data()
        return fit_nuclear_norm(X, a, r, self.n_actions, weights=w, **kwargs)

    def fit(self, **kwargs: Any) -> np.ndarray:
        """``M_init`` from the stored rounds: (K, d1, d2) or (B, K, d1, d2).

        Keyword arguments go to :func:`nuclear_norm_fit` (``solver="factored"`` by default).
        """
        if self._n == 0:
            raise RuntimeError("WarmStartBuffer.fit called on an empty buffer; add rounds first")
        if "weights" in kwargs:
            raise ValueError("weights come from add(); do not pass weights to fit")
        X, a, r, w = self.data()
        return nuclear_norm_fit(X, a, r, self.n_actions, weights=w, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        """Configuration and stored rounds as plain numpy arrays and scalars (copies)."""
        n = self._n
        return {
            "d1": self.d1,
            "d2": self.d2,
            "n_actions": self.n_actions,
            "length": self.length,
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "dtype": str(self._X.dtype),
            "n": n,
            "X": self._X[:, :, :n].transpose(0, 2, 1, 3).copy(),
            "actions": self._actions[:, :n].copy(),
            "rewards": self._rewards[:, :n].copy(),
            "weights": self._weights[:, :n].copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same configuration."""
        mine = self.state_dict()
        for key in ("d1", "d2", "n_actions", "length", "n_trials", "dtype"):
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            if state[key] != mine[key]:
                raise ValueError(
                    f"state[{key!r}] = {state[key]!r} does not match this buffer's {mine[key]!r}"
                )
        n = state.get("n")
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 0 <= n <= self.length:
            raise ValueError(f"state['n'] must be an integer in [0, {self.length}], got {n!r}")
        B = self._X.shape[0]
        expected = {
            "X": (B, n, self.d1, self.d2),
            "actions": (B, n),
            "rewards": (B, n),
            "weights": (B, n),
        }
        arrays = {}
        for key, shape in expected.items():
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            arr = np.asarray(state[key])
            if arr.shape != shape:
                raise ValueError(f"state[{key!r}] must have shape {shape}, got {arr.shape}")
            arrays[key] = arr
        check_finite(arrays["X"].astype(np.float64), "state['X']")
        check_finite(arrays["rewards"], "state['rewards']")
        acts = arrays["actions"]
        if acts.dtype.kind not in "iu" or ((acts < 0) | (acts >= self.n_actions)).any():
            raise ValueError(f"state['actions'] must be integers in [0, {self.n_actions})")
        wts = arrays["weights"]
        if not np.isfinite(wts).all() or (wts < 0).any():
            raise ValueError("state['weights'] must be finite and >= 0")
        self._X[:, :, :n] = arrays["X"].transpose(0, 2, 1, 3)
        self._actions[:, :n] = acts
        self._rewards[:, :n] = arrays["rewards"]
        self._weights[:, :n] = wts
        self._n = int(n)
