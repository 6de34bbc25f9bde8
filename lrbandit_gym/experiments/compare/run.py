"""Agent comparisons: every agent on the same trials, regret, estimation error, inference.

:func:`compare` runs named agents on the same trial seeds (common random numbers: trial
``i`` shows every agent the same contexts and noise, see
:mod:`lrbandit_gym.experiments.compare.units`) and returns a :class:`ComparisonResult`: per-round
cumulative regret per agent and trial, a summary (final regret mean ± s.e. and interquartile
mean, estimation error ``‖M̂_a − M_a‖_F`` where the agent has an estimate, time per round),
and the coverage and mean width of the inference wrappers' intervals for ``<M_a, T>``,
``V*`` and the values of two fixed target policies (always arm 0, uniform; see
:mod:`lrbandit_gym.experiments.policy_targets`) computed on each agent's own trajectory:
which policy's data give the sharpest valid inference.

Agents are given as factories ``factory(env, seed=seed) -> agent``:

* a plain callable, or :func:`batched`: our agents, built once per chunk of trials on a
  vector env of that chunk (``EpsilonGreedy(env, ...)`` plays all of them at once);
* :func:`per_trial`: any object with ``act``/``update`` built for one trial's env;
* :func:`sb3`: a stable-baselines3 model, built per trial on the flattened env and trained by
  its own ``model.learn()`` while the wrappers watch (propensities from
  :class:`agents.SB3Agent`).

Trials run in units (a chunk of trials of one agent) seeded from ``seed``, the agent's name
and the chunk's index, each with one BLAS thread and one torch thread, so results do not
depend on ``jobs`` or ``backend``.  Presentation (tables, files, figures) lives in
:mod:`lrbandit_gym.experiments.compare.report`.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lrbandit_gym import engine
from lrbandit_gym.experiments.compare.report import ComparisonResult
from lrbandit_gym.experiments.compare.units import ComparisonSetting, merge_units, run_unit
from lrbandit_gym.experiments.montecarlo import chunk_map
from lrbandit_gym.experiments.outputs import ArgumentError
from lrbandit_gym.experiments.parallel import Interrupted, RunInterrupted, WorkerDied
from lrbandit_gym.experiments.policy_targets import target_policy_values
from lrbandit_gym.experiments.run_warnings import count_warnings
from lrbandit_gym.experiments.studies import paper_targets

__all__ = [
    "AgentSpec",
    "ComparisonResult",
    "ComparisonSetting",
    "DEFAULT_AGENTS",
    "OurAgent",
    "SB3Model",
    "batched",
    "compare",
    "default_lineup",
    "per_trial",
    "sb3",
    "sb3_available",
    "trial_seeds",
]

_KINDS = ("batched", "per_trial", "sb3")


@dataclass(frozen=True)
class AgentSpec:
    """How to build and run one agent of a comparison.

    Attributes
    ----------
    factory : callable
        ``factory(env, seed=seed) -> agent`` ("batched": ``env`` is a vector env of a chunk of
        trials and ``seed`` a ``SeedSequence``; "per_trial": one trial's env; "sb3": one
        trial's flattened env and an int seed, returning a stable-baselines3 model).
    kind : {"batched", "per_trial", "sb3"}
    trials : int, optional
        Trials for this agent (default: the comparison's); they are the first ``trials``
        trials of the comparison, with the same seeds as every other agent's.
    flatten : bool
        "per_trial" only: give the agent flat observations.
    cost : float
        Relative seconds per trial-round, used only to schedule the slowest units first.
    """

    factory: Callable
    kind: str = "batched"
    trials: int | None = None
    flatten: bool = False
    cost: float = 1e-4

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}; got {self.kind!r}")
        if not callable(self.factory):
            raise ValueError(f"factory must be callable; got {self.factory!r}")


def batched(factory: Callable, *, trials: int | None = None, cost: float = 1e-4) -> AgentSpec:
    """An agent that plays a chunk of trials at once on a vector env (our agents)."""
    return AgentSpec(factory, "batched", trials, cost=cost)


def per_trial(
    factory: Callable, *, trials: int | None = None, flatten: bool = False, cost: float = 1e-4
) -> AgentSpec:
    """An agent with ``act``/``update`` built for, and playing, one trial at a time."""
    return AgentSpec(factory, "per_trial", trials, flatten=flatten, cost=cost)


def sb3(model: Any, *, trials: int | None = None, cost: float = 1e-3, **kwargs) -> AgentSpec:
    """A stable-baselines3 model trained per trial by ``model.learn()``.

    ``model`` is an algorithm class or its name in :mod:`stable_baselines3` (then the
    model is ``cls("MlpPolicy", env, seed=seed, device="cpu", **kwargs)``), or a factory
    ``factory(env, seed) -> model``.
    """
    factory = model if callable(model) and not isinstance(model, type) else SB3Model(model, kwargs)
    if kwargs and factory is model:
        raise ValueError("keyword arguments apply to an algorithm class or name, not a factory")
    return AgentSpec(factory, "sb3", trials, cost=cost)


@dataclass(frozen=True)
class OurAgent:
    """A picklable factory of one of :mod:`agents`' policies by class name."""

    name: str
    kwargs: dict = field(default_factory=dict)

    def __call__(self, env, seed):
        import agents

        return getattr(agents, self.name)(env, seed=seed, **self.kwargs)


@dataclass(frozen=True)
class SB3Model:
    """A picklable factory of a stable-baselines3 model: ``cls("MlpPolicy", env, ...)``."""

    algorithm: Any
    kwargs: dict = field(default_factory=dict)

    def __call__(self, env, seed):
        import stable_baselines3

        cls = self.algorithm
        if isinstance(cls, str):
            cls = getattr(stable_baselines3, cls)
        options = {"device": "cpu", "verbose": 0, **self.kwargs}
        return cls("MlpPolicy", env, seed=int(seed), **options)


def sb3_available() -> bool:
    """Whether stable-baselines3 and torch can be imported (the ``sb3`` extra)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("stable_baselines3", "torch"))


#: The default line-up's names, in the order of the tables.
DEFAULT_AGENTS = (
    "eps-greedy",
    "softmax",
    "ensemble",
    "linear",
    "ppo",
    "dqn",
    "uniform",
    "oracle",
)


def default_lineup(
    rank: int = 2,
    warm_start: int = 400,
    rounds: int = 2000,
    sb3_trials: int | None = 20,
) -> dict[str, AgentSpec]:
    """The comparison's default agents (PPO and DQN need the ``sb3`` extra).

    ``eps-greedy`` (ε = 0.1), ``softmax`` (τ = 1) and ``ensemble`` (ensemble sampling, 10
    models) are our low-rank agents at the problem's rank, the first two after ``warm_start``
    uniform rounds; ``linear`` is the full-rank linear ε-greedy (ε = 0.1); ``ppo`` and
    ``dqn`` are stable-baselines3's with ``gamma=0`` (a bandit) and small rollouts so that
    they learn within ``rounds`` (PPO: 100 steps a rollout, minibatches of 50, 4 epochs; DQN:
    a replay buffer of ``rounds``, ε from 1 to 0.05 over the first tenth of the rounds, and
    ``learning_starts=warm_start``: like our low-rank agents it first plays ``warm_start``
    uniform rounds, which are also the rounds the inference wrappers fit their own warm
    start on); ``uniform`` and ``oracle`` bracket the regret.
    """
    low = {"rank": rank, "warm_start": warm_start}
    lineup = {
        "eps-greedy": batched(OurAgent("EpsilonGreedy", {**low, "epsilon": 0.1})),
        "softmax": batched(OurAgent("Softmax", {**low, "temperature": 1.0})),
        "ensemble": batched(
            OurAgent("EnsembleSampling", {"rank": rank, "n_models": 10}), cost=1e-3
        ),
        "linear": batched(OurAgent("LinearEpsilonGreedy", {"epsilon": 0.1}), cost=2e-4),
        "ppo": sb3(
            "PPO", trials=sb3_trials, cost=1e-3, gamma=0.0, n_steps=100, batch_size=50, n_epochs=4
        ),
        "dqn": sb3(
            "DQN",
            trials=sb3_trials,
            cost=7e-4,
            gamma=0.0,
            buffer_size=max(int(rounds), 1),
            learning_starts=warm_start,
            exploration_fraction=0.1,
            exploration_final_eps=0.05,
            train_freq=4,
        ),
        "uniform": batched(OurAgent("UniformRandom")),
        "oracle": batched(OurAgent("Oracle")),
    }
    return lineup


def trial_seeds(seed: int, n_trials: int) -> list[int]:
    """The environment seed of every trial: one child of ``SeedSequence(seed)`` each, the
    same for every agent."""
    return [int(c.generate_state(1)[0]) for c in np.random.SeedSequence(seed).spawn(n_trials)]


def _agent_entropy(seed: int, name: str, index: int) -> list[int]:
    """Entropy of an agent's seed in unit ``index``: by name, not by position in the
    line-up, so an agent's numbers do not depend on which other agents run."""
    return [int(seed), zlib.crc32(name.encode("utf-8")), int(index)]


def _positive(value, name: str, least: int = 1) -> int:
    """``value`` as an int, or :class:`~.outputs.ArgumentError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
        raise ArgumentError(f"{name} must be an integer >= {least}; got {value!r}", name)
    return int(value)


def _units(specs: dict[str, AgentSpec], setting, trials: int, seed: int, batch_size: int):
    """Every unit of work: ``(name, first trial, n trials, kind, args, weight)``."""
    seeds = trial_seeds(seed, trials)
    units = []
    for name, spec in specs.items():
        n = trials if spec.trials is None else min(spec.trials, trials)
        size = batch_size if spec.kind == "batched" else 1
        for index, first in enumerate(range(0, n, size)):
            idx = list(range(first, min(first + size, n)))
            env_seeds = [seeds[i] for i in idx]
            if spec.kind == "batched":
                agent_seed = np.random.SeedSequence(_agent_entropy(seed, name, index))
                args = (spec.factory, setting, env_seeds, agent_seed)
            else:
                own = [
                    int(np.random.SeedSequence(_agent_entropy(seed, name, i)).generate_state(1)[0])
                    for i in idx
                ]
                args = (spec.factory, setting, env_seeds, own)
                if spec.kind == "per_trial":
                    args += (spec.flatten,)
            units.append((name, first, len(idx), spec.kind, args, spec.cost * len(idx)))
    # The slowest units first, so that the last ones to finish are short.
    order = sorted(range(len(units)), key=lambda i: -units[i][5])
    return [units[i] for i in order]


def _execute(payload: bytes):
    """Run one pickled unit (in this process, a pool worker or a Ray worker)."""
    import cloudpickle

    kind, args, kernels = cloudpickle.loads(payload)
    return engine.call(kernels, run_unit, kind, *args)


def compare(
    env_config: Mapping[str, Any],
    agents: Mapping[str, Callable | AgentSpec],
    *,
    trials: int = 20,
    rounds: int = 1000,
    seed: int = 0,
    targets: Mapping[str, np.ndarray] | None = None,
    checkpoints: int | Sequence[int] = 10,
    warm_start: int = 400,
    confidence_level: float = 0.95,
    jobs: int = 1,
    backend: str = "local",
    batch_size: int = 25,
    progress: bool | None = None,
    stream=None,
) -> ComparisonResult:
    """Run every agent on the same trials and return regret, estimation and inference.

    Parameters
    ----------
    env_config : mapping
        Keyword arguments of ``MatrixContextBandit-v0`` (``d1``, ``d2``, ``rank``,
        ``n_actions``, ``noise_std``, …; not ``flatten`` or ``max_episode_steps``).
    agents : mapping of str to factory or AgentSpec
        Named agents; a plain callable ``factory(env, seed=...)`` (an agent class or a
        function) is a batched agent (see the module notes, :func:`batched`,
        :func:`per_trial` and :func:`sb3`).
    trials, rounds : int
        Trials per agent (unless its spec says fewer) and rounds per trial.
    seed : int
        Root of every trial's and agent's seed.
    targets : mapping of str to array (d1, d2), optional
        Linear forms for ``<M_a, T>`` (default: the paper's ``T1``, ``T2``).
    checkpoints : int or sequence of int
        Rounds at which intervals and errors are read, or how many evenly spaced ones.
    warm_start : int
        Rounds of the wrappers' own warm start for agents without a shared low-rank
        estimator (give our low-rank agents the same ``warm_start``).
    confidence_level : float
    jobs : int
        Processes (or Ray workers) running units side by side.
    backend : {"local", "ray"}
    batch_size : int
        Trials per unit of a batched agent.
    progress : bool, optional
        A tqdm progress bar on stderr (default: when stderr is a terminal; a final line in
        any case unless False).
    stream : file, optional
        Where the final line goes (default stderr).

    Returns
    -------
    ComparisonResult

    Raises
    ------
    RunInterrupted
        On Ctrl-C once a unit has finished (a ``KeyboardInterrupt``,
        :class:`~.parallel.RunInterrupted`): the workers stop within a second and ``result``
        is the :class:`ComparisonResult` of the units that finished, with ``partial=True``
        (agents without a finished unit are left out; ``info["trials_done"]`` and
        ``info["trials_planned"]`` count every agent's trials).  Before any unit finished,
        the ``KeyboardInterrupt`` itself.
    """
    import gymnasium as gym

    env_kwargs = dict(env_config)
    for bad in ("flatten", "max_episode_steps", "num_envs"):
        if bad in env_kwargs:
            raise ValueError(f"env_config sets {bad!r}, which the comparison chooses itself")
    trials = _positive(trials, "trials")
    seed = _positive(seed, "seed", least=0)
    rounds = _positive(rounds, "rounds")
    jobs = _positive(jobs, "jobs")
    batch_size = _positive(batch_size, "batch_size")
    warm_start = _positive(warm_start, "warm_start")
    if backend not in ("local", "ray"):
        raise ArgumentError(f"backend must be 'local' or 'ray'; got {backend!r}", "backend")
    if not agents:
        raise ArgumentError("agents must name at least one agent", "agents")
    specs = {
        str(name): spec if isinstance(spec, AgentSpec) else batched(spec)
        for name, spec in agents.items()
    }
    try:
        probe = gym.make(
            "lrbandit_gym:MatrixContextBandit-v0", max_episode_steps=None, **env_kwargs
        )
    except (TypeError, ValueError) as exc:
        word = str(exc).split(" ", 1)[0]
        name = f"env_config.{word}" if word in env_kwargs else "env_config"
        raise ArgumentError(f"env_config: {exc}", name) from None
    base = probe.unwrapped
    if targets is None:
        targets = (
            paper_targets(base.d1, base.d2)
            if min(base.d1, base.d2) >= 3
            else {"T1": _entry(base.d1, base.d2)}
        )
    targets = {str(k): np.asarray(v, dtype=float) for k, v in targets.items()}
    if isinstance(checkpoints, int | np.integer):
        n = max(1, min(int(checkpoints), rounds))
        points = sorted({math.ceil(rounds * (i + 1) / n) for i in range(n)})
    else:
        points = sorted({int(c) for c in checkpoints} | {rounds})
        if points[0] < 1 or points[-1] > rounds:
            raise ValueError(f"checkpoints must lie in [1, rounds={rounds}]; got {checkpoints!r}")
    setting = ComparisonSetting(
        env_kwargs=env_kwargs,
        rounds=rounds,
        targets=targets,
        checkpoints=tuple(points),
        warm_start=warm_start,
        rank=int(base.rank),
        confidence_level=float(confidence_level),
    )
    truth = np.array([base.linear_form(t) for t in targets.values()])
    optimal = float(base.optimal_value)
    policy_values = target_policy_values(base)
    true_params = np.array(base.true_params)
    probe.close()

    import cloudpickle

    units = _units(specs, setting, trials, seed, batch_size)
    kernels = engine.active_engine()
    payloads = [cloudpickle.dumps((u[3], u[4], kernels)) for u in units]
    stream = sys.stderr if stream is None else stream
    total = sum(u[2] for u in units) * rounds
    bar = _progress_bar(total, progress, len(units))
    done = [0]

    def tick(i):
        done[0] += 1
        if bar is not None:
            bar.update(units[i][2] * rounds)

    start = time.perf_counter()
    stopped = None  # Ctrl-C: the units that finished make a partial result
    try:
        results = dict(enumerate(chunk_map(jobs, backend, tick)(_execute, payloads)))
    except Interrupted as exc:
        if not exc.results:
            raise
        stopped, results = exc, exc.results
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - start
    if progress is not False:
        ran = f"{len(units)} units" if stopped is None else f"{len(results)} of {len(units)} units"
        print(
            f"compare: {ran}, {total:,} trial-rounds of {len(specs)} agents "
            f"in {wall:.1f} s ({jobs} job(s), backend {backend})",
            file=stream,
        )
    per_agent: dict[str, list] = {name: [] for name in specs}
    planned = dict.fromkeys(specs, 0)
    for i, unit in enumerate(units):
        planned[unit[0]] += unit[2]
        if i in results:
            per_agent[unit[0]].append((unit[1], results[i]))
    data = {
        name: _concat(sorted(parts, key=lambda p: p[0]))
        for name, parts in per_agent.items()
        if parts
    }
    done = {name: sum(r["regret"].shape[0] for _, r in per_agent[name]) for name in specs}
    raised = (w for d in data.values() for w in d.get("warnings", []))
    for category, message, count in count_warnings(raised):  # each once, from the units
        warnings.warn(f"{message} [{count} unit(s)]", category, stacklevel=2)
    result = ComparisonResult(
        setting=setting,
        agents=[name for name in specs if name in data],
        data=data,
        truth=truth,
        optimal_value=optimal,
        true_params=true_params,
        info={
            "trials": trials,
            "rounds": rounds,
            "seed": seed,
            "jobs": jobs,
            "backend": backend,
            "batch_size": batch_size,
            "engine": kernels,
            "wall_seconds": wall,
            "kinds": {name: spec.kind for name, spec in specs.items()},
            "trials_done": done,
            "trials_planned": planned,
        },
        partial=stopped is not None,
        policy_values=policy_values,
    )
    if stopped is not None:
        reason = str(stopped) if isinstance(stopped, WorkerDied) else None
        raise RunInterrupted(result, sum(done.values()), sum(planned.values()), reason) from None
    return result


def _entry(d1: int, d2: int) -> np.ndarray:
    t = np.zeros((d1, d2))
    t[0, 0] = 1.0
    return t


def _progress_bar(total: int, progress: bool | None, units: int):
    """A tqdm bar on stderr counting trial-rounds, or None."""
    if progress is False:
        return None
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc=f"compare ({units} units)",
        unit=" trial-rounds",
        unit_scale=True,
        file=sys.stderr,
        disable=None if progress is None else False,
        smoothing=0.05,
    )


def _concat(parts: list[tuple[int, dict]]) -> dict[str, Any]:
    """One agent's units, in trial order, as one result."""
    out: dict[str, Any] = {
        "trials": np.concatenate(
            [np.arange(first, first + r["regret"].shape[0]) for first, r in parts]
        )
    }
    out.update(merge_units([p[1] for p in parts]))
    out["regret"] = np.cumsum(out["regret"], axis=1)
    return out
