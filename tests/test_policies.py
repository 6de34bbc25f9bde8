"""Policies: exact propensities, batching, warm start, save/resume, baselines, bad input."""

import pickle

import gymnasium as gym
import numpy as np
import pytest
from helpers import play
from scipy import stats

import lrbandit_gym  # noqa: F401
from agents import (
    Decision,
    EpsilonGreedy,
    ForcedExploration,
    LinearEpsilonGreedy,
    Oracle,
    Policy,
    Softmax,
    UniformRandom,
)


def small_env(**kwargs):
    return gym.make("MatrixContextBandit-v0", d1=6, d2=5, rank=2, **kwargs)


def small_vec(b, **kwargs):
    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=b,
        vectorization_mode="vector_entry_point",
        d1=6,
        d2=5,
        rank=2,
        **kwargs,
    )


def truth_init(env, scale=0.1, seed=0):
    """A fixed perturbation of the truth: a warm start without the warm-start phase."""
    rng = np.random.default_rng(seed)
    p = env.unwrapped.true_params
    return p + scale * rng.standard_normal(p.shape) / np.sqrt(p[0].size)


@pytest.mark.parametrize(
    "make",
    [
        lambda env: EpsilonGreedy(env, rank=2, epsilon=0.3, M_init=truth_init(env), seed=1),
        lambda env: Softmax(env, rank=2, temperature=0.5, M_init=truth_init(env), seed=1),
        lambda env: UniformRandom(env, seed=1),
        lambda env: LinearEpsilonGreedy(env, epsilon=0.3, seed=1),
    ],
)
def test_reported_propensities_match_empirical_frequencies(make):
    env = small_env(n_actions=3)
    policy = make(env)
    assert isinstance(policy, Policy)
    obs, _ = env.reset(seed=0)
    probs = policy.action_probs(obs)
    assert probs.shape == (3,) and probs.sum() == pytest.approx(1.0)
    n = 20000
    counts = np.bincount([policy.act(obs).action for _ in range(n)], minlength=3)
    expected = probs * n
    keep = expected > 0
    assert counts[~keep].sum() == 0
    assert stats.chisquare(counts[keep], expected[keep]).pvalue > 1e-3
    decision = policy.act(obs)
    np.testing.assert_allclose(decision.propensities, probs)
    assert decision.propensities[decision.action] > 0


def test_epsilon_greedy_pmf_and_ties():
    env = small_env(n_actions=3)
    with pytest.warns(RuntimeWarning, match="singular values"):
        policy = EpsilonGreedy(env, rank=2, epsilon=0.3, M_init=np.zeros((3, 6, 5)), seed=0)
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(policy.action_probs(obs), [1 / 3] * 3)  # all tied
    policy = EpsilonGreedy(env, rank=2, epsilon=0.3, M_init=truth_init(env), seed=0)
    p = policy.action_probs(obs)
    greedy = np.argmax(policy.estimator.predict(obs))
    assert p[greedy] == pytest.approx(1 - 0.3 + 0.1)
    assert np.delete(p, greedy) == pytest.approx([0.1, 0.1])
    decaying = EpsilonGreedy(env, rank=2, epsilon=0.05, decay=0.1, M_init=truth_init(env))
    assert decaying.epsilon_at(1) == pytest.approx(0.05)
    assert decaying.epsilon_at(1000) == pytest.approx(0.05 * 1000**-0.1)


def test_softmax_pmf_is_the_boltzmann_distribution():
    env = small_env()
    policy = Softmax(env, rank=2, temperature=0.7, M_init=truth_init(env))
    obs, _ = env.reset(seed=3)
    preds = policy.estimator.predict(obs)
    w = np.exp(preds / 0.7)
    np.testing.assert_allclose(policy.action_probs(obs), w / w.sum(), rtol=1e-12)


def test_epsilon_greedy_exploration_flag_has_rate_epsilon():
    env = small_env()
    policy = EpsilonGreedy(env, rank=2, epsilon=0.2, M_init=truth_init(env), seed=4)
    obs, _ = env.reset(seed=0)
    flags = []
    for _ in range(5000):
        policy.act(obs)
        flags.append(policy.last_explored)
    assert np.mean(flags) == pytest.approx(0.2, abs=0.02)


def test_oracle_has_zero_regret_and_uniform_has_positive():
    env = small_env(n_actions=3)
    for policy, zero in [(Oracle(env), True), (UniformRandom(env, seed=0), False)]:
        obs, _ = env.reset(seed=0)
        regret = 0.0
        for _ in range(200):
            d = policy.act(obs)
            obs, r, _, _, info = env.step(d)
            regret += info["regret"]
        assert (regret == 0.0) is zero


