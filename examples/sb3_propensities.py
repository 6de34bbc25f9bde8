"""Inference while a stable-baselines3 agent plays (needs the ``sb3`` extra).

stable-baselines3 passes bare actions to ``env.step``, so the wrapper gets the propensities
from ``propensity_fn``: here the policy's categorical action distribution, which is exactly
the pmf the sampled action was drawn from.  The wrapper runs its own low-rank estimator,
warm-started on the first ``warm_start`` rounds it sees (weighted by 1/propensity).

    python examples/sb3_propensities.py            # 3000 steps of A2C
    python examples/sb3_propensities.py --small    # 1000 steps
"""

import argparse

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import A2C

import lrbandit_gym  # noqa: F401
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
holder = {}


def propensity_fn(obs):
    with torch.no_grad():
        obs_t, _ = holder["model"].policy.obs_to_tensor(np.asarray(obs, dtype=np.float32))
        probs = holder["model"].policy.get_distribution(obs_t).distribution.probs
    p = probs.numpy()[0].astype(float)
    return p / p.sum()


watched = ParameterInference(
    env, {"trace": T}, rank=2, warm_start=warm_start, propensity_fn=propensity_fn
)
model = A2C("MlpPolicy", watched, seed=0, verbose=0)
holder["model"] = model
model.learn(total_timesteps=steps)
print(watched.summary())
print("truth <M_a, I>:", watched.unwrapped.linear_form(T))
