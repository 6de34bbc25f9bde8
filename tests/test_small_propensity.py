"""Weights outside the theory are said, not silently absorbed: a chosen arm's propensity
below SMALL_PROPENSITY raises SmallPropensityWarning, once per wrapper."""

import warnings

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy
from inference import ParameterInference, SmallPropensityWarning, build_stack


def _env():
    return gym.make("MatrixContextBandit-v0", d1=6, d2=6, rank=1)


def test_a_tiny_propensity_warns_once_naming_it():
    pmf = np.array([0.9995, 0.0005])
    env = ParameterInference(
        _env(), {"T": np.eye(6)}, rank=1, warm_start=50, propensity_fn=lambda obs: pmf
    )
    env.reset(seed=0)
    with pytest.warns(SmallPropensityWarning, match="propensity 0.0005") as record:
        for _ in range(20):
            env.step(0)
        env.step(1)  # the tiny one is chosen
        env.step(1)
    ours = [w for w in record if issubclass(w.category, SmallPropensityWarning)]
    assert len(ours) == 1
    assert ours[0].filename == __file__  # points at the caller's step()


def test_epsilon_greedy_does_not_warn():
    base = _env()
    agent = EpsilonGreedy(base, rank=1, epsilon=0.1, warm_start=60, seed=0)
    env = build_stack(base, {"T": np.eye(6)}, estimator=agent.estimator)
    obs, _ = env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallPropensityWarning)
        for _ in range(200):
            decision = agent.act(obs)
            nxt, reward, *_ = env.step(decision)
            agent.update(obs, decision, reward)
            obs = nxt