def test_batched_policy_matches_the_vector_env_and_draws_from_its_pmf():
    venv = small_vec(4000)
    policy = EpsilonGreedy(venv, rank=2, epsilon=0.2, M_init=truth_init(venv), seed=0)
    assert policy.n_trials == 4000
    obs, _ = venv.reset(seed=0)
    d = policy.act(obs)
    assert d.action.shape == (4000,) and d.propensities.shape == (4000, 2)
    chosen = d.propensities[np.arange(4000), d.action]
    assert np.all(chosen > 0)
    # the pulled arm is the greedy one with probability 1 - ε + ε/2 = 0.9
    greedy = np.argmax(policy.estimator.predict(obs), axis=1)
    assert np.mean(d.action == greedy) == pytest.approx(0.9, abs=0.015)
    venv.step(d)
    policy.update(obs, d, np.zeros(4000))


def test_single_and_batched_estimators_agree_on_the_same_data():
    env = small_env()
    init = truth_init(env)
    single = [EpsilonGreedy(env, rank=2, M_init=init, seed=s) for s in range(3)]
    batched = EpsilonGreedy(d1=6, d2=5, rank=2, M_init=init, n_trials=3, seed=9)
    rng = np.random.default_rng(0)
    for _ in range(50):
        x = rng.standard_normal((3, 6, 5))
        a = rng.integers(0, 2, 3)
        p = np.where(np.arange(2) == a[:, None], 0.7, 0.3)
        y = rng.standard_normal(3)
        batched.update(x, Decision(a, p), y)
        for b, pol in enumerate(single):
            pol.update(x[b], Decision(int(a[b]), p[b]), float(y[b]))
    for b, pol in enumerate(single):
        np.testing.assert_allclose(batched.estimates[b], pol.estimates, rtol=1e-12, atol=1e-14)


def test_warm_start_phase_explores_uniformly_then_initialises():
    env = small_env()
    policy = EpsilonGreedy(env, rank=2, warm_start=80, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(80):
        assert policy.in_warm_start
        np.testing.assert_allclose(policy.action_probs(obs), [0.5, 0.5])
        d = policy.act(obs)
        nxt, r, *_ = env.step(d)
        policy.update(obs, d, r)
        obs = nxt
    assert not policy.in_warm_start
    assert policy.estimator.initialized and policy.online_rounds == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda env: EpsilonGreedy(env, rank=2, warm_start=80, seed=5),
        lambda env: Softmax(env, rank=2, warm_start=80, seed=5),
        lambda env: ForcedExploration(EpsilonGreedy(env, rank=2, warm_start=80, seed=5), p0=0.2),
        lambda env: LinearEpsilonGreedy(env, seed=5),
    ],
)
@pytest.mark.parametrize("split", [40, 120])  # inside and after the warm start
def test_save_and_resume_continue_bit_identically(make, split):
    env_a, env_b = small_env(), small_env()
    a, b = make(env_a), make(env_b)
    obs_a, _ = env_a.reset(seed=1)
    obs_b, _ = env_b.reset(seed=1)
    obs_a = play(env_a, a, obs_a, split)
    obs_b = play(env_b, b, obs_b, split)
    state = pickle.loads(pickle.dumps(b.state_dict()))
    env_c = pickle.loads(pickle.dumps(env_b))  # the environment resumes too
    c = make(env_c)
    c.load_state_dict(state)
    play(env_a, a, obs_a, 40)
    play(env_c, c, obs_b, 40)
    np.testing.assert_array_equal(a.estimates, c.estimates)


def test_forced_exploration_takes_arms_behind_schedule():
    env = small_env(n_actions=3)
    policy = ForcedExploration(
        EpsilonGreedy(env, rank=2, epsilon=0.01, M_init=truth_init(env), seed=0), p0=0.3, beta=0.0
    )
    obs, _ = env.reset(seed=0)
    for t in range(300):
        d = policy.act(obs)
        assert d.propensities[d.action] > 0
        if d.propensities.max() == 1.0:
            assert policy.pulls[0, d.action] < 0.3 * (t + 1)
        nxt, r, *_ = env.step(d)
        policy.update(obs, d, r)
        obs = nxt
    assert np.all(policy.pulls >= 0.3 * 300 - 1)


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.soak  # a claim about the paper's setting; the full-rank peer costs O((d1 d2)^2)
def test_paper_setting_low_rank_beats_full_rank_linear_peer_on_regret():
    """n = 3000 rounds from scratch each; the warm start's uniform rounds count against the
    low-rank agent.  A 1000-round warm start (error ~0.14) is the regret-minded choice: the
    paper's 2000 rounds buy estimation accuracy for inference at the price of ~1000 more
    rounds of uniform play (measured: 2034 vs the linear peer's 1645 at n = 3000, while
    1000 rounds give 1178)."""
    regrets = {}
    for name in ("low_rank", "linear"):
        env = gym.make("MatrixContextBandit-v0", max_episode_steps=None)
        policy = (
            EpsilonGreedy(env, epsilon=0.1, warm_start=1000, seed=0)
            if name == "low_rank"
            else LinearEpsilonGreedy(env, epsilon=0.1, seed=0)
        )
        obs, _ = env.reset(seed=0)
        total = 0.0
        for _ in range(3000):
            d = policy.act(obs)
            nxt, r, _, _, info = env.step(d)
            policy.update(obs, d, r)
            total += info["regret"]
            obs = nxt
        regrets[name] = total
    assert regrets["low_rank"] < regrets["linear"], regrets


