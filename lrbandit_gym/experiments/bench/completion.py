"""Completion contexts at a recommender's size: speed, warm-start memory and coverage.

Behind ``lrbandit bench completion`` and ``lrbandit bench completion-coverage``
(docs/performance.md, docs/reproduction.md).  With ``observation="index"`` a round of the
env, an ε-greedy agent and both inference wrappers costs O((d1 + d2) r) and the warm start
stores 32 bytes a round (:class:`agents.warm_start.CompletionWarmStartBuffer`), so a 1000 x 1000
problem runs at the speed of a 50 x 50 dense one and a 50,000-round warm start fits in a few
MB where the dense buffer would need 186 GiB.

The step size: ``η_t c w_t`` moves a completion estimate's prediction by about
``η_t w_t r (d1 + d2)`` times the residual, the same as a Gaussian context's, so the paper's
``c_η = 0.1`` (tuned at ``d1 + d2 = 100``) is rescaled to ``c_η = 0.1 · 40 / (d1 + d2)``
here (:func:`completion_step_scale`), which keeps that factor below one at any size.
"""

from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np

from lrbandit_gym.experiments.bench.run import best_times
from lrbandit_gym.experiments.coverage import coverage_interval

__all__ = ["bench_completion", "completion_coverage", "completion_step_scale"]


def completion_step_scale(d1: int, d2: int, scale: float = 1.0) -> float:
    """``c_η = 0.1 · 40 / ((d1 + d2) · max(1, scale))``: the paper's step, rescaled to the
    problem's size and to the singular values ``scale`` of the truth (see the module
    docstring; the factors' squared rows grow with it); 0.002 at 1000 x 1000, 0.02 at
    100 x 100 with unit singular values."""
    return 0.1 * 40.0 / ((d1 + d2) * max(1.0, scale))


def _watched_loop(d: int, context: str, observation: str, rank: int, n_actions: int, seed: int):
    """One round of a single env with an ε-greedy agent started near the truth and both
    inference wrappers sharing its estimator (the paper's targets), as a callable."""
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the env)
    from agents import EpsilonGreedy
    from inference import build_stack
    from lrbandit_gym.experiments.studies import paper_targets

    env = gym.make(
        "MatrixContextBandit-v0",
        d1=d,
        d2=d,
        rank=rank,
        n_actions=n_actions,
        context=context,
        observation=observation,
        max_episode_steps=None,
    )
    truth = env.unwrapped.true_params
    scale = np.abs(truth).max()
    init = truth + 0.01 * scale * np.random.default_rng(seed).standard_normal(truth.shape)
    step = 0.1 if context == "gaussian" else completion_step_scale(d, d)
    agent = EpsilonGreedy(env, rank=rank, epsilon=0.1, M_init=init, seed=seed, step_scale=step)
    wrapped = build_stack(env, paper_targets(d, d), estimator=agent.estimator)
    state = {"obs": wrapped.reset(seed=seed)[0]}

    def one_round():
        obs = state["obs"]
        decision = agent.act(obs)
        state["obs"], reward, *_ = wrapped.step(decision)
        agent.update(obs, decision, reward)

    return one_round


def _warm_start_memory(d: int, rank: int, n_actions: int, rounds: int, seed: int) -> dict:
    """Run an ε-greedy agent's ``rounds``-round warm start (and its fit) on the index form
    of a ``d x d`` completion env with both wrappers watching; memory traced throughout."""
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401
    from agents import EpsilonGreedy
    from agents.warm_start import completion_buffer_bytes, warm_start_buffer_bytes
    from inference import build_stack
    from lrbandit_gym.experiments.studies import paper_targets

    env = gym.make(
        "MatrixContextBandit-v0",
        d1=d,
        d2=d,
        rank=rank,
        n_actions=n_actions,
        context="completion",
        observation="index",
        max_episode_steps=None,
    )
    agent = EpsilonGreedy(
        env, rank=rank, warm_start=rounds, seed=seed, step_scale=completion_step_scale(d, d)
    )
    buffer_bytes = completion_buffer_bytes(agent.warm_start_rounds)
    wrapped = build_stack(env, paper_targets(d, d), estimator=agent.estimator)
    obs, _ = wrapped.reset(seed=seed)
    # Traced from the first round on: the rounds, the fit and the initialisation (the
    # buffer was allocated with the agent, the wrappers' own state with them).
    tracemalloc.start()
    base_bytes = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    fit_seconds = 0.0
    for _ in range(rounds):
        decision = agent.act(obs)
        nxt, reward, *_ = wrapped.step(decision)
        before = time.perf_counter()
        agent.update(obs, decision, reward)
        if not agent.in_warm_start:
            fit_seconds = time.perf_counter() - before
        obs = nxt
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    truth = env.unwrapped.true_params
    err = np.linalg.norm(agent.estimates - truth, axis=(1, 2)) / np.linalg.norm(truth, axis=(1, 2))
    return {
        "warm_start": rounds,
        "buffer_bytes": int(buffer_bytes),
        "dense_buffer_bytes": int(warm_start_buffer_bytes(d, d, rounds)),
        "peak_traced_bytes": int(peak - base_bytes),
        "warm_start_seconds": seconds,
        "fit_seconds": fit_seconds,
        "relative_error": err.tolist(),
    }


