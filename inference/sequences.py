"""Asymptotic confidence sequences: intervals valid at every round at once (docs/method.md §7).

The debiased estimators of this package are, to first order, averages of martingale
differences: ``m̂_n − m ≈ (1/n) Σ_t ξ_t`` with conditional variances whose average the cores
estimate consistently (``ŝ² = σ̂²Ŝ²`` for ``<M_i, T>``, ``Ŝ²_V`` for ``V*``).  For such
averages, Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas ("Time-uniform central limit theory
and asymptotic confidence sequences", Annals of Statistics 2024, Theorem 2.2 and its
martingale analogue) give the two-sided asymptotic confidence sequence::

    m̂_n ± ŝ_n · sqrt( 2(nρ² + 1) / (n²ρ²) · log( sqrt(nρ² + 1) / α ) )        (CS)

It is Robbins' normal-mixture boundary for a standardised sum ``S_n = Σ_t ξ_t/ŝ`` with
mixing variance ``ρ²``: the mixture martingale
``M_n = (nρ² + 1)^(-1/2) · exp(ρ² S_n² / (2(nρ² + 1)))`` exceeds ``1/α`` exactly when the
value lies outside (CS), so by Ville's inequality ``P(∃ n: M_n ≥ 1/α) ≤ α`` (asymptotically,
through the strong approximation of ``S_n`` by a Brownian motion).  Hence:

* the intervals cover the truth at every ``n`` simultaneously with probability ``≥ 1 − α``
  (asymptotically), so they may be read at every round and acted on at any stopping time;
* ``p_n = min(1, 1/M_n)`` is an anytime-valid p-value: ``P(∃ n: p_n ≤ α) ≤ α``.

``ρ`` is fixed in advance, never chosen from the data: it is set from ``tuning_n``, the
round at which the boundary is (approximately) tightest,
``ρ² = (−2 log α + log(1 − 2 log α)) / tuning_n``.

The one-sided version (``alternative="greater"``) mixes over positive drifts only, with a
half-normal mixing law: ``M⁺_n = 2 (nρ² + 1)^(-1/2) exp(ρ²S_n²/(2(nρ² + 1)))
Φ(ρ S_n / sqrt(nρ² + 1))``; its lower confidence bound solves ``M⁺_n = 1/α``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

from inference.results import IntervalEstimate, finish_array, normal_interval
from lrbandit_gym.input_checks import check_positive_int

__all__ = [
    "DEFAULT_TUNING_N",
    "KINDS",
    "check_kind",
    "mixing_variance",
    "sequence_factor",
    "sequence_interval",
    "kind_interval",
    "sequence_phrase",
]

#: Round at which a confidence sequence is tightest unless the caller says otherwise.
DEFAULT_TUNING_N = 1000

#: Kinds of interval every read-out offers: the paper's fixed-n Wald interval, or the
#: anytime-valid confidence sequence of this module.
KINDS = ("fixed", "sequence")


def check_kind(kind, tuning_n) -> tuple[str, int]:
    """Validate ``kind`` and ``tuning_n``; return them (``tuning_n`` as an int)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    return kind, check_positive_int(tuning_n, "tuning_n")


def mixing_variance(tuning_n: int, alpha: float) -> float:
    """``ρ²`` that makes the two-sided boundary at level ``α`` tightest near ``n = tuning_n``.

    Minimising ``2(nρ²+1)/(n²ρ²) · log(sqrt(nρ²+1)/α)`` over ``ρ`` at ``n = tuning_n`` gives,
    to a close approximation, ``n ρ² = −2 log α + log(1 − 2 log α)``.
    """
    a = -2.0 * np.log(alpha)
    return float((a + np.log1p(a)) / tuning_n)


def sequence_factor(n, alpha: float, tuning_n: int) -> np.ndarray:
    """Half-width of the two-sided sequence (CS) in units of the per-round s.d. ``ŝ``.

    ``sqrt(2(nρ²+1)/(n²ρ²) · log(sqrt(nρ²+1)/α))``; the fixed-n interval's is ``z/√n``.
    """
    n = np.asarray(n, dtype=float)
    rho2 = mixing_variance(tuning_n, alpha)
    v = n * rho2 + 1.0
    return np.sqrt(2.0 * v / (n * n * rho2) * (0.5 * np.log(v) - np.log(alpha)))


