"""When the default warm start is too short for the signal: the rule that extends it.

The default length (:func:`~agents.warm_start.rules.default_warm_start_rounds`) counts
degrees of freedom, so it brings ``M_init`` within the noise level of the truth
(docs/method.md §3).  The greedy rules a policy plays afterwards compare arms, though, and
what decides them is the estimation error against the *signal*, the differences between
the arms: with ten times the paper's noise the default leaves ``‖M_init − M‖_F`` about half
of ``σ``, which the held-out check accepts, yet large against ``‖M_a − M_b‖_F``, and the
greedy rules are far from optimal for hundreds of rounds.

Both sides are measured on the warm-start rounds, in units of squared predictions:

* the error of arm ``a``: the held-out check's excess prediction error
  (:mod:`agents.warm_start.check`), ``e_a = MSE_a − σ̂_a² ≈ E<M̂_a − M_a, X>²``, times
  ``4/5``: the check's fit leaves every fifth round out, ``M_init`` uses them all, and the
  error of a least-squares fit falls like ``1/n``;
* the signal: on every stored context ``X_t`` the greedy rule compares the two arms
  ``a_t``, ``b_t`` that ``M_init`` predicts best, and the gap between their predictions,
  ``g_t = <M̂_{a_t} − M̂_{b_t}, X_t>``, is what the error must not overturn.

Their ratio, the *noise-to-signal ratio* of a trial, is (weights ``w_t``)

    ρ² = Σ_t w_t (e_{a_t} + e_{b_t}) / Σ_t w_t g_t².                                (NSR)

With two arms it is ``(e_0 + e_1) / s_01``, ``s_01`` the mean squared difference of the
two arms' predictions.  For independent fits ``e_a + e_b`` is the mean squared error of
the estimated difference ``<M̂_a − M̂_b, X>``, so ``ρ`` is then the tangent of the angle
between the estimated and the true difference; with Gaussian contexts the greedy choice
differs from the optimal one on a fraction ``arctan(ρ)/π`` of the contexts.  With more
arms only the comparisons that decide the greedy choice count: arms that are never among
the two best, or that are close to each other but far below the best, do not ask for
more rounds.  :data:`MAX_NOISE_TO_SIGNAL` = 1/64 (``ρ = 1/8``: with two arms at most 4%
of contexts decided the other way) is the largest ratio the default accepts.  The greedy
rules' regret grows like ``ρ²`` (the share of contexts decided the other way, times the
gap on them, both of order ``ρ``), and ``V̂`` of Section 4 sits below ``V*`` by the mean
regret of the rules played; with the step that continues the warm start's average
(:func:`agents.estimator.step_size.continuing_gain`) this bound keeps that bias small against the
standard error in the grid's settings (docs/method.md §3 and §10 give the measurements).
An arm that the check cannot measure (too few rounds) has ``e_a = inf``, and arms whose
fitted predictions coincide leave no gap: both ask for more rounds.

The rule, :func:`extends`: after the default number of rounds, a trial *needs* more when
``ρ² > 1/64``; a batch of trials (which share one warm-start length: the trials of a vector
env play in lock step) extends while at least half of its trials need more
(:data:`EXTEND_FRACTION`).  Extending doubles the length, up to :data:`MAX_EXTENSION` = 8
times :func:`~agents.warm_start.rules.recovery_rounds` (the default length, but for
completion contexts, whose default may already be that long) and within the phase's
memory limit, then fits and measures again.
:class:`~agents.warm_start.phase.WarmStart` applies it for the low-rank policies' default
warm start only: an explicit length is the user's and is kept exactly, the streaming fit
keeps no held-out rounds, and the inference wrappers' own warm start (which observes
rounds, it does not choose them) keeps its length.
"""

from __future__ import annotations

import numpy as np

from agents.warm_start.check import HOLDOUT_EVERY, WarmStartCheck
from lrbandit_gym.onehot import OneHotContexts

