"""Monte Carlo studies of the online intervals: the engine of the validity tests and of
``lrbandit reproduce``.

A study runs B trials at once on the vector environment, with a batched ε-greedy low-rank
agent and the inference wrappers sharing its estimator (the paper's procedure, docs/method.md
§6), and records every interval at chosen checkpoints ``n`` (one run of 3000 rounds gives
n = 1000, 2000 and 3000).  Trials are processed in chunks of fixed size whose seeds are
spawned from one ``SeedSequence``, so results do not depend on how chunks are scheduled.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from lrbandit_gym import engine

__all__ = [
    "StudyConfig",
    "make_study_env",
    "paper_targets",
    "chunk_jobs",
    "process_map",
    "run_chunk",
    "run_study",
    "coverage_interval",
    "coverage_stats",
    "format_coverage",
    "summarize_parameters",
    "summarize_value",
    "summarize_uniform",
    "UniformTracker",
]

#: What :func:`run_study` times in every chunk (wall-clock seconds in the process running it):
#: the warm-start rounds (their contexts drawn, played uniformly and stored), the fit of
#: ``M_init`` at the end of the warm start, and the online rounds with their read-outs.
PHASES = ("warm_start_rounds", "warm_start_fit", "online_rounds")


def paper_targets(d1: int, d2: int) -> dict[str, np.ndarray]:
    """The paper's ``T1 = e1e1ᵀ`` and ``T2 = e1e1ᵀ + 2e2e2ᵀ − 3e3e3ᵀ`` (Section 5)."""
    t1 = np.zeros((d1, d2))
    t1[0, 0] = 1.0
    t2 = t1.copy()
    t2[1, 1] = 2.0
    t2[2, 2] = -3.0
    return {"T1": t1, "T2": t2}


@dataclass(frozen=True)
class StudyConfig:
    """One simulation setting (defaults: the paper's Table 1, docs/method.md §6)."""

    d1: int = 50
    d2: int = 50
    rank: int = 3
    n_actions: int = 2
    noise_std: float = 0.1
    singular_values: float | tuple = 1.0
    truth_seed: int = 0
    epsilon: float = 0.1
    epsilon_decay: float = 0.0
    step_scale: float = 0.1  # c_η of Algorithm 1 (the paper's 0.1 assumes ‖M_a‖ = 1)
    warm_start: int | None = None  # None: agents.DEFAULT_WARM_START_ROUNDS
    checkpoints: tuple[int, ...] = (1000, 2000, 3000)
    targets: str | None = "paper"  # "paper" for T1/T2; None for no parameter inference
    projection: str = "tangent"
    #: How <M_a, T> is read from the debiased average: "one-step" (the library's default)
    #: or "projection" (the paper's rank-r truncation, eq. (12)).
    point_estimate: str = "one-step"
    value: bool = False  # also run optimal-value inference
    #: Extra inference variants fed the same trajectories: "paper"/"tangent" (the other
    #: projection), the negative controls "no_ipw"/"no_debias" (LinearFormInference), and
    #: "exploration_only" (the baseline of the paper's Table 3).
    variants: tuple[str, ...] = ()
    #: Time-uniform coverage: from this online round on (n₀) up to the last checkpoint,
    #: every interval of the study's own procedure is read at *every* round, both the
    #: fixed-n interval and the confidence sequence, and a trial counts as covered only if
    #: the truth stays inside at all of those rounds.  None: checkpoints only.
    uniform_from: int | None = None
    #: Round at which the confidence sequences are tightest (``tuning_n``; None: the
    #: inference package's default).
    tuning_n: int | None = None
    #: Record every round's intervals (fixed and sequence, from ``uniform_from`` on) of this
    #: many trials of each chunk, for the figures.
    trace_trials: int = 0
    extra: dict = field(default_factory=dict)

    def replace(self, **changes) -> StudyConfig:
        return dataclasses.replace(self, **changes)


def _make_targets(config: StudyConfig) -> dict[str, np.ndarray] | None:
    if config.targets is None:
        return None
    if config.targets == "paper":
        return paper_targets(config.d1, config.d2)
    raise ValueError(f"targets must be 'paper' or None; got {config.targets!r}")


