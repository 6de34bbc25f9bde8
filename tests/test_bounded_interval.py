"""Imbens and Manski's interval for a quantity between two estimable bounds (the V*
interval's construction, docs/method.md §10): its critical value, its coverage of every
point between the bounds, and its p-value."""

import numpy as np
import pytest
from scipy.stats import norm

from inference.cores.bounded_interval import (
    bounded_interval,
    bounded_p_value,
    manski_critical_value,
)


def test_critical_value_solves_its_equation_between_the_two_quantiles():
    spread = np.array([0.0, 0.05, 0.3, 1.0, 2.0, 6.0, np.nan])
    c = manski_critical_value(spread, 0.95)
    assert c[0] == pytest.approx(norm.ppf(0.975), abs=1e-12)  # a point: two-sided
    assert c[-2] == pytest.approx(norm.ppf(0.95), abs=1e-8)  # far apart: one-sided
    assert np.isnan(c[-1])
    d = spread[:-1]
    np.testing.assert_allclose(norm.cdf(c[:-1] + d) - norm.cdf(-c[:-1]), 0.95, atol=1e-12)
    assert (np.diff(c[:-1]) < 0).all()


@pytest.mark.parametrize("width", [0.0, 0.5, 1.5, 4.0])
def test_covers_every_point_between_the_bounds_at_the_level(width):
    """As the V* interval uses it: the lower bound 0 estimated with s.e. 1, the upper bound
    ``width`` (in standard errors) estimated as the lower estimate plus a non-negative
    estimate of the width (s.e. 0.5, so the upper s.e. is √1.25).  200 000 draws (Monte
    Carlo s.e. of a coverage 0.0005).  Every point between the bounds is covered at least at
    the level; once the bounds are apart (1.5 s.e. or more) either end is covered within
    0.006 of it.  The interval with the two-sided z at both ends covers the whole of
    ``[θ_l, θ_u]`` at once and over-covers the ends (about 0.975); the one-sided z at both
    ends under-covers where the bounds are close (0.926 at width 0)."""
    rng = np.random.default_rng(0)
    n = 200_000
    low_est = rng.standard_normal(n)
    high_est = low_est + np.maximum(0.0, width + 0.5 * rng.standard_normal(n))
    high_se = np.sqrt(1.25)
    low, high = bounded_interval(low_est, np.ones(n), high_est, np.full(n, high_se), 0.95)
    for point in (0.0, 0.5 * width, width):
        covered = np.mean((low <= point) & (point <= high))
        assert covered >= 0.95 - 0.002, (point, covered)
        if width >= 1.5 and point in (0.0, width):
            assert covered <= 0.956, (point, covered)
        wide = np.mean((low_est - 1.96 <= point) & (point <= high_est + 1.96 * high_se))
        narrow = np.mean((low_est - 1.645 <= point) & (point <= high_est + 1.645 * high_se))
        if width >= 1.5 and point in (0.0, width):
            assert wide > 0.97, wide
        if width == 0.0:
            assert narrow < 0.93, narrow


def test_p_value_matches_the_interval():
    """A null lies outside the interval at level L exactly when its p-value is below 1 − L;
    between the two estimates the p-value is 1; for coinciding bounds it is the two-sided
    normal p-value."""
    rng = np.random.default_rng(1)
    n = 4000
    low_est = rng.normal(size=n)
    high_est = low_est + rng.exponential(1.0, size=n)
    low_se, high_se = rng.uniform(0.5, 2, n), rng.uniform(0.5, 2, n)
    null = rng.normal(scale=4, size=n)
    p = bounded_p_value(null, low_est, low_se, high_est, high_se)
    for level in (0.8, 0.9, 0.95, 0.99):
        low, high = bounded_interval(low_est, low_se, high_est, high_se, level)
        outside = (null < low) | (null > high)
        np.testing.assert_array_equal(outside, p < 1 - level)
    inside = (low_est <= null) & (null <= high_est)
    assert inside.any() and (p[inside] == 1).all()
    z = 1.3
    assert bounded_p_value(0.0, z, 1.0, z, 1.0) == pytest.approx(2 * norm.sf(z), rel=1e-12)
