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

* ``solver="proximal"`` (:mod:`agents.warm_start.proximal`): the convex problem (10) itself, by
  accelerated proximal gradient (FISTA with adaptive restart) and singular value
  thresholding, with the data-driven penalty and the tangent-space refit below.  It is the
  default without ``rank`` (only the convex problem is then defined) and the one that
  reports diagnostics (``full_output=True``).
* ``solver="factored"`` (:mod:`agents.warm_start.factored`): (10) restricted to rank ≤ r in
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

Arms with too few rounds
------------------------
An arm without a round of positive weight has no fit: both solvers return zero for it, with
a warning naming the arm (and trial).  :func:`initial_estimate`, from which the policies
initialise, gives every arm with too few rounds for a well-posed fit (at most
:func:`min_warm_start_pulls`), or with a fit of rank below ``r``, its penalised fit plus a
fixed rank-r matrix ``START_SCALE * rho * Q_U Q_Vᵀ`` instead, with a warning:
:mod:`agents.warm_start.rules` gives the rule and why.

Size of the warm start
----------------------
:func:`~agents.warm_start.rules.default_warm_start_rounds` sizes the warm start from the
degrees of freedom of the problem.

The stores that collect the rounds, the held-out check and the :class:`WarmStart` object
that runs the phase live beside this module (the map is in :mod:`agents.warm_start`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.warm_start.factored import factored_nuclear_norm_fit
from agents.warm_start.inputs import (
    fit_failure,
    per_arm_values,
    validate_inputs,
    warn_empty_arms,
)
from agents.warm_start.proximal import NuclearNormFit, proximal_fit
from agents.warm_start.rules import (
    start_weak_arms,
)
from lrbandit_gym.input_checks import (
    check_choice,
    check_positive_float,
    check_positive_int,
)
from lrbandit_gym.onehot import OneHotContexts

__all__ = ["DEFAULT_PENALTY_SCALE", "initial_estimate", "nuclear_norm_fit"]

#: Multiplier ``C`` in ``lambda = C * sigma_hat * s`` (see the module docstring).
DEFAULT_PENALTY_SCALE = 0.5

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
    X : array_like of shape (n, d1, d2) or (B, n, d1, d2), or OneHotContexts
        Contexts (e.g. float32 from :class:`WarmStartBuffer`; the proximal fit runs in
        float64).  Completion contexts may be given by their indices
        (:class:`~lrbandit_gym.onehot.OneHotContexts`, as
        :class:`~agents.warm_start.completion.CompletionWarmStartBuffer` stores them): the
        factored solver then never forms a context matrix (the proximal one does).
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
        The estimate (not rank-truncated), or with ``full_output`` the whole result.  An arm
        without a round of positive weight gets zero, with a ``RuntimeWarning`` naming it
        (:func:`initial_estimate` gives such arms a start the SGD can learn from).

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
        if full_output:
            raise ValueError("full_output=True needs solver='proximal' (the one with diagnostics)")
        if rank is None:
            raise ValueError("solver='factored' needs rank (it fits in rank-r factored form)")
    Xa, acts, y, w, K, batched = validate_inputs(X, actions, rewards, n_actions, weights, context)
    warn_empty_arms(acts, w, K, batched)
    return _fit_validated(
        Xa,
        acts,
        y,
        w,
        K,
        batched,
        context=context,
        penalty=penalty,
        penalty_scale=penalty_scale,
        noise_std=noise_std,
        rank=rank,
        max_iter=max_iter,
        tol=tol,
        seed=seed,
        solver=solver,
        full_output=full_output,
    )


def _fit_validated(
    Xa: np.ndarray,
    acts: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    K: int,
    batched: bool,
    *,
    context: str,
    penalty: Any,
    penalty_scale: float,
    noise_std: Any,
    rank: int | None,
    max_iter: int,
    tol: float,
    seed: int,
    solver: str,
    full_output: bool,
) -> np.ndarray | NuclearNormFit:
    """:func:`nuclear_norm_fit` on the output of
    :func:`~agents.warm_start.inputs.validate_inputs` (``solver`` resolved)."""
    if solver == "factored":
        # (10) in rank-r factored form, then unpenalised sweeps (agents.warm_start.factored).
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
    # (10) by FISTA with the data-driven penalty, then the tangent refit (.proximal).
    if isinstance(Xa, OneHotContexts):  # the proximal solver works on the matrices
        Xa = Xa.dense()
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
        penalty=None if penalty is None else per_arm_values(penalty, "penalty", B, K, batched),
        noise_std=None
        if noise_std is None
        else per_arm_values(noise_std, "noise_std", B, K, batched),
        penalty_scale=penalty_scale,
        rank=rank,
        max_iter=max_iter,
        tol=tol,
        seed=seed,
    )
    return fit if full_output else fit.estimate