def make_study_env(config, n_trials: int):
    """The native vector env of ``n_trials`` bandits in ``config``'s setting (any config with
    ``d1``, ``d2``, ``rank``, ``n_actions``, ``noise_std``, ``singular_values`` and
    ``truth_seed``), without episode truncation."""
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the env)

    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=n_trials,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
        d1=config.d1,
        d2=config.d2,
        rank=config.rank,
        n_actions=config.n_actions,
        noise_std=config.noise_std,
        singular_values=np.asarray(config.singular_values),
        truth_seed=config.truth_seed,
    )


def run_chunk(config: StudyConfig, n_trials: int, seed) -> dict[str, np.ndarray]:
    """Run ``n_trials`` trials in one batch and return the intervals at every checkpoint.

    Returns arrays (leading axis: checkpoints) ``estimate``/``se`` of shape
    ``(C, n_T, K, B)``, ``diff_estimate``/``diff_se`` ``(C, n_T, B)`` for ``M_1 − M_0``,
    ``value_estimate``/``value_se`` ``(C, B)``, the truths ``truth`` ``(n_T, K)`` and
    ``optimal_value``, and ``phase_seconds`` (3,): the wall-clock seconds of :data:`PHASES`.
    """
    from threadpoolctl import threadpool_limits

    # One BLAS thread: multi-threaded reductions round differently, and the same seed must
    # give the same numbers on one process, many, or a Ray cluster.
    with threadpool_limits(1):
        return _run_chunk(config, n_trials, seed)


def _run_chunk(config: StudyConfig, n_trials: int, seed) -> dict[str, np.ndarray]:
    from agents import DEFAULT_WARM_START_ROUNDS, EpsilonGreedy
    from inference import (
        ExplorationOnlyInference,
        LinearFormInference,
        VectorParameterInference,
        VectorValueInference,
    )

    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    env_seed, agent_seed = ss.spawn(2)
    venv = make_study_env(config, n_trials)
    # The paper's warm start (2000 rounds) unless the study sets one: never the agents'
    # problem-sized default, so the studies' numbers do not depend on it.
    warm = DEFAULT_WARM_START_ROUNDS if config.warm_start is None else config.warm_start
    agent = EpsilonGreedy(
        venv,
        step_scale=config.step_scale,
        rank=config.rank,
        epsilon=config.epsilon,
        decay=config.epsilon_decay,
        seed=agent_seed,
        warm_start=warm,
        # the paper's exact step and the buffered fit, whatever the agents' defaults
        # (docs/method.md §3: step_scale is the absolute c_η; the default is scale-free)
        warm_start_fit="buffer",
        # the chunk's warm-start buffer is sized on purpose (see single_threaded_blas)
        max_memory_bytes=max(2**31, n_trials * warm * (config.d1 * config.d2 + 64) * 8),
    )
    env = venv
    targets = _make_targets(config)
    cores = {}  # variant name -> wrapper; "" is the study's own procedure
    value = explore = None
    if targets is not None and "exploration_only" in config.variants:
        explore = ExplorationOnlyInference(
            config.d1,
            config.d2,
            config.rank,
            config.n_actions,
            targets,
            projection=config.projection,
            point_estimate=config.point_estimate,
            n_trials=n_trials,
        )
    if targets is not None:
        for variant in ("",) + tuple(v for v in config.variants if v != "exploration_only"):
            projection = variant if variant in ("paper", "tangent") else config.projection
            env = wrapper = VectorParameterInference(
                env,
                targets,
                estimator=agent.estimator,
                projection=projection,
                point_estimate=config.point_estimate,
            )
            if variant in ("no_ipw", "no_debias"):  # negative control: an ablated core
                wrapper.core = LinearFormInference(
                    config.d1,
                    config.d2,
                    config.rank,
                    config.n_actions,
                    targets,
                    projection=projection,
                    point_estimate=config.point_estimate,
                    n_trials=n_trials,
                    ablation=variant,
                )
            elif variant not in ("", "paper", "tangent"):
                raise ValueError(f"unknown study variant {variant!r}")
            cores[variant] = wrapper
    if config.value:
        env = value = VectorValueInference(env, estimator=agent.estimator)
    base = venv.unwrapped
    checkpoints = sorted(config.checkpoints)
    n_c, k = len(checkpoints), config.n_actions
    names = [] if targets is None else list(targets)
    out = {
        "value_estimate": np.full((n_c, n_trials), np.nan),
        "value_se": np.full((n_c, n_trials), np.nan),
        "truth": np.array([base.linear_form(targets[n]) for n in names]).reshape(len(names), k),
        "optimal_value": np.array(base.optimal_value if config.value else np.nan),
        "regret": np.zeros(n_trials),
    }
    for variant in list(cores) + (["exploration_only"] if explore is not None else []):
        p = f"{variant}:" if variant else ""
        out[p + "estimate"] = np.full((n_c, len(names), k, n_trials), np.nan)
        out[p + "se"] = np.full((n_c, len(names), k, n_trials), np.nan)
        out[p + "diff_estimate"] = np.full((n_c, len(names), n_trials), np.nan)
        out[p + "diff_se"] = np.full((n_c, len(names), n_trials), np.nan)
    tracker = None
    if config.uniform_from is not None:
        tracker = UniformTracker(cores.get(""), value, names, k, n_trials, config, checkpoints[-1])
    obs, _ = env.reset(seed=int(env_seed.generate_state(1)[0]))
    online = 0
    # Wall-clock marks: loop start, before and after the update that runs the warm-start
    # fit, loop end (see PHASES).
    marks = [time.perf_counter(), np.nan, np.nan, np.nan]
    while online < checkpoints[-1]:
        decision = agent.act(obs)
        was_online = not agent.in_warm_start
        if explore is not None and was_online:
            eps = agent.epsilon_at(agent.online_rounds + 1)
            u, v = (np.array(f) for f in agent.estimator.factors)
        next_obs, reward, _, _, info = env.step(decision)
        if explore is not None and was_online:
            explore.update(u, v, obs, decision.action, reward, agent.last_explored, eps)
        before = time.perf_counter()
        agent.update(obs, decision, reward)
        obs = next_obs
        if not was_online:
            if not agent.in_warm_start:  # this update fitted M_init
                marks[1:3] = before, time.perf_counter()
            continue
        online += 1
        out["regret"] += info["regret"]
        if tracker is not None and online >= config.uniform_from:
            tracker.read(online, out["truth"], out["optimal_value"])
        if online not in checkpoints:
            continue
        c = checkpoints.index(online)
        readers = dict(cores)
        if explore is not None:
            readers["exploration_only"] = explore
        for variant, param in readers.items():
            p = f"{variant}:" if variant else ""
            for j, name in enumerate(names):
                for arm in range(k):
                    ci = param.interval(arm, name)
                    out[p + "estimate"][c, j, arm] = ci.estimate
                    out[p + "se"][c, j, arm] = ci.standard_error
                ci = param.difference(1, 0, name)
                out[p + "diff_estimate"][c, j] = ci.estimate
                out[p + "diff_se"][c, j] = ci.standard_error
        if value is not None:
            ci = value.interval()
            out["value_estimate"][c] = ci.estimate
            out["value_se"][c] = ci.standard_error
    marks[3] = time.perf_counter()
    if tracker is not None:
        out.update(tracker.results())
    out["checkpoints"] = np.asarray(checkpoints)
    out["phase_seconds"] = np.diff(marks)
    return out


