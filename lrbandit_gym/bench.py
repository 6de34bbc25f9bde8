"""Speed benchmarks behind ``lrbandit bench``: each figure beside the numpy cost it must beat.

Timings take the best of several repeats (``min`` is the estimate least disturbed by other
processes), and every comparison is measured in the same run, side by side.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

__all__ = ["best_times", "bench_env"]


def best_times(fns: dict[str, Callable[[], object]], number: int, repeat: int = 7) -> dict:
    """Seconds per call of each function: best over ``repeat`` interleaved runs.

    The functions take turns within each repeat, so a burst of load from another process
    hits all of them alike and their ratio stays meaningful.
    """
    best = dict.fromkeys(fns, np.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return {name: float(t) for name, t in best.items()}


def bench_env(d: int = 50, num_envs: int = 1000, seed: int = 0) -> dict[str, float]:
    """Time the vector env and the single env against drawing their contexts with numpy.

    Returns seconds per step: ``vector_step`` and ``vector_draw`` at ``B = num_envs``, and
    ``single_step`` and ``single_draw`` (both on the unwrapped single env), with
    ``vector_ratio = vector_step / vector_draw`` (target ≤ 1.3) and
    ``single_added_us = (single_step − single_draw)·1e6`` (target ≤ 15 µs).
    """
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the env)

    rng = np.random.default_rng(seed)
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        d1=d,
        d2=d,
        max_episode_steps=None,
    )
    venv.reset(seed=seed)
    actions = rng.integers(0, 2, size=num_envs)
    vec = best_times(
        {"draw": lambda: rng.standard_normal((num_envs, d, d)), "step": lambda: venv.step(actions)},
        number=10,
    )

    env = gym.make("MatrixContextBandit-v0", d1=d, d2=d).unwrapped
    env.reset(seed=seed)
    single = best_times(
        {"draw": lambda: rng.standard_normal((d, d)), "step": lambda: env.step(1)}, number=2000
    )
    vector_draw, vector_step = vec["draw"], vec["step"]
    single_draw, single_step = single["draw"], single["step"]
    return {
        "d": d,
        "num_envs": num_envs,
        "vector_step": vector_step,
        "vector_draw": vector_draw,
        "vector_ratio": vector_step / vector_draw,
        "single_step": single_step,
        "single_draw": single_draw,
        "single_added_us": (single_step - single_draw) * 1e6,
    }
