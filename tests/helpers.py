"""Helpers that several test modules share."""

import gymnasium as gym
import numpy as np


def states_equal(a: dict, b: dict) -> bool:
    """Whether two ``state_dict``s hold the same keys, dtypes and values."""
    if a.keys() != b.keys():
        return False
    for key in a:
        if isinstance(a[key], np.ndarray):
            if not (a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key])):
                return False
        elif a[key] != b[key]:
            return False
    return True


def small_env(**kwargs):
    """A small single bandit (6 x 5, rank 2) without a time limit."""
    kw = dict(d1=6, d2=5, rank=2)
    kw.update(kwargs)
    return gym.make("MatrixContextBandit-v0", max_episode_steps=None, **kw)


def play(env, agent, obs, n):
    """``n`` rounds of ``agent`` on ``env`` from ``obs``; returns the next observation."""
    for _ in range(n):
        d = agent.act(obs)
        nxt, r, *_ = env.step(d)
        agent.update(obs, d, r)
        obs = nxt
    return obs


def rank_r(rng, d1, d2, r, scale=1.0):
    """A random ``d1 x d2`` matrix of rank ``r`` with singular values ``scale``."""
    return (
        scale
        * np.linalg.qr(rng.standard_normal((d1, r)))[0]
        @ np.linalg.qr(rng.standard_normal((d2, r)))[0].T
    )


class EditStep(gym.Wrapper):
    """Applies ``edit(obs, reward, terminated, truncated, info)`` to the result of step
    number ``at`` (1-based) of ``env``: a reward a wrapper must refuse, an ``info`` that is
    not the bandit's."""

    def __init__(self, env, at, edit):
        super().__init__(env)
        self.at, self.t, self.edit = at, 0, edit

    def step(self, action):
        out = self.env.step(action)
        self.t += 1
        return self.edit(*out) if self.t == self.at else out


def nan_reward(obs, reward, terminated, truncated, info):
    """An :class:`EditStep` edit: the step's reward becomes NaN."""
    return obs, float("nan"), terminated, truncated, info


def small_comparison(jobs=1, backend="local", names=("eps", "alone", "uniform")):
    """A seeded comparison of a few agents on a 6 x 5 bandit (5 trials of 80 rounds), on
    ``jobs`` workers of ``backend``; ``names`` picks the agents ("ppo" where
    stable-baselines3 is installed)."""
    from lrbandit_gym.experiments.compare.run import (
        OurAgent,
        compare,
        per_trial,
        sb3,
        sb3_available,
    )

    agents = {
        "eps": OurAgent("EpsilonGreedy", {"rank": 2, "warm_start": 30}),
        "alone": per_trial(OurAgent("UniformRandom")),
        "uniform": OurAgent("UniformRandom"),
    }
    if sb3_available() and "ppo" in names:
        agents["ppo"] = sb3("PPO", trials=1, gamma=0.0, n_steps=40, batch_size=20, n_epochs=2)
    agents = {k: v for k, v in agents.items() if k in names}
    return compare(
        {"d1": 6, "d2": 5, "rank": 2},
        agents,
        trials=5,
        rounds=80,
        seed=3,
        warm_start=30,
        batch_size=2,
        jobs=jobs,
        backend=backend,
        progress=False,
    )


def assert_same_comparison(a, b):
    """Two comparisons give the same agents and the same numbers (timings apart)."""
    assert a.agents == b.agents
    for name in a.agents:
        for key, value in a.data[name].items():
            if key in ("seconds", "agent_seconds"):
                continue
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, b.data[name][key], err_msg=f"{name}/{key}")
            else:
                assert value == b.data[name][key]
