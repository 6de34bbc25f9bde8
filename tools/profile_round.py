"""Count the project's function calls in one ``env.step`` under the inference wrappers.

    python tools/profile_round.py            # calls and files of one step, then the list

The stack is the README's: ``ValueInference(ParameterInference(env))`` sharing an
ε-greedy agent's estimator, past the warm start.  Only calls into the project's packages
(``lrbandit_gym``, ``agents``, ``inference``) are counted; numpy, Gymnasium and the
standard library are not.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np

import lrbandit_gym  # noqa: F401  (registers the environment)
from agents import EpsilonGreedy, play
from inference import ParameterInference, ValueInference

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = tuple(str(ROOT / p) for p in ("lrbandit_gym", "agents", "inference"))


def one_step_calls(warm_rounds: int = 400, seed: int = 0) -> Counter:
    """The project calls ``(file, function)`` of one ``env.step`` after ``warm_rounds``."""
    env = gym.make("MatrixContextBandit-v0", d1=20, d2=20, rank=2)
    agent = EpsilonGreedy(env, rank=2, epsilon=0.1, warm_start=warm_rounds, seed=seed)
    T = np.zeros((20, 20))
    T[0, 0] = 1.0
    env = ValueInference(ParameterInference(env, {"T": T}, estimator=agent.estimator))
    obs = play(env, agent, warm_rounds + 10, seed=seed)
    decision = agent.act(obs)
    calls: Counter = Counter()

    def tracer(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(PACKAGES):
                calls[(str(Path(path).relative_to(ROOT)), frame.f_code.co_name)] += 1

    sys.setprofile(tracer)
    try:
        env.step(decision)
    finally:
        sys.setprofile(None)
    return calls


def main() -> None:
    calls = one_step_calls()
    files = sorted({f for f, _ in calls})
    print(f"{sum(calls.values())} project calls to {len(calls)} functions in {len(files)} files")
    for (f, name), n in sorted(calls.items()):
        print(f"  {n:3d}  {f}:{name}")


if __name__ == "__main__":
    main()