def bench_completion(
    d: int = 1000,
    rank: int = 3,
    n_actions: int = 2,
    warm_start: int = 50_000,
    d_ref: int = 50,
    number: int = 500,
    seed: int = 0,
) -> dict:
    """Rounds per second and warm-start memory of completion contexts at ``d x d``.

    Speed: one round of a single env with an ε-greedy agent and both inference wrappers
    (:class:`inference.ParameterInference` with the paper's two targets and
    :class:`inference.ValueInference`, sharing the agent's estimator), timed in blocks of
    ``number`` rounds, interleaved (:func:`~lrbandit_gym.experiments.bench.run.best_times`):

    * ``index``: completion contexts at ``d``, ``observation="index"``;
    * ``matrix_small``: completion contexts at ``d_ref``, dense one-hot observations;
    * ``gaussian_small``: Gaussian contexts at ``d_ref`` (the paper's setting), the dense
      path the target refers to.

    Memory (``warm_start`` > 0): the agent's warm start of ``warm_start`` rounds at ``d``
    (index observations, both wrappers watching): the buffer's bytes (allocated with the
    agent) and the peak of all allocations traced with :mod:`tracemalloc` from the first
    round to the initialised estimator (the rounds, the fit and its temporaries,
    ``LowRankSGD.initialize``), beside what a dense buffer would take.  The wrappers' own
    state (the targets, the accumulators of ``Σ_t M̃``: O(K d1 d2), allocated when they
    are built) is not the warm start's and is not counted.

    Returns
    -------
    dict
        ``rounds_per_s`` (a dict by loop), the sizes, and the memory figures.
    """
    loops = {
        "index": _watched_loop(d, "completion", "index", rank, n_actions, seed),
        "matrix_small": _watched_loop(d_ref, "completion", "matrix", rank, n_actions, seed),
        "gaussian_small": _watched_loop(d_ref, "gaussian", "matrix", rank, n_actions, seed),
    }
    for fn in loops.values():  # past the first rounds (compilation, cold caches)
        for _ in range(100):
            fn()

    def block(fn):
        return lambda: [fn() for _ in range(number)]

    t = best_times({name: block(fn) for name, fn in loops.items()}, number=1, repeat=5)
    out = {
        "d": d,
        "d_ref": d_ref,
        "rank": rank,
        "n_actions": n_actions,
        "rounds_per_s": {name: number / seconds for name, seconds in t.items()},
    }
    if warm_start:
        out.update(_warm_start_memory(d, rank, n_actions, warm_start, seed))
    return out