class UniformTracker:
    """Reads every interval of a study at every round from ``config.uniform_from`` on and
    keeps, per trial, whether the truth has stayed inside so far (time-uniform coverage).

    Both kinds are read through the wrappers' public ``interval``/``difference``:
    ``kind="fixed"`` (the paper's intervals) and ``kind="sequence"`` (the confidence
    sequences, tuned at ``config.tuning_n``).  ``results`` gives boolean arrays
    ``uniform:{kind}:covered`` ``(n_T, K, B)``, ``uniform:{kind}:diff_covered`` ``(n_T, B)``
    and ``uniform:{kind}:value_covered`` ``(B,)``, the rounds checked, and, for the first
    ``config.trace_trials`` trials, every round's bounds (``trace:*``).
    """

    KINDS = ("fixed", "sequence")

    def __init__(self, param, value, names, k, n_trials, config, last: int) -> None:
        from inference.sequences import DEFAULT_TUNING_N

        self.param, self.value, self.names, self.k = param, value, list(names), k
        self.opts = {"tuning_n": config.tuning_n or DEFAULT_TUNING_N}
        self.first, self.last = int(config.uniform_from), int(last)
        if not 1 <= self.first <= self.last:
            raise ValueError(
                f"uniform_from must be in [1, {self.last}] (the last checkpoint); "
                f"got {config.uniform_from!r}"
            )
        n_t = len(self.names)
        self.covered = {
            kind: {
                "covered": np.ones((n_t, k, n_trials), bool),
                "diff_covered": np.ones((n_t, n_trials), bool),
                "value_covered": np.ones(n_trials, bool),
            }
            for kind in self.KINDS
        }
        self.n_trace = min(int(config.trace_trials), n_trials)
        rounds = self.last - self.first + 1
        self.trace = {}
        if self.n_trace:
            for kind in self.KINDS:
                for bound in ("low", "high"):
                    self.trace[f"trace:{kind}:{bound}"] = np.full(
                        (rounds, n_t, k, self.n_trace), np.nan
                    )
                    self.trace[f"trace:{kind}:value_{bound}"] = np.full(
                        (rounds, self.n_trace), np.nan
                    )
            self.trace["trace:point"] = np.full((rounds, n_t, k, self.n_trace), np.nan)
            self.trace["trace:value_point"] = np.full((rounds, self.n_trace), np.nan)

    def read(self, n: int, truth: np.ndarray, optimal_value) -> None:
        """Read round ``n``'s intervals and update the running coverage."""
        import warnings

        from inference import InsufficientDataWarning

        row = n - self.first
        m = self.n_trace
        with warnings.catch_warnings():
            # an arm not yet pulled gives NaN (counted as not covered), warned once per read
            warnings.simplefilter("ignore", InsufficientDataWarning)
            for kind in self.KINDS:
                cov = self.covered[kind]
                opts = {"kind": kind, **self.opts}
                for j, name in enumerate(self.names if self.param is not None else []):
                    for arm in range(self.k):
                        ci = self.param.interval(arm, name, **opts)
                        cov["covered"][j, arm] &= ci.contains(truth[j, arm])
                        if m:
                            self.trace[f"trace:{kind}:low"][row, j, arm] = ci.low[:m]
                            self.trace[f"trace:{kind}:high"][row, j, arm] = ci.high[:m]
                            self.trace["trace:point"][row, j, arm] = ci.estimate[:m]
                    ci = self.param.difference(1, 0, name, **opts)
                    cov["diff_covered"][j] &= ci.contains(truth[j, 1] - truth[j, 0])
                if self.value is not None:
                    ci = self.value.interval(**opts)
                    cov["value_covered"] &= ci.contains(float(optimal_value))
                    if m:
                        self.trace[f"trace:{kind}:value_low"][row] = ci.low[:m]
                        self.trace[f"trace:{kind}:value_high"][row] = ci.high[:m]
                        self.trace["trace:value_point"][row] = ci.estimate[:m]

    def results(self) -> dict[str, np.ndarray]:
        out = {
            f"uniform:{kind}:{key}": arr
            for kind, arrays in self.covered.items()
            for key, arr in arrays.items()
        }
        out["uniform_rounds"] = np.array([self.first, self.last, self.opts["tuning_n"]])
        out.update(self.trace)
        return out


