"""Rules of the warm start: how long it is, and how an arm with too few rounds starts.

Algorithm 1 starts from ``M_init`` within the noise level of the truth (docs/method.md §3),
fitted by eq. (10) on an exploration phase (:mod:`agents.warm_start.fit`).  Two rules decide
what happens around that fit.

Size of the warm start
----------------------
:func:`default_warm_start_rounds` sizes the warm start from the degrees of freedom of the
problem (the rule and its values are in its docstring); a policy's default then extends
while the error is large against the signal (:mod:`agents.warm_start.extension`).

Arms with too few rounds
------------------------
An arm without a round of positive weight has no fit: both solvers return zero for it, with
a warning naming the arm (and trial).  The policies initialise from
:func:`agents.warm_start.initial_estimate` instead, which gives a defined, non-degenerate
start (:func:`start_weak_arms`) to every arm that has too few rounds for its fit to be
well-posed (at most :func:`min_warm_start_pulls` ``= r (d1 + d2 − r) + 10``: the
unpenalised rank-r refit has more unknowns than equations there, interpolates the noise and
can be arbitrarily large) or whose fit has rank below ``r`` (e.g. all its rewards zero).
Such an arm starts from its penalised fit alone (zero without rounds) plus a fixed rank-r
matrix ``START_SCALE * rho * Q_U Q_Vᵀ``: a zero or rank-deficient start is a stationary
point of the factored SGD, which could never grow the missing directions.  ``Q_U``, ``Q_V``
are orthonormal ``d1 x r`` and ``d2 x r`` bases drawn from ``seed`` and the arm's index
(:func:`fixed_directions`), the same for every trial, so a start is a function of the data
and ``seed`` alone; ``rho = sqrt(c Σ w y² / Σ w)`` over the trial's rounds (``c`` the
context scale: ``rho`` estimates the scale ``‖M_a‖_F`` of the arms' parameters; 1 when
every reward is zero).  :data:`START_SCALE` = 1% keeps the arm's predictions two orders of
magnitude below the rewards, so the start biases no decision and cannot make the SGD
diverge, while it is non-degenerate.  The SGD only refines an estimate that is already
close (its step decays as ``1/t``), so such an arm is learnt slowly: a warning names every
such arm and its rounds and suggests the warm-start length of
:func:`default_warm_start_rounds`.  Arms with more rounds and a rank-r fit (every arm of
the paper's studies, with about 1000 rounds for 291 unknowns) keep their fit exactly.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from agents.warm_start.factored import factored_nuclear_norm_fit
from agents.warm_start.inputs import CONTEXTS, fit_failure, name_list
from lrbandit_gym.input_checks import check_choice, check_positive_int

__all__ = [
    "COMPLETION_MAX_FACTOR",
    "ROUNDS_PER_DOF",
    "START_SCALE",
    "default_warm_start_rounds",
    "fixed_directions",
    "min_warm_start_pulls",
    "recovery_rounds",
    "start_weak_arms",
]

#: Warm-start rounds per degree of freedom ``K r (d1 + d2 − r)`` in
#: :func:`default_warm_start_rounds` (Gaussian contexts).
ROUNDS_PER_DOF = 3.5

#: Longest completion warm start of :func:`default_warm_start_rounds`, in multiples of
#: :func:`recovery_rounds`.
COMPLETION_MAX_FACTOR = 8

#: Singular values of the fixed start of an arm with too few rounds, relative to the reward
#: scale (see the module docstring, "Arms with too few rounds").
START_SCALE = 0.01


def default_warm_start_rounds(
    d1: int, d2: int, rank: int, n_actions: int, context: str = "gaussian"
) -> int:
    """Warm-start rounds for a problem of this size: the policies' default.

    The rule counts the degrees of freedom of the unknowns, ``dof = K r (d1 + d2 − r)``
    (``K`` rank-r matrices of size ``d1 x d2``), and asks for

    * Gaussian contexts: ``3.5 dof`` rounds (:data:`ROUNDS_PER_DOF`), rounded up to a
      multiple of 100;
    * completion contexts: ``c dof`` rounds (``c = d1 d2``), at least the recovery rule
      ``n_rec = 3.5 dof log(d1 + d2)`` (:func:`recovery_rounds`, a multiple of 100) and at
      most :data:`COMPLETION_MAX_FACTOR` ``n_rec``, rounded up to a multiple of 100.

    Why: the fit of eq. (10) must bring every arm within the noise level of its truth
    before the SGD starts (docs/method.md §3).  A least-squares fit of ``dof`` unknowns from
    ``n`` rounds leaves ``‖M_init − M‖²_F ≈ σ² c dof / n`` (the ``K`` arms share the rounds),
    so the noise level needs ``n ≳ c dof``.  With Gaussian contexts (``c = 1``) every round
    measures a random projection of the pulled arm, and the rank-r refit needs a fixed
    multiple of the degrees of freedom: in the paper's setting (d = 50, r = 3, K = 2, 582
    dof) 1000 rounds are too few and 2000 (3.4 per dof) are enough, and at r = 7 the same
    2000 rounds leave ``M_init`` too far from the truth (Table 2).  3.5 per dof gives 2100
    and 4600 rounds there.  A completion context reveals one entry per round: recovering a
    rank-r matrix at all takes of the order of ``r (d1 + d2) log(d1 + d2)`` of them (every
    row and column must be seen: the coupon collector's log), and bringing it within the
    noise level takes ``c dof``, which grows like ``d³``; the cap keeps large matrices at a
    length a policy can play, where the online step makes up the rest (docs/reproduction.md,
    "The grid").

    Values: 2100 (d = 50, r = 3, K = 2), 3400 (r = 5), 4600 (r = 7), 600 (d = 20, r = 2,
    K = 2), 200 (d1 = 6, d2 = 5, r = 2, K = 2); completion contexts: 3200 (d = 10, r = 1,
    K = 2), 8800 (d = 20, r = 1, K = 2), 16000 (d = 20, r = 2, K = 2), 64000 (d = 60,
    r = 2, K = 2), 1100 (d1 = 6, d2 = 5, r = 2, K = 2).

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
    recovery = recovery_rounds(d1, d2, rank, n_actions, context)
    if context == "gaussian":
        return recovery
    noise_level = d1 * d2 * n_actions * rank * (d1 + d2 - rank)  # c dof: within σ of M
    rounds = max(recovery, min(noise_level, COMPLETION_MAX_FACTOR * recovery))
    return 100 * math.ceil(rounds / 100)


def recovery_rounds(d1: int, d2: int, rank: int, n_actions: int, context: str = "gaussian") -> int:
    """Rounds that recover the arms' rank-r parameters at all: ``3.5 dof`` (Gaussian
    contexts) or ``3.5 dof log(d1 + d2)`` (completion), rounded up to a multiple of 100.

    The default warm start (:func:`default_warm_start_rounds`) for Gaussian contexts, and
    the base of the completion default's cap and of the extension's
    (:mod:`agents.warm_start.extension`).
    """
    d1 = check_positive_int(d1, "d1")
    d2 = check_positive_int(d2, "d2")
    rank = check_positive_int(rank, "rank")
    n_actions = check_positive_int(n_actions, "n_actions")
    context = check_choice(context, "context", CONTEXTS)
    if rank > min(d1, d2):
        raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
    dof = n_actions * rank * (d1 + d2 - rank)
    if context == "gaussian":
        hundreds = -(-7 * dof // 200)  # ceil(3.5 dof / 100), in integers
    else:
        hundreds = math.ceil(ROUNDS_PER_DOF * dof * math.log(d1 + d2) / 100)
    return 100 * max(1, hundreds)


def min_warm_start_pulls(d1: int, d2: int, rank: int) -> int:
    """Rounds an arm needs beyond which its warm-start fit is well-posed: ``r (d1 + d2 −
    r) + 10``.

    A rank-r ``d1 x d2`` matrix has ``r (d1 + d2 − r)`` degrees of freedom; the rank-r
    refit of eq. (10) is unpenalised, so it needs more rounds than that (the same margin
    of 10 as the proximal solver's refit).  An arm with at most this many rounds gets the
    start of :func:`initial_estimate` instead of its fit.
    """
    return rank * (d1 + d2 - rank) + 10


def fixed_directions(d1: int, d2: int, rank: int, K: int, seed: int) -> np.ndarray:
    """``Q_U Q_Vᵀ`` per arm (K, d1, d2): orthonormal bases drawn from ``(seed, arm)``."""
    out = np.empty((K, d1, d2))
    for k in range(K):
        g = np.random.default_rng([int(seed), k])
        Q_U = np.linalg.qr(g.standard_normal((d1, rank)))[0]
        Q_V = np.linalg.qr(g.standard_normal((d2, rank)))[0]
        out[k] = Q_U @ Q_V.T
    return out


def start_weak_arms(
    M: np.ndarray,
    Xa: np.ndarray,
    acts: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    K: int,
    batched: bool,
    *,
    rank: int,
    context: str,
    seed: int,
) -> None:
    """Give every arm with too few rounds, or a fit of rank below ``rank``, its start.

    The rule of the module docstring ("Arms with too few rounds"), applied in place to the
    fit ``M`` of :func:`agents.warm_start.initial_estimate`; a ``RuntimeWarning`` names
    those arms (and trials) and their rounds and points at the caller of
    :func:`~agents.warm_start.initial_estimate`.

    Parameters
    ----------
    M : ndarray of shape (B, K, d1, d2)
        The finite rank-r fit of every arm, overwritten for the weak arms.
    Xa, acts, y, w, K, batched
        The validated data (:func:`agents.warm_start.inputs.validate_inputs`).
    rank : int
        Rank ``r`` of the estimator to initialise.
    context : {"gaussian", "completion"}
        Sets the context scale ``c`` of ``rho``.
    seed : int
        Seed of the fixed directions (:func:`fixed_directions`).

    Raises
    ------
    FloatingPointError
        If a weak arm's penalised fit fails numerically.
    """
    d1, d2 = Xa.shape[2:]
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
        E = fixed_directions(d1, d2, rank, K, seed)
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
                        fit_failure(Xa, y, f"a singular system ({exc})")
                    ) from None
            if not np.isfinite(pen).all():
                raise FloatingPointError(fit_failure(Xa, y, "a non-finite estimate"))
            for k in np.flatnonzero(short[b]):
                M[b, k] = pen[k] + START_SCALE * rho[b] * E[k]
        listed = [
            (f"trial {b} " if batched else "")
            + f"arm {k} ({int(pulls[b, k])} round{'' if pulls[b, k] == 1 else 's'}"
            + (", rank-deficient fit" if pulls[b, k] > min_warm_start_pulls(d1, d2, rank) else "")
            + ")"
            for b, k in np.argwhere(short)
        ]
        names = name_list(listed)
        warnings.warn(
            f"warm start: too few rounds of positive weight (at most "
            f"{min_warm_start_pulls(d1, d2, rank)}) for the rank-{rank} fit of {names}; "
            "each such arm starts from its penalised fit (zero without rounds) plus a fixed "
            f"rank-{rank} matrix with singular values {START_SCALE:g} x the reward scale "
            "(agents.warm_start.fit, 'Arms with too few rounds'), and the SGD, which only "
            "refines an estimate near the truth, learns it slowly; a longer warm start "
            f"(about {default_warm_start_rounds(d1, d2, rank, K, context)} rounds) avoids "
            "this",
            RuntimeWarning,
            stacklevel=3,
        )
