"""Warnings on insufficient data and refusals of every kind of bad input of
:class:`inference.cores.linear_form.LinearFormInference`."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from inference.cores.linear_form import LinearFormInference
from inference.results import InsufficientDataWarning, SmallPropensityWarning

# ----------------------------------------------------------------------------- insufficient data


def _small(**kw):
    T = np.zeros((4, 3))
    T[0, 0] = 1.0
    return LinearFormInference(4, 3, 1, 2, {"T": T}, **kw)


def _round(rng, K=2, d1=4, d2=3, r=1):
    return (
        rng.standard_normal((K, d1, r)),
        rng.standard_normal((K, d2, r)),
        rng.standard_normal((d1, d2)),
    )


def test_no_rounds_gives_nan_and_warning():
    inf = _small()
    with pytest.warns(InsufficientDataWarning, match="at least 1 more round"):
        ci = inf.interval(0, "T")
    assert np.isnan([ci.estimate, ci.low, ci.high, ci.standard_error, ci.p_value]).all()
    assert ci.n_obs == 0
    with pytest.warns(InsufficientDataWarning):
        assert np.isnan(inf.debiased_mean(0)).all()
    with pytest.warns(InsufficientDataWarning):
        assert np.isnan(inf.difference(0, 1, "T").estimate)
    assert np.isnan(inf.sigma2).all() and np.isnan(inf.S2).all()


def test_arm_never_pulled_warns_with_count():
    rng = np.random.default_rng(0)
    inf = _small()
    U, V, X = _round(rng)
    inf.update(U, V, X, 0, 1.0, np.array([0.5, 0.5]))
    with pytest.warns(InsufficientDataWarning, match="at least 1 more pull of arm 1"):
        ci = inf.interval(1, "T")
    assert np.isnan(ci.estimate) and np.isnan(ci.low)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsufficientDataWarning)
        # One round holds all of the variance: the Lindeberg check says so (weight_share).
        with pytest.warns(SmallPropensityWarning, match="one of its 1 rounds holds 100%"):
            assert np.isfinite(inf.interval(0, "T").low)


def test_batched_insufficient_data_is_per_trial():
    rng = np.random.default_rng(0)
    inf = _small(n_trials=3)
    U, V, X = _round(rng)
    stackU, stackV = np.stack([U] * 3), np.stack([V] * 3)
    inf.update(
        stackU, stackV, np.stack([X] * 3), np.array([0, 1, 0]), np.ones(3), np.full((3, 2), 0.5)
    )
    with pytest.warns(InsufficientDataWarning, match="in 2 of 3 trials"):
        ci = inf.interval(1, "T")
    assert np.isnan(ci.low[[0, 2]]).all() and np.isfinite(ci.low[1])
    assert ci.contains(0.0).dtype == bool


def test_zero_estimate_variance_not_estimable():
    rng = np.random.default_rng(0)
    inf = _small()
    _, _, X = _round(rng)
    zeroU, zeroV = np.zeros((2, 4, 1)), np.zeros((2, 3, 1))
    inf.update(zeroU, zeroV, X, 0, 1.0, np.array([0.5, 0.5]))
    with pytest.warns(InsufficientDataWarning, match="non-zero estimate"):
        ci = inf.interval(0, "T")
    assert np.isnan(ci.low) and np.isnan(ci.standard_error)


# ----------------------------------------------------------------------------- bad input


def _valid(rng, B=None):
    K, d1, d2, r = 2, 4, 3, 1
    shape = () if B is None else (B,)
    return dict(
        U=rng.standard_normal(shape + (K, d1, r)),
        V=rng.standard_normal(shape + (K, d2, r)),
        X=rng.standard_normal(shape + (d1, d2)),
        action=0 if B is None else np.zeros(B, dtype=int),
        reward=0.5 if B is None else np.full(B, 0.5),
        propensities=np.array([0.5, 0.5]) if B is None else np.full((B, 2), 0.5),
    )


def _bad_inputs():
    nan_X = np.ones((4, 3))
    nan_X[1, 2] = np.nan
    inf_U = np.ones((2, 4, 1))
    inf_U[1, 0, 0] = np.inf
    return [
        ("action", 2, "action"),
        ("action", -1, "action"),
        ("action", 0.0, "action"),
        ("action", True, "action"),
        ("reward", np.nan, "reward"),
        ("reward", np.inf, "reward"),
        ("reward", [1.0, 2.0], "reward"),
        ("X", nan_X, "X"),
        ("X", np.ones((3, 4)), "X"),
        ("U", inf_U, "U"),
        ("U", np.ones((2, 4, 2)), "U"),
        ("V", np.ones((3, 3, 1)), "V"),
        ("propensities", np.array([0.0, 1.0]), "propensities"),
        ("propensities", np.array([-0.1, 1.1]), "propensities"),
        ("propensities", np.array([np.nan, 0.5]), "propensities"),
        ("propensities", np.array([0.5, 0.6]), "sum to 1"),
        ("propensities", np.array([1.0]), "propensities"),
    ]


@pytest.mark.parametrize(("arg", "value", "match"), _bad_inputs())
def test_bad_update_raises_and_leaves_state_unchanged(arg, value, match):
    rng = np.random.default_rng(0)
    inf = _small(projection="paper")
    for _ in range(3):
        kw = _valid(rng)
        kw["action"] = int(rng.integers(2))
        inf.update(**kw)
    before = inf.state_dict()
    kw = _valid(rng)
    kw[arg] = value
    with pytest.raises(ValueError, match=match):
        inf.update(**kw)
    after = inf.state_dict()
    for key, val in before.items():
        if isinstance(val, np.ndarray):
            assert val.tobytes() == after[key].tobytes(), key
        else:
            assert val == after[key], key


def test_bad_batched_update_names_trial():
    rng = np.random.default_rng(0)
    inf = _small(n_trials=3)
    kw = _valid(rng, B=3)
    kw["propensities"] = np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]])
    kw["action"] = np.array([0, 0, 1])
    with pytest.raises(ValueError, match=r"trial 2"):
        inf.update(**kw)
    kw = _valid(rng, B=3)
    kw["reward"] = np.array([0.0, np.nan, 0.0])
    with pytest.raises(ValueError, match=r"reward.*trial 1"):
        inf.update(**kw)
    assert inf.n_obs == 0


@pytest.mark.parametrize(
    ("targets", "match"),
    [
        ({}, "at least one"),
        ({"T": np.ones((3, 4))}, r"targets\['T'\]"),
        ({"T": np.full((4, 3), np.nan)}, r"targets\['T'\]"),
        ([("T", np.ones((4, 3))), ("T", np.eye(4, 3))], "duplicate target name 'T'"),
        ({3: np.ones((4, 3))}, "target names"),
        (np.ones((4, 3)), "mapping"),
    ],
)
def test_bad_targets(targets, match):
    with pytest.raises(ValueError, match=match):
        LinearFormInference(4, 3, 1, 2, targets)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"context": "poisson"}, "context"),
        ({"projection": "full"}, "projection"),
        ({"point_estimate": "svd"}, "point_estimate"),
        ({"n_trials": 0}, "n_trials"),
        ({"rank": 5}, "rank"),
        ({"n_actions": 1}, "n_actions"),
    ],
)
def test_bad_constructor_arguments(kw, match):
    args = dict(d1=4, d2=3, rank=1, n_actions=2, targets={"T": np.ones((4, 3))})
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        LinearFormInference(**args)


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.2, float("nan"), float("inf"), "0.9"])
def test_bad_confidence_level(level):
    rng = np.random.default_rng(0)
    inf = _small()
    inf.update(**_valid(rng))
    with pytest.raises(ValueError, match="confidence_level"):
        inf.interval(0, "T", confidence_level=level)
    with pytest.raises(ValueError, match="confidence_level"):
        inf.difference(0, 1, "T", confidence_level=level)


def test_bad_readout_arguments():
    inf = _small()
    with pytest.raises(ValueError, match="arm"):
        inf.interval(2, "T")
    with pytest.raises(ValueError, match="target must be one of 'T'; got 'S'"):
        inf.interval(0, "S")
    with pytest.raises(ValueError, match="arm_a and arm_b must differ"):
        inf.difference(1, 1, "T")
    with pytest.raises(ValueError, match="arm"):
        inf.debiased_mean(-1)


def test_inference_imports_no_plotting_or_pandas():
    code = (
        "import sys, inference.cores.linear_form, inference.cores.optimal_value, "
        "inference.cores.exploration_only, inference.results; "
        "bad = [m for m in ('matplotlib', 'pandas') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
