"""Is the warm start close enough to the truth for the theory?  A held-out check.

Algorithm 1 and the intervals of Sections 3-4 assume that ``M_init`` is within the noise
level of the truth, ``‖M_init − M‖_F ≲ σ`` (docs/method.md §3).  Neither side is known, but
their ratio is observable from the warm-start rounds themselves: for a fit ``M̂`` that did
not see round ``t``,

    E[(y_t − <M̂_a, X_t>)²] = σ_a² + E[<M̂_a − M_a, X_t>²]
                            = σ_a² + ‖M̂_a − M_a‖_F² / c        (c = 1 Gaussian, d1·d2 completion)

so ``c`` times the excess of the held-out mean squared prediction error over a noise
estimate ``σ̂_a²`` estimates the squared estimation error, in units of the noise variance:

    ratio_a = c (held-out MSE_a − σ̂_a²) / σ̂_a²   ≈ ‖M̂_a − M_a‖_F² / σ_a².

For completion contexts the factor ``c = d1 d2`` matters: a completion round reveals one
entry, so the prediction error is ``‖M̂ − M‖²_F/(d1 d2)``, small even when ``M̂`` is far from
``M`` in the Frobenius norm the condition speaks of; and the held-out error is ``c`` times
less precise, so a single completion trial is flagged only when far off.

:func:`check_warm_start` computes it.  It refits eq. (10) (the factored fit of
:func:`agents.warm_start.nuclear_norm_fit`) on the warm-start rounds with every
:data:`HOLDOUT_EVERY`-th round left out (weight 0, which the fit ignores exactly), and
measures that fit's prediction error on the left-out rounds, weighted by the rounds' weights
(``1/π`` for adaptively collected rounds).  ``σ̂_a²`` is the weighted mean squared in-sample
residual of the same fit times ``n_a / (n_a − p)``, ``p = r (d1 + d2 − r)`` the degrees of
freedom of a rank-r matrix (``n_a`` the arm's effective number of fitted rounds).  The check
fit has 20% fewer rounds than ``M_init``, so its error is somewhat larger: the check errs on
the side of warning.

An arm of a trial is *flagged* when its ratio exceeds :data:`MAX_RATIO` = 1
(``‖M̂ − M‖_F > σ`` for Gaussian contexts) by more than three standard errors of the
held-out mean, or when it has too few fitted rounds to measure anything (at most
:func:`~agents.warm_start.rules.min_warm_start_pulls`).  The check *warns* about an arm that
is flagged, for a single trial; for a batch of trials (which share one configuration), about
an arm whose mean ratio over the trials exceeds :data:`MAX_RATIO` by more than three of its
standard errors (from the spread over the trials) or that has too few rounds in some trial,
so that one unlucky trial among thousands does not raise it.  When
the fit is far from the truth (or from converged), ``σ̂²`` absorbs part of the misfit and the
ratio understates the error, though it still exceeds 1.  Measured ratios (the paper's
setting, rank 7, completion contexts) are in docs/reproduction.md, "Validity outside the
paper".

The inference wrappers run the check when their own estimator finishes its warm start
(:mod:`inference.wrappers.own_estimator`), and a low-rank policy does when its ``check_warm_start``
attribute is True (off by default: it costs about one more fit); both keep the result as
``warm_start_check``.  :func:`warn_if_far` issues the :class:`WarmStartWarning`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.warm_start.fit import nuclear_norm_fit
from agents.warm_start.inputs import name_list, validate_inputs
from agents.warm_start.rules import default_warm_start_rounds, min_warm_start_pulls
from lrbandit_gym.input_checks import check_positive_int
from lrbandit_gym.onehot import OneHotContexts

__all__ = [
    "HOLDOUT_EVERY",
    "MAX_RATIO",
    "WarmStartCheck",
    "WarmStartWarning",
    "check_buffer",
    "check_warm_start",
    "warn_if_far",
]

#: Every ``HOLDOUT_EVERY``-th warm-start round is left out of the check's fit (20%).
HOLDOUT_EVERY = 5

#: Largest ``‖M̂ − M‖²_F / (c σ²)`` the check accepts (the theory's ``‖M_init − M‖_F ≲ σ``).
MAX_RATIO = 1.0

#: Standard errors of the held-out mean by which a trial's ratio must exceed
#: :data:`MAX_RATIO` to be flagged.
_MARGIN = 3.0


class WarmStartWarning(RuntimeWarning):
    """The warm start left the estimate too far from the truth for the theory's intervals."""


