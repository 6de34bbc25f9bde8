"""The default warm start extends when its error is large against the signal
(agents.warm_start.extension): it triggers at low signal and not at high, an explicit length
is kept, a batch decides together, memory bounds it, and a saved state restores mid-extension."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401  (registers the environment)
from agents import EpsilonGreedy
from agents.warm_start import WarmStart, default_warm_start_rounds, warm_start_buffer_bytes
from agents.warm_start.check import WarmStartCheck, check_warm_start
from agents.warm_start.extension import (
    MAX_EXTENSION,
    MAX_NOISE_TO_SIGNAL,
    extends,
    noise_to_signal,
)

DEFAULT = default_warm_start_rounds(6, 5, 1, 2)  # 100 rounds


def vector_env(noise_std, n_trials=8):
    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=n_trials,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
        d1=6,
        d2=5,
        rank=1,
        noise_std=noise_std,
    )


def play(env, agent, obs, n=None):
    """Play ``n`` rounds, or to the end of the warm start."""
    played = 0
    while agent.in_warm_start if n is None else played < n:
        d = agent.act(obs)
        nxt, r, *_ = env.step(d)
        agent.update(obs, d, r)
        obs = nxt
        played += 1
    return obs


def warm_started(noise_std, seed=0, **kwargs):
    env = vector_env(noise_std)
    agent = EpsilonGreedy(env, rank=1, seed=seed, **kwargs)
    obs, _ = env.reset(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        obs = play(env, agent, obs)
    return env, agent, obs


def test_extends_at_low_signal_and_not_at_high():
    _, quiet, _ = warm_started(0.1)
    assert quiet.warm_start_rounds == DEFAULT
    assert np.median(quiet._warm_start.noise_to_signal) < MAX_NOISE_TO_SIGNAL / 2
    _, noisy, _ = warm_started(1.0)
    assert noisy.warm_start_rounds > DEFAULT
    assert noisy.warm_start_rounds <= MAX_EXTENSION * DEFAULT
    assert noisy.online_rounds == 0 and not noisy.in_warm_start
    # the length is the default times a power of 2
    assert noisy.warm_start_rounds in [DEFAULT * 2**k for k in range(1, 4)]


def test_an_explicit_warm_start_is_kept_exactly():
    _, agent, _ = warm_started(1.0, warm_start=DEFAULT)
    assert agent.warm_start_rounds == DEFAULT
    assert agent._warm_start.max_rounds == DEFAULT
    assert agent._warm_start.noise_to_signal is None  # not even measured


def test_the_inference_wrappers_own_warm_start_does_not_extend():
    ws = WarmStart(6, 5, 2, 1, n_trials=4, method="buffer")
    assert ws.max_rounds == ws.rounds == DEFAULT
    assert WarmStart(6, 5, 2, 1, n_trials=4, extend=True).max_rounds == MAX_EXTENSION * DEFAULT
    one_arm = WarmStart(6, 5, 1, 1, extend=True)  # one arm: no pair to compare
    assert one_arm.max_rounds == one_arm.rounds


def test_memory_bounds_the_extension():
    limit = warm_start_buffer_bytes(6, 5, 4 * DEFAULT, 8)
    ws = WarmStart(6, 5, 2, 1, n_trials=8, max_memory_bytes=limit, extend=True)
    assert ws.max_rounds == 4 * DEFAULT
    assert ws.allows(2 * DEFAULT) and ws.allows(4 * DEFAULT)
    assert not ws.allows(8 * DEFAULT) and not ws.allows(3 * DEFAULT)


def test_a_batch_extends_while_half_of_its_trials_need_it():
    above, below = 2 * MAX_NOISE_TO_SIGNAL, MAX_NOISE_TO_SIGNAL / 2
    assert extends([above])
    assert not extends([below])
    assert extends([above, below])
    assert not extends([above, below, below])
    assert not extends([np.nan])  # a single arm: nothing to compare


def test_noise_to_signal_compares_the_error_with_the_gap_between_arms():
    rng = np.random.default_rng(0)
    u, v = rng.standard_normal(6), rng.standard_normal(5)
    truth = np.stack([np.outer(u, v), -np.outer(u, v)]) / 5
    X = rng.standard_normal((400, 6, 5))
    a = rng.integers(0, 2, 400)
    mean = np.einsum("nij,nij->n", truth[a], X)
    ratios = []
    for sigma in (0.05, 1.0):
        y = mean + sigma * rng.standard_normal(400)
        check = check_warm_start(X, a, y, 2, rank=1)
        ratios.append(noise_to_signal(truth[None], check, X[None], np.ones((1, 400)))[0])
    assert ratios[0] < MAX_NOISE_TO_SIGNAL / 10 < MAX_NOISE_TO_SIGNAL < ratios[1]


def test_with_more_arms_only_the_comparisons_that_decide_count():
    """Arms 1 and 2 coincide, but arm 0 is always far above them: the greedy rule never
    compares them with each other, so their coincidence asks for no more rounds."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((1, 200, 3, 2))
    X[..., 0, 0] = 1.0  # an intercept
    M = np.zeros((1, 3, 3, 2))
    M[0, 0, 0, 0] = 10.0
    M[0, 1, 1, 1] = M[0, 2, 1, 1] = 0.5
    excess = np.full((1, 3), 0.01)
    check = WarmStartCheck(
        ratio=excess,
        ratio_se=excess,
        sigma2=np.ones((1, 3)),
        heldout_mse=1.0 + excess,
        flagged=np.zeros((1, 3), dtype=bool),
        rounds=200,
        recommended=400,
    )
    ratio = noise_to_signal(M, check, X, np.ones((1, 200)))[0]
    assert ratio < MAX_NOISE_TO_SIGNAL / 50
    M[0, 0, 0, 0] = -10.0  # now arms 1 and 2 are compared, and nothing tells them apart
    assert noise_to_signal(M, check, X, np.ones((1, 200)))[0] == np.inf


