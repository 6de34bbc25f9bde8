"""Policy-value inference: the AIPW core against its formulas, its calibration on a stream
with a known truth, and the wrappers against a hand-fed core."""

import gymnasium as gym
import numpy as np
import pytest
from helpers import play

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy
from inference import (
    GREEDY,
    PolicyEvaluation,
    PolicyValueInference,
    ValueInference,
    VectorPolicyEvaluation,
)

K = 3


def _stream(rng, n, B, *, weight_bug=False):
    """An adaptive logging policy on a K-armed problem with linear rewards in a scalar
    context: the logging pmf depends on the running mean rewards (adaptive), the outcome
    model is a predictable running mean, and the targets are a fixed rule and a fixed pmf
    whose values are known in closed form."""
    theta = np.array([0.0, 1.0, -0.5])  # E[y | a, x] = theta_a * x + a/4, x ~ N(1, 1)
    core = PolicyValueInference(K, ["rule", "mix"], n_trials=B)
    sums, counts = np.zeros((B, K)), np.ones((B, K))
    for _ in range(n):
        x = rng.normal(1.0, 1.0, size=B)
        means = sums / counts
        greedy = means.argmax(axis=1)
        p = np.full((B, K), 0.4 / K)
        p[np.arange(B), greedy] += 0.6
        a = (rng.random(B)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
        mu = theta[None, :] * x[:, None] + np.arange(K) / 4
        y = mu[np.arange(B), a] + rng.normal(0, 0.5, size=B)
        pred = means + 0.0 * x[:, None]  # a predictable, misspecified outcome model
        rule = np.zeros((B, K))
        rule[np.arange(B), np.where(x > 0.5, 1, 2)] = 1.0
        mix = np.tile([0.25, 0.25, 0.5], (B, 1))
        props = p.copy()
        if weight_bug:  # the seeded bug: uniform propensities instead of the policy's
            props = np.full((B, K), 1.0 / K)
        core.update(pred, a, y, props, np.stack([rule, mix], axis=1))
        sums[np.arange(B), a] += y
        counts[np.arange(B), a] += 1
    return core


def _truth():
    from scipy.stats import norm

    # rule: arm 1 when x > 0.5 (value E[x; x>0.5] + P(x>0.5)/4), else arm 2
    # (E[-0.5 x; x<=0.5] + 2/4 P(x<=0.5)), x ~ N(1, 1).
    z = -0.5
    p_hi = 1 - norm.cdf(z)
    ex_hi = 1 * p_hi + norm.pdf(z)  # E[x 1{x > 0.5}]
    ex_lo = 1.0 - ex_hi
    rule = ex_hi + p_hi / 4 - 0.5 * ex_lo + 0.5 * (1 - p_hi)
    mix = 0.25 * (0.0) + 0.25 * (1.0 + 0.25) + 0.5 * (-0.5 + 0.5)
    return {"rule": rule, "mix": mix}


def test_terms_match_the_aipw_formula():
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(4, K))
    a = np.array([0, 2, 1, 1])
    y = rng.normal(size=4)
    p = rng.dirichlet(np.ones(K), size=4)
    targets = rng.dirichlet(np.ones(K), size=(4, 2))
    g = PolicyValueInference.terms(pred, a, y, p, targets)
    for b in range(4):
        for j in range(2):
            direct = targets[b, j] @ pred[b] + targets[b, j, a[b]] / p[b, a[b]] * (
                y[b] - pred[b, a[b]]
            )
            assert g[b, j] == pytest.approx(direct, rel=1e-12)


def test_running_sums_give_the_mean_and_empirical_variance():
    rng = np.random.default_rng(1)
    core = PolicyValueInference(K, ["p", "q"])
    terms = []
    for _ in range(50):
        pred, y = rng.normal(size=K), rng.normal()
        p = rng.dirichlet(np.ones(K))
        a = int(rng.choice(K, p=p))
        tg = rng.dirichlet(np.ones(K), size=2)
        core.update(pred, a, y, p, tg)
        terms.append(
            PolicyValueInference.terms(pred[None], np.array([a]), np.array([y]), p[None], tg[None])[
                0
            ]
        )
    g = np.array(terms)
    ci = core.interval("q")
    assert ci.estimate == pytest.approx(g[:, 1].mean(), rel=1e-12)
    assert ci.standard_error == pytest.approx(g[:, 1].std() / np.sqrt(50), rel=1e-10)
    d = core.difference("p", "q")
    diff = g[:, 0] - g[:, 1]
    assert d.estimate == pytest.approx(diff.mean(), rel=1e-12)
    assert d.standard_error == pytest.approx(diff.std() / np.sqrt(50), rel=1e-10)


