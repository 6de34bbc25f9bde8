"""agents.play: the act -> step -> update loop, equal to the loop written by hand."""

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy, play
from inference import ParameterInference

D = 5
WARM = 100


def _single(**kw):
    return gym.make("MatrixContextBandit-v0", d1=D, d2=D, rank=1, **kw)


def _vector():
    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=3,
        vectorization_mode="vector_entry_point",
        d1=D,
        d2=D,
        rank=1,
    )


def _hand_loop(env, agent, rounds, seed, learn=True):
    obs, _ = env.reset(seed=seed)
    for _ in range(rounds):
        decision = agent.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(decision)
        if learn:
            agent.update(obs, decision, reward)
        if np.ndim(terminated) == 0 and (terminated or truncated):
            next_obs, _ = env.reset()
        obs = next_obs
    return obs


def _setup(make, wrapped):
    env = make()
    agent = EpsilonGreedy(env, rank=1, epsilon=0.2, warm_start=WARM, seed=3)
    if wrapped:
        env = ParameterInference(env, {"T": np.eye(D)}, estimator=agent.estimator)
    return env, agent


@pytest.mark.parametrize("make, wrapped", [(_single, False), (_single, True), (_vector, False)])
def test_play_equals_the_hand_loop_bit_for_bit(make, wrapped):
    env_a, agent_a = _setup(make, wrapped)
    env_b, agent_b = _setup(make, wrapped)
    obs_a = play(env_a, agent_a, WARM + 60, seed=7)
    obs_b = _hand_loop(env_b, agent_b, WARM + 60, seed=7)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(agent_a.estimates, agent_b.estimates)
    assert agent_a.estimator.initialized  # the online rounds ran, not only the warm start
    if wrapped:
        assert env_a.interval(0, "T") == env_b.interval(0, "T")


def test_play_continues_from_the_observation_it_returns():
    env_a, agent_a = _setup(_single, False)
    env_b, agent_b = _setup(_single, False)
    obs = play(env_a, agent_a, 30, seed=1)
    obs = play(env_a, agent_a, 0, obs=obs)
    obs_a = play(env_a, agent_a, WARM + 20, obs=obs)
    obs_b = play(env_b, agent_b, WARM + 50, seed=1)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(agent_a.estimates, agent_b.estimates)


def test_learn_false_only_acts():
    env_a, agent_a = _setup(_single, False)
    env_b, agent_b = _setup(_single, False)
    play(env_a, agent_a, WARM + 10, seed=2)  # past the warm start: an estimate exists
    play(env_b, agent_b, WARM + 10, seed=2)
    before = np.array(agent_a.estimates)
    obs_a = play(env_a, agent_a, 25, obs=env_a.reset(seed=5)[0], learn=False)
    obs_b = _hand_loop(env_b, agent_b, 25, seed=5, learn=False)
    np.testing.assert_array_equal(agent_a.estimates, before)
    np.testing.assert_array_equal(obs_a, obs_b)


class _CountResets(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.resets = 0
        self.steps_since_reset = []

    def reset(self, **kwargs):
        self.resets += 1
        self.steps_since_reset.append(0)
        return self.env.reset(**kwargs)

    def step(self, action):
        self.steps_since_reset[-1] += 1
        return self.env.step(action)


def test_an_ended_episode_is_reset_before_the_next_round():
    env = _CountResets(_single(max_episode_steps=7))
    agent = EpsilonGreedy(env, rank=1, warm_start=WARM, seed=0)
    play(env, agent, 20, seed=0)
    # the first reset, then one after rounds 7 and 14
    assert env.resets == 3
    assert env.steps_since_reset == [7, 7, 6]


@pytest.mark.parametrize("rounds", [-1, 2.0, "3", None, True, np.float64(4.0)])
def test_bad_rounds_are_refused_before_anything_runs(rounds):
    env = _CountResets(_single())
    agent = EpsilonGreedy(env, rank=1, warm_start=WARM, seed=0)
    with pytest.raises(ValueError, match="rounds must be a non-negative integer"):
        play(env, agent, rounds)
    assert env.resets == 0


def test_rounds_may_be_a_numpy_integer():
    env = _CountResets(_single())
    agent = EpsilonGreedy(env, rank=1, warm_start=WARM, seed=0)
    play(env, agent, np.int64(5), seed=0)
    assert env.steps_since_reset == [5]


def test_obs_and_seed_together_are_refused():
    env, agent = _setup(_single, False)
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="obs or seed"):
        play(env, agent, 1, obs=obs, seed=0)
