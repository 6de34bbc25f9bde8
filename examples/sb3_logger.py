"""Inference inside stable-baselines3's loop: intervals in SB3's logger.

:class:`inference.InferenceCallback` records, at the end of every rollout, each interval the
inference wrappers hold (estimate, low, high and standard error for every target and arm,
and for ``V*``) with ``model.logger.record``, so they are written next to SB3's training
curves by whatever outputs the logger has: stdout, CSV, or TensorBoard
(``configure(folder, ["tensorboard"])``, which needs ``pip install tensorboard``: the
``sb3`` extra does not install it).  This script logs to CSV and prints the keys.

    python examples/sb3_logger.py            # 3000 rounds at d = 20
    python examples/sb3_logger.py --small    # 800 rounds at d = 8
"""

import argparse
import csv
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
from stable_baselines3 import A2C
from stable_baselines3.common.logger import configure

import lrbandit_gym  # noqa: F401
from agents import SB3Agent
from inference import InferenceCallback, build_stack

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--small", action="store_true", help="fewer rounds: runs in seconds")
args = parser.parse_args()
d, rounds, warm_start = (8, 800, 300) if args.small else (20, 3000, 400)

env = gym.make("MatrixContextBandit-v0", d1=d, d2=d, rank=2, flatten=True, max_episode_steps=None)
model = A2C("MlpPolicy", env, gamma=0.0, n_steps=20, seed=0)
agent = SB3Agent(model)
# ParameterInference and ValueInference on one own estimator, warm-started on their rounds
watched = build_stack(
    env, {"trace": np.eye(d)}, rank=2, warm_start=warm_start, propensity_fn=agent.action_probs
)
model.set_env(watched)

folder = Path(tempfile.mkdtemp(prefix="lrbandit-sb3-"))
model.set_logger(configure(str(folder), ["csv"]))  # add "stdout" or "tensorboard" as wished
# SB3 writes its logs every `log_interval` rollouts (A2C's default, 100, is 2000 steps here).
model.learn(total_timesteps=rounds, callback=InferenceCallback(), log_interval=5)

with open(folder / "progress.csv", newline="") as fh:
    rows = list(csv.DictReader(fh))
keys = sorted(k for k in rows[-1] if k.startswith("inference/"))
print(f"{len(rows)} log rows in {folder / 'progress.csv'}; SB3's keys include",
      sorted(k for k in rows[-1] if k.startswith("train/"))[:3])  # fmt: skip
print("keys the callback logged:")
for key in keys:
    print(f"  {key:<34} {float(rows[-1][key]):+.4f}")
