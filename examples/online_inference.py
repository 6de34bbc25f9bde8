"""Confidence intervals that update online while an epsilon-greedy low-rank agent plays.

The paper's setting (d1 = d2 = 50, rank 3, two arms): the agent explores uniformly for its
warm start, then both inference wrappers share its estimator, as in the paper's procedure.

    python examples/online_inference.py            # 2000 warm-start + 2000 online rounds
    python examples/online_inference.py --small    # d = 20, rank 2: a few seconds
"""

import argparse

import gymnasium as gym
import numpy as np

import lrbandit_gym  # noqa: F401  (registers MatrixContextBandit-v0)
from agents import EpsilonGreedy, play
from inference import ParameterInference, ValueInference

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--small", action="store_true", help="a small problem that runs in seconds")
args = parser.parse_args()
d, rank, warm_start, online = (20, 2, 400, 600) if args.small else (50, 3, 2000, 2000)

env = gym.make("MatrixContextBandit-v0", d1=d, d2=d, rank=rank, max_episode_steps=None)
T1 = np.zeros((d, d))
T1[0, 0] = 1.0
agent = EpsilonGreedy(env, rank=rank, epsilon=0.1, warm_start=warm_start, seed=0)
params = ParameterInference(env, {"T1": T1}, estimator=agent.estimator)
env = ValueInference(params, estimator=agent.estimator)

play(env, agent, warm_start + online, seed=0)  # act, step, update, round after round

print(params.summary())
print(env.summary())
print("truth <M_a, T1>:", env.unwrapped.linear_form(T1), " V*:", env.unwrapped.optimal_value)
