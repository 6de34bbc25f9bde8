"""Step sizes of the low-rank SGD (Algorithm 1): the paper's absolute step and the
scale-free default (docs/method.md §3, "Step size").

A step of eq. (8) moves the pulled arm's prediction on the round's own context by

    <M̂_new − M̂, X_t> ≈ η_t c w_t res_t (‖X_t V‖_F² + ‖X_tᵀ U‖_F²)

(first order in ``η``).  For both context laws the context scale ``c`` makes the expected
factor the same: ``c E‖X V‖_F² = d1 ‖V‖_F²`` and ``c E‖Xᵀ U‖_F² = d2 ‖U‖_F²`` (Gaussian:
``E[X V Vᵀ Xᵀ] = ‖V‖_F² I``, ``c = 1``; completion: ``c = d1 d2`` and the mean over entries of
``‖V_k‖²`` is ``‖V‖_F²/d2``), and with balanced factors ``‖U‖_F² = ‖V‖_F² = ν``, the
nuclear norm of ``M̂``.  So a round of weight ``w`` shrinks its own residual by the factor
``1 − κ`` with

    κ = η_t c w (d1 + d2) ν / c = η_t w (d1 + d2) ν          (the *gain* of the round).

The absolute step ``η_t = step_scale · max(t, t*)^{−α}`` (the paper's, ``step_scale`` =
``c_η = 0.1``) therefore has a gain that grows with ``d1 + d2`` and with ``‖M‖_*``: at the
paper's ``d = 50``, ``r = 3``, unit singular values (``(d1 + d2) ν = 300``) it is
``0.1 · 300^{0.01} ≈ 0.106`` per unit weight, at ``d = 500`` ten times that.  In mean
square, the SGD is stable while ``κ E[1/π] < 2`` (the second moment of the step against
its drift); ε-greedy with ``ε = 0.1`` and two arms has ``E[1/π] ≈ 10.5`` for the arm that
is greedy half of the time, hence the paper's step is stable at ``d = 50`` and drifts or
diverges at ``d = 200`` and ``500``.

The scale-free step fixes the gain instead:

    η_{t,a} = g · (t* / max(t, t*))^α / ((d1 + d2) ν_a),     g = step_gain (default 0.03),

with ``ν_a`` the nuclear norm of the pulled arm's current estimate, floored at
:data:`NUCLEAR_NORM_FLOOR` times the largest arm's (so that an arm started near zero does
not take huge steps while another arm sets the scale of the rewards).  The default
``g = 0.03`` is below the paper's own gain at its size (0.106): a smaller gain leaves less
SGD noise in the estimate the intervals are debiased against, which keeps them calibrated
at the sizes where the paper's step is gentler than 0.106 (at ``d = 20``, ``r = 2`` its gain
is 0.028), while a warm-started estimate needs no large steps (docs/method.md §3).  A given
``step_scale`` is the paper's absolute step, unchanged; the paper's ``c_η`` corresponds
to ``g = c_η t*^{−α} (d1 + d2) ν`` (0.106 in its setting).

After a warm start the scale-free step also never exceeds the gain that *continues the warm
start's average* (:func:`continuing_gain`).  Per direction of the tangent space a round of
gain ``κ`` shrinks the error by ``κ / ((d1 + d2) r)`` on average (equal singular values), and
the Robbins–Monro step that averages optimally is ``1/(n_t)`` per direction, with ``n_t`` the
rounds the estimate already holds.  A uniform warm-start round and an inverse-propensity
weighted round do not hold the same information: the variance of an arm's weighted
gradient is proportional to the realized factor ``1{a_t = a}/π_t(a)²``, whose mean is ``K``
for a uniform round, so ``n0`` warm-start rounds are worth ``n0 v̄_a / K`` online rounds,
with ``v̄_a`` the running mean of that factor.  Hence the cap

    κ_{t,a} ≤ (d1 + d2) r / (n0 v̄_a / K + t).

Without it the default gain's stationary noise undoes a long warm start (docs/method.md §3,
"The cap after a warm start", and §10 for the measurements).  At the paper's size the cap
is above the decaying schedule; a user's ``M_init`` without a warm start has ``n0 = 0`` and
no cap.
"""

from __future__ import annotations

import numpy as np

