"""Warm start of the low-rank SGD: nuclear-norm penalised least squares, eq. (10).

Algorithm 1 starts from an estimate ``M_init`` with ``‖M_init − M‖_F`` of the order of the
noise level (docs/method.md §3).  The warm start obtains it from an exploration phase of
uniformly random actions: for every arm ``a``, the nuclear-norm penalised weighted least
squares fit (Negahban & Wainwright, 2011)

    M_init,a = argmin_M  (1 / (2 W_a)) Σ_{t: a_t = a} w_t (y_t − <M, X_t>)²  +  λ_a ‖M‖_*    (10)

    W_a = Σ_{t: a_t = a} w_t    (= n_a for unit weights; w_t = 1/π_t(a_t) for adaptively
                                  collected rounds),

followed, when the target rank ``r`` is known, by an unpenalised refit.
:func:`nuclear_norm_fit` computes it for every arm of every trial at once, by one of two
solvers:

* ``solver="proximal"`` (:mod:`agents.nuclear_norm`): the convex problem (10) itself, by
  accelerated proximal gradient (FISTA with adaptive restart) and singular value
  thresholding, with the data-driven penalty and the tangent-space refit below.  It is the
  default without ``rank`` (only the convex problem is then defined) and the one that
  reports diagnostics (``full_output=True``).
* ``solver="factored"`` (:mod:`agents.factored_fit`): (10) restricted to rank ≤ r in
  factored form, by alternating ridge regressions, then unpenalised sweeps as the refit.
  About ten passes over the data instead of a few hundred, at the proximal path's accuracy
  in the paper's setting, so it is the default with ``rank`` (large Monte Carlo batches).

Penalty (``penalty=None``, proximal solver)
-------------------------------------------
``λ_a = penalty_scale · σ̂_a · s_a`` where ``s_a = E ‖Σ_t ω_t g_t X_t‖_op`` (``ω_t`` the
normalised weights, ``g_t ~ N(0, 1)``) is the operator norm of the gradient noise per unit
noise level, estimated by Monte Carlo on the observed design (a few draws; the operator norm
concentrates sharply).  For Gaussian contexts this is ``≈ (√d1 + √d2) / √n_a``, the rate of
Negahban & Wainwright; computing it from the design makes the same rule right for completion
contexts (one-hot ``X``) and for unequal weights without separate formulas.

``σ̂_a`` comes from a scaled-lasso type fixed point: start from the signal-inflated
``sqrt(Σ ω y²)``, fit, re-estimate ``σ`` from residuals, refit with the new penalty (warm
started: the sequence of fits doubles as a continuation path), until it moves by less than
5%.  Starting from above avoids the spurious tiny-noise fixed points of an overfitted start.
The residuals are those of an unpenalised least-squares refit on the tangent space of the
rank-k manifold at the fit (``k`` the target rank, or without one the number of singular
values above ``λ``), divided by the residual degrees of freedom
``n_eff − (k (d1 + d2) − k²)``: the fit's own residuals carry its shrinkage bias, which, fed
back into the penalty, stalls the fixed point at a too-large ``σ``.

``penalty_scale = 0.5`` (:data:`DEFAULT_PENALTY_SCALE`): with the refit the error hardly
depends on it; without the refit a smaller scale shrinks less but converges more slowly, so
0.5 is the compromise (below the textbook 1-2, whose bound is loose by the shrinkage bias it
creates).

Refit (``rank`` given)
----------------------
Nuclear-norm estimates are biased towards zero by ``~λ`` per singular value.  With the
target rank known, the fit of (10) is followed by an unpenalised weighted least-squares
refit on the tangent space of the rank-r manifold at the fit (``M = A Q_Vᵀ + Q_U Bᵀ``,
``(d1 + d2) r − r²`` free parameters; one Riemannian Gauss-Newton step).  This removes the
shrinkage and makes the result insensitive to the penalty; the residuals of this linear fit
also give a clean noise estimate for the penalty rule.  The refit estimate has rank ≤ 2r;
:meth:`agents.estimator.LowRankSGD.initialize` truncates it to rank r.

Beside this module, :class:`~agents.warm_start_buffer.WarmStartBuffer` stores the
exploration rounds and :func:`~agents.buffer_pool.reuse_buffer_memory` lets successive
buffers share their storage.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.buffer_pool import reuse_buffer_memory
from agents.factored_fit import factored_nuclear_norm_fit
from agents.nuclear_norm import NuclearNormFit, proximal_fit
from agents.warm_start_buffer import WarmStartBuffer
from lrbandit_gym.validation import (
    check_choice,
    check_finite,
    check_positive_float,
    check_positive_int,
)

__all__ = [
    "DEFAULT_PENALTY_SCALE",
    "DEFAULT_WARM_START_ROUNDS",
    "NuclearNormFit",
    "WarmStartBuffer",
    "nuclear_norm_fit",
    "reuse_buffer_memory",
]

#: Exploration rounds (all arms together, uniformly random actions) for the warm start.
#:
#: In the paper's setting (d1 = d2 = 50, r = 3, K = 2, sigma = 0.1, Gaussian contexts, unit
#: singular values) this many rounds bring the rank-r refit of eq. (10) within the
#: initialisation condition ``‖M_init − M‖_F ≲ sigma`` for every arm; half as many (500 per
#: arm) are below the sample size at which nuclear-norm recovery works.
DEFAULT_WARM_START_ROUNDS = 2000

#: Multiplier ``C`` in ``lambda = C * sigma_hat * s`` (see the module docstring).
DEFAULT_PENALTY_SCALE = 0.5

_CONTEXTS = ("gaussian", "completion")
_SOLVERS = ("factored", "proximal")


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
    full_output: bool = False,
) -> np.ndarray | NuclearNormFit:
    """Warm start ``M_init`` for :meth:`~agents.estimator.LowRankSGD.initialize`: eq. (10)
    per arm, then the refit when ``rank`` is given (see the module docstring).

    Parameters
    ----------
    X : array_like of shape (n, d1, d2) or (B, n, d1, d2)
        Contexts (e.g. float32 from :class:`WarmStartBuffer`; the proximal fit runs in
        float64).
    actions : array_like of int, shape (n,) or (B, n)
    rewards : array_like of shape (n,) or (B, n)
    n_actions : int
        Number of arms ``K``.
    weights : array_like of shape (n,) or (B, n), optional
        Non-negative per-round weights ``w_t``, e.g. ``1/pi_t(a_t)`` for adaptively
        collected data.  Rescaling an arm's weights leaves its fit unchanged; zero-weight
        rounds are ignored exactly.
    context : {"gaussian", "completion"}, default "gaussian"
        "completion" requires one-hot contexts and uses the exact (diagonal) curvature.
    penalty : float or array_like of shape (K,) or (B, K), optional
        ``lambda``; None for the data-driven rule.
    penalty_scale : float, default 0.5
        ``C`` in the data-driven rule ``lambda = C sigma_hat s``.
    noise_std : float or array_like of shape (K,) or (B, K), optional
        Known noise level; skips the noise estimate of the data-driven rule (proximal).
    rank : int, optional
        Target rank ``r``; if given, the fit is refitted without the penalty.
    max_iter : int, default 1000
        Proximal-gradient iterations per fit (proximal).
    tol : float, default 1e-5
        Stop when ``‖M_k - M_{k-1}‖_F <= tol ‖M_k‖_F`` for every arm (proximal).
    seed : int, default 0
        Seed of the power iteration and Monte Carlo draws (proximal; the fit is
        deterministic).
    solver : {"factored", "proximal"}, optional
        Default: "factored" when ``rank`` is given and ``full_output`` is False, else
        "proximal".
    full_output : bool, default False
        Return the :class:`NuclearNormFit` (estimate and diagnostics) instead of the
        estimate alone; needs the proximal solver.

    Returns
    -------
    ndarray of shape (K, d1, d2) or (B, K, d1, d2), or NuclearNormFit
        The estimate (not rank-truncated), or with ``full_output`` the whole result.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> M = np.stack([np.outer(rng.standard_normal(6), rng.standard_normal(5))] * 2)
    >>> X = rng.standard_normal((400, 6, 5)); a = rng.integers(0, 2, 400)
    >>> y = np.einsum("nij,nij->n", M[a], X) + 0.1 * rng.standard_normal(400)
    >>> nuclear_norm_fit(X, a, y, 2, rank=1).shape
    (2, 6, 5)
    >>> nuclear_norm_fit(X, a, y, 2, rank=1, full_output=True).refit
    True
    """
    if solver is None:
        solver = "proximal" if rank is None or full_output else "factored"
    solver = check_choice(solver, "solver", _SOLVERS)
    if solver == "factored":
        # (10) in rank-r factored form, then unpenalised sweeps (agents.factored_fit).
        if full_output:
            raise ValueError("full_output=True needs solver='proximal' (the one with diagnostics)")
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
    # (10) by FISTA with the data-driven penalty, then the tangent refit (agents.nuclear_norm).
    Xa, acts, y, w, K, batched = _validate(X, actions, rewards, n_actions, weights, context)
    B, n, d1, d2 = Xa.shape
    penalty_scale = check_positive_float(penalty_scale, "penalty_scale")
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_positive_float(tol, "tol")
    if rank is not None:
        rank = check_positive_int(rank, "rank")
        if rank > min(d1, d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
    fit = proximal_fit(
        Xa,
        acts,
        y,
        w,
        K,
        batched=batched,
        context=context,
        penalty=None if penalty is None else _per_arm(penalty, "penalty", B, K, batched),
        noise_std=None if noise_std is None else _per_arm(noise_std, "noise_std", B, K, batched),
        penalty_scale=penalty_scale,
        rank=rank,
        max_iter=max_iter,
        tol=tol,
        seed=seed,
    )
    return fit if full_output else fit.estimate


def _per_arm(value: Any, name: str, B: int, K: int, batched: bool) -> np.ndarray:
    """A non-negative scalar, per-arm or (batched) per-trial-and-arm value as (B, K)."""
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


def _validate(
    X: Any,
    actions: Any,
    rewards: Any,
    n_actions: Any,
    weights: Any,
    context: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """Checked inputs with a trial axis: ``X`` (B, n, d1, d2) in float32 or float64,
    ``actions``, ``rewards`` and ``weights`` (B, n), ``K`` and whether the input was batched.
    """
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
