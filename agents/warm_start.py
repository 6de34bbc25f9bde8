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

Arms with too few rounds
------------------------
An arm without a round of positive weight has no fit: both solvers return zero for it, with
a warning naming the arm (and trial).  The policies initialise from :func:`initial_estimate`
instead, which gives a defined, non-degenerate start to every arm that has too few rounds
for its fit to be well-posed (at most :func:`min_warm_start_pulls` ``= r (d1 + d2 − r) +
10``: the unpenalised rank-r refit has more unknowns than equations there, interpolates the
noise and can be arbitrarily large) or whose fit has rank below ``r`` (e.g. all its rewards
zero).  Such an arm starts from its penalised fit alone (zero without rounds) plus a fixed
rank-r matrix ``START_SCALE * rho * Q_U Q_Vᵀ``: a zero or rank-deficient start is a
stationary point of the factored SGD, which could never grow the missing directions.
``Q_U``, ``Q_V`` are orthonormal ``d1 x r`` and ``d2 x r`` bases drawn from ``seed`` and the
arm's index, the same for every trial, so a start is a function of the data and ``seed``
alone; ``rho = sqrt(c Σ w y² / Σ w)`` over the trial's rounds (``c`` the context scale:
``rho`` estimates the scale ``‖M_a‖_F`` of the arms' parameters; 1 when every reward is
zero).  :data:`START_SCALE` = 1% keeps the arm's predictions two orders of magnitude below
the rewards, so the start biases no decision and cannot make the SGD diverge, while it is
non-degenerate.  The SGD only refines an estimate that is already close (its step decays
as ``1/t``), so such an arm is learnt slowly: a warning names every such arm and its rounds
and suggests the warm-start length of :func:`default_warm_start_rounds`.  Arms with more
rounds and a rank-r fit (every arm of the paper's studies, with about 1000 rounds for 291
unknowns) keep their fit exactly.

Size of the warm start
----------------------
:func:`default_warm_start_rounds` sizes the warm start from the degrees of freedom of the
problem (the rule and its values are in its docstring); :data:`DEFAULT_WARM_START_ROUNDS`
is the paper's fixed 2000 rounds, which the studies pass explicitly.

Beside this module, :class:`~agents.warm_start_buffer.WarmStartBuffer` stores the
exploration rounds and :func:`~agents.buffer_pool.reuse_buffer_memory` lets successive
buffers share their storage.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from agents.buffer_pool import reuse_buffer_memory
from agents.factored_fit import factored_nuclear_norm_fit
from agents.nuclear_norm import NuclearNormFit, proximal_fit
from agents.warm_start_buffer import WarmStartBuffer, warm_start_buffer_bytes
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
    "START_SCALE",
    "WarmStartBuffer",
    "default_warm_start_rounds",
    "initial_estimate",
    "min_warm_start_pulls",
    "nuclear_norm_fit",
    "reuse_buffer_memory",
    "warm_start_buffer_bytes",
]

#: The paper's warm start: 2000 exploration rounds (all arms together, uniformly random
#: actions).  Not the policies' default, which :func:`default_warm_start_rounds` sizes from
#: the problem; kept for compatibility and passed explicitly by the paper's studies.
#:
#: In the paper's setting (d1 = d2 = 50, r = 3, K = 2, sigma = 0.1, Gaussian contexts, unit
#: singular values) this many rounds bring the rank-r refit of eq. (10) within the
#: initialisation condition ``‖M_init − M‖_F ≲ sigma`` for every arm; half as many (500 per
#: arm) are below the sample size at which nuclear-norm recovery works.
DEFAULT_WARM_START_ROUNDS = 2000

#: Warm-start rounds per degree of freedom ``K r (d1 + d2 − r)`` in
#: :func:`default_warm_start_rounds` (Gaussian contexts).
ROUNDS_PER_DOF = 3.5

#: Singular values of the fixed start of an arm with too few rounds, relative to the reward
#: scale (see the module docstring, "Arms with too few rounds").
START_SCALE = 0.01

#: Multiplier ``C`` in ``lambda = C * sigma_hat * s`` (see the module docstring).
DEFAULT_PENALTY_SCALE = 0.5

_CONTEXTS = ("gaussian", "completion")
_SOLVERS = ("factored", "proximal")
# How many (trial, arm) pairs a warning lists before it summarises the rest.
_LISTED = 8


