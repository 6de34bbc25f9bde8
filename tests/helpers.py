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