def test_intervals_cover_on_an_adaptive_stream():
    """2000 trials of 1000 rounds of an adaptive three-armed stream: coverage within 3.5
    Monte Carlo s.e. of 0.95 and a z s.d. within 0.93-1.07 for a fixed rule and a fixed
    pmf.  Dropping the 1/π weight (uniform propensities) biases both; a standard error off
    by a factor of 1.2 moves the z s.d. outside the band."""
    rng = np.random.default_rng(2)
    core = _stream(rng, 1000, 2000)
    truth = _truth()
    for name in ("rule", "mix"):
        ci = core.interval(name)
        z = (ci.estimate - truth[name]) / ci.standard_error
        cover = np.mean(np.abs(z) < 1.959964)
        assert abs(cover - 0.95) < 3.5 * np.sqrt(0.95 * 0.05 / 2000), (name, cover)
        assert 0.93 < z.std() < 1.07, (name, z.std())
        assert abs(z.mean()) < 0.1, (name, z.mean())
        assert not 0.93 < (z * 1.2).std() < 1.07  # the band notices a wrong scale
    bad = _stream(np.random.default_rng(2), 1000, 2000, weight_bug=True)
    z_bad = (bad.interval("rule").estimate - truth["rule"]) / bad.interval("rule").standard_error
    assert abs(z_bad.mean()) > 0.5


def test_bad_input_changes_nothing():
    core = PolicyValueInference(2, ["p"])
    core.update([0.0, 1.0], 1, 1.0, [0.5, 0.5], [[0.0, 1.0]])
    before = core.state_dict()
    for kwargs, match in [
        ({"targets": [[0.5, 0.6]]}, "sum to 1"),
        ({"targets": [[np.nan, 1.0]]}, "finite"),
        ({"targets": [[0.5, 0.5], [0.5, 0.5]]}, "shape"),
        ({"propensities": [1.0, 0.0]}, "propensit"),
        ({"reward": np.nan}, "reward"),
    ]:
        args = {
            "predictions": [0.0, 1.0],
            "action": 1,
            "reward": 1.0,
            "propensities": [0.5, 0.5],
            "targets": [[0.0, 1.0]],
        }
        args.update(kwargs)
        with pytest.raises(ValueError, match=match):
            core.update(**args)
        after = core.state_dict()
        assert after["n"] == before["n"]
        np.testing.assert_array_equal(after["sum_gg"], before["sum_gg"])
    with pytest.raises(ValueError, match="policy must be one of"):
        core.interval("nope")
    with pytest.raises(ValueError, match="distinct"):
        PolicyValueInference(2, ["a", "a"])


def test_state_round_trip():
    rng = np.random.default_rng(3)
    core = PolicyValueInference(2, ["p", "q"], n_trials=3)
    for _ in range(10):
        core.update(
            rng.normal(size=(3, 2)),
            rng.integers(2, size=3),
            rng.normal(size=3),
            np.full((3, 2), 0.5),
            np.tile([[1.0, 0.0], [0.3, 0.7]], (3, 1, 1)),
        )
    other = PolicyValueInference(2, ["p", "q"], n_trials=3)
    other.load_state_dict(core.state_dict())
    np.testing.assert_array_equal(other.interval("q").estimate, core.interval("q").estimate)
    with pytest.raises(ValueError):
        PolicyValueInference(2, ["p", "r"], n_trials=3).load_state_dict(core.state_dict())


def test_wrapper_feeds_the_core_what_a_hand_fed_core_gets():
    """The wrapper's core equals a core fed by hand with the shared estimator's predictions
    before the update, the decision's propensities and the targets' pmfs."""
    base = gym.make("MatrixContextBandit-v0", d1=8, d2=6, rank=1, n_actions=3)
    agent = EpsilonGreedy(base, rank=1, epsilon=0.3, warm_start=150, seed=0)
    fixed = np.array([0.2, 0.3, 0.5])
    policies = {"greedy": GREEDY, "fixed": lambda obs: fixed, "arm 2": lambda obs: 2}
    env = PolicyEvaluation(base, policies, estimator=agent.estimator)
    hand = PolicyValueInference(3, list(policies))
    obs, _ = env.reset(seed=1)
    obs = play(env, agent, obs, 150)
    for _ in range(300):
        decision = agent.act(obs)
        pred = agent.estimator.predict(obs)
        greedy = np.eye(3)[int(np.argmax(pred))]
        tg = np.stack([greedy, fixed, np.eye(3)[2]])
        next_obs, reward, *_ = env.step(decision)
        hand.update(pred, decision.action, reward, decision.propensities, tg)
        agent.update(obs, decision, reward)
        obs = next_obs
    assert env.core.n_obs == hand.n_obs == 300
    for name in policies:
        assert env.interval(name).estimate == pytest.approx(hand.interval(name).estimate, rel=1e-12)
        assert env.interval(name).standard_error == pytest.approx(
            hand.interval(name).standard_error, rel=1e-12
        )


