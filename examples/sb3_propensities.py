"""Inference while a stable-baselines3 agent plays (needs the ``sb3`` extra).

stable-baselines3 passes bare actions to ``env.step``, so the wrapper gets the propensities
from ``propensity_fn``: :class:`agents.SB3Agent` reads them from A2C's categorical action
distribution, exactly the pmf each action is drawn from, while ``model.learn()`` drives the
loop.  The wrapper runs its own low-rank estimator, warm-started on the first ``warm_start``
rounds it sees (weighted by 1/propensity).

    python examples/sb3_propensities.py            # 3000 steps of A2C
    python examples/sb3_propensities.py --small    # 1000 steps
"""

import argparse

import gymnasium as gym
import numpy as np
from stable_baselines3 import A2C

import lrbandit_gym  # noqa: F401
from agents import SB3Agent
from inference import ParameterInference

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--small", action="store_true", help="fewer steps: runs in seconds")
args = parser.parse_args()
steps, warm_start = (1000, 300) if args.small else (3000, 400)

d = 10
env = gym.make(
    "MatrixContextBandit-v0",
    d1=d,
    d2=d,
    rank=2,
    flatten=True,
    dtype=np.float32,
    max_episode_steps=200,
)
T = np.eye(d)
model = A2C("MlpPolicy", env, seed=0, verbose=0)
agent = SB3Agent(model)  # the exact pmf of every action A2C plays
watched = ParameterInference(
    env, {"trace": T}, rank=2, warm_start=warm_start, propensity_fn=agent.action_probs
)
model.set_env(watched)  # A2C now plays through the wrapper
model.learn(total_timesteps=steps)
print(watched.summary())
print("truth <M_a, I>:", watched.unwrapped.linear_form(T))
