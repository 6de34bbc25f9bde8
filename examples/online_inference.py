"""Confidence intervals that update online while an epsilon-greedy low-rank agent plays.

python examples/online_inference.py
"""

import gymnasium as gym
import numpy as np

import lrbandit_gym  # noqa: F401  (registers MatrixContextBandit-v0)
from agents import EpsilonGreedy
from inference import ParameterInference, ValueInference

env = gym.make("MatrixContextBandit-v0", max_episode_steps=None)
T1 = np.zeros((50, 50))
T1[0, 0] = 1.0
agent = EpsilonGreedy(env, rank=3, epsilon=0.1, seed=0)
env = ValueInference(ParameterInference(env, {"T1": T1}, estimator=agent.estimator))

obs, _ = env.reset(seed=0)
for _ in range(4000):  # 2000 warm-start rounds, then 2000 rounds of inference
    decision = agent.act(obs)
    next_obs, reward, *_ = env.step(decision)
    agent.update(obs, decision, reward)
    obs = next_obs

print(env.env.summary())
print(env.summary())
print("truth <M_a, T1>:", env.unwrapped.linear_form(T1), " V*:", env.unwrapped.optimal_value)