def _lockstep(env, a, b, obs, n):
    for _ in range(n):
        da, db = a.act(obs), b.act(obs)
        np.testing.assert_array_equal(da.action, db.action)
        nxt, r, *_ = env.step(da)
        a.update(obs, da, r)
        b.update(obs, db, r)
        obs = nxt
    return obs


def test_state_round_trips_mid_extension_and_after_it():
    env = vector_env(1.0)
    agent = EpsilonGreedy(env, rank=1, seed=0)
    obs, _ = env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        obs = play(env, agent, obs, DEFAULT + 10)  # extended, 10 rounds into the extension
        assert agent.in_warm_start and agent.warm_start_rounds == 2 * DEFAULT
        state = pickle.loads(pickle.dumps(agent.state_dict()))
        assert state["warm_start_rounds"] == 2 * DEFAULT
        assert state["buffer.length"] == 2 * DEFAULT
        twin = EpsilonGreedy(env, rank=1, seed=123)
        assert twin.warm_start_rounds == DEFAULT
        twin.load_state_dict(state)
        assert twin.warm_start_rounds == 2 * DEFAULT
        obs = _lockstep(env, agent, twin, obs, 8 * DEFAULT)
    assert not agent.in_warm_start
    assert twin.warm_start_rounds == agent.warm_start_rounds > DEFAULT
    np.testing.assert_array_equal(twin.estimates, agent.estimates)
    # after the warm start the final length is in the state
    after = agent.state_dict()
    assert after["warm_start_rounds"] == agent.warm_start_rounds
    fresh = EpsilonGreedy(env, rank=1, seed=5)
    fresh.load_state_dict(after)
    assert fresh.warm_start_rounds == agent.warm_start_rounds and not fresh.in_warm_start
    _lockstep(env, agent, fresh, obs, 5)
    np.testing.assert_array_equal(fresh.estimates, agent.estimates)


def test_a_length_the_phase_cannot_have_is_refused():
    env = vector_env(1.0)
    agent = EpsilonGreedy(env, rank=1, seed=0)
    state = agent.state_dict()
    state["warm_start_rounds"] = 3 * DEFAULT
    with pytest.raises(ValueError, match="warm_start_rounds"):
        agent.load_state_dict(state)
    explicit = EpsilonGreedy(env, rank=1, seed=0, warm_start=DEFAULT)
    state["warm_start_rounds"] = 2 * DEFAULT
    with pytest.raises(ValueError, match="warm_start_rounds"):
        explicit.load_state_dict(state)
