"""``lrbandit validate``: a Monte Carlo check of the intervals' coverage in any setting.

The paper's studies (:mod:`~lrbandit_gym.experiments.studies`) check the intervals where
the paper did.  :func:`validate` checks them where a user is: any environment
configuration of ``MatrixContextBandit-v0`` (sizes, rank, arms, Gaussian or completion
contexts, a noise level per arm, any noise law, singular values), a policy from
:mod:`agents`, targets ``T`` and checkpoints ``n``.  It runs ``trials`` independent trials
batched on the native vector env, with the inference wrappers watching the policy play, reads
every interval at every checkpoint, and returns a :class:`ValidationResult`: per checkpoint
and quantity the coverage, the mean and standard deviation of the z-scores
``(estimate − truth)/se`` and the mean length, each with its Monte Carlo standard error, and
a one-line verdict (the rule: :func:`~lrbandit_gym.experiments.validate.report.verdict`).

How a chunk runs.  Trials run in chunks of ``batch_size`` on the Monte Carlo engine
(:mod:`~lrbandit_gym.experiments.montecarlo`): chunk ``i`` is seeded by the ``i``-th child
of ``SeedSequence(seed)`` and runs with one BLAS thread, in this process, in ``jobs`` local
processes or on Ray (``backend``), so results depend on ``seed`` and ``batch_size`` only,
not on ``jobs`` or ``backend``.  The loop (:func:`run_chunk`) is the standard
``act → step → update`` with the inference wrappers of
:class:`~lrbandit_gym.experiments.validate.stack.InferenceStack` stacked on the env.  The
wrappers share the policy's estimator (``estimator="shared"``, the paper's procedure; then
inference starts when the policy's warm start ends) or run their own, warm-started on the
first ``warm_start`` rounds they see (``"own"``; the only choice for a policy without a
low-rank estimator).  Either way the warm start is checked on held-out rounds
(:mod:`agents.warm_start.check`) and a :class:`~agents.warm_start.check.WarmStartWarning`
is reported when it leaves the estimate too far from the truth for the theory.

Per-round read-outs.  Every round after inference has started, each *reader* of the chunk
(:class:`~lrbandit_gym.experiments.validate.readers.Reader`) is asked whether it wants to
read (``due(n)``) and then reads the wrappers (``read(n, stack)``).
:class:`~lrbandit_gym.experiments.validate.readers.CheckpointReader` reads the intervals at
the checkpoints; a reader that reads every round from some ``n0`` (for instance to measure
time-uniform coverage) is another reader passed in ``readers``.

The setting is :class:`~lrbandit_gym.experiments.validate.setting.ValidationSetting`; the
grid of settings outside the paper
(:data:`~lrbandit_gym.experiments.validate.grid.GRID`) runs with ``lrbandit validate
--grid``.
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lrbandit_gym.experiments.montecarlo import (
    BACKENDS,
    ChunkResults,
    merge_trials,
    plan_chunks,
    run_chunks,
)
from lrbandit_gym.experiments.run_warnings import count_warnings, recorded_warnings
from lrbandit_gym.experiments.validate.readers import CheckpointReader, Reader
from lrbandit_gym.experiments.validate.report import ValidationResult, flag_cells, verdict
from lrbandit_gym.experiments.validate.setting import (
    ENV_KEYS,
    ESTIMATORS,
    LOW_RANK_POLICIES,
    POLICIES,
    SettingError,
    ValidationSetting,
    load_targets,
    make_env,
    make_policy,
    problem_sizes,
    warm_start_rounds,
)
from lrbandit_gym.experiments.validate.stack import InferenceStack
from lrbandit_gym.experiments.validate.uniform import UniformReader, uniform_verdict
from lrbandit_gym.experiments.validate.warning_rates import warned_verdict

__all__ = [
    "check_setting",
    "default_batch_size",
    "run_chunk",
    "run_validation",
    "validate",
]


# --------------------------------------------------------------------------- checks
_ENV_FIELDS = re.compile(
    r"^(d1|d2|rank|n_actions|context|noise_std|noise|singular_values|truth_seed|flatten)\b"
)


def check_setting(setting: ValidationSetting) -> dict[str, np.ndarray]:
    """Check a setting before any trial runs, by building one trial of it; returns its
    targets.

    Raises
    ------
    SettingError
        Naming the offending field: ``"env.KEY"``, ``"policy"``, ``"policy_kwargs.KEY"``
        (or ``"policy_kwargs"``), ``"rank"``, ``"warm_start"``, ``"targets"``, ``"n"``,
        ``"estimator"``, ``"value"``.
    """
    if not isinstance(setting.env, Mapping):
        raise SettingError("env", f"env must be a mapping of arguments; got {setting.env!r}")
    unknown = [k for k in setting.env if k not in ENV_KEYS]
    if unknown:
        raise SettingError(
            f"env.{unknown[0]}", f"unknown env argument {unknown[0]!r}; choose from {ENV_KEYS}"
        )
    if setting.estimator not in ESTIMATORS:
        raise SettingError(
            "estimator", f"estimator must be one of {ESTIMATORS}; got {setting.estimator!r}"
        )
    if not callable(setting.policy) and setting.policy not in POLICIES:
        raise SettingError("policy", f"policy must be one of {POLICIES}; got {setting.policy!r}")
    n = setting.n
    if (
        not isinstance(n, tuple | list)
        or not n
        or any(isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1 for v in n)
    ):
        raise SettingError("n", f"n must be one or more positive integers; got {n!r}")
    for name in ("rank", "warm_start", "uniform_from", "tuning_n"):
        v = getattr(setting, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1):
            raise SettingError(name, f"{name} must be a positive integer; got {v!r}")
    if setting.uniform_from is not None and setting.uniform_from > max(n):
        raise SettingError(
            "uniform_from",
            f"uniform_from must be at most the last checkpoint {max(n)}; "
            f"got {setting.uniform_from!r}",
        )
    if setting.tuning_n is not None and setting.uniform_from is None:
        raise SettingError("tuning_n", "tuning_n needs uniform_from (the first round checked)")
    from inference.cores.projection_choice import PROJECTIONS

    if setting.projection is not None and setting.projection not in PROJECTIONS:
        raise SettingError(
            "projection", f"projection must be one of {PROJECTIONS}; got {setting.projection!r}"
        )
    from inference.cores.design_variance import DESIGN_VARIANCES

    if setting.design_variance is not None and setting.design_variance not in DESIGN_VARIANCES:
        raise SettingError(
            "design_variance",
            f"design_variance must be one of {DESIGN_VARIANCES}; got {setting.design_variance!r}",
        )
    if not isinstance(setting.value, bool):
        raise SettingError("value", f"value must be true or false; got {setting.value!r}")
    try:
        venv = make_env(setting.env, 1)
    except (ValueError, TypeError) as exc:
        m = _ENV_FIELDS.match(str(exc))
        raise SettingError(f"env.{m.group(1)}" if m else "env", str(exc)) from None
    d1, d2, rank, k, _ = problem_sizes(venv, setting)
    if setting.rank is not None and rank > min(d1, d2):
        raise SettingError("rank", f"rank must be <= min(d1, d2) = {min(d1, d2)}; got {rank}")
    targets = load_targets(setting.targets, d1, d2)
    if not targets and not setting.value:
        raise SettingError("targets", "nothing to check: no targets and value = false")
    try:
        agent = make_policy(setting, venv, np.random.SeedSequence(0))
    except (ValueError, TypeError) as exc:
        m = re.search(r"unexpected keyword argument '(\w+)'", str(exc)) or re.match(
            r"^(\w+)", str(exc)
        )
        key = m.group(1) if m else ""
        if key in ("warm_start",):
            raise SettingError("warm_start", str(exc)) from None
        where = f"policy_kwargs.{key}" if key in setting.policy_kwargs else "policy_kwargs"
        raise SettingError(where, f"policy {setting.policy!r}: {exc}") from None
    try:
        InferenceStack(venv, agent, setting, targets)
    except SettingError:
        raise
    except ValueError as exc:
        # A read-out option the stack refuses names itself first; the rest is the estimator's.
        m = re.match(r"^(\w+)", str(exc))
        key = m.group(1) if m and m.group(1) in _READOUT_FIELDS else "estimator"
        raise SettingError(key, str(exc)) from None
    return targets


#: The parameter read-out's fields of a setting, which the stack's refusals name first.
_READOUT_FIELDS = ("context_law", "projection", "design_variance")


def _chunk_bytes(setting: ValidationSetting) -> int:
    """Bytes per trial of a chunk's largest buffers (warm-start rounds; the linear
    policy's inverse Gram matrices)."""
    from agents.warm_start import completion_buffer_bytes, warm_start_buffer_bytes

    venv = make_env(setting.env, 1)
    d1, d2, _, k, context = problem_sizes(venv, setting)
    warm = warm_start_rounds(setting, venv)
    # the warm-start store's own sizes: completion rounds as indices, dense ones as matrices
    per = (
        completion_buffer_bytes(warm)
        if context == "completion"
        else warm_start_buffer_bytes(d1, d2, warm)
    )
    low_rank = setting.policy in LOW_RANK_POLICIES
    copies = 2 if low_rank and setting.estimator == "own" else 1
    total = per * copies
    if setting.policy == "linear-epsilon-greedy":
        total += k * (d1 * d2) ** 2 * 8
    return total