@dataclass(frozen=True)
class WarmStartCheck:
    """Result of :func:`check_warm_start`; arrays have shape ``(K,)``, or ``(B, K)`` for a
    batch of trials.

    Attributes
    ----------
    ratio : ndarray
        ``c (held-out MSE − σ̂²)/σ̂²``, the estimate of ``‖M̂_a − M_a‖²_F/σ_a²``; ``inf`` for
        an arm with too few rounds to check.
    ratio_se : ndarray
        Its standard error from the held-out rounds (``σ̂²`` taken as known).
    sigma2 : ndarray
        ``σ̂_a²`` (NaN where the arm has too few rounds).
    heldout_mse : ndarray
        Weighted mean squared prediction error on the held-out rounds.
    flagged : ndarray of bool
        ``ratio − 3 ratio_se > MAX_RATIO``, or too few rounds.
    rounds : int
        Warm-start rounds checked (all arms together).
    recommended : int
        A warm start to try instead when something is flagged: the problem-sized default
        (:func:`agents.warm_start.default_warm_start_rounds`) when it is longer than
        ``rounds``; else ``2 ratio`` times ``rounds`` for the worst arm's mean ratio (the
        error of a least-squares fit falls like ``1/n``), between 2 and 10 times ``rounds``.
    """

    ratio: np.ndarray
    ratio_se: np.ndarray
    sigma2: np.ndarray
    heldout_mse: np.ndarray
    flagged: np.ndarray
    rounds: int
    recommended: int

    @property
    def warned_arms(self) -> np.ndarray:
        """``(K,)`` bool: the arms the check warns about (module docstring): flagged, for a
        single trial; for a batch, a mean ratio over the trials above :data:`MAX_RATIO` by
        more than 3 standard errors, or too few rounds in some trial."""
        if self.flagged.ndim == 1:
            return self.flagged.copy()
        warned = ~np.isfinite(self.ratio).all(axis=0)
        for k in np.flatnonzero(~warned):
            r = self.ratio[:, k]
            if r.size == 1:
                warned[k] = self.flagged[0, k]
            else:
                se = r.std(ddof=1) / np.sqrt(r.size)
                warned[k] = r.mean() - _MARGIN * se > MAX_RATIO
        return warned

    @property
    def ok(self) -> bool:
        """Whether the check warns about no arm."""
        return not bool(self.warned_arms.any())

    def message(self, who: str = "the warm start") -> str:
        """What a :class:`WarmStartWarning` says about this check (empty when :attr:`ok`)."""
        if self.ok:
            return ""
        ratio = np.atleast_2d(self.ratio)
        batched = self.flagged.ndim == 2
        listed = []
        for k in np.flatnonzero(self.warned_arms):
            r = ratio[:, k]
            finite = r[np.isfinite(r)]
            short = int((~np.isfinite(r)).sum())
            if not batched:
                what = f"ratio {r[0]:.2g}" if finite.size else "too few rounds to check"
            elif short:
                what = f"too few rounds to check in {short} of {r.size} trials"
            else:
                se = r.std(ddof=1) / np.sqrt(r.size) if r.size > 1 else np.nan
                what = f"mean ratio over {r.size} trials {r.mean():.2g} ± {se:.2g}"
            listed.append(f"arm {k} ({what})")
        return (
            f"{who} ({self.rounds} rounds) leaves the estimate too far from the truth for the "
            "theory (docs/method.md §3 wants ‖M_init − M‖_F ≲ σ): on held-out warm-start "
            "rounds the estimated ‖M_init − M‖²_F/σ² (from the excess prediction error over "
            f"the noise variance) exceeds {MAX_RATIO:g}, or cannot be measured, for "
            f"{name_list(listed)}; "
            "intervals may under-cover until the online estimate catches up.  Pass "
            f"warm_start={self.recommended} (or more)"
        )


def _recommended(
    rounds: int, ratio: np.ndarray, d1: int, d2: int, rank: int, K: int, context: str
) -> int:
    """The problem-sized default when it is longer; else enough rounds to bring the worst
    arm's mean ratio to 1/2, as the error of a least-squares fit falls like 1/n (between 2
    and 10 times ``rounds``: a noisy ratio must not ask for absurd lengths)."""
    default = default_warm_start_rounds(d1, d2, rank, K, context)
    if default > rounds:
        return default
    with np.errstate(invalid="ignore"):
        worst = np.atleast_2d(ratio).mean(axis=0).max()
    factor = min(2 * worst, 10.0) if np.isfinite(worst) and worst > 1 else 2.0
    return 100 * math.ceil(factor * rounds / 100)