from lrbandit_gym.input_checks import check_positive_float

__all__ = [
    "DEFAULT_STEP_GAIN",
    "NUCLEAR_NORM_FLOOR",
    "continuing_gain",
    "normalized_step",
    "resolve_step",
    "schedule",
]

#: ``g``: the gain of the scale-free step at ``t <= t*`` (per unit weight); the paper's step
#: has gain 0.106 at its ``d = 50``, ``r = 3``, ``‖M_a‖_* = 3`` and 0.028 at ``d = 20``,
#: ``r = 2``.
DEFAULT_STEP_GAIN = 0.03

#: An arm's ``ν_a`` in the scale-free step is at least this fraction of the largest arm's
#: nuclear norm in the same trial.
NUCLEAR_NORM_FLOOR = 0.1


def resolve_step(step_scale: object, step_gain: object) -> tuple[float | None, float | None]:
    """Validate the two step arguments: exactly one parametrisation is used.

    Returns ``(step_scale, None)`` for the absolute step and ``(None, g)`` for the
    scale-free one (``g`` = :data:`DEFAULT_STEP_GAIN` when both are None).

    Raises
    ------
    ValueError
        If both are given, or the given one is not a finite real number ``> 0``.
    """
    if step_scale is not None and step_gain is not None:
        raise ValueError(
            f"pass step_scale (the absolute step c_eta, got {step_scale!r}) or step_gain (the "
            f"scale-free gain, got {step_gain!r}), not both"
        )
    if step_scale is not None:
        return check_positive_float(step_scale, "step_scale"), None
    gain = DEFAULT_STEP_GAIN if step_gain is None else step_gain
    return None, check_positive_float(gain, "step_gain")


def schedule(t: np.ndarray | float, step_offset: float, step_decay: float) -> np.ndarray:
    """``(t* / max(t, t*))^α``: 1 up to ``t*``, then the decay of Algorithm 1's step."""
    tt = np.maximum(np.asarray(t, dtype=np.float64), step_offset)
    return (step_offset / tt) ** step_decay


def continuing_gain(
    prior_rounds: int,
    mean_square_weight: np.ndarray | float,
    n_actions: int,
    t: int,
    d1: int,
    d2: int,
    rank: int,
) -> np.ndarray:
    """The largest gain that continues a warm start's average (module docstring):
    ``(d1 + d2) r / (n0 v̄ / K + t)``.

    Parameters
    ----------
    prior_rounds : int
        ``n0``: the uniform warm-start rounds behind the initial estimate.
    mean_square_weight : ndarray of shape (B,), or float
        ``v̄_a``: the mean of ``1{a_s = a}/π_s(a)²`` over the online rounds ``s <= t``, at
        the pulled arm of every trial.
    n_actions : int
        ``K``.
    t : int
        The online round, from 1.
    d1, d2, rank : int
        Context shape and rank ``r``.
    """
    return (d1 + d2) * rank / (prior_rounds * mean_square_weight / n_actions + t)


def normalized_step(
    gain: float,
    sched: np.ndarray | float,
    singular_values: np.ndarray,
    arms: np.ndarray,
    d1: int,
    d2: int,
) -> np.ndarray:
    """``η_{t,a}`` of the scale-free step for the pulled arm of every trial.

    Parameters
    ----------
    gain : float
        ``g``.
    sched : float or ndarray of shape (B,)
        :func:`schedule` at the round (or at each arm's update count).
    singular_values : ndarray of shape (B, K, r)
        The balanced factors' singular values (``ν_a`` is their sum).
    arms : ndarray of int, shape (B,)
        The pulled arm of every trial.
    d1, d2 : int
        Context shape.

    Returns
    -------
    ndarray of shape (B,)
        ``g · sched / ((d1 + d2) ν_a)``, and 0 where every arm of the trial is zero (the
        factored step is zero there anyway).
    """
    nu = singular_values.sum(axis=-1)  # (B, K) nuclear norms
    floor = NUCLEAR_NORM_FLOOR * nu.max(axis=-1)
    nu_a = np.maximum(nu[np.arange(len(arms)), arms], floor)
    ok = nu_a > 0
    return np.where(ok, gain * np.asarray(sched) / ((d1 + d2) * np.where(ok, nu_a, 1.0)), 0.0)