def initial_estimate(
    X: Any,
    actions: Any,
    rewards: Any,
    n_actions: int,
    *,
    rank: int,
    weights: Any = None,
    context: str = "gaussian",
    seed: int = 0,
) -> np.ndarray:
    """``M_init`` for :meth:`~agents.estimator.LowRankSGD.initialize`, defined for every arm.

    The fit of :func:`nuclear_norm_fit` (``rank`` given: the factored solver), with the
    start of :func:`agents.warm_start.rules.start_weak_arms` ("Arms with too few rounds")
    for every arm that has at most :func:`min_warm_start_pulls` rounds of positive weight
    or a fit of rank below ``rank``; a ``RuntimeWarning`` names those arms (and trials) and
    their rounds.  Every other arm keeps its fit exactly.

    Parameters
    ----------
    X, actions, rewards, n_actions, weights, context
        As in :func:`nuclear_norm_fit`.
    rank : int
        Rank ``r`` of the estimator to initialise.
    seed : int, default 0
        Seed of the fixed directions of the substituted starts.

    Returns
    -------
    ndarray of shape (K, d1, d2) or (B, K, d1, d2)
        Finite, and of rank at least ``r`` for every arm.

    Raises
    ------
    ValueError
        On invalid input (as :func:`nuclear_norm_fit`).
    FloatingPointError
        If the fit fails numerically (a singular system or a non-finite result: contexts or
        rewards too large for it); the message gives their largest magnitudes and the ways
        out.

    Examples
    --------
    >>> import warnings
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((30, 6, 5)); a = np.zeros(30, dtype=int)  # arm 1 unpulled
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     M = initial_estimate(X, a, rng.standard_normal(30), 2, rank=2)
    >>> "arm 1 (0 rounds)" in str(caught[0].message), int(np.linalg.matrix_rank(M[1]))
    (True, 2)
    """
    rank = check_positive_int(rank, "rank")
    Xa, acts, y, w, K, batched = validate_inputs(X, actions, rewards, n_actions, weights, context)
    d1, d2 = Xa.shape[2:]
    if rank > min(d1, d2):
        raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
    try:
        with np.errstate(all="ignore"):  # a non-finite fit is reported below
            M = _fit_validated(
                Xa,
                acts,
                y,
                w,
                K,
                batched,
                context=context,
                penalty=None,
                penalty_scale=DEFAULT_PENALTY_SCALE,
                noise_std=None,
                rank=rank,
                max_iter=1000,
                tol=1e-5,
                seed=0,
                solver="factored",
                full_output=False,
            )
    except np.linalg.LinAlgError as exc:
        raise FloatingPointError(fit_failure(Xa, y, f"a singular system ({exc})")) from None
    M = np.array(M if batched else M[None], dtype=np.float64)
    if not np.isfinite(M).all():
        raise FloatingPointError(fit_failure(Xa, y, "a non-finite estimate"))
    # Arms with too few rounds, or a rank-deficient fit, start by the rule of
    # agents.warm_start.rules ("Arms with too few rounds").
    start_weak_arms(M, Xa, acts, y, w, K, batched, rank=rank, context=context, seed=seed)
    return M if batched else M[0]
