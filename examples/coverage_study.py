"""A small Monte Carlo study: how often do the online 95% intervals cover the truth?

B independent bandits run in lock step on the native vector environment (one numpy call
per round for all of them), with one batched epsilon-greedy agent and the vector inference
wrappers sharing its estimator.  Every trial has the same truth (``truth_seed``) and its own
contexts, noise and actions, so the fraction of trials whose interval contains the truth
estimates the coverage.  ``lrbandit reproduce`` runs the paper's full-size studies the same
way.

    python examples/coverage_study.py            # 500 trials, d = 20
    python examples/coverage_study.py --small    # 100 trials
"""

import argparse

import gymnasium as gym
import numpy as np

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy, play
from inference import build_stack, stack_layers

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--small", action="store_true", help="fewer trials: runs in seconds")
args = parser.parse_args()
trials = 100 if args.small else 500
d, rank, warm_start, online = 20, 2, 400, 1000

venv = gym.make_vec(
    "MatrixContextBandit-v0",
    num_envs=trials,
    vectorization_mode="vector_entry_point",
    d1=d,
    d2=d,
    rank=rank,
    max_episode_steps=None,
)
T1 = np.zeros((d, d))
T1[0, 0] = 1.0
agent = EpsilonGreedy(venv, rank=rank, epsilon=0.1, warm_start=warm_start, seed=0)
env = build_stack(venv, {"T1": T1}, estimator=agent.estimator)  # <M_a, T1> and V*
params = stack_layers(env)["parameters"]

play(env, agent, warm_start + online, seed=0)  # every trial acts, steps and learns at once

truth = env.unwrapped.linear_form(T1)  # (K,): the truth is shared by the trials
mc_se = np.sqrt(0.95 * 0.05 / trials)
print(f"{trials} trials, {online} online rounds; Monte Carlo s.e. of a coverage {mc_se:.3f}")
for arm in range(2):
    ci = params.interval(arm, "T1")  # arrays of shape (B,)
    print(f"<M_{arm}, T1>: coverage {np.mean(ci.contains(truth[arm])):.3f}")
ci = params.difference(1, 0, "T1")
print(f"<M_1 - M_0, T1>: coverage {np.mean(ci.contains(truth[1] - truth[0])):.3f}")
ci = env.interval()
print(f"V*: coverage {np.mean(ci.contains(env.unwrapped.optimal_value)):.3f}")
