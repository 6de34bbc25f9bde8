"""The Lindeberg check (inference.cores.weight_share): a read-out warns where one round holds over
a quarter of its quantity's predictable variance (SHARE_LIMIT), and only there; the running
arrays survive a save and load, and a state without them is refused."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from inference import LinearFormInference, PolicyValueInference, SmallPropensityWarning
from inference.cores.weight_share import WeightShare

N = 300


def _core(n_trials=None):
    T = np.zeros((4, 3))
    T[0, 0] = 1.0
    return LinearFormInference(4, 3, 1, 2, {"T": T}, n_trials=n_trials)


def _play(core, rare_round: int | None, rare=1e-6, seed=0):
    """``N`` rounds of a fixed estimate; arm 1 has propensity 1/2, except at ``rare_round``
    where it has ``rare`` (arm 0 is pulled there)."""
    rng = np.random.default_rng(seed)
    U, V = rng.standard_normal((2, 4, 1)), rng.standard_normal((2, 3, 1))
    for t in range(N):
        X = rng.standard_normal((4, 3))
        if t == rare_round:
            core.update(U, V, X, 0, 0.1, np.array([1 - rare, rare]))
        else:
            a = int(rng.integers(2))
            core.update(U, V, X, a, rng.standard_normal(), np.array([0.5, 0.5]))
    return core


def test_weight_share_is_the_largest_factor_over_the_sum():
    share = WeightShare(2, 3)
    share.add(np.array([[1.0, 2.0, 0.0], [1.0, np.inf, 0.0]]))
    share.add(np.array([[3.0, 2.0, 0.0], [1.0, 1.0, 0.0]]))
    got = share.shares()
    assert np.allclose(got[0, :2], [0.75, 0.5]) and np.isnan(got[0, 2])
    assert got[1, 0] == 0.5 and got[1, 1] == 1.0  # a zero propensity: all of it


def test_bounded_propensities_read_without_a_warning():
    core = _play(_core(), rare_round=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallPropensityWarning)
        core.interval(0, "T")
        core.interval(1, "T")
        core.difference(1, 0, "T")


def test_one_round_of_tiny_propensity_warns_for_its_arm_only():
    core = _play(_core(), rare_round=150)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallPropensityWarning)
        core.interval(0, "T")  # arm 0's propensity was 1 - 1e-6 there: nothing heavy
    with pytest.warns(
        SmallPropensityWarning, match=r"<M_1, T\['T'\]> may under-cover: one of its 300 rounds"
    ):
        core.interval(1, "T")
    with pytest.warns(SmallPropensityWarning, match="Lindeberg"):
        core.difference(1, 0, "T")


def test_batched_warning_counts_the_trials():
    rng = np.random.default_rng(1)
    core = _core(n_trials=3)
    U, V = rng.standard_normal((3, 2, 4, 1)), rng.standard_normal((3, 2, 3, 1))
    for t in range(N):
        p = np.full((3, 2), 0.5)
        if t == 10:
            p[2] = [1 - 1e-6, 1e-6]
        a = np.where(np.arange(3) == 2, 0, rng.integers(2, size=3)) if t == 10 else None
        a = rng.integers(2, size=3) if a is None else a
        core.update(U, V, rng.standard_normal((3, 4, 3)), a, rng.standard_normal(3), p)
    with pytest.warns(SmallPropensityWarning, match=r"in 1 of 3 trials \(largest: trial 2\)"):
        core.interval(1, "T")


def test_state_round_trip_keeps_the_check_and_a_state_without_it_is_refused():
    core = _play(_core(), rare_round=150)
    state = core.state_dict()
    assert {"weight_sum", "weight_max"} <= set(state)
    fresh = _core()
    fresh.load_state_dict(state)
    with pytest.warns(SmallPropensityWarning):
        fresh.interval(1, "T")
    value = PolicyValueInference(2, ["arm 0"]).state_dict()
    for key in ("weight_sum", "weight_max"):
        for core, saved in ((_core(), state), (PolicyValueInference(2, ["arm 0"]), value)):
            with pytest.raises(ValueError, match=f"missing key.*'{key}'"):
                core.load_state_dict({k: v for k, v in saved.items() if k != key})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"weight_max": np.full((1, 2), 1e9)}, "exceeds"),
        ({"weight_sum": np.zeros((2, 2))}, "shape"),
        ({"weight_sum": np.full((1, 2), -1.0)}, ">= 0"),
    ],
)
def test_a_bad_weight_state_is_refused_and_changes_nothing(change, match):
    core = _play(_core(), rare_round=None)
    before = core.state_dict()
    with pytest.raises(ValueError, match=match):
        core.load_state_dict({**before, **change})
    after = core.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in ("weight_sum", "weight_max"))


def test_policy_value_warns_for_the_target_that_plays_the_rare_arm():
    rng = np.random.default_rng(2)
    pv = PolicyValueInference(2, ["arm 0", "arm 1"])
    targets = np.array([[1.0, 0.0], [0.0, 1.0]])
    for t in range(N):
        p = np.array([1 - 1e-6, 1e-6]) if t == 7 else np.array([0.5, 0.5])
        a = 0 if t == 7 else int(rng.integers(2))
        pv.update(np.zeros(2), a, rng.standard_normal(), p, targets)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallPropensityWarning)
        pv.interval("arm 0")
    with pytest.warns(SmallPropensityWarning, match="value of 'arm 1'"):
        pv.interval("arm 1")
    with pytest.warns(SmallPropensityWarning):
        pv.difference("arm 1", "arm 0")
    restored = PolicyValueInference(2, ["arm 0", "arm 1"])
    restored.load_state_dict(pv.state_dict())
    with pytest.warns(SmallPropensityWarning):
        restored.interval("arm 1")


def test_policy_value_terms_from_elsewhere_silence_the_check_and_still_save():
    pv = PolicyValueInference(2, ["arm 1"])
    targets = np.array([[0.0, 1.0]])
    pv.update(np.zeros(2), 0, 0.0, np.array([1 - 1e-6, 1e-6]), targets)
    pv.update(np.zeros(2), 1, 1.0, np.array([0.5, 0.5]), targets)
    with pytest.warns(SmallPropensityWarning):
        pv.interval("arm 1")
    pv.commit(np.ones((1, 1)))  # terms no propose() computed: their factors are unknown
    state = pv.state_dict()
    assert np.isnan(state["weight_sum"]).all()
    restored = PolicyValueInference(2, ["arm 1"])
    restored.load_state_dict(state)
    for core in (pv, restored):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SmallPropensityWarning)
            core.interval("arm 1")
