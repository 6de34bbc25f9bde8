"""A comparison in ten lines: our agents and the baselines on the same trials.

python examples/compare_agents.py            # 40 trials x 1500 rounds, d = 20
python examples/compare_agents.py --small    # 8 trials x 400 rounds, d = 8
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--small", action="store_true", help="fewer trials and rounds: seconds")
small = parser.parse_args().small
d, trials, rounds, warm = (8, 8, 400, 100) if small else (20, 40, 1500, 400)

# --- the ten lines ---
from agents import EpsilonGreedy, LinearEpsilonGreedy, Oracle, Softmax, UniformRandom  # noqa: E402
from lrbandit_gym.experiments.compare import compare  # noqa: E402

agents = {
    "eps-greedy": lambda env, seed: EpsilonGreedy(env, rank=2, warm_start=warm, seed=seed),
    "softmax": lambda env, seed: Softmax(env, rank=2, warm_start=warm, seed=seed),
    "linear": LinearEpsilonGreedy,
    "uniform": UniformRandom,
    "oracle": Oracle,
}
result = compare({"d1": d, "d2": d, "rank": 2}, agents, trials=trials, rounds=rounds,
                 warm_start=warm)  # fmt: skip
print(result.to_markdown())