def completion_coverage(
    trials: int = 500,
    d: int = 100,
    rank: int = 3,
    checkpoints: tuple[int, ...] = (5000, 10000, 20000),
    warm_start: int | None = None,
    batch_size: int = 250,
    seed: int = 0,
    confidence_level: float = 0.95,
    singular_values: float = 10.0,
    noise_std: float = 0.1,
    step_gain: float | None = None,
) -> dict:
    """Coverage of the intervals on completion contexts, on the native vector env.

    ``trials`` bandits (``d x d``, rank ``rank``, two arms, noise ``noise_std``, singular
    values ``singular_values``: 10 puts the typical entry, about ``10 r / d``, above the
    noise level 0.1, which a single revealed entry must resolve) in chunks of
    ``batch_size``, observed as indices: a batched ε-greedy agent (ε = 0.1,
    the warm start of :func:`agents.warm_start.default_warm_start_rounds` unless ``warm_start`` is
    given, ``c_η`` of :func:`completion_step_scale`, or the scale-free step of gain
    ``step_gain`` when given) with
    :class:`inference.VectorParameterInference` (the paper's targets ``T1``, ``T2``) and
    :class:`inference.VectorValueInference` sharing its estimator.  At every checkpoint
    (online rounds) each interval is read; a trial covers when the truth is inside.

    Returns
    -------
    dict
        ``rows``: one dict per checkpoint and quantity with ``coverage``, its Monte Carlo
        standard error, ``mean_length`` and the mean z-score; the configuration; ``seconds``.
    """
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401
    from agents import EpsilonGreedy
    from agents.warm_start import default_warm_start_rounds
    from inference import build_stack, stack_layers
    from lrbandit_gym.experiments.studies import paper_targets

    warm = (
        default_warm_start_rounds(d, d, rank, 2, "completion") if warm_start is None else warm_start
    )
    targets = paper_targets(d, d)
    names = list(targets)
    cps = sorted(checkpoints)
    est = {(c, q): [] for c in cps for q in _quantities(names)}
    se = {key: [] for key in est}
    truth = {}
    start = time.perf_counter()
    seeds = np.random.SeedSequence(seed).spawn(math.ceil(trials / batch_size))
    for chunk, ss in enumerate(seeds):
        b = min(batch_size, trials - chunk * batch_size)
        env_seed, agent_seed = ss.spawn(2)
        venv = gym.make_vec(
            "MatrixContextBandit-v0",
            num_envs=b,
            vectorization_mode="vector_entry_point",
            max_episode_steps=None,
            d1=d,
            d2=d,
            rank=rank,
            context="completion",
            observation="index",
            singular_values=singular_values,
            noise_std=noise_std,
        )
        agent = EpsilonGreedy(
            venv,
            rank=rank,
            epsilon=0.1,
            warm_start=warm,
            seed=agent_seed,
            **(
                {"step_scale": completion_step_scale(d, d, singular_values)}
                if step_gain is None
                else {"step_gain": step_gain}
            ),
        )
        value = build_stack(venv, targets, estimator=agent.estimator)
        params = stack_layers(value)["parameters"]
        base = venv.unwrapped
        for name in names:
            for arm in range(2):
                truth[name, arm] = float(base.linear_form(targets[name])[arm])
        truth["V*"] = float(base.optimal_value)
        obs, _ = value.reset(seed=int(env_seed.generate_state(1)[0]))
        online = 0
        while online < cps[-1]:
            decision = agent.act(obs)
            was_online = not agent.in_warm_start
            nxt, reward, *_ = value.step(decision)
            agent.update(obs, decision, reward)
            obs = nxt
            if not was_online:
                continue
            online += 1
            if online not in cps:
                continue
            for name in names:
                for arm in range(2):
                    ci = params.interval(arm, name, confidence_level)
                    est[online, (name, arm)].append(ci.estimate)
                    se[online, (name, arm)].append(ci.standard_error)
            ci = value.interval(confidence_level)
            est[online, "V*"].append(ci.estimate)
            se[online, "V*"].append(ci.standard_error)
    seconds = time.perf_counter() - start
    from scipy.special import ndtri

    z = float(ndtri(0.5 + confidence_level / 2))
    rows = []
    for (c, q), values in est.items():
        e, s = np.concatenate(values), np.concatenate(se[c, q])
        t = truth[q]
        ok = np.isfinite(e) & np.isfinite(s)
        covered = np.abs(e - t) <= z * s
        cov = float(covered[ok].mean())
        label = q if q == "V*" else f"<M_{q[1]}, {q[0]}>"
        interval = coverage_interval(int(covered[ok].sum()), int(ok.sum()))
        rows.append(
            {
                "n": c,
                "quantity": label,
                "truth": t,
                "coverage": cov,
                "coverage_se": math.sqrt(cov * (1 - cov) / max(ok.sum(), 1)),
                "coverage_low": interval[0],
                "coverage_high": interval[1],
                "mean_length": float(2 * z * s[ok].mean()),
                "mean_z": float(((e - t) / s)[ok].mean()),
                "trials": int(ok.sum()),
            }
        )
    return {
        "rows": rows,
        "trials": trials,
        "d": d,
        "rank": rank,
        "warm_start": warm,
        "singular_values": singular_values,
        "noise_std": noise_std,
        "step_scale": completion_step_scale(d, d, singular_values) if step_gain is None else None,
        "step_gain": step_gain,
        "checkpoints": cps,
        "seconds": seconds,
    }


def _quantities(names: list[str]) -> list:
    return [(name, arm) for name in names for arm in range(2)] + ["V*"]
