"""Tests of agents.estimator.LowRankSGD's interface: the per-round API (check_context,
predict_checked, pulled, step on a Round, arm versions), the refusal of bad input and of a
diverging step (nothing changes), and the saved state (bit-identical resume, validation)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import states_equal

from agents.estimator import LowRankSGD, PulledArms
from lrbandit_gym.rounds import Round


# --------------------------------------------------------------------------- per-round API
@pytest.mark.parametrize("n_trials", [None, 3])
def test_per_round_api_reproduces_predict_and_update(n_trials):
    """check_context -> predict_checked -> pulled -> step(Round) gives the numbers of
    predict and update bit for bit, and pulled() shows the factors before the step."""
    est, twin = _fresh(n_trials=n_trials), _fresh(n_trials=n_trials)
    B, K, r = 1 if n_trials is None else n_trials, 3, 2
    trials = np.arange(B)
    for i in range(5):
        X, a, y, p = _good_args(n_trials)
        X = X + i
        Xb, fp = est.check_context(X)
        assert Xb.shape == (B, 5, 4) and fp.shape == (B,)
        np.testing.assert_array_equal(fp, est.fingerprint(Xb.copy()))
        preds = est.predict_checked(Xb, fp)
        assert preds.shape == (B, K)
        np.testing.assert_array_equal(preds, np.reshape(twin.predict(X), (B, K)))
        ab, yb = np.reshape(a, B), np.reshape(y, B).astype(float)
        pb = np.reshape(p, (B, K))
        U_all, V_all = (np.reshape(f, (B, K) + f.shape[-2:]) for f in est.factors)
        sv_all = np.reshape(est.singular_values, (B, K, r))
        pulled = est.pulled(Xb, ab, fp)
        assert isinstance(pulled, PulledArms)
        np.testing.assert_array_equal(pulled.U, U_all[trials, ab])
        np.testing.assert_array_equal(pulled.V, V_all[trials, ab])
        np.testing.assert_array_equal(pulled.sv, sv_all[trials, ab])
        np.testing.assert_allclose(pulled.XV, Xb @ pulled.V, rtol=1e-12)
        np.testing.assert_allclose(pulled.XtU, Xb.transpose(0, 2, 1) @ pulled.U, rtol=1e-12)
        sv_before = pulled.sv.copy()
        res = est.step(Round(Xb, ab, yb, pb, fp))
        np.testing.assert_array_equal(res, np.reshape(twin.update(X, a, y, p), B))
        np.testing.assert_array_equal(pulled.sv, sv_before)  # a copy, not a view
    assert states_equal(est.state_dict(), twin.state_dict())


@pytest.mark.parametrize("n_trials", [None, 3])
def test_update_is_check_round_then_step(n_trials):
    """update() checks the raw round into a Round (batched layout, with the fingerprint) and
    steps on it: step(check_round(...)) gives its numbers bit for bit."""
    est, twin = _fresh(n_trials=n_trials), _fresh(n_trials=n_trials)
    B = 1 if n_trials is None else n_trials
    X, a, y, p = _good_args(n_trials)
    before = est.state_dict()
    round_ = est.check_round(X, a, y, p)
    assert states_equal(est.state_dict(), before)  # checking changes nothing
    assert isinstance(round_, Round)
    assert round_.contexts.shape == (B, 5, 4) and round_.actions.shape == (B,)
    assert round_.propensities.shape == (B, 3) and round_.fingerprint.shape == (B,)
    np.testing.assert_array_equal(est.step(round_), np.reshape(twin.update(X, a, y, p), B))
    assert states_equal(est.state_dict(), twin.state_dict())
    with pytest.raises(ValueError, match="propensities must be given"):
        est.check_round(X, a, y, None)
    unknown = _fresh(n_trials=n_trials, propensities="unknown")
    assert unknown.check_round(X, a, y, None).propensities is None


def test_arm_versions_and_factor_views_are_read_only_and_follow_the_steps():
    est = _fresh(n_trials=2)
    versions = est.arm_versions
    assert versions.shape == (2, 3) and versions.dtype == np.int64
    with pytest.raises(ValueError, match="read-only"):
        versions[0, 0] = 7
    U, V = est.batched_factors
    assert U.shape == (2, 3, 5, 2) and V.shape == (2, 3, 4, 2)
    for view in (U, V):
        with pytest.raises(ValueError, match="read-only"):
            view[...] = 0.0
    before = est.arm_versions.copy()
    X, a, y, p = _good_args(2)
    est.update(X, a, y, p)
    moved = versions != before  # the view follows the estimator
    assert moved.sum() == 2 and moved[np.arange(2), a].all()
    trials, arms = np.nonzero(moved)
    U_moved, V_moved = est.arm_factors(trials, arms)
    U_now, V_now = est.factors
    np.testing.assert_array_equal(U_moved, U_now[trials, arms])
    np.testing.assert_array_equal(V_moved, V_now[trials, arms])
    np.testing.assert_array_equal(U, U_now)
    U_moved[...] = 0.0  # a gathered copy: the estimator does not see it
    assert not np.array_equal(est.factors[0][trials, arms], 0.0)
    assert est.arm_versions.flags.writeable is False


# --------------------------------------------------------------------------- validation
def _fresh(n_trials=None, **kw):
    rng = np.random.default_rng(8)
    est = LowRankSGD(5, 4, 2, 3, n_trials=n_trials, **kw)
    shape = (3, 5, 4) if n_trials is None else (n_trials, 3, 5, 4)
    est.initialize(rng.standard_normal(shape))
    est.update(*(_good_args(n_trials)))
    return est


def _good_args(n_trials=None):
    rng = np.random.default_rng(9)
    if n_trials is None:
        return rng.standard_normal((5, 4)), 1, 0.5, np.array([0.2, 0.5, 0.3])
    B = n_trials
    return (
        rng.standard_normal((B, 5, 4)),
        np.arange(B) % 3,
        np.full(B, 0.5),
        np.tile([0.2, 0.5, 0.3], (B, 1)),
    )


def _nan_at(X, index):
    X = X.copy()
    X[index] = np.nan
    return X


BAD_UNBATCHED = [
    # (argument index, bad value, text expected in the message)
    (0, np.ones((4, 5)), "(4, 5)"),
    (0, _nan_at(np.ones((5, 4)), (2, 1)), "nan"),
    (0, np.full((5, 4), np.inf), "inf"),
    (1, 3, "got 3"),
    (1, -1, "got -1"),
    (1, 1.0, "1.0"),
    (1, True, "True"),
    (2, np.nan, "nan"),
    (2, np.inf, "inf"),
    (2, "a", "'a'"),
    (3, np.array([0.2, 0.5, 0.2]), "0.9"),
    (3, np.array([0.6, 0.5, -0.1]), "-0.1"),
    (3, np.array([0.5, np.nan, 0.5]), "nan"),
    (3, np.array([0.5, 0.5]), "(2,)"),
    (3, np.array([0.5, 0.0, 0.5]), "0.0"),  # zero at the chosen arm (action 1)
    (3, None, "None"),
]


@pytest.mark.parametrize(("pos", "value", "text"), BAD_UNBATCHED)
def test_bad_update_input_raises_and_changes_nothing(pos, value, text):
    est = _fresh()
    before = est.state_dict()
    args = list(_good_args())
    args[pos] = value
    name = ["X", "action", "reward", "propensities"][pos]
    with pytest.raises(ValueError, match=name) as info:
        est.update(*args)
    assert text in str(info.value)
    assert states_equal(est.state_dict(), before)


BAD_BATCHED = [
    (0, _nan_at(np.ones((4, 5, 4)), (2, 1, 1)), "trial 2"),
    (0, np.ones((3, 5, 4)), "(3, 5, 4)"),
    (1, np.array([0, 1, 3, 0]), "trial 2"),
    (1, np.array([0.0, 1.0, 2.0, 0.0]), "float64"),
    (2, np.array([0.0, 0.0, 0.0, np.inf]), "trial 3"),
    (3, np.array([[0.2, 0.5, 0.3]] * 3 + [[0.2, 0.5, 0.4]]), "trial 3"),
    (3, np.array([[0.2, 0.5, 0.3], [0.2, 0.0, 0.8], [0.2, 0.5, 0.3], [1.0, 0, 0]]), "trial 1"),
]


@pytest.mark.parametrize(("pos", "value", "text"), BAD_BATCHED)
def test_bad_batched_input_names_first_trial(pos, value, text):
    est = _fresh(n_trials=4)
    before = est.state_dict()
    args = list(_good_args(4))
    args[pos] = value
    with pytest.raises(ValueError) as info:
        est.update(*args)
    assert text in str(info.value)
    assert states_equal(est.state_dict(), before)


def test_context_check_by_fingerprint_finds_every_non_finite_entry():
    """predict/update check a context through its fingerprint <X, W> (one pass): a NaN or
    an infinity at any position, or +inf and -inf together, must still be refused, and
    finite entries that overflow the fingerprint must still be accepted."""
    est = _fresh(n_trials=2)
    X, a, y, p = _good_args(2)
    for index in np.ndindex(X.shape):
        for bad in (np.nan, np.inf, -np.inf):
            Xb = X.copy()
            Xb[index] = bad
            with pytest.raises(ValueError, match=f"trial {index[0]}"):
                est.update(Xb, a, y, p)
            with pytest.raises(ValueError, match="X must be finite"):
                est.predict(Xb)
    both = X.copy()
    both[1, 0, 0], both[1, 4, 3] = np.inf, -np.inf
    with pytest.raises(ValueError, match="trial 1"):
        est.predict(both)
    before = est.state_dict()
    huge = np.full_like(X, 1e308)  # finite; the fingerprint overflows to inf
    with np.errstate(over="ignore"):  # the predictions themselves overflow
        assert est.predict(huge).shape == (2, 3)
    assert states_equal(est.state_dict(), before)


def test_unknown_mode_accepts_zero_propensity_at_chosen_arm():
    est = _fresh(propensities="unknown")
    X, a, y, _ = _good_args()
    est.update(X, a, y, np.array([0.5, 0.0, 0.5]))
    with pytest.raises(ValueError, match="sum to 1"):
        est.update(X, a, y, np.array([0.5, 0.0, 0.4]))


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        (dict(d1=0), "d1"),
        (dict(d2=-3), "d2"),
        (dict(rank=0), "rank"),
        (dict(rank=5), "rank must be <= min(d1, d2) = 4, got 5"),
        (dict(n_actions=1), "n_actions"),
        (dict(n_trials=0), "n_trials"),
        (dict(context="sparse"), "'sparse'"),
        (dict(propensities="estimated"), "'estimated'"),
        (dict(step_scale=0.0), "step_scale"),
        (dict(step_offset=-1), "step_offset"),
        (dict(step_decay=np.nan), "step_decay"),
        (dict(d1=2.5), "2.5"),
    ],
)
def test_bad_constructor_arguments(kwargs, text):
    base = dict(d1=5, d2=4, rank=2)
    base.update(kwargs)
    with pytest.raises(ValueError) as info:
        LowRankSGD(**base)
    assert text in str(info.value)


@pytest.mark.parametrize(
    ("M", "text"),
    [
        (np.ones((2, 4, 5)), "(2, 4, 5)"),
        (np.ones((3, 2, 5, 4)), "(3, 2, 5, 4)"),
        (np.full((2, 5, 4), np.nan), "nan"),
    ],
)
def test_bad_initialize(M, text):
    est = _fresh_two_arm()
    before = est.state_dict()
    with pytest.raises(ValueError, match="M_init") as info:
        est.initialize(M)
    assert text in str(info.value)
    assert states_equal(est.state_dict(), before)


def _fresh_two_arm():
    est = LowRankSGD(5, 4, 2)
    est.initialize(np.random.default_rng(0).standard_normal((2, 5, 4)))
    return est


def test_divergence_raises_without_corrupting_state():
    est = LowRankSGD(5, 4, 2, step_scale=1e300, step_offset=1)
    est.initialize(np.random.default_rng(0).standard_normal((2, 5, 4)))
    before = est.state_dict()
    with pytest.raises(FloatingPointError, match="step_scale"), np.errstate(all="ignore"):
        est.update(np.full((5, 4), 1e10), 0, 1e150, np.array([0.5, 0.5]))
    assert states_equal(est.state_dict(), before)


def test_huge_finite_factors_are_balanced_by_the_eigen_route():
    # Factors ~1e80: their Gram matrices (~1e160) are finite, the r x r product the
    # Cholesky route decomposes (~1e320) is not; those pairs take the eigen route.
    est = LowRankSGD(5, 4, 2, step_scale=1e-300)
    est.initialize(1e160 * np.random.default_rng(0).standard_normal((2, 5, 4)))
    before = est.estimates
    est.update(np.ones((5, 4)), 0, 0.0, np.array([0.5, 0.5]))  # a step of ~1e-300
    U, V = est.factors
    np.testing.assert_allclose(est.estimates, before, rtol=1e-10)
    D = np.diag(est.singular_values[0])
    np.testing.assert_allclose(U[0].T @ U[0], D, rtol=1e-10, atol=1e-10 * D.max())
    np.testing.assert_allclose(V[0].T @ V[0], D, rtol=1e-10, atol=1e-10 * D.max())


# --------------------------------------------------------------------------- persistence
@pytest.mark.parametrize("n_trials", [None, 3])
def test_state_dict_pickle_and_bit_identical_resume(n_trials):
    rng = np.random.default_rng(10)
    d1, d2, r, K = 6, 5, 2, 2
    est = LowRankSGD(d1, d2, r, K, n_trials=n_trials, propensities="unknown")
    shape = (K, d1, d2) if n_trials is None else (n_trials, K, d1, d2)
    est.initialize(rng.standard_normal(shape))
    lead = () if n_trials is None else (n_trials,)

    def stream(seed, n):
        g = np.random.default_rng(seed)
        for _ in range(n):
            a = g.integers(0, K, lead) if lead else int(g.integers(K))
            yield g.standard_normal(lead + (d1, d2)), a, g.standard_normal(lead) if lead else 0.7

    for X, a, y in stream(0, 15):
        est.update(X, a, y)
    state = est.state_dict()
    for value in state.values():
        assert isinstance(value, (np.ndarray, int, float, str, bool))
    clone = LowRankSGD.from_state_dict(state)
    pickled = pickle.loads(pickle.dumps(est))
    state["U"][...] = 0.0  # state_dict returns copies
    assert not np.array_equal(est.factors[0], 0.0)
    for X, a, y in stream(1, 25):
        est.update(X, a, y)
        clone.update(X, a, y)
        pickled.update(X, a, y)
    assert states_equal(est.state_dict(), clone.state_dict())
    assert states_equal(est.state_dict(), pickled.state_dict())
    assert clone.t == est.t == 40


def test_load_state_dict_validates():
    est = _fresh_two_arm()
    good = est.state_dict()
    other = LowRankSGD(5, 4, 1)
    with pytest.raises(ValueError, match="rank"):
        other.load_state_dict(good)
    bad = dict(good, U=good["U"][..., :1])
    before = est.state_dict()
    with pytest.raises(ValueError, match="'U'"):
        est.load_state_dict(bad)
    with pytest.raises(ValueError, match="nan"):
        est.load_state_dict(dict(good, V=np.full_like(good["V"], np.nan)))
    with pytest.raises(ValueError, match="missing"):
        est.load_state_dict({k: v for k, v in good.items() if k != "t"})
    with pytest.raises(ValueError, match="'t'"):
        est.load_state_dict(dict(good, t=-1))
    assert states_equal(est.state_dict(), before)
