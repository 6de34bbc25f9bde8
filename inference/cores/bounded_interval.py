"""Confidence intervals for a quantity known to lie between two bounds that can each be
estimated: Imbens and Manski (2004), "Confidence intervals for partially identified
parameters", Econometrica 72(6).

The ``V*`` interval needs one (docs/method.md §10): ``V*`` lies between the mean value of the
greedy rules played, which ``V̂_n`` estimates without bias, and that value plus their regret,
which ``V̂_n + R̂_n`` estimates from above.  With estimates ``θ̂_l``, ``θ̂_u`` of the two
bounds, standard errors ``s_l``, ``s_u`` and ``Δ̂ = θ̂_u − θ̂_l ≥ 0``, the interval is

    [θ̂_l − c·s_l,  θ̂_u + c·s_u],   Φ(c + Δ̂ / max(s_l, s_u)) − Φ(−c) = level.       (IM)

``c`` falls from the two-sided ``z_{(1+level)/2}`` (``Δ̂ = 0``: a point, the usual interval)
to the one-sided ``z_{level}`` (``Δ̂`` many standard errors: only one end can be missed at a
time).  Whichever point of ``[θ_l, θ_u]`` the quantity is, the interval covers it with
probability at least ``level`` (to first order); the interval ``[θ̂_l − z s_l, θ̂_u + z s_u]``
with the two-sided ``z`` covers the whole of ``[θ_l, θ_u]`` at once, more than a point needs.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri

__all__ = ["bounded_interval", "bounded_p_value", "manski_critical_value"]

#: Bisection steps for ``c``: the bracket is narrower than 0.4, so 2^-50 of it is far below
#: rounding.
_STEPS = 50


def manski_critical_value(spread: np.ndarray, level: float) -> np.ndarray:
    """``c`` of eq. (IM) for ``spread = Δ̂ / max(s_l, s_u)`` (any shape, ``≥ 0``; NaN gives
    NaN), by bisection between the one-sided and the two-sided normal quantiles."""
    spread = np.asarray(spread, dtype=float)
    lo = np.full(spread.shape, float(ndtri(level)))
    hi = np.full(spread.shape, float(ndtri(0.5 + 0.5 * level)))
    d = np.where(np.isfinite(spread), np.maximum(spread, 0.0), 0.0)
    for _ in range(_STEPS):
        mid = 0.5 * (lo + hi)
        above = ndtr(mid + d) - ndtr(-mid) >= level  # coverage rises with c
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return np.where(np.isnan(spread), np.nan, hi)


def bounded_interval(
    low_est: np.ndarray,
    low_se: np.ndarray,
    high_est: np.ndarray,
    high_se: np.ndarray,
    level: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` of eq. (IM), elementwise; ``high_est`` below ``low_est`` counts as
    ``Δ̂ = 0``."""
    low_est, high_est = np.asarray(low_est, float), np.asarray(high_est, float)
    low_se, high_se = np.asarray(low_se, float), np.asarray(high_se, float)
    spread = _spread(low_est, low_se, high_est, high_se)
    c = manski_critical_value(spread, level)
    return low_est - c * low_se, np.maximum(high_est, low_est) + c * high_se


def bounded_p_value(
    null_value: float | np.ndarray,
    low_est: np.ndarray,
    low_se: np.ndarray,
    high_est: np.ndarray,
    high_se: np.ndarray,
) -> np.ndarray:
    """The p-value of ``H0: quantity = null_value`` that matches eq. (IM): 1 inside
    ``[θ̂_l, θ̂_u]``, and outside ``1 − [Φ(c₀ + δ) − Φ(−c₀)]`` with ``c₀`` the null's
    distance to the nearer estimate in its standard errors, so that the null lies outside
    the interval at level ``L`` exactly when the p-value is below ``1 − L``."""
    low_est, high_est = np.asarray(low_est, float), np.asarray(high_est, float)
    low_se, high_se = np.asarray(low_se, float), np.asarray(high_se, float)
    high_est = np.maximum(high_est, low_est)
    spread = _spread(low_est, low_se, high_est, high_se)
    with np.errstate(divide="ignore", invalid="ignore"):
        below = (low_est - null_value) / low_se
        above = (null_value - high_est) / high_se
    c0 = np.maximum(below, above)
    inside = c0 <= 0
    p = np.where(inside, 1.0, ndtr(-c0 - spread) + ndtr(-c0))  # 1 − [Φ(c₀ + δ) − Φ(−c₀)]
    return np.where(np.isnan(c0) | np.isnan(spread), np.nan, np.clip(p, 0.0, 1.0))


def _spread(low_est, low_se, high_est, high_se) -> np.ndarray:
    """``Δ̂ / max(s_l, s_u)``, 0 where the bounds coincide."""
    delta = np.maximum(high_est - low_est, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(delta > 0, delta / np.maximum(low_se, high_se), 0.0)
