"""The paper's simulation setting (Section 5, docs/method.md §6) on the Monte Carlo engine:
the setting of the validity tests and of ``lrbandit reproduce``'s tables.

A chunk (:func:`run_chunk`) runs B trials at once on the vector environment, with a batched
ε-greedy low-rank agent and the inference wrappers sharing its estimator (the paper's
procedure), and records every interval at chosen checkpoints ``n`` (one run of 3000 rounds
gives n = 1000, 2000 and 3000).  :func:`run_study` runs the chunks on
:mod:`~lrbandit_gym.experiments.montecarlo`, seeded from one ``SeedSequence``, so results
do not depend on how chunks are scheduled; the tables are read from the merged arrays by
:mod:`~lrbandit_gym.experiments.coverage`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lrbandit_gym.experiments.montecarlo import merge_trials, run_trials

__all__ = [
    "PAPER_WARM_START_ROUNDS",
    "PHASES",
    "StudyConfig",
    "UniformTracker",
    "make_study_env",
    "merge_chunks",
    "paper_targets",
    "run_chunk",
    "run_study",
]

#: What :func:`run_study` times in every chunk (wall-clock seconds in the process running it):
#: the warm-start rounds (their contexts drawn, played uniformly and stored), the fit of
#: ``M_init`` at the end of the warm start, and the online rounds with their read-outs.
PHASES = ("warm_start_rounds", "warm_start_fit", "online_rounds")

#: The paper's warm start: 2000 exploration rounds (all arms together, uniformly random
#: actions), the studies' default.  Not the policies' default, which
#: :func:`agents.warm_start.default_warm_start_rounds` sizes from the problem, so the
#: studies' numbers do not depend on that rule.
#:
#: In the paper's setting (d1 = d2 = 50, r = 3, K = 2, sigma = 0.1, Gaussian contexts, unit
#: singular values) this many rounds bring the rank-r refit of eq. (10) within the
#: initialisation condition ``‖M_init − M‖_F ≲ sigma`` for every arm; half as many (500 per
#: arm) are below the sample size at which nuclear-norm recovery works.
PAPER_WARM_START_ROUNDS = 2000


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
    warm_start: int | None = None  # None: PAPER_WARM_START_ROUNDS
    checkpoints: tuple[int, ...] = (1000, 2000, 3000)
    targets: str | None = "paper"  # "paper" for T1/T2; None for no parameter inference
    projection: str = "tangent"
    #: How <M_a, T> is read from the debiased average: "one-step" (the library's default)
    #: or "projection" (the paper's rank-r truncation, eq. (12)).
    point_estimate: str = "one-step"
    #: The design part of the parameters' variance: eq. (14), the paper's ("pulled"),
    #: unlike the wrappers' default ("auto", docs/method.md §13).
    design_variance: str = "pulled"
    value: bool = False  # also run optimal-value inference
    #: Extra inference variants fed the same trajectories: "paper"/"tangent" (the other
    #: projection), the negative controls "no_ipw"/"no_debias" (controls.py), and
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
    from agents import EpsilonGreedy
    from inference import ExplorationOnlyInference, build_stack
    from lrbandit_gym.experiments.controls import CONTROLS

    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    env_seed, agent_seed = ss.spawn(2)
    venv = make_study_env(config, n_trials)
    warm = PAPER_WARM_START_ROUNDS if config.warm_start is None else config.warm_start
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
            env = wrapper = build_stack(
                env,
                targets,
                value=False,
                estimator=agent.estimator,
                projection=projection,
                point_estimate=config.point_estimate,
                design_variance=config.design_variance,
            )
            if variant in CONTROLS:  # a negative control: the core with a part removed
                wrapper.core = CONTROLS[variant](
                    config.d1,
                    config.d2,
                    config.rank,
                    config.n_actions,
                    targets,
                    projection=projection,
                    point_estimate=config.point_estimate,
                    n_trials=n_trials,
                )
            elif variant not in ("", "paper", "tangent"):
                raise ValueError(f"unknown study variant {variant!r}")
            cores[variant] = wrapper
    if config.value:
        env = value = build_stack(env, estimator=agent.estimator)
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


#: Read-outs the same in every chunk of a study (kept once by the merge).
SHARED = ("truth", "optimal_value", "checkpoints", "uniform_rounds")


def merge_chunks(chunks: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The chunks' results as one: trials concatenated (last axis), :data:`SHARED` kept
    once, ``phase_seconds`` summed (timings, not results: kept apart by :func:`run_study`)."""
    return merge_trials(chunks, shared=SHARED, summed=("phase_seconds",))


def run_study(
    config: StudyConfig,
    n_trials: int,
    seed: int = 0,
    batch_size: int = 250,
    map_fn: Callable | None = None,
    progress: Callable[[int, int], None] | None = None,
    timing: dict | None = None,
) -> dict[str, np.ndarray]:
    """Run ``n_trials`` trials in chunks of ``batch_size`` (the last may be smaller) on the
    Monte Carlo engine (:func:`~lrbandit_gym.experiments.montecarlo.run_trials`).

    Chunk ``i`` is seeded by the ``i``-th child of ``SeedSequence(seed)``, whatever runs it:
    ``map_fn(fn, list_of_args)`` (e.g. :func:`~.montecarlo.chunk_map` on processes or Ray)
    may schedule chunks anywhere and the merged result is the same; without it the chunks
    run in this process, ``progress(done, total)`` after each.

    ``timing``, if given, is filled with the seconds spent in each of :data:`PHASES`, summed
    over chunks (so over processes: with J busy processes they add up to about J times the
    wall time).  Timings are kept out of the result, which depends on the seed only.

    Ctrl-C (a :class:`~.parallel.Interrupted` from ``map_fn``, or ``KeyboardInterrupt`` in
    this process) raises :class:`~.parallel.RunInterrupted` whose ``result`` merges the
    chunks that finished, with ``done`` of the ``n_trials`` trials; it lets the
    ``KeyboardInterrupt`` through when no chunk finished.
    """

    def merge(chunks):
        merged = merge_chunks(chunks)
        seconds = merged.pop("phase_seconds")
        if timing is not None:
            timing.update(zip(PHASES, seconds.tolist(), strict=True))
        return merged

    return run_trials(
        run_chunk, config, n_trials, seed, batch_size, merge, map_fn=map_fn, progress=progress
    )
