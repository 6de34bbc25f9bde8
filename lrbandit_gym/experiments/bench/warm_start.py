"""Benchmarks of the warm start's memory and accuracy behind ``lrbandit bench warmstart``.

Three figures (docs/performance.md, "Streaming warm start"):

* a Gaussian problem at ``d = 500``, ``r = 3``, ``K = 2``: an ε-greedy agent with every
  default plays a 20,000-round warm start (too long for the buffer: the default rule picks
  the streaming fit), then 1,000 online rounds; peak memory, ``‖M_init − M‖_F`` and
  ``‖M̂ − M‖_F`` after the online rounds;
* the streaming warm start's peak memory against its length at ``d = 100``;
* the paper's setting (``d = 50``, 2,000 rounds): ``‖M_init − M‖_F`` of the buffered fit
  beside the streaming one, from the same rounds.

Memory is the peak of ``tracemalloc`` (numpy reports its allocations to it) over the
phase measured, which includes the environment's draws.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

__all__ = ["bench_warm_start", "warm_start_run"]


def _truncated_errors(estimates: np.ndarray, truth: np.ndarray, rank: int) -> list[float]:
    """``‖trunc_r(M̂_a) − M_a‖_F`` per arm."""
    u, s, vt = np.linalg.svd(estimates, full_matrices=False)
    trunc = np.matmul(u[..., :rank] * s[..., None, :rank], vt[..., :rank, :])
    return [float(e) for e in np.linalg.norm(trunc - truth, axis=(-2, -1))]


def warm_start_run(
    d: int,
    warm_start: int,
    online: int = 0,
    *,
    rank: int = 3,
    n_actions: int = 2,
    warm_start_fit: str | None = None,
    seed: int = 0,
) -> dict:
    """One ε-greedy agent (every other default) on a Gaussian ``d x d`` env: the warm start,
    then ``online`` rounds.

    Returns
    -------
    dict
        ``fit`` (the warm-start fit used), ``peak_bytes`` (peak traced memory over the warm
        start), ``init_error`` and ``final_error`` (``‖M̂_a − M_a‖_F`` per arm after the
        warm start and after the online rounds), ``diverged`` (a ``FloatingPointError``
        was raised), ``seconds``.
    """
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the env)
    from agents import EpsilonGreedy, play

    env = gym.make(
        "MatrixContextBandit-v0",
        d1=d,
        d2=d,
        rank=rank,
        n_actions=n_actions,
        max_episode_steps=None,
    )
    truth = env.unwrapped.true_params
    start = time.perf_counter()
    tracemalloc.start()
    try:
        agent = EpsilonGreedy(
            env, rank=rank, warm_start=warm_start, warm_start_fit=warm_start_fit, seed=seed
        )
        obs = play(env, agent, warm_start, seed=seed)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    init_error = _truncated_errors(agent.estimates, truth, rank)
    diverged = False
    try:
        play(env, agent, online, obs=obs)
    except FloatingPointError:
        diverged = True
    return {
        "d": d,
        "warm_start": warm_start,
        "online": online,
        "fit": agent.warm_start_fit,
        "peak_bytes": int(peak),
        "init_error": init_error,
        "final_error": _truncated_errors(agent.estimates, truth, rank),
        "diverged": diverged,
        "seconds": time.perf_counter() - start,
    }


def bench_warm_start(
    d_large: int = 500,
    large_rounds: int = 20_000,
    online: int = 1_000,
    d_memory: int = 100,
    lengths: tuple[int, ...] = (1_000, 10_000, 100_000),
    paper_seeds: int = 5,
    seed: int = 0,
) -> dict:
    """The three figures of the module docstring.

    Returns
    -------
    dict
        ``large`` (:func:`warm_start_run` at ``d_large``), ``memory`` (one
        :func:`warm_start_run` with the streaming fit per length at ``d_memory``) and
        ``paper`` (``buffer`` and ``streaming``: per seed, the arms' ``‖M_init − M‖_F`` at
        ``d = 50`` after 2,000 rounds).
    """
    large = warm_start_run(d_large, large_rounds, online, seed=seed)
    memory = [
        warm_start_run(d_memory, n, 0, warm_start_fit="streaming", seed=seed) for n in lengths
    ]
    paper = {
        fit: [warm_start_run(50, 2000, 0, warm_start_fit=fit, seed=s) for s in range(paper_seeds)]
        for fit in ("buffer", "streaming")
    }
    return {"large": large, "memory": memory, "paper": paper}