def check_warm_start(
    X: Any,
    actions: Any,
    rewards: Any,
    n_actions: int,
    *,
    rank: int,
    weights: Any = None,
    context: str = "gaussian",
) -> WarmStartCheck:
    """Held-out check of the warm start's distance to the truth (see the module docstring).

    Parameters
    ----------
    X : array_like of shape (n, d1, d2) or (B, n, d1, d2)
        The warm-start contexts (e.g. :meth:`agents.warm_start.WarmStartBuffer.data`).
    actions : array_like of int, shape (n,) or (B, n)
    rewards : array_like of shape (n,) or (B, n)
    n_actions : int
        Number of arms ``K``.
    rank : int
        Rank ``r`` of the estimator the warm start initialises.
    weights : array_like of shape (n,) or (B, n), optional
        Per-round weights (``1/π_t(a_t)`` for adaptively collected rounds); default 1.
    context : {"gaussian", "completion"}, default "gaussian"

    Returns
    -------
    WarmStartCheck

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> M = np.stack([np.outer(rng.standard_normal(8), rng.standard_normal(6)) / 7] * 2)
    >>> X = rng.standard_normal((600, 8, 6)); a = rng.integers(0, 2, 600)
    >>> y = np.einsum("nij,nij->n", M[a], X) + 0.1 * rng.standard_normal(600)
    >>> check = check_warm_start(X, a, y, 2, rank=1)
    >>> check.ok, bool((check.ratio < 1).all())
    (True, True)
    """
    rank = check_positive_int(rank, "rank")
    Xa, acts, y, w, K, batched = validate_inputs(X, actions, rewards, n_actions, weights, context)
    B, n, d1, d2 = Xa.shape
    if rank > min(d1, d2):
        raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
    held = (np.arange(n) % HOLDOUT_EVERY) == HOLDOUT_EVERY - 1  # (n,)
    w_fit = np.where(held, 0.0, w)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # Empty arms were reported by the fit of M_init itself; a failed fit is judged below.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            M = np.asarray(
                nuclear_norm_fit(
                    Xa, acts, y, K, weights=w_fit, context=context, rank=rank, solver="factored"
                )
            )
        except np.linalg.LinAlgError:
            M = np.full((B, K, d1, d2), np.nan)
    dof = rank * (d1 + d2 - rank)
    scale = float(d1 * d2) if context == "completion" else 1.0  # c of Appendix C
    ratio = np.full((B, K), np.inf)
    ratio_se = np.full((B, K), np.nan)
    sigma2 = np.full((B, K), np.nan)
    mse = np.full((B, K), np.nan)
    for b in range(B):
        # The trial's contexts in (d1, n, d2) layout (a view of WarmStartBuffer's storage):
        # every arm's predictions are one batched GEMM over the rows.  Completion contexts
        # as indices (CompletionWarmStartBuffer): a prediction is one entry.
        one_hot = isinstance(Xa, OneHotContexts)
        Xs = None if one_hot else Xa[b].transpose(1, 0, 2)
        for k in range(K):
            mine = (acts[b] == k) & (w[b] > 0)
            fit_rows = mine & ~held
            test_rows = mine & held
            wf, wt = w[b, fit_rows], w[b, test_rows]
            if wf.size == 0 or wt.size < 2 or not np.isfinite(M[b, k]).all():
                continue
            n_eff = wf.sum() ** 2 / (wf**2).sum()
            if n_eff <= min_warm_start_pulls(d1, d2, rank):
                continue  # too few rounds: ratio stays inf (flagged)
            if one_hot:
                pred = M[b, k][Xa.rows[b], Xa.cols[b]]  # <M, e_j e_kᵀ> = M[j, k]
            else:
                Mk = M[b, k].astype(Xs.dtype)[:, :, None]
                pred = np.matmul(Xs, Mk)[..., 0].sum(axis=0, dtype=np.float64)  # (n,)
            e2 = (y[b] - pred) ** 2
            s2 = float((wf * e2[fit_rows]).sum() / wf.sum()) * n_eff / (n_eff - dof)
            m = float((wt * e2[test_rows]).sum() / wt.sum())
            var = float((wt**2 * (e2[test_rows] - m) ** 2).sum() / wt.sum() ** 2)
            sigma2[b, k], mse[b, k] = s2, m
            # A noiseless arm (σ̂ = 0) is judged against a floor far below any real noise.
            floor = max(s2, 1e-12 * float(np.mean(y[b] ** 2)), np.finfo(float).tiny)
            ratio[b, k] = scale * (m - s2) / floor
            ratio_se[b, k] = scale * np.sqrt(var) / floor
    flagged = ~np.isfinite(ratio) | (ratio - _MARGIN * np.nan_to_num(ratio_se) > MAX_RATIO)
    out = [ratio, ratio_se, sigma2, mse, flagged]
    if not batched:
        out = [a[0] for a in out]
    return WarmStartCheck(
        *out, rounds=n, recommended=_recommended(n, ratio, d1, d2, rank, K, context)
    )


def warn_if_far(check: WarmStartCheck, who: str, stacklevel: int = 2) -> None:
    """Issue :class:`WarmStartWarning` with ``check``'s message when it flags an arm."""
    if not check.ok:
        warnings.warn(check.message(who), WarmStartWarning, stacklevel=stacklevel + 1)


def check_buffer(
    buffer: Any, *, rank: int, context: str, who: str, stacklevel: int = 2
) -> WarmStartCheck:
    """:func:`check_warm_start` on a full :class:`~agents.warm_start.WarmStartBuffer`'s
    rounds, with a :class:`WarmStartWarning` naming ``who`` when it finds the estimate too
    far (the hook of the inference wrappers' own warm start and of
    ``LowRankPolicy.check_warm_start``); ``stacklevel`` as for :func:`warnings.warn`,
    counted from the caller of this function."""
    X, actions, rewards, weights = buffer.data()
    check = check_warm_start(
        X, actions, rewards, buffer.n_actions, rank=rank, weights=weights, context=context
    )
    warn_if_far(check, who, stacklevel=stacklevel + 1)
    return check