def _log_mixture(s: np.ndarray, n: int, rho2: float, one_sided: bool) -> np.ndarray:
    """``log M_n`` (two-sided) or ``log M⁺_n`` (one-sided) at standardised sum ``s``."""
    v = n * rho2 + 1.0
    out = -0.5 * np.log(v) + rho2 * s * s / (2.0 * v)
    if one_sided:
        out = out + np.log(2.0) + log_ndtr(np.sqrt(rho2 / v) * s)
    return out


@lru_cache(maxsize=4096)
def _one_sided_threshold(n: int, alpha: float, tuning_n: int) -> float:
    """The standardised sum ``s*`` at which ``M⁺_n = 1/α`` (``M⁺_n`` increases in ``s``)."""
    rho2 = mixing_variance(tuning_n, alpha)
    target = -np.log(alpha)

    def gap(s: float) -> float:
        return float(_log_mixture(np.asarray(s), n, rho2, True)) - target

    # M⁺_n ≥ M_n for s > 0, so the two-sided threshold n·factor brackets the root.
    high = 2.0 * max(float(n * sequence_factor(n, alpha, tuning_n)), 1.0)
    return float(brentq(gap, 0.0, high, xtol=1e-12, rtol=1e-12))


def sequence_interval(
    estimate: np.ndarray,
    standard_error: np.ndarray,
    *,
    n_obs: int,
    confidence_level: float,
    tuning_n: int,
    method: str,
    batched: bool,
    null_value: float | np.ndarray = 0.0,
    alternative: str = "two-sided",
) -> IntervalEstimate:
    """The confidence sequence's interval at round ``n_obs``, as an :class:`IntervalEstimate`.

    The counterpart of :func:`inference.results.normal_interval`: same arguments plus
    ``tuning_n``, with ``standard_error = ŝ/√n`` as there.  ``p_value`` is the anytime-valid
    ``min(1, 1/M_n)`` for ``H0: quantity = null_value`` (two-sided) or
    ``H0: quantity <= null_value`` (``alternative="greater"``, with ``high = inf``).
    """
    est = np.asarray(estimate, dtype=float)
    se = np.asarray(standard_error, dtype=float)
    bad = ~(np.isfinite(est) & np.isfinite(se))
    est = np.where(bad, np.nan, est)
    se = np.where(bad, np.nan, se)
    n = int(n_obs)
    alpha = 1.0 - confidence_level
    if n > 0:
        rho2 = mixing_variance(tuning_n, alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.sqrt(n) * (est - null_value) / se  # S_n = Σ ξ_t / ŝ = √n · z
        if alternative == "two-sided":
            half = se * np.sqrt(n) * sequence_factor(n, alpha, tuning_n)
            low, high = est - half, est + half
            log_m = _log_mixture(s, n, rho2, one_sided=False)
        elif alternative == "greater":
            low = est - se / np.sqrt(n) * _one_sided_threshold(n, alpha, tuning_n)
            high = np.where(bad, np.nan, np.inf)
            log_m = _log_mixture(s, n, rho2, one_sided=True)
        else:  # pragma: no cover - internal misuse
            raise ValueError(f"alternative must be 'two-sided' or 'greater', got {alternative!r}")
        p = np.where(np.isnan(s), np.nan, np.minimum(1.0, np.exp(-log_m)))
    else:
        low = high = p = np.full(est.shape, np.nan)
    p = np.where(bad, np.nan, p)
    return IntervalEstimate(
        estimate=finish_array(est, batched),
        low=finish_array(low, batched),
        high=finish_array(high, batched),
        confidence_level=float(confidence_level),
        standard_error=finish_array(se, batched),
        p_value=finish_array(p, batched),
        n_obs=np.full(est.shape, n, dtype=np.int64) if batched else n,
        method=method,
    )


def kind_interval(kind: str, tuning_n: int, **kwargs) -> IntervalEstimate:
    """:func:`inference.results.normal_interval` (``kind="fixed"``) or
    :func:`sequence_interval` (``kind="sequence"``) on the same arguments."""
    if kind == "sequence":
        return sequence_interval(tuning_n=tuning_n, **kwargs)
    return normal_interval(**kwargs)


def sequence_phrase(kind: str, tuning_n: int) -> str:
    """What a result's ``method`` adds for ``kind``: nothing for the fixed-n interval."""
    if kind == "fixed":
        return ""
    return f"; anytime-valid asymptotic confidence sequence tuned at n = {tuning_n}"
