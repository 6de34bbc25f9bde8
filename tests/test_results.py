"""Tests for :mod:`inference.results` (the shared result type)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from inference.results import (
    InsufficientDataWarning,
    IntervalEstimate,
    critical_value,
    normal_interval,
)


def _scalar(**kw):
    args = dict(
        estimate=np.array([1.0]),
        standard_error=np.array([0.5]),
        n_obs=100,
        confidence_level=0.95,
        method="test",
        batched=False,
    )
    args.update(kw)
    return normal_interval(**args)


def test_scalar_fields_are_python_numbers():
    ci = _scalar()
    assert isinstance(ci.estimate, float) and isinstance(ci.low, float)
    assert isinstance(ci.p_value, float) and ci.n_obs == 100
    z = stats.norm.ppf(0.975)
    assert (ci.low, ci.high) == pytest.approx((1.0 - z * 0.5, 1.0 + z * 0.5))
    assert ci.p_value == pytest.approx(2 * stats.norm.sf(2.0))
    assert ci.width == pytest.approx(2 * z * 0.5)


def test_unpacks_as_low_high_only():
    ci = _scalar()
    low, high = ci
    assert (low, high) == (ci.low, ci.high)
    assert list(ci) == [ci.low, ci.high]
    with pytest.raises(ValueError):
        a, b, c = ci  # noqa: F841


def test_contains_scalar_and_batched():
    ci = _scalar()
    assert ci.contains(1.0) is True
    assert ci.contains(5.0) is False
    batch = normal_interval(
        np.array([0.0, 1.0, np.nan]),
        np.array([1.0, 0.1, 1.0]),
        n_obs=10,
        confidence_level=0.9,
        method="m",
        batched=True,
    )
    np.testing.assert_array_equal(batch.contains(0.0), [True, False, False])
    np.testing.assert_array_equal(batch.contains(np.array([0.0, 1.0, 0.0])), [True, True, False])
    assert batch.estimate.shape == (3,) and batch.n_obs.tolist() == [10, 10, 10]
    assert np.isnan(batch.low[2]) and np.isnan(batch.p_value[2]) and np.isnan(batch.estimate[2])


def test_frozen_and_read_only():
    batch = normal_interval(
        np.zeros(2), np.ones(2), n_obs=5, confidence_level=0.9, method="m", batched=True
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.low = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError):
        batch.low[0] = 3.0


def test_repr_is_readable():
    text = repr(_scalar(method="<M_1, T>"))
    assert text.startswith("IntervalEstimate(estimate=1, low=0.02")
    assert "confidence_level=0.95" in text and "n_obs=100" in text and "<M_1, T>" in text
    big = normal_interval(
        np.arange(300.0), np.ones(300), n_obs=7, confidence_level=0.95, method="m", batched=True
    )
    assert "..." in repr(big) and len(repr(big)) < 600


def test_one_sided_greater():
    ci = _scalar(alternative="greater", null_value=0.5)
    z = stats.norm.ppf(0.95)
    assert ci.low == pytest.approx(1.0 - z * 0.5)
    assert ci.high == np.inf and ci.width == np.inf
    assert ci.p_value == pytest.approx(stats.norm.sf((1.0 - 0.5) / 0.5))


def test_two_sided_p_value_is_symmetric():
    a = _scalar(estimate=np.array([1.3]))
    b = _scalar(estimate=np.array([-1.3]))
    assert a.p_value == pytest.approx(b.p_value)


@pytest.mark.parametrize("level", [0.5, 0.8, 0.95, 0.999])
def test_critical_value_matches_scipy(level):
    assert critical_value(level) == pytest.approx(stats.norm.ppf(0.5 + level / 2))
    assert critical_value(level, two_sided=False) == pytest.approx(stats.norm.ppf(level))


def test_warning_class():
    assert issubclass(InsufficientDataWarning, UserWarning)
    assert IntervalEstimate.__dataclass_params__.frozen


def test_equality_compares_fields_and_treats_nan_as_equal():
    def batch(est):
        return normal_interval(
            np.asarray(est, dtype=float),
            np.ones(2),
            n_obs=5,
            confidence_level=0.9,
            method="m",
            batched=True,
        )

    assert batch([0.0, np.nan]) == batch([0.0, np.nan])
    assert batch([0.0, 1.0]) != batch([0.0, 2.0])
    assert _scalar() == _scalar() and _scalar() != _scalar(method="other")
    assert _scalar(estimate=np.array([np.nan])) == _scalar(estimate=np.array([np.nan]))
    assert _scalar() != batch([1.0, 1.0]) and _scalar() != (0.02, 1.98)
    with pytest.raises(TypeError):
        hash(_scalar())