__all__ = [
    "EXTEND_FRACTION",
    "MAX_EXTENSION",
    "MAX_NOISE_TO_SIGNAL",
    "extends",
    "noise_to_signal",
]

#: Largest noise-to-signal ratio ``ρ²`` (NSR) the default warm start accepts.
MAX_NOISE_TO_SIGNAL = 1.0 / 64.0

#: Longest extended warm start, in multiples of
#: :func:`~agents.warm_start.rules.recovery_rounds`.
MAX_EXTENSION = 8

#: Fraction of a batch's trials that must need more rounds for the batch to extend.
EXTEND_FRACTION = 0.5


def noise_to_signal(
    M_init: np.ndarray,
    check: WarmStartCheck,
    X: np.ndarray | OneHotContexts,
    weights: np.ndarray,
) -> np.ndarray:
    """``ρ²`` of (NSR) for every trial (module docstring).

    Parameters
    ----------
    M_init : ndarray of shape (B, K, d1, d2)
        The fit of eq. (10) on every stored round.
    check : WarmStartCheck
        The held-out check on the same rounds (arrays of shape ``(B, K)``).
    X : ndarray of shape (B, n, d1, d2), or OneHotContexts
        The stored contexts (as :func:`~agents.warm_start.inputs.validate_inputs` returns
        them).
    weights : ndarray of shape (B, n)
        The rounds' weights.

    Returns
    -------
    ndarray of shape (B,)
        ``inf`` where a compared arm could not be checked or the compared predictions
        coincide; NaN with a single arm (nothing to compare).
    """
    B, K = M_init.shape[:2]
    with np.errstate(invalid="ignore"):
        excess = np.asarray(check.heldout_mse) - np.asarray(check.sigma2)
    excess = np.atleast_2d(excess).reshape(B, K)
    error = np.where(np.isfinite(excess), np.maximum(excess, 0.0), np.inf)
    error = error * (HOLDOUT_EVERY - 1) / HOLDOUT_EVERY
    out = np.full(B, np.nan)
    if K < 2:
        return out
    for b in range(B):
        if isinstance(X, OneHotContexts):
            preds = M_init[b][:, X.rows[b], X.cols[b]].T  # (n, K): <M, e_j e_kᵀ> = M[j, k]
        else:
            # The trial's contexts in (d1, n, d2) layout (a view of the buffer's storage):
            # every arm's predictions are one batched GEMM over the rows.
            Xs = X[b].transpose(1, 0, 2)
            Mb = M_init[b].astype(Xs.dtype)
            preds = np.stack(
                [
                    np.matmul(Xs, Mb[k][:, :, None])[..., 0].sum(axis=0, dtype=np.float64)
                    for k in range(K)
                ],
                axis=1,
            )
        w = weights[b]
        ranked = np.argsort(preds, axis=1, kind="stable")
        best, second = ranked[:, -1], ranked[:, -2]  # the two arms each context compares
        rows = np.arange(preds.shape[0])
        gap2 = (w * (preds[rows, best] - preds[rows, second]) ** 2).sum()
        with np.errstate(invalid="ignore"):  # an unchecked arm's inf times a zero weight
            err = np.where(w > 0, w * (error[b, best] + error[b, second]), 0.0).sum()
        out[b] = err / gap2 if gap2 > 0 else np.inf
    return out


def extends(ratios: np.ndarray) -> bool:
    """Whether a phase whose trials have these ``ρ²`` extends: at least
    :data:`EXTEND_FRACTION` of them above :data:`MAX_NOISE_TO_SIGNAL` (NaN, a single arm,
    never needs more)."""
    ratios = np.asarray(ratios, dtype=float)
    with np.errstate(invalid="ignore"):
        needs = ratios > MAX_NOISE_TO_SIGNAL
    return bool(needs.mean() >= EXTEND_FRACTION)
