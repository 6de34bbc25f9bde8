"""Speed benchmarks behind ``lrbandit bench``: each figure beside the numpy cost it must beat.

Timings take the best of several repeats (``min`` is the estimate least disturbed by other
processes), and every comparison is measured in the same run, side by side.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

__all__ = ["bench_agents", "bench_env", "bench_inference", "bench_study_round", "best_times"]


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


def _paper_agent(env):
    """An ε-greedy agent on ``env`` started near the truth (benchmarks time steady state)."""
    from agents import EpsilonGreedy

    truth = env.unwrapped.true_params
    init = truth + 0.01 * np.random.default_rng(0).standard_normal(truth.shape)
    return EpsilonGreedy(env, rank=env.unwrapped.rank, epsilon=0.1, M_init=init, seed=0)


def bench_agents(d_large: int = 500, d: int = 50, num_envs: int = 1000, seed: int = 0) -> dict:
    """LowRankSGD at ``d_large`` against the naive full-SVD update of eq. (8), and one batched
    ε-greedy round (act + update) at ``B = num_envs`` against drawing the contexts.

    Targets: ``sgd_speedup ≥ 50`` and ``batched_ratio ≤ 3``.
    """
    import gymnasium as gym

    from lrbandit_gym.experiments.bench.estimator import bench_estimator

    est = bench_estimator(d=d_large, rank=3, seed=seed)
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        d1=d,
        d2=d,
        max_episode_steps=None,
    )
    agent = _paper_agent(venv)
    obs, _ = venv.reset(seed=seed)
    state = {"obs": obs}
    rng = np.random.default_rng(seed)

    def agent_round():
        o = state["obs"]
        decision = agent.act(o)
        nxt, reward, *_ = venv.step(decision)
        agent.update(o, decision, reward)
        state["obs"] = nxt

    def env_round():
        state["obs"] = venv.step(rng.integers(0, 2, num_envs))[0]

    t = best_times(
        {
            "draw": lambda: rng.standard_normal((num_envs, d, d)),
            "env": env_round,
            "round": agent_round,
        },
        number=5,
    )
    agent_cost = t["round"] - t["env"]
    return {
        "d_large": d_large,
        "sgd_update": est["lowrank_s_per_round"],
        "naive_update": est["naive_s_per_round"],
        "sgd_speedup": est["speedup"],
        "num_envs": num_envs,
        "draw": t["draw"],
        "agent_round": agent_cost,
        "batched_ratio": agent_cost / t["draw"],
    }


def bench_inference(d: int = 50, num_envs: int = 1000, seed: int = 0) -> dict:
    """Both inference wrappers (two targets, sharing the agent's estimator) against one
    LowRankSGD round (single env; target ≤ 3×), and on the vector env against drawing the
    contexts (target ≤ 2×).  A wrapper's cost is its wrapped step minus the bare env step.
    """
    import gymnasium as gym

    from inference import (
        ParameterInference,
        ValueInference,
        VectorParameterInference,
        VectorValueInference,
    )
    from lrbandit_gym.experiments.studies import paper_targets

    targets = paper_targets(d, d)
    rng = np.random.default_rng(seed)
    out: dict[str, float] = {"d": d, "num_envs": num_envs}
    for vector in (False, True):
        if vector:
            env = gym.make_vec(
                "MatrixContextBandit-v0",
                num_envs=num_envs,
                d1=d,
                d2=d,
                vectorization_mode="vector_entry_point",
                max_episode_steps=None,
            )
        else:
            env = gym.make("MatrixContextBandit-v0", d1=d, d2=d, max_episode_steps=None)
        agent = _paper_agent(env)
        wrapper_cls = (
            (VectorParameterInference, VectorValueInference)
            if vector
            else (ParameterInference, ValueInference)
        )
        wrapped = wrapper_cls[1](wrapper_cls[0](env, targets, estimator=agent.estimator))
        obs, _ = wrapped.reset(seed=seed)
        decision = agent.act(obs)
        x = np.array(obs)
        y = np.zeros(num_envs) if vector else 0.0
        fns = {
            "bare": lambda env=env, decision=decision: env.step(decision),
            "wrapped": lambda wrapped=wrapped, decision=decision: wrapped.step(decision),
            "sgd": lambda agent=agent, x=x, y=y, decision=decision: agent.estimator.update(
                x, decision.action, y, decision.propensities
            ),
        }
        if vector:
            fns["draw"] = lambda: rng.standard_normal((num_envs, d, d))
        t = best_times(fns, number=5 if vector else 300)
        cost = t["wrapped"] - t["bare"]
        if vector:
            out.update(vector_wrappers=cost, vector_draw=t["draw"], vector_ratio=cost / t["draw"])
        else:
            out.update(single_wrappers=cost, single_sgd=t["sgd"], single_ratio=cost / t["sgd"])
    return out


def bench_study_round(d: int = 50, num_envs: int = 125, seed: int = 0) -> dict:
    """One online round of the Table 1 study at ``B = num_envs`` (the chunk size of
    ``lrbandit reproduce``), beside drawing its contexts, on one BLAS thread.

    ``api``: the study's round through the public API (ε-greedy ``act``, the vector env
    wrapped by :class:`inference.VectorParameterInference`, ``update``); ``internals``: the
    same arithmetic through the internal entry points that round ends up in (the env's
    expected rewards, ``LowRankSGD.predict_checked``/``step`` and the
    :class:`~inference.wrappers.shared_estimator.SharedEstimate` the wrappers use), with one
    finiteness
    check of the context and no wrappers.  Both are reported as seconds beyond the draw, so
    their difference is what validation and the layers cost, and ``internals`` is the floor
    of this numpy implementation.
    """
    from threadpoolctl import threadpool_limits

    from inference import LinearFormInference, VectorParameterInference
    from inference.wrappers.shared_estimator import SharedEstimate
    from lrbandit_gym.experiments.studies import StudyConfig, make_study_env, paper_targets
    from lrbandit_gym.rounds import Round

    with threadpool_limits(1):
        venv = make_study_env(StudyConfig(d1=d, d2=d), num_envs)
        agent = _paper_agent(venv)
        env = VectorParameterInference(venv, paper_targets(d, d), estimator=agent.estimator)
        state = {"obs": env.reset(seed=seed)[0]}

        def api_round():
            obs = state["obs"]
            decision = agent.act(obs)
            state["obs"], reward, *_ = env.step(decision)
            agent.update(obs, decision, reward)

        est = agent.estimator
        problem = venv.unwrapped.problem
        core = LinearFormInference(
            d, d, est.rank, est.n_actions, paper_targets(d, d), n_trials=num_envs
        )
        feed = SharedEstimate(est, core)
        rng = np.random.default_rng(seed)
        trials = np.arange(num_envs)

        def internals_round():
            X = rng.standard_normal((num_envs, d, d))
            mean = problem.expected_rewards(X, None)
            fp = est.fingerprint(X)
            if not np.isfinite(fp).all():
                raise FloatingPointError("non-finite context")
            preds = est.predict_checked(X, fp)
            eps = agent.epsilon_at(est.t + 1)
            best = preds.argmax(axis=1)
            probs = np.full(preds.shape, eps / est.n_actions)
            probs[trials, best] += 1.0 - eps
            a = np.where(rng.random(num_envs) < eps, rng.integers(0, est.n_actions, num_envs), best)
            y = mean[trials, a] + problem.noise_std[a] * rng.standard_normal(num_envs)
            snapshot = feed.snapshot(X, a, fp)
            round_ = Round(X, a, y, probs, fp)
            feed.absorb(snapshot, round_)
            est.step(round_)

        for _ in range(20):  # past the first rounds (exact comparisons, cold caches)
            api_round()
            internals_round()
        t = best_times(
            {
                "draw": lambda: rng.standard_normal((num_envs, d, d)),
                "api": api_round,
                "internals": internals_round,
            },
            number=20,
        )
    return {
        "d": d,
        "num_envs": num_envs,
        "draw": t["draw"],
        "api": t["api"] - t["draw"],
        "internals": t["internals"] - t["draw"],
    }