def default_warm_start_rounds(
    d1: int, d2: int, rank: int, n_actions: int, context: str = "gaussian"
) -> int:
    """Warm-start rounds for a problem of this size: the policies' default.

    The rule counts the degrees of freedom of the unknowns, ``dof = K r (d1 + d2 − r)``
    (``K`` rank-r matrices of size ``d1 x d2``), and asks for

    * Gaussian contexts: ``3.5 dof`` rounds (:data:`ROUNDS_PER_DOF`), rounded up to a
      multiple of 100;
    * completion contexts: ``3.5 dof log(d1 + d2)`` rounds, rounded up to a multiple of 100.

    Why: the fit of eq. (10) must bring every arm within the noise level of its truth
    before the SGD starts (docs/method.md §3).  With Gaussian contexts every round measures
    a random projection of the pulled arm, and the rank-r refit needs a fixed multiple of
    the degrees of freedom: in the paper's setting (d = 50, r = 3, K = 2, 582 dof) 1000
    rounds are too few and 2000 (3.4 per dof) are enough, and at r = 7 the same 2000 rounds
    leave ``M_init`` too far from the truth (Table 2).  3.5 per dof gives 2100 and 4600
    rounds there.  A completion context reveals one entry per round, and recovering a
    rank-r matrix from uniformly sampled entries takes of the order of
    ``r (d1 + d2) log(d1 + d2)`` of them (every row and column must be seen: the coupon
    collector's log), hence the extra factor ``log(d1 + d2)``.

    Values: 2100 (d = 50, r = 3, K = 2), 3400 (r = 5), 4600 (r = 7), 600 (d = 20, r = 2,
    K = 2), 200 (d1 = 6, d2 = 5, r = 2, K = 2); completion contexts: 9400 (d = 50, r = 3,
    K = 2), 2000 (d = 20, r = 2, K = 2).

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    rank : int
        Rank ``r`` of the estimates, ``1 <= r <= min(d1, d2)``.
    n_actions : int
        Number of arms ``K``.
    context : {"gaussian", "completion"}, default "gaussian"

    Returns
    -------
    int
        A positive multiple of 100.

    Examples
    --------
    >>> default_warm_start_rounds(50, 50, 3, 2)
    2100
    >>> default_warm_start_rounds(50, 50, 7, 2)
    4600
    """
    d1 = check_positive_int(d1, "d1")
    d2 = check_positive_int(d2, "d2")
    rank = check_positive_int(rank, "rank")
    n_actions = check_positive_int(n_actions, "n_actions")
    context = check_choice(context, "context", _CONTEXTS)
    if rank > min(d1, d2):
        raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
    dof = n_actions * rank * (d1 + d2 - rank)
    if context == "gaussian":
        hundreds = -(-7 * dof // 200)  # ceil(3.5 dof / 100), in integers
    else:
        hundreds = math.ceil(ROUNDS_PER_DOF * dof * math.log(d1 + d2) / 100)
    return 100 * max(1, hundreds)


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
    Xa, acts, y, w, K, batched = _validate(X, actions, rewards, n_actions, weights, context)
    _warn_empty_arms(acts, w, K, batched)
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
    """:func:`nuclear_norm_fit` on the output of :func:`_validate` (``solver`` resolved)."""
    if solver == "factored":
        # (10) in rank-r factored form, then unpenalised sweeps (agents.factored_fit).
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
    start of the module docstring ("Arms with too few rounds") for every arm that has fewer
    than ``rank`` rounds of positive weight or a fit of rank below ``rank``; a
    ``RuntimeWarning`` names those arms (and trials) and their rounds.  Every other arm
    keeps its fit exactly.

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
    Xa, acts, y, w, K, batched = _validate(X, actions, rewards, n_actions, weights, context)
    B, _, d1, d2 = Xa.shape
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
        raise FloatingPointError(_fit_failure(Xa, y, f"a singular system ({exc})")) from None
    M = np.array(M if batched else M[None], dtype=np.float64)
    if not np.isfinite(M).all():
        raise FloatingPointError(_fit_failure(Xa, y, "a non-finite estimate"))
    positive = w > 0
    pulls = ((acts[..., None] == np.arange(K)) & positive[..., None]).sum(axis=1)  # (B, K)
    s = np.linalg.svd(M, compute_uv=False)
    deficient = s[..., rank - 1] <= 1e-12 * np.maximum(s[..., 0], np.finfo(float).tiny)
    short = (pulls <= min_warm_start_pulls(d1, d2, rank)) | deficient
    if short.any():
        scale = float(d1 * d2) if context == "completion" else 1.0
        total = np.where(positive, w, 0.0).sum(axis=1)
        mean_sq = np.where(positive, w * y**2, 0.0).sum(axis=1) / np.where(total > 0, total, 1)
        with np.errstate(over="ignore"):
            rho = np.sqrt(scale * mean_sq)
        rho = np.where((rho > 0) & np.isfinite(rho), rho, 1.0)
        E = _fixed_directions(d1, d2, rank, K, seed)
        for b in np.flatnonzero(short.any(axis=1)):
            # The penalised fit alone: the unpenalised refit interpolates the noise when an
            # arm has no more rounds than unknowns, and its error peaks there.
            with np.errstate(all="ignore"):
                try:
                    pen = factored_nuclear_norm_fit(
                        Xa[b : b + 1],
                        acts[b : b + 1],
                        y[b : b + 1],
                        K,
                        rank,
                        weights=w[b : b + 1],
                        context_scale=scale,
                        refit_sweeps=0,
                    )[0]
                except np.linalg.LinAlgError as exc:
                    raise FloatingPointError(
                        _fit_failure(Xa, y, f"a singular system ({exc})")
                    ) from None
            if not np.isfinite(pen).all():
                raise FloatingPointError(_fit_failure(Xa, y, "a non-finite estimate"))
            for k in np.flatnonzero(short[b]):
                M[b, k] = pen[k] + START_SCALE * rho[b] * E[k]
        listed = [
            (f"trial {b} " if batched else "")
            + f"arm {k} ({int(pulls[b, k])} round{'' if pulls[b, k] == 1 else 's'}"
            + (", rank-deficient fit" if pulls[b, k] > min_warm_start_pulls(d1, d2, rank) else "")
            + ")"
            for b, k in np.argwhere(short)
        ]
        more = len(listed) - _LISTED
        names = ", ".join(listed[:_LISTED]) + (f" and {more} more" if more > 0 else "")
        warnings.warn(
            f"warm start: too few rounds of positive weight (at most "
            f"{min_warm_start_pulls(d1, d2, rank)}) for the rank-{rank} fit of {names}; "
            "each such arm starts from its penalised fit (zero without rounds) plus a fixed "
            f"rank-{rank} matrix with singular values {START_SCALE:g} x the reward scale "
            "(agents.warm_start, 'Arms with too few rounds'), and the SGD, which only "
            "refines an estimate near the truth, learns it slowly; a longer warm start "
            f"(about {default_warm_start_rounds(d1, d2, rank, K, context)} rounds) avoids "
            "this",
            RuntimeWarning,
            stacklevel=2,
        )
    return M if batched else M[0]


def min_warm_start_pulls(d1: int, d2: int, rank: int) -> int:
    """Rounds an arm needs beyond which its warm-start fit is well-posed: ``r (d1 + d2 −
    r) + 10``.

    A rank-r ``d1 x d2`` matrix has ``r (d1 + d2 − r)`` degrees of freedom; the rank-r
    refit of eq. (10) is unpenalised, so it needs more rounds than that (the same margin
    of 10 as the proximal solver's refit).  An arm with at most this many rounds gets the
    start of :func:`initial_estimate` instead of its fit.
    """
    return rank * (d1 + d2 - rank) + 10


def _fixed_directions(d1: int, d2: int, rank: int, K: int, seed: int) -> np.ndarray:
    """``Q_U Q_Vᵀ`` per arm (K, d1, d2): orthonormal bases drawn from ``(seed, arm)``."""
    out = np.empty((K, d1, d2))
    for k in range(K):
        g = np.random.default_rng([int(seed), k])
        Q_U = np.linalg.qr(g.standard_normal((d1, rank)))[0]
        Q_V = np.linalg.qr(g.standard_normal((d2, rank)))[0]
        out[k] = Q_U @ Q_V.T
    return out


def _fit_failure(Xa: np.ndarray, y: np.ndarray, what: str) -> str:
    """The message of a warm-start fit that failed numerically."""
    xmax = float(np.abs(Xa).max()) if Xa.size else 0.0
    ymax = float(np.abs(y).max()) if y.size else 0.0
    return (
        f"the warm-start fit of eq. (10) ended in {what} on {y.shape[-1]} rounds with largest "
        f"|reward| {ymax:.3g} and largest |context entry| {xmax:.3g}: the data are too large "
        "(or too degenerate) for it.  Rescale the rewards and contexts, or pass an initial "
        "estimate (M_init=) to skip the warm start"
    )


def _warn_empty_arms(acts: np.ndarray, w: np.ndarray, K: int, batched: bool) -> None:
    """Warn about the arms (of any trial) without a round of positive weight."""
    has = ((acts[..., None] == np.arange(K)) & (w[..., None] > 0)).any(axis=1)  # (B, K)
    if has.all():
        return
    empty = np.argwhere(~has)
    listed = [(f"trial {b} " if batched else "") + f"arm {k}" for b, k in empty]
    more = len(listed) - _LISTED
    names = ", ".join(listed[:_LISTED]) + (f" and {more} more" if more > 0 else "")
    warnings.warn(
        f"no rounds with positive weight for {names}; the estimate of such an arm is zero",
        RuntimeWarning,
        stacklevel=3,
    )


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