def _concat(chunks: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    first = chunks[0]
    merged = {}
    for key, value in first.items():
        if key == "phase_seconds":  # timings, not results: summed, kept apart by run_study
            merged[key] = np.sum([c[key] for c in chunks], axis=0)
        elif key in ("truth", "optimal_value", "checkpoints", "uniform_rounds"):
            merged[key] = value
        else:
            merged[key] = np.concatenate([c[key] for c in chunks], axis=-1)
    return merged


def run_study(
    config: StudyConfig,
    n_trials: int,
    seed: int = 0,
    batch_size: int = 250,
    map_fn: Callable | None = None,
    progress: Callable[[int, int], None] | None = None,
    timing: dict | None = None,
) -> dict[str, np.ndarray]:
    """Run ``n_trials`` trials in chunks of ``batch_size`` (the last may be smaller).

    Chunk ``i`` is seeded by the ``i``-th child of ``SeedSequence(seed)``, whatever runs it:
    ``map_fn(fn, list_of_args)`` (e.g. a process pool's or Ray's map) may schedule chunks
    anywhere and the merged result is the same.

    ``timing``, if given, is filled with the seconds spent in each of :data:`PHASES`, summed
    over chunks (so over processes: with J busy processes they add up to about J times the
    wall time).  Timings are kept out of the result, which depends on the seed only.

    Ctrl-C (a :class:`~.parallel.Interrupted` from ``map_fn``, or ``KeyboardInterrupt`` in
    this process) raises :class:`~.parallel.RunInterrupted` whose ``result`` merges the
    chunks that finished, with ``done`` of the ``n_trials`` trials; it lets the
    ``KeyboardInterrupt`` through when no chunk finished.
    """
    from lrbandit_gym.experiments.parallel import Interrupted, RunInterrupted, local_map

    jobs = chunk_jobs(config, n_trials, batch_size, seed)
    stopped = None
    try:
        if map_fn is None:  # in this process, one warm-start buffer for all chunks
            tick = None if progress is None else (lambda i: progress(i + 1, len(jobs)))
            chunks = local_map(_run_job, jobs, 1, tick)
        else:
            chunks = list(map_fn(_run_job, jobs))
    except Interrupted as exc:
        if not exc.results:
            raise
        stopped = exc
        chunks = list(exc.results.values())
    merged = _concat(chunks)
    seconds = merged.pop("phase_seconds")
    if timing is not None:
        timing.update(zip(PHASES, seconds.tolist(), strict=True))
    if stopped is not None:
        done = sum(jobs[i][1] for i in stopped.results)
        raise RunInterrupted(merged, done, n_trials) from None
    return merged


def chunk_jobs(config, n_trials: int, batch_size: int, seed) -> list[tuple]:
    """The chunks of a study: ``(config, size, seed, engine)`` for chunks of ``batch_size``
    trials (the last may be smaller), chunk ``i`` seeded by the ``i``-th child of
    ``SeedSequence(seed)`` and run with the caller's engine (Ray's workers too)."""
    sizes = [batch_size] * (n_trials // batch_size)
    if n_trials % batch_size:
        sizes.append(n_trials % batch_size)
    seeds = np.random.SeedSequence(seed).spawn(len(sizes))
    kernels = engine.active_engine()
    return [(config, size, s, kernels) for size, s in zip(sizes, seeds, strict=True)]


def _run_job(job):
    """A chunk for ``map_fn``: ``(config, n_trials, seed, engine)``, run with that engine
    (the process pools' initializer, :func:`single_threaded_blas`, makes their workers keep
    one warm-start buffer for all their chunks)."""
    *args, kernels = job
    return engine.call(kernels, run_chunk, *args)


def single_threaded_blas() -> None:
    """Worker initializer: one BLAS thread per process (2 processes on 2 cores, not 2×2),
    one warm-start buffer reused by all the chunks the process runs, and freed memory kept
    for reuse (:func:`_keep_freed_memory`)."""
    from threadpoolctl import threadpool_limits

    from agents.warm_start import reuse_buffer_memory

    threadpool_limits(1)
    reuse_buffer_memory(True)
    _keep_freed_memory()


# glibc's mallopt parameters (malloc.h) and the largest mmap threshold it accepts on 64-bit.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MMAP_THRESHOLD_MAX = 32 << 20


def _keep_freed_memory() -> bool:
    """Make glibc's ``malloc`` keep freed memory in the process for reuse (study workers).

    The warm-start fit allocates and frees arrays of ~10 MB per trial and arm.  By default
    glibc hands such blocks back to the kernel as soon as they are freed, so the next trial
    faults every page in again and the kernel zeroes it (docs/performance.md gives the
    counts).  Serving blocks up to 32 MB
    from the heap and keeping up to 1 GB of freed heap removes them; the numbers computed do
    not change.  Larger blocks (the warm-start buffer) are still mapped on their own.

    Called by the initializer of the worker processes that :func:`process_map` and
    ``lrbandit reproduce --backend local`` start, never in the caller's own process.
    Returns whether the options were set: False where the C library is not glibc (the
    workers then run as before).
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX),
            (_M_TRIM_THRESHOLD, 1 << 30),
            (_M_TOP_PAD, 64 << 20),
        )
    )


def process_map(jobs: int):
    """A ``map_fn`` for :func:`run_study` that runs chunks on ``jobs`` local processes
    (worker processes even for ``jobs == 1``, each with one BLAS thread); Ctrl-C stops it
    at once (:func:`~.parallel.process_pool_map`)."""
    from lrbandit_gym.experiments.parallel import process_pool_map

    def map_fn(fn, items):
        return process_pool_map(fn, items, jobs)

    return map_fn


#: Level of the Monte Carlo interval reported beside every coverage (:func:`coverage_interval`).
MC_LEVEL = 0.95


def coverage_interval(covered, trials, level: float = MC_LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a coverage: ``covered`` of ``trials`` intervals held.

    The normal-approximation error ``sqrt(c (1 − c)/N)`` collapses to zero at ``c = 0`` or
    ``1`` (20 trials that all cover would read ``1.000 ± 0.000``) and its bars pass 1 near
    the edges; the Wilson interval inverts the score test instead, so it stays inside
    ``[0, 1]`` and keeps a width at the edges (20 of 20: ``[0.839, 1]`` at 95%).  It is the
    interval of ``scipy.stats.binomtest(covered, trials).proportion_ci(method="wilson")``.
    ``(nan, nan)`` without trials.
    """
    n = float(trials)
    if not n > 0:
        return math.nan, math.nan
    p = float(covered) / n
    z = float(stats.norm.ppf(0.5 + level / 2))
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def format_coverage(row: dict, key: str = "coverage", digits: int = 3) -> str:
    """``"0.950 [0.93, 0.96]"``: a coverage and its Wilson interval (``{key}_low`` and
    ``{key}_high`` of ``row``), or ``"n/a"`` for a coverage that is not finite."""
    value = row[key]
    if not math.isfinite(value):
        return "n/a"
    low, high = row.get(f"{key}_low", math.nan), row.get(f"{key}_high", math.nan)
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{value:.{digits}f}"
    inner = max(2, digits - 1)
    return f"{value:.{digits}f} [{low:.{inner}f}, {high:.{inner}f}]"


def coverage_stats(
    estimate: np.ndarray, standard_error: np.ndarray, low: np.ndarray, high: np.ndarray, truth
) -> dict[str, float]:
    """Monte Carlo summary of one cell: the trials' intervals for one quantity at one ``n``.

    Trials whose interval is not finite (too little data) are left out and counted apart.
    ``coverage`` is the fraction of intervals ``[low, high]`` that contain ``truth``, with
    its 95% Wilson interval ``coverage_low``/``coverage_high`` (:func:`coverage_interval`,
    what tables and figures show) and the normal-approximation standard error
    ``coverage_mcse = sqrt(c (1 − c)/N)`` (kept for the files); ``z = (estimate − truth)/se`` has
    mean (s.e. ``sd/√N``) and standard deviation (s.e. ``sd/√(2(N − 1))``, exact for normal
    z); ``mean_length`` is the mean of ``high − low`` and ``mse`` that of
    ``(estimate − truth)²``.  The paper studies' tables and ``lrbandit validate`` use it.
    """
    est, se = np.asarray(estimate, float), np.asarray(standard_error, float)
    lo, hi = np.asarray(low, float), np.asarray(high, float)
    ok = np.isfinite(est) & np.isfinite(se) & np.isfinite(lo) & np.isfinite(hi) & (se > 0)
    n = int(ok.sum())
    out = {
        "trials": n,
        "no_interval": int(ok.size - n),
        "coverage": math.nan,
        "coverage_mcse": math.nan,
        "coverage_low": math.nan,
        "coverage_high": math.nan,
        "z_mean": math.nan,
        "z_mean_mcse": math.nan,
        "z_sd": math.nan,
        "z_sd_mcse": math.nan,
        "mean_length": math.nan,
        "mse": math.nan,
    }
    if n == 0:
        return out
    covered = (lo[ok] <= truth) & (truth <= hi[ok])
    c = float(covered.mean())
    z = (est[ok] - truth) / se[ok]
    low_c, high_c = coverage_interval(int(covered.sum()), n)
    out.update(
        coverage=c,
        coverage_mcse=math.sqrt(c * (1 - c) / n),
        coverage_low=low_c,
        coverage_high=high_c,
        z_mean=float(z.mean()),
        mean_length=float(np.mean(hi[ok] - lo[ok])),
        mse=float(np.mean((est[ok] - truth) ** 2)),
    )
    if n > 1:
        sd = float(z.std(ddof=1))
        out.update(
            z_mean_mcse=sd / math.sqrt(n),
            z_sd=sd,
            z_sd_mcse=sd / math.sqrt(2 * (n - 1)),
        )
    return out


def _coverage_stats(est, se, truth, confidence_level):
    """:func:`coverage_stats` of the Wald intervals ``est ± z·se``."""
    z = stats.norm.ppf(0.5 + confidence_level / 2)
    est, se = np.asarray(est, float), np.asarray(se, float)
    return coverage_stats(est, se, est - z * se, est + z * se, truth)


def summarize_parameters(
    result: dict, confidence_level: float = 0.95, variant: str = ""
) -> list[dict]:
    """One row per checkpoint × target × (arm or difference) with coverage, length, MSE and
    z-score moments, each with its Monte Carlo standard error (``variant``: see
    :attr:`StudyConfig.variants`; "" is the study's own procedure)."""
    p = f"{variant}:" if variant else ""
    rows = []
    names = ["T1", "T2"][: result[p + "estimate"].shape[1]]
    k = result[p + "estimate"].shape[2]
    for c, n in enumerate(result["checkpoints"]):
        for j, name in enumerate(names):
            for arm in range(k):
                s = _coverage_stats(
                    result[p + "estimate"][c, j, arm],
                    result[p + "se"][c, j, arm],
                    result["truth"][j, arm],
                    confidence_level,
                )
                rows.append({"n": int(n), "target": name, "quantity": f"arm {arm}", **s})
            truth = result["truth"][j, 1] - result["truth"][j, 0]
            s = _coverage_stats(
                result[p + "diff_estimate"][c, j],
                result[p + "diff_se"][c, j],
                truth,
                confidence_level,
            )
            rows.append({"n": int(n), "target": name, "quantity": "arm 1 - arm 0", **s})
    return rows


def summarize_value(result: dict, confidence_level: float = 0.95) -> list[dict]:
    """Coverage and z-score moments of the optimal-value interval at every checkpoint."""
    rows = []
    for c, n in enumerate(result["checkpoints"]):
        s = _coverage_stats(
            result["value_estimate"][c],
            result["value_se"][c],
            float(result["optimal_value"]),
            confidence_level,
        )
        rows.append({"n": int(n), "target": "V*", "quantity": "optimal value", **s})
    return rows


def summarize_uniform(result: dict, confidence_level: float = 0.95) -> list[dict]:
    """Time-uniform coverage, one row per target × (arm or difference) and for ``V*``.

    Columns: ``n0``/``N`` (the rounds checked, every round from ``n0`` to ``N``),
    ``tuning_n``, the fixed-n coverage at ``N`` (``fixed_at_N``), the time-uniform coverage
    of the fixed-n intervals (``uniform_fixed``) and of the confidence sequences
    (``uniform_sequence``), each with its Monte Carlo s.e. and Wilson interval (``_low``,
    ``_high``), and the sequence's width
    relative to the fixed-n interval at ``N`` (``width_ratio``).  Empty when the study ran
    without ``uniform_from``.
    """
    if "uniform_rounds" not in result:
        return []
    from inference.results import critical_value
    from inference.sequences import sequence_factor

    n0, big_n, tuning = (int(v) for v in result["uniform_rounds"])
    alpha = 1.0 - confidence_level
    ratio = float(np.sqrt(big_n) * sequence_factor(big_n, alpha, tuning))
    ratio /= critical_value(confidence_level)
    base = {"n0": n0, "N": big_n, "tuning_n": tuning, "width_ratio": ratio}
    fixed_rows = summarize_parameters(result, confidence_level) if "estimate" in result else []
    if np.isfinite(result["optimal_value"]):
        fixed_rows += summarize_value(result, confidence_level)
    at_n = {(r["target"], r["quantity"]): r["coverage"] for r in fixed_rows if r["n"] == big_n}

    def row(target, quantity, fixed, seq):
        out = {"target": target, "quantity": quantity, **base}
        out["fixed_at_N"] = at_n.get((target, quantity), np.nan)
        for label, cov in (("uniform_fixed", fixed), ("uniform_sequence", seq)):
            p = float(np.mean(cov))
            out[label] = p
            out[label + "_mcse"] = float(np.sqrt(p * (1 - p) / cov.size))
            interval = coverage_interval(int(np.sum(cov)), cov.size)
            out[label + "_low"], out[label + "_high"] = interval
        return out

    rows = []
    fixed, seq = result["uniform:fixed:covered"], result["uniform:sequence:covered"]
    names = ["T1", "T2"][: fixed.shape[0]]
    for j, name in enumerate(names):
        for arm in range(fixed.shape[1]):
            rows.append(row(name, f"arm {arm}", fixed[j, arm], seq[j, arm]))
        rows.append(
            row(
                name,
                "arm 1 - arm 0",
                result["uniform:fixed:diff_covered"][j],
                result["uniform:sequence:diff_covered"][j],
            )
        )
    if np.isfinite(result["optimal_value"]):
        rows.append(
            row(
                "V*",
                "optimal value",
                result["uniform:fixed:value_covered"],
                result["uniform:sequence:value_covered"],
            )
        )
    return rows