#: Largest warm-start storage (bytes) a chunk's default batch size allows.
_CHUNK_BYTES = 2**30
_DEFAULT_BATCH = 100


def default_batch_size(setting: ValidationSetting) -> int:
    """Trials per chunk by default: 100, fewer when their buffers would exceed 1 GiB."""
    return max(1, min(_DEFAULT_BATCH, _CHUNK_BYTES // max(_chunk_bytes(setting), 1)))


# --------------------------------------------------------------------------- running
def run_chunk(
    setting: ValidationSetting,
    n_trials: int,
    seed,
    confidence_level: float = 0.95,
    readers: Sequence[type[Reader]] = (CheckpointReader,),
    report: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run ``n_trials`` trials of ``setting`` in one batch on the vector env.

    Returns ``{"quantities", "readers": {name: arrays}, "estimation_error" (C, B, K),
    and each of :data:`CHECKPOINTED` (C, B) (:meth:`InferenceStack.checkpoint_diagnostics`),
    "min_propensity" (B,), "warm_start_ratio" (B, K), "warnings": [(category, message)],
    "rounds": rounds played, "failure": None or why the chunk stopped early}``; ``report(k)``
    is called every 50 rounds with the rounds played since the last call.  A
    ``FloatingPointError`` of the policy or the wrappers (a diverging estimator, which stops
    every trial of the batch) ends the chunk early instead of raising.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1), recorded_warnings() as caught:
        out = _run_chunk(setting, n_trials, seed, confidence_level, readers, report)
    out["warnings"] = caught
    return out


def _run_chunk(setting, n_trials, seed, confidence_level, readers, report):
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    env_seed, agent_seed = ss.spawn(2)
    venv = make_env(setting.env, n_trials)
    d1, d2, _, k, _ = problem_sizes(venv, setting)
    targets = load_targets(setting.targets, d1, d2)
    agent = make_policy(setting, venv, agent_seed)
    stack = InferenceStack(venv, agent, setting, targets)
    if stack.shared and hasattr(agent, "check_warm_start"):
        agent.check_warm_start = True  # the held-out check of the policy's warm start
    active = [cls(setting, stack.quantities, n_trials, confidence_level) for cls in readers]
    last = max(r.last for r in active)
    checkpoints = sorted(set(int(n) for n in setting.n))
    error = np.full((len(checkpoints), n_trials, k), np.nan)
    per_trial = {name: np.full((len(checkpoints), n_trials), np.nan) for name in CHECKPOINTED}
    min_prop = np.full(n_trials, np.nan)
    min_chosen = np.full(n_trials, np.nan)
    env = stack.env
    obs, _ = env.reset(seed=int(env_seed.generate_state(1)[0]))
    n = rounds = pending = 0
    failure = None
    while n < last:
        decision = agent.act(obs)
        try:
            next_obs, reward, _, _, _ = env.step(decision)
            agent.update(obs, decision, reward)
        except FloatingPointError as exc:
            # A diverging estimator stops the whole batch: the chunk ends here, its
            # unread checkpoints stay NaN, and the verdict says so (FAILED).
            failure = f"stopped after {rounds} rounds ({n} of inference): {exc}"
            break
        obs = next_obs
        rounds += 1
        pending += 1
        if report is not None and pending == 50:
            report(pending)
            pending = 0
        n = stack.n_obs
        if n == 0:
            continue
        props = getattr(decision, "propensities", None)
        if props is not None:
            props = np.asarray(props).reshape(n_trials, -1)
            min_prop = np.fmin(min_prop, props.min(axis=-1))
            chosen = props[np.arange(n_trials), np.asarray(decision.action).reshape(-1)]
            min_chosen = np.fmin(min_chosen, chosen)
        for reader in active:
            if reader.due(n):
                reader.read(n, stack)
        if n in checkpoints:
            error[checkpoints.index(n)] = stack.estimation_error()
            for name, values in stack.checkpoint_diagnostics().items():
                per_trial[name][checkpoints.index(n)] = values
    if report is not None and pending:
        report(pending)
    check = getattr(stack.owner, "warm_start_check", None)
    ratio = np.full((n_trials, k), np.nan) if check is None else np.asarray(check.ratio)
    return {
        "quantities": stack.quantities,
        "readers": {r.name: r.result() for r in active},
        "estimation_error": error,
        **per_trial,
        "min_propensity": min_prop,
        "min_chosen_propensity": min_chosen,
        "warm_start_ratio": ratio.reshape(n_trials, k),
        "rounds": rounds,
        "failure": failure,
    }


#: Per-trial diagnostics read at every checkpoint (:meth:`InferenceStack.checkpoint_diagnostics`).
CHECKPOINTED = ("value_bias", "round_share", "design_share", "context_flag")
#: Per-trial diagnostics of a chunk, by the axis its trials lie on.
DIAGNOSTIC_AXES = {
    "estimation_error": 1,
    "min_propensity": 0,
    "min_chosen_propensity": 0,
    "value_bias": 1,
    "round_share": 1,
    "context_flag": 1,
    "design_share": 1,
    "warm_start_ratio": 0,
}


def _failure_verdict(chunks: Sequence[dict[str, Any]]) -> str | None:
    """The verdict line when chunks stopped early (a diverging estimator), else None."""
    failed = [c["failure"] for c in chunks if c["failure"] is not None]
    if not failed:
        return None
    return (
        f"FAILED: {len(failed)} of {len(chunks)} chunk(s) stopped early, their trials "
        f"without intervals from then on (coverage above is over the rest); first: "
        f"{failed[0]}"
    )


def _tables(
    ran: ChunkResults, readers: Sequence[type[Reader]], setting, level: float
) -> tuple[dict, list, list]:
    """``(arrays, rows, uniform_rows)`` of the chunks that finished: the merged arrays
    (trials concatenated; the first reader's keys bare, the others' prefixed
    ``"{name}:"``; ``checkpoints``; the diagnostics of :data:`DIAGNOSTIC_AXES`) and every
    reader's table rows (the uniform reader's apart: it is judged on its own)."""
    chunks = ran.results
    quantities = chunks[0]["quantities"]
    arrays: dict[str, np.ndarray] = {}
    rows: list[dict[str, Any]] = []
    uniform_rows: list[dict[str, Any]] = []
    for cls in readers:
        merged = merge_trials([c["readers"][cls.name] for c in chunks])
        prefix = "" if cls is readers[0] else f"{cls.name}:"
        arrays.update({prefix + key: v for key, v in merged.items()})
        summary = cls.summarize(merged, quantities, setting, level)
        if cls.name == UniformReader.name:  # judged on its own (uniform_verdict)
            uniform_rows = summary
            continue
        for row in summary:
            rows.append({**row, "quantity": prefix + row["quantity"]})
    arrays["checkpoints"] = np.array(sorted(set(int(n) for n in setting.n)))
    diagnostics = [{key: c[key] for key in DIAGNOSTIC_AXES} for c in chunks]
    arrays.update(merge_trials(diagnostics, axes=DIAGNOSTIC_AXES))
    return arrays, rows, uniform_rows


class _NoBar:
    def update(self, k: int) -> None:
        pass

    def close(self) -> None:
        pass


def _rounds_per_chunk(setting: ValidationSetting) -> int:
    """Rounds every chunk plays: the policy's warm start (the wrappers' own one, if longer
    or the only one), then the inference rounds."""
    return warm_start_rounds(setting, make_env(setting.env, 1)) + max(setting.n)


class _GrowingBar:
    """A tqdm bar whose total grows when the rounds outrun it: the default warm start
    extends where the signal is weak (docs/method.md §3), which the planned total (the
    sizing rule's length) cannot know, and a bar past 100% would say nothing."""

    def __init__(self, bar) -> None:
        self.bar = bar

    def update(self, k: int) -> None:
        if self.bar.n + k > self.bar.total:
            self.bar.total = self.bar.n + k
        self.bar.update(k)

    def close(self) -> None:
        self.bar.close()


def _round_bar(total: int, trials: int, n_chunks: int, progress: bool):
    """A tqdm bar of ``total`` rounds on standard error (grown if the rounds outrun it), or
    one that shows nothing."""
    if not progress:
        return _NoBar()
    from tqdm.auto import tqdm

    bar = tqdm(
        total=total,
        unit="round",
        desc=f"validate ({trials} trials, {n_chunks} chunk(s))",
        file=sys.stderr,
    )
    return _GrowingBar(bar)


def _check_run(setting, trials, seed, jobs, batch_size, confidence_level, backend):
    """The run's arguments checked (:class:`SettingError` naming the first wrong one):
    ``(batch_size, confidence level)``."""
    from inference.cores.checks import check_confidence_level
    from inference.results import InsufficientDataWarning  # noqa: F401  (package check)
    from lrbandit_gym.memory import check_memory

    check_setting(setting)
    for name, v, least in (("trials", trials, 1), ("jobs", jobs, 1), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < least:
            raise SettingError(name, f"{name} must be an integer >= {least}; got {v!r}")
    if batch_size is None:
        batch_size = default_batch_size(setting)
    elif isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SettingError(
            "batch_size", f"batch_size must be a positive integer; got {batch_size!r}"
        )
    try:
        check_memory(batch_size * _chunk_bytes(setting), "batch_size", batch_size, "a chunk")
    except ValueError as exc:
        raise SettingError("batch_size", str(exc)) from None
    try:
        level = check_confidence_level(confidence_level)
    except ValueError as exc:
        raise SettingError("confidence_level", str(exc)) from None
    if backend not in BACKENDS:
        raise SettingError("backend", f"backend must be one of {BACKENDS}; got {backend!r}")
    return batch_size, level


def run_validation(
    setting: ValidationSetting,
    *,
    trials: int = 200,
    seed: int = 0,
    batch_size: int | None = None,
    jobs: int = 1,
    confidence_level: float = 0.95,
    progress: bool = True,
    readers: Sequence[type[Reader]] = (CheckpointReader,),
    backend: str = "local",
) -> ValidationResult:
    """Run :class:`~lrbandit_gym.experiments.validate.setting.ValidationSetting` ``setting``
    (see :func:`validate` for the arguments; ``readers`` are the
    :class:`~lrbandit_gym.experiments.validate.readers.Reader` classes each chunk runs,
    :class:`~lrbandit_gym.experiments.validate.readers.CheckpointReader` first)."""
    start = time.perf_counter()
    batch_size, level = _check_run(
        setting, trials, seed, jobs, batch_size, confidence_level, backend
    )
    readers = tuple(readers)
    if setting.uniform_from is not None and UniformReader not in readers:
        readers += (UniformReader,)
    chunks = plan_chunks(setting, trials, batch_size, seed)
    per_chunk = _rounds_per_chunk(setting)
    bar = _round_bar(per_chunk * len(chunks), trials, len(chunks), progress)
    local = backend == "local"
    try:
        ran = run_chunks(
            run_chunk,
            chunks,
            jobs=1 if local and len(chunks) == 1 else jobs,
            backend=backend,
            report=bar.update if local else None,
            on_done=None if local else (lambda i: bar.update(per_chunk)),
            options={"confidence_level": level, "readers": readers},
        )
    finally:
        bar.close()
    arrays, rows, uniform_rows = _tables(ran, readers, setting, level)
    status, line, band = verdict(rows, level)
    failure = _failure_verdict(ran.results)
    if failure is not None:
        status, line = "FAILED", failure
    flag_cells(rows, level)
    messages, counted = [], count_warnings(c["warnings"] for c in ran.results)
    for category, message, count in counted:
        messages.append(f"{message} [{category.__name__}, {count} of {len(ran.results)} chunk(s)]")
        warnings.warn(message, category, stacklevel=2)
    line = warned_verdict(status, line, arrays, [c["warnings"] for c in ran.results])
    result = ValidationResult(
        setting=setting,
        rows=rows,
        uniform_rows=uniform_rows,
        uniform_verdict=uniform_verdict(uniform_rows, level) if uniform_rows else "",
        status=status,
        verdict=line,
        band=band,
        quantities=ran.results[0]["quantities"],
        arrays=arrays,
        trials=trials,
        seed=seed,
        batch_size=batch_size,
        confidence_level=level,
        warnings=messages,
        seconds=time.perf_counter() - start,
        partial=ran.partial,
        trials_done=ran.trials_done,
    )
    if ran.partial:
        raise ran.interrupted(result) from None
    return result


def validate(
    env: Mapping[str, Any] | None = None,
    *,
    policy: Any = "epsilon-greedy",
    policy_kwargs: Mapping[str, Any] | None = None,
    rank: int | None = None,
    warm_start: int | None = None,
    targets: Any = "paper",
    value: bool = True,
    n: Sequence[int] = (1000, 2000),
    estimator: str = "auto",
    trials: int = 200,
    seed: int = 0,
    batch_size: int | None = None,
    jobs: int = 1,
    confidence_level: float = 0.95,
    progress: bool = True,
    uniform_from: int | None = None,
    tuning_n: int | None = None,
    backend: str = "local",
    context_law: str | None = None,
    projection: str | None = None,
    design_variance: str | None = None,
) -> ValidationResult:
    """Monte Carlo check of the intervals' coverage in any setting.

    Parameters
    ----------
    env : mapping, optional
        ``MatrixContextBandit-v0`` arguments (:data:`ENV_KEYS`).
    policy, policy_kwargs, rank, warm_start, targets, value, n, estimator
        The setting (:class:`~lrbandit_gym.experiments.validate.setting.ValidationSetting`).
    trials : int, default 200
        Independent trials (all share the truth drawn from ``truth_seed``).
    seed : int, default 0
        Root of the ``SeedSequence`` that seeds every chunk.
    batch_size : int, optional
        Trials per chunk (default 100, fewer when a chunk's warm-start buffers would exceed
        1 GiB).  Results depend on it (through the seeds), not on ``jobs``.
    jobs : int, default 1
        Worker processes or Ray CPUs (one BLAS thread each).
    confidence_level : float, default 0.95
        Nominal coverage of the intervals checked.
    progress : bool, default True
        Show a progress bar (tqdm) on standard error.
    uniform_from, tuning_n : int, optional
        Also check time-uniform coverage from round ``uniform_from`` on, of the fixed-n
        intervals and of the confidence sequences tuned at ``tuning_n``
        (:class:`~lrbandit_gym.experiments.validate.setting.ValidationSetting`); the result
        then holds ``uniform_rows`` and ``uniform_verdict``.
    backend : {"local", "ray"}, default "local"
        Where the chunks run: this process (``jobs == 1``) or ``jobs`` local processes, or
        Ray (the ``ray`` extra); the numbers are the same.
    context_law : str, optional
        The parameter intervals' law (default the env's; docs/method.md §1).
    projection : {"auto", "tangent", "paper", "none"}, optional
        The parameter intervals' read-out (default the wrappers', "auto"; docs/method.md §12).
    design_variance : {"auto", "pulled", "all-rounds"}, optional
        The parameter intervals' design variance (default the wrappers', "auto";
        docs/method.md §13).

    Returns
    -------
    ValidationResult
        The table (``rows``, ``to_frame()``, ``to_markdown()``, ``to_csv()``), the verdict
        (``status``, ``verdict``), every trial's intervals (``arrays``) and diagnostics.

    Raises
    ------
    SettingError
        On an invalid setting, before any trial runs; ``field`` names the culprit.
    RunInterrupted
        On Ctrl-C once a chunk has finished (a ``KeyboardInterrupt``,
        :class:`~.parallel.RunInterrupted`): the workers stop within a second and ``result``
        is the :class:`ValidationResult` of the chunks that finished, with ``partial=True``
        and ``trials_done``.  Before any chunk finished, the ``KeyboardInterrupt`` itself.

    Examples
    --------
    >>> from lrbandit_gym.experiments.validate.run import validate
    >>> result = validate(
    ...     {"d1": 8, "d2": 6, "rank": 1}, targets="entry", n=(100,), trials=20, progress=False
    ... )
    >>> result.status in ("VALID", "OVER-COVERS", "UNDER-COVERS")
    True
    """
    setting = ValidationSetting(
        env=dict(env or {}),
        policy=policy,
        policy_kwargs=dict(policy_kwargs or {}),
        rank=rank,
        warm_start=warm_start,
        targets=targets,
        value=value,
        n=tuple(n) if isinstance(n, list | tuple) else n,
        estimator=estimator,
        uniform_from=uniform_from,
        tuning_n=tuning_n,
        context_law=context_law,
        projection=projection,
        design_variance=design_variance,
    )
    return run_validation(
        setting,
        trials=trials,
        seed=seed,
        batch_size=batch_size,
        jobs=jobs,
        confidence_level=confidence_level,
        progress=progress,
        backend=backend,
    )
