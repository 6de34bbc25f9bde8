"""Result type shared by every inference procedure.

:class:`IntervalEstimate` is the one object returned by ``interval``, ``difference`` and
``test_greater``: a frozen, scipy-style record of a point estimate, its Wald confidence
interval, standard error and p-value.  It holds Python floats for a single bandit and
arrays of shape ``(B,)`` when ``B`` independent trials are run in lock step.

Too little data never raises: the affected entries are NaN and an
:class:`InsufficientDataWarning` says how many more rounds or pulls are needed.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

__all__ = ["InsufficientDataWarning", "IntervalEstimate", "SmallPropensityWarning"]


class InsufficientDataWarning(UserWarning):
    """Too few rounds (or pulls of an arm) to estimate a quantity or its variance.

    The result's affected entries are NaN; the message says how much more data is needed.
    """


class SmallPropensityWarning(UserWarning):
    """The logging policy chose an arm with a propensity so small that its inverse-propensity
    weight is outside what the intervals' central limit theorem allows (``π_t ≥ p0 > 0``,
    docs/method.md §8): the intervals may under-cover."""


_ARRAY_FIELDS = ("estimate", "low", "high", "standard_error", "p_value", "n_obs")


def _fmt(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=4, threshold=6, edgeitems=2, separator=", ")
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.array_equal(a, b, equal_nan=True))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return bool(a == b)


@dataclasses.dataclass(frozen=True, eq=False)
class IntervalEstimate:
    """A point estimate with a confidence interval, standard error and p-value.

    Unpacks as ``low, high = result``; two results are equal when every field is (NaN
    entries included).  Every numeric field is a Python number for a single
    bandit, or a read-only array of shape ``(B,)`` for ``B`` trials run in lock step.

    Attributes
    ----------
    estimate : float or ndarray
        Point estimate (NaN where there is too little data).
    low, high : float or ndarray
        Confidence bounds; a one-sided interval has ``high = inf``.
    confidence_level : float
        Nominal coverage, in ``(0, 1)``.
    standard_error : float or ndarray
        Estimated standard deviation of ``estimate``.
    p_value : float or ndarray
        Two-sided p-value for ``H0: quantity = 0`` unless ``method`` says otherwise (the
        one-sided value test of :meth:`OptimalValueInference.test_greater`).
    n_obs : int or ndarray
        Number of rounds ``n`` the estimate is based on.
    method : str
        What was estimated and how.
    """

    estimate: Any
    low: Any
    high: Any
    confidence_level: float
    standard_error: Any
    p_value: Any
    n_obs: Any
    method: str

    def __post_init__(self) -> None:
        for name in _ARRAY_FIELDS:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value = value.copy()
                value.flags.writeable = False
                object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        """Field-by-field equality; arrays compare elementwise, and NaN equals NaN, so a
        result equals an identical recomputation even where it has too little data."""
        if not isinstance(other, IntervalEstimate):
            return NotImplemented
        return all(
            _same(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self)
        )

    __hash__ = None  # type: ignore[assignment]  # equal results may hold different arrays

    def __iter__(self):
        """Yield ``low`` then ``high``, so that ``low, high = result`` works."""
        yield self.low
        yield self.high

    @property
    def width(self) -> Any:
        """Interval length ``high - low`` (``inf`` for a one-sided interval)."""
        return self.high - self.low

    def contains(self, value: Any) -> Any:
        """Whether ``low <= value <= high`` (elementwise when batched; NaN bounds give False).

        Parameters
        ----------
        value : float or array_like
            Scalar, or an array broadcastable to the batch shape ``(B,)``.
        """
        inside = np.logical_and(np.less_equal(self.low, value), np.less_equal(value, self.high))
        if np.ndim(inside) == 0:
            return bool(inside)
        return np.asarray(inside)

    def __repr__(self) -> str:
        parts = [f"{f.name}={_fmt(getattr(self, f.name))}" for f in dataclasses.fields(self)]
        return "IntervalEstimate(" + ", ".join(parts) + ")"


# ---------------------------------------------------------------------------- helpers
def critical_value(confidence_level: float, two_sided: bool = True) -> float:
    """Standard normal quantile ``z`` such that ``P(|Z| <= z) = confidence_level``.

    One-sided: ``P(Z <= z) = confidence_level``.
    """
    if two_sided:
        return float(ndtri(0.5 + 0.5 * confidence_level))
    return float(ndtri(confidence_level))


def finish_array(value: np.ndarray, batched: bool) -> Any:
    """``value`` as returned in an :class:`IntervalEstimate`: the array when batched, else
    its single entry as a Python scalar."""
    return value if batched else value.reshape(-1)[0].item()


def normal_interval(
    estimate: np.ndarray,
    standard_error: np.ndarray,
    *,
    n_obs: int,
    confidence_level: float,
    method: str,
    batched: bool,
    null_value: float | np.ndarray = 0.0,
    alternative: str = "two-sided",
) -> IntervalEstimate:
    """Build a Wald interval from 1-d arrays of estimates and standard errors.

    Entries whose estimate or standard error is NaN give NaN bounds and p-value.

    Parameters
    ----------
    estimate, standard_error : ndarray of shape (B,)
    n_obs : int
        Rounds behind the estimate.
    confidence_level : float
        Already validated, in ``(0, 1)``.
    method : str
    batched : bool
        Return arrays of shape ``(B,)`` (True) or Python floats (False, ``B = 1``).
    null_value : float or ndarray
        Value of the quantity under ``H0``.
    alternative : {"two-sided", "greater"}
        "greater": one-sided test of ``H0: quantity <= null_value`` with a lower
        confidence bound and ``high = inf``.
    """
    est = np.asarray(estimate, dtype=float)
    se = np.asarray(standard_error, dtype=float)
    bad = ~(np.isfinite(est) & np.isfinite(se))
    est = np.where(bad, np.nan, est)
    se = np.where(bad, np.nan, se)
    with np.errstate(divide="ignore", invalid="ignore"):
        zstat = (est - null_value) / se
    if alternative == "two-sided":
        z = critical_value(confidence_level)
        low, high = est - z * se, est + z * se
        p = 2.0 * ndtr(-np.abs(zstat))
    elif alternative == "greater":
        z = critical_value(confidence_level, two_sided=False)
        low = est - z * se
        high = np.where(bad, np.nan, np.inf)
        p = ndtr(-zstat)
    else:  # pragma: no cover - internal misuse
        raise ValueError(f"alternative must be 'two-sided' or 'greater', got {alternative!r}")
    # se == 0 with a finite estimate: the z statistic is +-inf (or NaN at est == null).
    p = np.where(bad, np.nan, p)
    n = np.full(est.shape, int(n_obs), dtype=np.int64) if batched else int(n_obs)
    return IntervalEstimate(
        estimate=finish_array(est, batched),
        low=finish_array(low, batched),
        high=finish_array(high, batched),
        confidence_level=float(confidence_level),
        standard_error=finish_array(se, batched),
        p_value=finish_array(p, batched),
        n_obs=n,
        method=method,
    )


def warn_insufficient(message: str, stacklevel: int = 3) -> None:
    """Emit an :class:`InsufficientDataWarning`."""
    warnings.warn(message, InsufficientDataWarning, stacklevel=stacklevel)


def trials_phrase(mask: np.ndarray, batched: bool, largest: int | None = None) -> str:
    """``' in 3 of 300 trials'`` for a batched mask, ``''`` otherwise; with ``largest``,
    ``' in 3 of 300 trials (largest: trial 7)'``."""
    if not batched:
        return ""
    where = f" in {int(np.count_nonzero(mask))} of {mask.size} trials"
    return where if largest is None else f"{where} (largest: trial {largest})"


def interval_rows(ci: IntervalEstimate) -> list[dict[str, float]]:
    """One dict per trial of ``ci``'s estimate, bounds, standard error and p-value."""
    fields = ("estimate", "low", "high", "standard_error", "p_value")
    arrays = {f: np.atleast_1d(np.asarray(getattr(ci, f), dtype=float)) for f in fields}
    return [{f: float(arrays[f][i]) for f in fields} for i in range(arrays["estimate"].size)]


def format_table(rows, n_trials, confidence_level) -> str:
    """A text table of ``(label, IntervalEstimate)`` rows (trial 0 when batched)."""
    pct = f"{100 * confidence_level:g}%"
    head = (
        f"{'quantity':<24}{'estimate':>11}{pct + ' low':>11}{pct + ' high':>11}"
        f"{'se':>11}{'p-value':>11}"
    )
    lines = [head, "-" * len(head)]
    for label, ci in rows:
        r = interval_rows(ci)[0]
        lines.append(
            f"{label:<24}{r['estimate']:>11.4f}{r['low']:>11.4f}{r['high']:>11.4f}"
            f"{r['standard_error']:>11.4g}{r['p_value']:>11.3g}"
        )
    if n_trials is not None:
        lines.append(f"(trial 0 of {n_trials}; the IntervalEstimate arrays hold every trial)")
    return "\n".join(lines)
