"""PPO with ``gamma=0`` on the flattened env, with inference on its own trajectory.

``gym.make(..., flatten=True)`` gives the flat observations stable-baselines3's MLP policies
take; ``gamma=0`` makes PPO a contextual-bandit learner (each round's reward is its return).
:class:`agents.SB3Agent` reads the exact probability of every action PPO plays from its
categorical policy, so the inference wrappers take ``agent.action_probs`` as their
``propensity_fn`` while ``model.learn()`` drives the loop (the wrappers run their own
low-rank estimator, warm-started on the first ``warm_start`` rounds).

    python examples/sb3_ppo.py            # 4000 rounds at d = 20
    python examples/sb3_ppo.py --small    # 1000 rounds at d = 8
"""

import argparse

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO

import lrbandit_gym  # noqa: F401
from agents import SB3Agent
from inference import ParameterInference, ValueInference

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--small", action="store_true", help="fewer rounds: runs in seconds")
args = parser.parse_args()
d, rounds, warm_start = (8, 1000, 300) if args.small else (20, 4000, 400)

env = gym.make("MatrixContextBandit-v0", d1=d, d2=d, rank=2, flatten=True, max_episode_steps=None)
model = PPO("MlpPolicy", env, gamma=0.0, n_steps=100, batch_size=50, n_epochs=4, seed=0)
agent = SB3Agent(model)  # exact propensities of the actions PPO plays

T = np.zeros((d, d))
T[0, 0] = 1.0  # <M_a, T> is the entry (0, 0) of M_a
params = ParameterInference(
    env, {"T": T}, rank=2, warm_start=warm_start, propensity_fn=agent.action_probs
)
watched = ValueInference(params, propensity_fn=agent.action_probs)
model.set_env(watched)  # PPO now plays through the wrappers
model.learn(total_timesteps=rounds)

print(params.summary())
print(watched.summary())
print("truth <M_a, T>:", watched.unwrapped.linear_form(T), " V*:", watched.unwrapped.optimal_value)
print("PPO's pmf at a fresh context:", agent.action_probs(env.observation_space.sample()))
