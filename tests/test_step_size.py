"""Tests of the step sizes of the low-rank SGD (agents.estimator.step_size): the paper's absolute
step, kept exactly, and the scale-free default."""

from __future__ import annotations

import numpy as np
import pytest

from agents import EpsilonGreedy, LowRankSGD
from agents.estimator.step_size import DEFAULT_STEP_GAIN, NUCLEAR_NORM_FLOOR


def _truth(rng, d, r, K=2):
    return np.stack(
        [
            np.linalg.qr(rng.standard_normal((d, r)))[0]
            @ np.linalg.qr(rng.standard_normal((d, r)))[0].T
            for _ in range(K)
        ]
    )


def _one_step(est, M, X, a, y, p):
    """The product after one step of eq. (8) with coefficient ``coef``, from factors."""
    u, s, vt = np.linalg.svd(M[a])
    r = est.rank
    U, V = u[:, :r] * np.sqrt(s[:r]), vt[:r].T * np.sqrt(s[:r])
    res = y - np.sum(X * (U @ V.T))

    def after(coef):
        return (U + coef * res * X @ V) @ (V + coef * res * X.T @ U).T

    return after


@pytest.mark.parametrize("context", ["gaussian", "completion"])
def test_scale_free_step_is_the_gain_over_the_context_and_parameter_scale(context):
    rng = np.random.default_rng(0)
    d1, d2, r = 9, 7, 2
    M = 3.0 * np.stack([rng.standard_normal((d1, r)) @ rng.standard_normal((r, d2))] * 2)
    M[0] *= 0.5  # arms of different scales: each is normalised by its own nuclear norm
    est = LowRankSGD(d1, d2, r, context=context)
    est.initialize(M)
    if context == "gaussian":
        X = rng.standard_normal((d1, d2))
    else:
        X = np.zeros((d1, d2))
        X[2, 3] = 1.0
    p = np.array([0.25, 0.75])
    for a in (0, 1):
        e = LowRankSGD(d1, d2, r, context=context)
        e.initialize(M)
        e.update(X, action=a, reward=0.3, propensities=p)
        nu = np.linalg.svd(M[a], compute_uv=False)[:r].sum()
        c = d1 * d2 if context == "completion" else 1.0
        coef = DEFAULT_STEP_GAIN * c / ((d1 + d2) * nu * p[a])
        expected = _one_step(est, M, X, a, 0.3, p)(coef)
        np.testing.assert_allclose(e.estimates[a], expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("prior", [0, 40, 4000])
def test_after_a_warm_start_the_step_is_capped_to_continue_its_average(prior):
    """Round t of an estimator whose M_init stands on ``prior`` uniform rounds takes the
    smaller of the schedule's gain and (d1 + d2) r / (prior v̄ / K + t), with v̄ the mean of
    1{a_s = a}/π_s(a)² over the online rounds (docs/method.md §3, "The cap after a warm
    start"); exact, through the factored step of eq. (8), at the first two rounds."""
    rng = np.random.default_rng(3)
    d1, d2, r, K = 9, 7, 2, 2
    M = 3.0 * np.stack([rng.standard_normal((d1, r)) @ rng.standard_normal((r, d2))] * K)
    est = LowRankSGD(d1, d2, r, n_actions=K)
    est.initialize(M, prior_rounds=prior)
    p = np.array([0.25, 0.75])
    square = 0.0  # Σ_s 1{a_s = 1}/π_s(1)² over the rounds before
    for t, a in ((1, 1), (2, 1)):
        X = rng.standard_normal((d1, d2))
        before = est.estimates
        nu = np.linalg.svd(before[a], compute_uv=False)[:r].sum()
        square += 1 / p[a] ** 2
        cap = (d1 + d2) * r / (prior * (square / t) / K + t) if prior else np.inf
        gain = min(DEFAULT_STEP_GAIN, cap)  # the schedule is flat up to t* = 300
        coef = gain / ((d1 + d2) * nu * p[a])
        expected = _one_step(est, before, X, a, 0.3, p)(coef)
        est.update(X, action=a, reward=0.3, propensities=p)
        np.testing.assert_allclose(est.estimates[a], expected, rtol=1e-9, atol=1e-12)
    if prior == 4000:
        assert cap < DEFAULT_STEP_GAIN / 3  # the cap binds
    state = est.state_dict()
    assert state["prior_rounds"] == prior
    np.testing.assert_allclose(state["square_weight_sum"], [[0.0, square]])


def test_the_cap_survives_a_save_and_a_state_without_it_is_refused():
    rng = np.random.default_rng(4)
    M = rng.standard_normal((2, 6, 5))
    est = LowRankSGD(6, 5, 1)
    est.initialize(M, prior_rounds=4000)
    p = np.array([0.5, 0.5])
    for _ in range(3):
        est.update(rng.standard_normal((6, 5)), 0, 0.1, p)
    X = rng.standard_normal((6, 5))
    restored = LowRankSGD(6, 5, 1)
    restored.load_state_dict(est.state_dict())
    for key in ("prior_rounds", "square_weight_sum"):
        with pytest.raises(ValueError, match=key):
            LowRankSGD(6, 5, 1).load_state_dict(
                {k: v for k, v in est.state_dict().items() if k != key}
            )
    uncapped = LowRankSGD(6, 5, 1)
    uncapped.load_state_dict(
        {**est.state_dict(), "prior_rounds": 0, "square_weight_sum": np.zeros((1, 2))}
    )
    for e in (est, restored, uncapped):
        e.update(X, 0, 0.1, p)
    np.testing.assert_array_equal(restored.estimates, est.estimates)
    assert not np.allclose(uncapped.estimates, est.estimates)
    with pytest.raises(ValueError, match="square_weight_sum"):
        restored.load_state_dict({**est.state_dict(), "square_weight_sum": -np.ones((1, 2))})
    with pytest.raises(ValueError, match="prior_rounds"):
        LowRankSGD(6, 5, 1).initialize(M, prior_rounds=-1)


def test_a_policy_passes_its_warm_start_to_the_cap():
    import gymnasium as gym

    env = gym.make("MatrixContextBandit-v0", d1=5, d2=4, rank=1)
    agent = EpsilonGreedy(env, rank=1, warm_start=150, seed=0)
    obs, _ = env.reset(seed=0)
    while agent.in_warm_start:
        d = agent.act(obs)
        nxt, reward, *_ = env.step(d)
        agent.update(obs, d, reward)
        obs = nxt
    assert agent.estimator.state_dict()["prior_rounds"] == 150


def test_absolute_step_is_unchanged_and_exclusive():
    rng = np.random.default_rng(1)
    M = rng.standard_normal((2, 6, 5))
    est = LowRankSGD(6, 5, 2, step_scale=0.1)
    est.initialize(M)
    X = rng.standard_normal((6, 5))
    p = np.array([0.5, 0.5])
    est.update(X, action=1, reward=1.0, propensities=p)
    coef = 0.1 * 300.0**-0.99 / 0.5
    expected = _one_step(est, M, X, 1, 1.0, p)(coef)
    np.testing.assert_allclose(est.estimates[1], expected, rtol=1e-10, atol=1e-12)
    assert est.step_size(1) == pytest.approx(0.1 * 300.0**-0.99)
    with pytest.raises(ValueError, match="step_scale .* or step_gain .*not both"):
        LowRankSGD(6, 5, 2, step_scale=0.1, step_gain=0.1)
    with pytest.raises(ValueError, match="step_gain must be a finite real number > 0, got 0"):
        LowRankSGD(6, 5, 2, step_gain=0)
    with pytest.raises(ValueError, match="step_scale must be a finite real number > 0, got -1"):
        EpsilonGreedy(d1=6, d2=5, n_actions=2, rank=2, step_scale=-1)


def test_floor_on_a_small_arm():
    rng = np.random.default_rng(2)
    M = np.stack([rng.standard_normal((6, 1)) @ rng.standard_normal((1, 5))] * 2)
    M[0] *= 1e-6  # arm 0 nearly zero: its step is normalised by the floor, not by ~0
    est = LowRankSGD(6, 5, 1)
    est.initialize(M)
    X = rng.standard_normal((6, 5))
    p = np.array([0.5, 0.5])
    after = _one_step(est, M, X, 0, 1.0, p)
    est.update(X, action=0, reward=1.0, propensities=p)
    nu_floor = NUCLEAR_NORM_FLOOR * np.linalg.svd(M[1], compute_uv=False)[0]
    coef = DEFAULT_STEP_GAIN / ((6 + 5) * nu_floor * 0.5)
    np.testing.assert_allclose(est.estimates[0], after(coef), rtol=1e-9, atol=1e-15)


def test_state_round_trip_keeps_the_parametrisation_and_needs_step_gain():
    rng = np.random.default_rng(3)
    M = rng.standard_normal((2, 5, 4))
    est = LowRankSGD(5, 4, 2, step_gain=0.05)
    est.initialize(M)
    state = est.state_dict()
    assert state["step_scale"] == 0.0 and state["step_gain"] == 0.05
    copy = LowRankSGD.from_state_dict(state)
    assert copy.step_scale is None and copy.step_gain == 0.05
    old = LowRankSGD(5, 4, 2, step_scale=0.1)
    old.initialize(M)
    restored = LowRankSGD.from_state_dict(old.state_dict())
    assert restored.step_scale == 0.1 and restored.step_gain is None
    without = {k: v for k, v in old.state_dict().items() if k != "step_gain"}
    with pytest.raises(ValueError, match="step_gain"):
        LowRankSGD.from_state_dict(without)
    with pytest.raises(ValueError, match="step_scale"):
        est.load_state_dict(old.state_dict())  # absolute state into a scale-free estimator


def _drift(d, step_scales, seed=0, online=300):
    """‖M̂ − M‖_F (largest arm) after ``online`` ε-greedy rounds from a start at 0.05, for
    an agent of each of ``step_scales``, all fed the same contexts and noise."""
    rng = np.random.default_rng(seed)
    # the truth of _truth(rng, d, 3), kept in factors: Q_u Q_vᵀ with orthonormal Q_u, Q_v
    pairs = [
        (np.linalg.qr(rng.standard_normal((d, 3)))[0], np.linalg.qr(rng.standard_normal((d, 3)))[0])
        for _ in range(2)
    ]
    qu, qv = np.stack([u for u, _ in pairs]), np.stack([v for _, v in pairs])
    truth = qu @ qv.swapaxes(1, 2)
    # a start at distance 0.05 within the truth's row and column spaces (rank 3 as it is)
    E = qu @ rng.standard_normal((2, 3, 3)) @ qv.swapaxes(1, 2)
    start = truth + 0.05 * E / np.linalg.norm(E, axis=(1, 2), keepdims=True)
    agents = [
        EpsilonGreedy(d1=d, d2=d, n_actions=2, rank=3, M_init=start, step_scale=s, seed=seed)
        for s in step_scales
    ]
    for _ in range(online):
        X = rng.standard_normal((d, d))
        noise = 0.1 * rng.standard_normal()
        for agent in agents:
            decision = agent.act(X)
            agent.update(X, decision, float(np.sum(truth[decision.action] * X)) + noise)
    return [float(np.linalg.norm(a.estimates - truth, axis=(1, 2)).max()) for a in agents]


def test_default_step_does_not_drift_at_larger_sizes():
    # From a start at 0.05, the paper's absolute step (step_scale=0.1), whose gain is ten
    # times the paper's at d = 500, drifts far away; the scale-free default stays near or
    # below its start at every size.
    for d in (50, 200):
        assert _drift(d, (None,))[0] < 0.06, d
    default, paper = _drift(500, (None, 0.1))
    assert default < 0.06
    assert paper > 0.1  # the negative control: the paper's step drifts