BAD_UPDATES = [
    ("propensities", lambda d, o, r: (o, Decision(d.action, np.array([0.5, 0.6])), r)),
    ("propensities", lambda d, o, r: (o, Decision(d.action, np.array([1.5, -0.5])), r)),
    ("propensities", lambda d, o, r: (o, Decision(d.action, np.array([np.nan, 1.0])), r)),
    ("propensities", lambda d, o, r: (o, Decision(0, np.array([0.0, 1.0])), r)),
    ("reward", lambda d, o, r: (o, d, float("nan"))),
    ("reward", lambda d, o, r: (o, d, float("inf"))),
    ("X", lambda d, o, r: (o[:3], d, r)),
    ("X", lambda d, o, r: (np.full_like(o, np.nan), d, r)),
    ("action", lambda d, o, r: (o, Decision(2, np.array([0.5, 0.5])), r)),
    ("action", lambda d, o, r: (o, Decision(-1, np.array([0.5, 0.5])), r)),
]


@pytest.mark.parametrize("name,corrupt", BAD_UPDATES)
def test_bad_updates_raise_and_leave_the_policy_unchanged(name, corrupt):
    env = small_env()
    policy = EpsilonGreedy(env, rank=2, M_init=truth_init(env), seed=0)
    obs, _ = env.reset(seed=0)
    obs = play(env, policy, obs, 10)
    before = pickle.dumps(policy.state_dict())
    d = policy.act(obs)
    after_act = pickle.dumps(policy.state_dict())
    _, r, *_ = env.step(d)
    o, dd, rr = corrupt(d, obs, r)
    with pytest.raises(ValueError, match=name):
        policy.update(o, dd, rr)
    assert pickle.dumps(policy.state_dict()) == after_act
    assert before != after_act  # act() advanced the generator, as it should


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"rank": 0}, "rank"),
        ({"rank": 6}, "rank"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1.5}, "epsilon"),
        ({"warm_start": 0}, "warm_start"),
        ({"decay": -1.0}, "decay"),
    ],
)
def test_bad_constructor_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        EpsilonGreedy(small_env(), **kwargs)


def test_explicit_sizes_without_env_and_disagreement_with_env():
    policy = EpsilonGreedy(
        d1=6, d2=5, n_actions=3, rank=2, M_init=np.random.default_rng(0).standard_normal((3, 6, 5))
    )
    assert policy.n_actions == 3 and policy.n_trials is None
    with pytest.raises(ValueError, match="d1"):
        EpsilonGreedy(small_env(), d1=7)
    with pytest.raises(ValueError, match="propensities"):
        policy.update(np.zeros((6, 5)), 1, 0.0)  # a bare action carries no propensities


def test_linear_peer_equals_the_batch_ridge_solution():
    policy = LinearEpsilonGreedy(d1=6, d2=5, ridge=1.0, seed=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 6, 5))
    a = rng.integers(0, 2, 200)
    y = rng.standard_normal(200)
    for t in range(200):
        policy.update(x[t], Decision(int(a[t]), np.array([0.5, 0.5])), y[t])
    for k in range(2):
        f = x[a == k].reshape(-1, 30)
        ridge = np.linalg.solve(np.eye(30) + f.T @ f, f.T @ y[a == k])
        np.testing.assert_allclose(policy.estimates[k].ravel(), ridge, atol=1e-12)


@pytest.mark.slow
def test_paper_setting_estimation_error_after_3000_rounds():
    """d = 50, r = 3, σ = 0.1, ε = 0.1, default warm start: median over 20 seeded trials of
    ‖M̂_a − M_a‖_F after 3000 online rounds is at most 0.1 for both arms."""
    n_trials = 20
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=n_trials,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
    )
    policy = EpsilonGreedy(venv, rank=3, epsilon=0.1, seed=2024)
    obs, _ = venv.reset(seed=2024)
    while policy.in_warm_start or policy.online_rounds < 3000:
        d = policy.act(obs)
        nxt, r, *_ = venv.step(d)
        policy.update(obs, d, r)
        obs = nxt
    err = np.linalg.norm(policy.estimates - venv.unwrapped.true_params, axis=(2, 3))
    assert np.all(np.isfinite(err))
    assert np.all(np.median(err, axis=0) <= 0.1), np.median(err, axis=0)