def test_wrapper_stacks_and_greedy_matches_the_value_estimate():
    base = gym.make("MatrixContextBandit-v0", d1=10, d2=10, rank=1)
    agent = EpsilonGreedy(base, rank=1, epsilon=0.2, warm_start=200, seed=0)
    pe = PolicyEvaluation(base, {"g": GREEDY, "anti": lambda obs: 0}, estimator=agent.estimator)
    env = ValueInference(pe, estimator=agent.estimator)
    obs, _ = env.reset(seed=0)
    play(env, agent, obs, 600)
    # The greedy target's AIPW average is the paper's V-hat on the same rounds.
    assert pe.interval("g").estimate == pytest.approx(env.core.interval().estimate, rel=1e-12)
    assert env.get_wrapper_attr("policy_evaluation") is pe
    frame = env.to_frame()
    assert {"V*", "V(g)", "V(anti)", "V(anti) - V(g)"} <= set(frame["quantity"])
    assert "V(anti) - V(g)" in pe.summary()


def test_wrapper_refuses_bad_targets_before_the_step():
    base = gym.make("MatrixContextBandit-v0", d1=6, d2=6, rank=1)
    agent = EpsilonGreedy(base, rank=1, epsilon=0.2, warm_start=60, seed=0)
    bad = {"t": lambda obs: np.array([0.7, 0.7])}
    env = PolicyEvaluation(base, bad, estimator=agent.estimator)
    obs, _ = env.reset(seed=0)
    obs = play(env, agent, obs, 60)
    seen = env.rounds_seen
    with pytest.raises(ValueError, match="target policy 't'"):
        env.step(agent.act(obs))
    assert env.core.n_obs == 0 and env.rounds_seen == seen
    with pytest.raises(ValueError, match="non-empty mapping"):
        PolicyEvaluation(base, {}, estimator=agent.estimator)
    with pytest.raises(ValueError, match="policies\\['x'\\]"):
        PolicyEvaluation(base, {"x": "best"}, estimator=agent.estimator)


def test_overlap_is_required():
    """A target that plays an arm the logging policy never plays is refused."""
    base = gym.make("MatrixContextBandit-v0", d1=6, d2=6, rank=1)
    env = PolicyEvaluation(
        base,
        {"arm 1": lambda obs: 1},
        rank=1,
        warm_start=50,
        propensity_fn=lambda obs: np.array([1.0, 0.0]),
    )
    env.reset(seed=0)
    for _ in range(50):
        env.step(0)
    with pytest.raises(ValueError, match="cannot be estimated from this data"):
        env.step(0)


def test_vector_wrapper_matches_single_shape():
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=4,
        vectorization_mode="vector_entry_point",
        d1=8,
        d2=8,
        rank=1,
    )
    agent = EpsilonGreedy(venv, rank=1, epsilon=0.2, warm_start=100, seed=0)
    env = VectorPolicyEvaluation(
        venv, {"g": GREEDY, "a0": lambda obs: np.zeros(4, int)}, estimator=agent.estimator
    )
    obs, _ = env.reset(seed=0)
    play(env, agent, obs, 300)
    ci = env.difference("a0", "g")
    assert ci.estimate.shape == (4,) and np.isfinite(ci.standard_error).all()
    seq = env.interval("g", kind="sequence")
    fixed = env.interval("g")
    assert (seq.high - seq.low > fixed.high - fixed.low).all()


def test_terms_too_large_for_the_sums_are_refused_before_any_change():
    core = PolicyValueInference(2, ["p"])
    core.update([0.0, 1.0], 1, 1.0, [0.5, 0.5], [[0.0, 1.0]])
    before = core.state_dict()
    with pytest.raises(ValueError, match="MAX_MAGNITUDE"):
        core.update([1e200, 1.0], 1, 1.0, [0.5, 0.5], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="too large for the running sums"):
        core.update([0.0, 1e150], 1, -1e150, [0.999999, 1e-6], [[0.0, 1.0]])
    after = core.state_dict()
    assert after["n"] == before["n"]
    np.testing.assert_array_equal(after["sum_gg"], before["sum_gg"])


def test_wrapper_state_round_trip_and_a_bad_state_changes_nothing():
    base = gym.make("MatrixContextBandit-v0", d1=6, d2=6, rank=1)
    agent = EpsilonGreedy(base, rank=1, epsilon=0.2, warm_start=60, seed=0)
    env = PolicyEvaluation(base, {"g": GREEDY, "a0": lambda obs: 0}, estimator=agent.estimator)
    obs, _ = env.reset(seed=0)
    play(env, agent, obs, 200)
    state = env.state_dict()
    ci = env.interval("a0")
    bad = {**state, "core.n": -1}
    with pytest.raises(ValueError):
        env.load_state_dict(bad)
    assert env.interval("a0") == ci
    env.load_state_dict(state)
    assert env.interval("a0") == ci
