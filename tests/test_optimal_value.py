"""Tests for :class:`inference.cores.optimal_value.OptimalValueInference` (Section 4, Appendix A).

Gaussian contexts enter the value procedure only through the predictions
``<M_hat_a, X>`` and mean rewards ``<M_a, X>``, which are jointly Gaussian with covariance
given by the inner products of the matrices.  The statistical checks therefore draw those
inner products directly from vectors with the right Gram matrix (exact, and cheap enough for
thousands of trials).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import ndtr, ndtri

from inference.cores.optimal_value import OptimalValueInference
from inference.results import InsufficientDataWarning, IntervalEstimate
from lrbandit_gym.rounds import Round

# ----------------------------------------------------------------------------- reference


def reference(history, mode="known"):
    """V_hat_n and S_hat_V^2 straight from the formulas of Section 4 / Appendix A.

    sigma_hat^2_{i,t} is recomputed from scratch at every t (sum over s <= t)."""
    n = len(history)
    K = len(history[0][0])
    q = np.zeros(n)
    corr = np.zeros(n)
    sv = np.zeros(n)
    for t, (pred, a, y, p) in enumerate(history):
        a_hat = int(np.argmax(pred))
        q[t] = pred[a_hat]
        corr[t] = (a == a_hat) / p[a_hat] * (y - pred[a_hat])
        past = history[: t + 1]
        if mode == "known":
            sig = sum(
                (a_s == a_hat) / p_s[a_hat] * (y_s - pr_s[a_hat]) ** 2
                for pr_s, a_s, y_s, p_s in past
            ) / (t + 1)
        else:
            sq = [(y_s - pr_s[a_hat]) ** 2 for pr_s, a_s, y_s, p_s in past if a_s == a_hat]
            sig = np.mean(sq) if sq else 0.0
        sv[t] = sig / p[a_hat]
    assert K >= 2
    V = np.mean(q + corr)
    S2 = np.mean(sv) + np.mean(q**2) - np.mean(q) ** 2
    return V, S2


def make_history(rng, n, K, B=None):
    shape = () if B is None else (B,)
    hist = []
    for _ in range(n):
        pred = rng.standard_normal(shape + (K,))
        p = rng.dirichlet(np.ones(K), size=shape if B is not None else None) * 0.9 + 0.1 / K
        if B is None:
            a = int(rng.choice(K, p=p))
            y = float(rng.standard_normal() + pred[a])
        else:
            a = np.minimum((rng.random(B)[:, None] > np.cumsum(p, axis=1)).sum(axis=1), K - 1)
            y = rng.standard_normal(B) + pred[np.arange(B), a]
        hist.append((pred, a, y, p))
    return hist


# ----------------------------------------------------------------------------- online == batch


@pytest.mark.parametrize("mode", ["known", "estimated"])
def test_online_equals_direct_computation(mode):
    rng = np.random.default_rng(0)
    hist = make_history(rng, 60, 3)
    vi = OptimalValueInference(3, propensities=mode)
    for row in hist:
        vi.update(*row)
    V, S2 = reference(hist, mode)
    assert vi.n_obs == 60
    assert vi.estimate == pytest.approx(V, rel=1e-12)
    assert vi.S2_V == pytest.approx(S2, rel=1e-12)
    ci = vi.interval(confidence_level=0.8)
    z = ndtri(0.9)
    se = np.sqrt(S2 / 60)
    assert (ci.low, ci.high) == pytest.approx((V - z * se, V + z * se), rel=1e-10)
    assert ci.p_value == pytest.approx(2 * ndtr(-abs(V) / se), rel=1e-9)


@pytest.mark.parametrize("mode", ["known", "estimated"])
def test_batched_equals_unbatched(mode):
    rng = np.random.default_rng(1)
    B = 5
    hist = make_history(rng, 30, 3, B=B)
    batched = OptimalValueInference(3, n_trials=B, propensities=mode)
    singles = [OptimalValueInference(3, propensities=mode) for _ in range(B)]
    for pred, a, y, p in hist:
        batched.update(pred, a, y, p)
        for b, single in enumerate(singles):
            single.update(pred[b], int(a[b]), float(y[b]), p[b])
    ci = batched.interval()
    tg = batched.test_greater(0.1)
    for b, single in enumerate(singles):
        one = single.interval()
        assert ci.estimate[b] == pytest.approx(one.estimate, rel=1e-12)
        assert ci.standard_error[b] == pytest.approx(one.standard_error, rel=1e-12)
        assert tg.p_value[b] == pytest.approx(single.test_greater(0.1).p_value, rel=1e-10)
        np.testing.assert_allclose(batched.sigma2[b], single.sigma2, rtol=1e-12)
    # The single-trial path (Python scalars) runs the batched path's operations in the same
    # order: the running sums agree bit for bit.
    state = batched.state_dict()
    for b, single in enumerate(singles):
        mine = single.state_dict()
        for key, value in state.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value[b], mine[key][0], err_msg=key)
        assert batched.S2_V[b] == single.S2_V and batched.estimate[b] == single.estimate
        # The running values (the wrappers' info) are the read-outs', bit for bit.
        estimate, standard_error = single.running_values()
        assert estimate == single.estimate
        assert standard_error == np.sqrt(single.S2_V / single.n_obs)
        estimates, standard_errors = batched.running_values()
        assert (estimates[b], standard_errors[b]) == (estimate, standard_error)
        one, ci_b = single.interval(), batched.interval()
        assert (ci_b.low[b], ci_b.high[b]) == (one.low, one.high)


@pytest.mark.parametrize("mode", ["known", "estimated"])
def test_a_checked_round_equals_update(mode):
    """check_predictions, then update with a checked Round, is update() on raw arrays."""
    rng = np.random.default_rng(6)
    B, K = 3, 3
    hist = make_history(rng, 20, K, B=B)
    full = OptimalValueInference(K, n_trials=B, propensities=mode)
    seams = OptimalValueInference(K, n_trials=B, propensities=mode)
    for pred, a, y, p in hist:
        full.update(pred, a, y, p)
        seams.check_predictions(pred, p)
        seams.update(pred, Round(np.zeros((B, 1, 1)), a, y, p))
    for key, value in full.state_dict().items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, seams.state_dict()[key])
    assert full.interval() == seams.interval()


def test_check_predictions_raises_before_any_state_change():
    vi = OptimalValueInference(2, n_trials=2)
    vi.update(
        np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0, 1]), np.ones(2), np.full((2, 2), 0.5)
    )
    before = vi.state_dict()
    with pytest.raises(ValueError, match=r"a_hat.*\(trial 1\)"):
        vi.check_predictions(np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([[0.5, 0.5], [0.0, 1.0]]))
    for key, val in before.items():
        if isinstance(val, np.ndarray):
            assert val.tobytes() == vi.state_dict()[key].tobytes(), key


def test_sigma_running_includes_current_round():
    """sigma_hat^2_{a_hat,t} includes round t (sum over s <= t, Section 4)."""
    vi = OptimalValueInference(2)
    vi.update(np.array([1.0, 0.0]), 0, 3.0, np.array([0.5, 0.5]))
    # round 1: res = 2, sigma^2_{0,1} = (1/1) * 4 / 0.5 = 8; S2 term = 8 / 0.5 = 16
    assert vi._sum_sv[0] == pytest.approx(16.0)
    assert vi.sigma2 == pytest.approx([8.0, 0.0])


def test_state_dict_round_trip():
    rng = np.random.default_rng(2)
    hist = make_history(rng, 20, 2)
    a, b = OptimalValueInference(2), OptimalValueInference(2)
    for row in hist[:10]:
        a.update(*row)
    b.load_state_dict(a.state_dict())
    for row in hist[10:]:
        a.update(*row)
        b.update(*row)
    assert a.interval().estimate == b.interval().estimate
    with pytest.raises(ValueError, match="propensities"):
        OptimalValueInference(2, propensities="estimated").load_state_dict(a.state_dict())


# ----------------------------------------------------------------------------- statistics


def simulate(Mvec, Mhat, *, sigma, n, B, eps, seed, mode="known"):
    """B bandits with X ~ N(0, I_m): <M_a, X> = Mvec[a] @ x.  epsilon-greedy on M_hat.

    Returns the value object plus, per trial, the same estimator without the 1/(1 - e_t)
    weight (negative control)."""
    rng = np.random.default_rng(seed)
    K, m = Mvec.shape
    vi = OptimalValueInference(K, n_trials=B, propensities=mode)
    L = np.concatenate([Mvec, Mhat])  # (2K, m)
    no_weight = np.zeros(B)
    trials = np.arange(B)
    for t in range(1, n + 1):
        x = rng.standard_normal((B, m))
        lin = x @ L.T
        mean, pred = lin[:, :K], lin[:, K:]
        e = eps(t)
        greedy = np.argmax(pred, axis=1)
        p = np.full((B, K), e / K)
        p[trials, greedy] += 1 - e
        u = rng.random(B)
        a = np.minimum((u[:, None] > np.cumsum(p, axis=1)).sum(axis=1), K - 1)
        y = mean[trials, a] + sigma * rng.standard_normal(B)
        vi.update(pred, a, y, p)
        q = pred[trials, greedy]
        no_weight += q + (a == greedy) * (y - q)
    return vi, no_weight / n


def _two_arms(norm1, norm0, m=6, seed=0):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((2, m))
    M *= np.array([[norm0], [norm1]]) / np.linalg.norm(M, axis=1, keepdims=True)
    return M


def _value_of(Mvec, Mhat):
    """E<M_{a_hat(X)}, X> for a_hat = argmax <M_hat_a, X>, K = 2 (closed form)."""
    diff, dhat = Mvec[1] - Mvec[0], Mhat[1] - Mhat[0]
    return diff @ dhat / (np.linalg.norm(dhat) * np.sqrt(2 * np.pi))


def test_value_estimate_is_unbiased_and_no_weight_control_fails():
    """A shrunken estimate (M_hat_1 = 0.8 M_1, a common SGD bias): V_hat is unbiased for
    the value of the greedy rule a_hat; dropping the 1/(1 - e_t) weight is biased."""
    M = _two_arms(3.0, 1.0)
    Mhat = M.copy()
    Mhat[1] *= 0.8
    vi, no_weight = simulate(M, Mhat, sigma=0.5, n=200, B=1000, eps=lambda t: 0.4, seed=1)
    target = _value_of(M, Mhat)
    est = vi.interval().estimate
    se_mean = est.std(ddof=1) / np.sqrt(est.size)
    assert abs(est.mean() - target) < 4 * se_mean
    assert abs(no_weight.mean() - target) > 8 * se_mean


@pytest.mark.parametrize(
    ("norm1", "norm0", "sigma", "mode"),
    [
        (15.0, 1.0, 0.1, "known"),  # the paper's value study: ||M_1|| = 15, ||M_0|| = 1
        (1.0, 0.5, 2.0, "known"),  # noise-dominated: sigma^2 drives S_V^2
        (1.0, 0.5, 2.0, "estimated"),  # Appendix A: plain-mean sigma^2 (eq. A.4)
    ],
)
def test_value_intervals_are_calibrated(norm1, norm0, sigma, mode):
    """Decaying exploration eps_t = 0.05 t^-0.1 (beta > 0 allowed for the value):
    z = (V_hat - V*) / se is ~N(0, 1).  A variance off by a factor 2 (in S_V^2, or in the
    sigma^2 part for the noise-dominated case) gives var(z) ~2 or ~0.5, outside
    [0.8, 1.25] (sampling sd of var(z) with B = 2000 is ~0.03)."""
    M = _two_arms(norm1, norm0, seed=3)
    rng = np.random.default_rng(4)
    Mhat = M + 0.02 * norm1 * rng.standard_normal(M.shape) / np.sqrt(M.shape[1])
    vi, _ = simulate(
        M, Mhat, sigma=sigma, n=400, B=2000, eps=lambda t: 0.05 * t**-0.1, seed=5, mode=mode
    )
    v_star = np.linalg.norm(M[1] - M[0]) / np.sqrt(2 * np.pi)
    ci = vi.interval()
    z = (ci.estimate - v_star) / ci.standard_error
    assert abs(z.mean()) < 0.15, z.mean()
    assert 0.8 < z.var() < 1.25, z.var()
    assert 0.92 <= ci.contains(v_star).mean() <= 0.975


def test_test_greater_is_one_sided():
    """At the boundary of H0 the one-sided test rejects at its level: with B = 4000 the
    Monte Carlo s.e. of the size is sqrt(0.05 * 0.95 / B) = 0.0034, and the band
    (0.035, 0.065) is 0.05 ± 4.4 s.e., which a test at level 0.025 or 0.10 (a two-sided
    critical value, or a doubled p-value) falls outside."""
    B = 4000
    M = _two_arms(3.0, 1.0)
    vi, _ = simulate(M, M, sigma=0.5, n=100, B=B, eps=lambda t: 0.2, seed=6)
    v_star = np.linalg.norm(M[1] - M[0]) / np.sqrt(2 * np.pi)
    ci = vi.interval(confidence_level=0.9)
    far_below = vi.test_greater(v_star - 1.0)
    assert np.mean(far_below.p_value < 0.05) > 0.99  # H0: V* <= V* - 1 is false
    at_truth = vi.test_greater(v_star)
    size = np.mean(at_truth.p_value < 0.05)
    assert 0.035 < size < 0.065, size  # size 0.05 at the boundary
    assert np.all(at_truth.high == np.inf)
    # the one-sided 95% lower bound equals the lower end of the two-sided 90% interval
    np.testing.assert_allclose(at_truth.low, ci.low, rtol=1e-12)
    np.testing.assert_array_equal(at_truth.low > v_star, at_truth.p_value < 0.05)
    est, se = at_truth.estimate, at_truth.standard_error
    np.testing.assert_allclose(at_truth.p_value, ndtr(-(est - v_star) / se), rtol=1e-12)
    per_trial = vi.test_greater(np.full(B, v_star))
    np.testing.assert_allclose(per_trial.p_value, at_truth.p_value)


# ----------------------------------------------------------------------------- insufficient data


def test_too_few_rounds_warn_and_give_nan():
    vi = OptimalValueInference(2)
    with pytest.warns(InsufficientDataWarning, match="at least 2 more round"):
        ci = vi.interval()
    assert isinstance(ci, IntervalEstimate) and np.isnan(ci.estimate) and np.isnan(ci.low)
    vi.update(np.array([0.2, 0.1]), 0, 1.0, np.array([0.9, 0.1]))
    with pytest.warns(InsufficientDataWarning, match="at least 1 more round"):
        assert np.isnan(vi.test_greater(0.0).p_value)
    vi.update(np.array([0.5, 0.1]), 0, 1.0, np.array([0.9, 0.1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(vi.interval().low)


def test_zero_variance_not_estimable():
    vi = OptimalValueInference(2, n_trials=2)
    for _ in range(3):  # trial 0: constant predictions and exact rewards
        vi.update(
            np.array([[1.0, 0.0], [1.0, 0.0]]),
            np.array([0, 0]),
            np.array([1.0, 2.0]),
            np.full((2, 2), 0.5),
        )
    with pytest.warns(InsufficientDataWarning, match="in 1 of 2 trials"):
        ci = vi.interval()
    assert np.isnan(ci.low[0]) and np.isfinite(ci.low[1])


# ----------------------------------------------------------------------------- bad input


def _valid():
    return dict(
        predictions=np.array([0.3, 0.1]), action=0, reward=0.5, propensities=np.array([0.9, 0.1])
    )


@pytest.mark.parametrize(
    ("arg", "value", "match"),
    [
        ("predictions", np.array([0.3, np.nan]), "predictions"),
        ("predictions", np.array([0.3, 0.1, 0.0]), "predictions"),
        ("action", 2, "action"),
        ("action", 1.0, "action"),
        ("reward", np.inf, "reward"),
        ("propensities", np.array([0.9, 0.2]), "sum to 1"),
        ("propensities", np.array([1.1, -0.1]), "propensities"),
        ("propensities", np.array([1.0, 0.0]), None),  # zero at the chosen arm (action=1)
        ("propensities", np.array([0.0, 1.0]), "a_hat"),  # zero at a_hat = 0
    ],
)
@pytest.mark.parametrize("mode", ["known", "estimated"])
def test_bad_update_raises_and_leaves_state_unchanged(arg, value, match, mode):
    vi = OptimalValueInference(2, propensities=mode)
    rng = np.random.default_rng(0)
    for row in make_history(rng, 4, 2):
        vi.update(*row)
    before = vi.state_dict()
    kw = _valid()
    kw[arg] = value
    if match == "a_hat":  # pull arm 1 (pi = 1) while a_hat = 0 has pi = 0
        kw["action"] = 1
    if match is None:  # pi(a_t) = 0: an error only when propensities are known
        kw["action"] = 1
        kw["predictions"] = np.array([0.3, 0.1])
        if mode == "estimated":
            vi.update(**kw)
            return
        match = r"propensities\[action\]"
    with pytest.raises(ValueError, match=match):
        vi.update(**kw)
    after = vi.state_dict()
    for key, val in before.items():
        if isinstance(val, np.ndarray):
            assert val.tobytes() == after[key].tobytes(), key
        else:
            assert val == after[key]


@pytest.mark.parametrize("level", [0, 1, 2.0, float("nan"), None])
def test_bad_confidence_level(level):
    vi = OptimalValueInference(2)
    with pytest.raises(ValueError, match="confidence_level"):
        vi.interval(confidence_level=level)
    with pytest.raises(ValueError, match="confidence_level"):
        vi.test_greater(0.0, confidence_level=level)


def test_bad_threshold_and_constructor():
    with pytest.raises(ValueError, match="v0"):
        OptimalValueInference(2).test_greater(float("nan"))
    with pytest.raises(ValueError, match="v0"):
        OptimalValueInference(2, n_trials=3).test_greater(np.zeros(2))
    with pytest.raises(ValueError, match="propensities"):
        OptimalValueInference(2, propensities="unknown")
    with pytest.raises(ValueError, match="n_actions"):
        OptimalValueInference(1)
