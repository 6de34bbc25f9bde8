"""Evaluate a DQN agent's trajectory with the inference wrappers.

DQN plays uniformly for ``learning_starts`` steps, then ε-greedily on its Q-network with ε
decaying to ``exploration_final_eps``.  :class:`agents.SB3Agent` reports exactly that
ε-mixture (uniform before ``learning_starts``), so the wrappers can weight every round by
``1/π``.  Since ε stays positive, every arm keeps a positive probability and the intervals
for ``<M_a, T>`` and ``V*`` are valid on DQN's own data.  ``learning_starts`` equals the
wrappers' ``warm_start``, so their own estimator is fitted on uniform rounds (fitted on
ε-greedy rounds weighted by 1/π it is much noisier: see docs/reproduction.md, "Agent
comparisons").

    python examples/sb3_dqn.py            # 4000 rounds at d = 20
    python examples/sb3_dqn.py --small    # 1000 rounds at d = 8
"""

import argparse

import gymnasium as gym
import numpy as np
from stable_baselines3 import DQN

import lrbandit_gym  # noqa: F401
from agents import SB3Agent
from inference import ParameterInference, ValueInference

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--small", action="store_true", help="fewer rounds: runs in seconds")
args = parser.parse_args()
d, rounds, warm_start = (8, 1000, 300) if args.small else (20, 4000, 400)

env = gym.make("MatrixContextBandit-v0", d1=d, d2=d, rank=2, flatten=True, max_episode_steps=None)
model = DQN(
    "MlpPolicy",
    env,
    gamma=0.0,  # a bandit: the target is the reward
    buffer_size=rounds,
    learning_starts=warm_start,  # uniform rounds: the wrappers fit their estimator on them
    exploration_fraction=0.1,
    exploration_final_eps=0.05,
    seed=0,
)
agent = SB3Agent(model)
T1 = np.zeros((d, d))
T1[0, 0] = 1.0
targets = {"T1": T1, "trace": np.eye(d)}
params = ParameterInference(
    env, targets, rank=2, warm_start=warm_start, propensity_fn=agent.action_probs
)
watched = ValueInference(params, propensity_fn=agent.action_probs)
model.set_env(watched)
model.learn(total_timesteps=rounds)

print(f"DQN after {rounds} rounds: exploration rate {model.exploration_rate:.3f}")
print(params.summary())
print(watched.summary())
truth = {name: watched.unwrapped.linear_form(t) for name, t in targets.items()}
print("truth:", truth, " V*:", watched.unwrapped.optimal_value)
for name in targets:
    for arm in range(2):
        ci = params.interval(arm, name)
        covered = ci.low <= truth[name][arm] <= ci.high
        print(f"<M_{arm}, {name}>: [{ci.low:.4f}, {ci.high:.4f}] covers the truth: {covered}")
