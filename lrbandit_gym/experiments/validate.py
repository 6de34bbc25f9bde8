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
a one-line verdict (the rule: :func:`~lrbandit_gym.experiments.validate_report.verdict`).

How a chunk runs.  Trials run in chunks of ``batch_size``; chunk ``i`` is seeded by the
``i``-th child of ``SeedSequence(seed)`` (:func:`~lrbandit_gym.experiments.studies.chunk_jobs`)
and runs with one BLAS thread, so results depend on ``seed`` and ``batch_size`` only, not on
``jobs``.  The loop is the standard ``act → step → update`` with
:class:`~inference.VectorParameterInference` (every target, every arm and every difference
of arms) and :class:`~inference.VectorValueInference` (``V*``) stacked on the env.  The
wrappers share the policy's estimator (``estimator="shared"``, the paper's procedure; then
inference starts when the policy's warm start ends) or run their own, warm-started on the
first ``warm_start`` rounds they see (``"own"``; the only choice for a policy without a
low-rank estimator).  Either way the warm start is checked on held-out rounds
(:mod:`agents.warm_start_check`) and a :class:`~agents.warm_start_check.WarmStartWarning`
is reported when it leaves the estimate too far from the truth for the theory.

Per-round read-outs.  Every round after inference has started, each *reader* of the chunk
(:class:`Reader`) is asked whether it wants to read (``due(n)``) and then reads the wrappers
(``read(n, stack)``).  :class:`CheckpointReader` reads the intervals at the checkpoints; a
reader that reads every round from some ``n0`` (for instance to measure time-uniform
coverage) is another :class:`Reader` passed in ``readers``.

The grid of settings outside the paper (:data:`GRID`) runs with ``lrbandit validate --grid``.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lrbandit_gym import engine
from lrbandit_gym.experiments.parallel import Interrupted, RunInterrupted
from lrbandit_gym.experiments.studies import chunk_jobs, coverage_stats, paper_targets
from lrbandit_gym.experiments.validate_report import (
    Quantity,
    ValidationResult,
    flag_cells,
    verdict,
)

__all__ = [
    "ENV_KEYS",
    "ESTIMATORS",
    "GRID",
    "POLICIES",
    "CheckpointReader",
    "InferenceStack",
    "Reader",
    "SettingError",
    "ValidationResult",
    "ValidationSetting",
    "check_setting",
    "default_batch_size",
    "load_targets",
    "run_chunk",
    "run_validation",
    "validate",
]

#: Policies by name: ``"epsilon-greedy"`` (:class:`agents.EpsilonGreedy`: ``epsilon``,
#: ``decay``), ``"softmax"`` (:class:`agents.Softmax`: ``temperature``), both low-rank
#: (``step_scale``, ``step_offset``, ``step_decay`` too); ``"uniform"``
#: (:class:`agents.UniformRandom`) and ``"linear-epsilon-greedy"``
#: (:class:`agents.LinearEpsilonGreedy`: ``epsilon``, ``ridge``).
POLICIES = ("epsilon-greedy", "softmax", "uniform", "linear-epsilon-greedy")
#: Policies whose propensities have a floor: the checks add the values of two fixed target
#: policies (always arm 0, uniform) under them (:class:`InferenceStack`).
_EXPLORING = ("epsilon-greedy", "uniform", "linear-epsilon-greedy")
_LOW_RANK = ("epsilon-greedy", "softmax")

#: Who estimates ``M̂`` for inference: "shared" (the policy's estimator), "own" (the
#: wrappers' own), "auto" (shared when the policy has a low-rank estimator).
ESTIMATORS = ("auto", "shared", "own")

#: The environment arguments a setting may give (``MatrixContextBandit-v0``'s).
ENV_KEYS = (
    "d1",
    "d2",
    "rank",
    "n_actions",
    "context",
    "noise_std",
    "noise",
    "singular_values",
    "truth_seed",
)

#: Largest warm-start storage (bytes) a chunk's default batch size allows.
_CHUNK_BYTES = 2**30
_DEFAULT_BATCH = 100


class SettingError(ValueError):
    """An invalid setting; ``field`` names the offending field (``"env.rank"``,
    ``"policy_kwargs.epsilon"``, ``"targets"``, ``"n"``, ...)."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class ValidationSetting:
    """One configuration to validate.

    Attributes
    ----------
    env : mapping
        Arguments of ``MatrixContextBandit-v0`` (:data:`ENV_KEYS`; defaults: the env's,
        ``d1 = d2 = 50``, ``rank = 3``, ``K = 2``, ``σ = 0.1``).  ``noise_std`` may give one
        value per arm.
    policy : str or callable, default "epsilon-greedy"
        A name from :data:`POLICIES`, or ``factory(env, seed=seed) -> agent`` for any agent
        with ``act``/``update`` that reports propensities on a vector env (picklable when
        ``jobs > 1``).
    policy_kwargs : mapping
        Keyword arguments of the policy (e.g. ``epsilon``, ``temperature``).
    rank : int, optional
        Rank of the estimates (default: the environment's).
    warm_start : int, optional
        Warm-start rounds of the policy and of the wrappers' own estimator (default: sized
        from the problem, :func:`agents.default_warm_start_rounds`).
    targets : str or mapping, default "paper"
        ``"paper"`` (``T1 = e1e1ᵀ``, ``T2 = e1e1ᵀ + 2e2e2ᵀ − 3e3e3ᵀ``), ``"entry"``
        (``e11 = e1e1ᵀ``), ``"random"`` or ``"random:SEED"`` (a rank-one ``u vᵀ`` with unit
        ``u``, ``v``), a path to a ``.npz`` of named ``(d1, d2)`` matrices, a mapping of
        names to matrices, or None for ``V*`` only (:func:`load_targets`).
    value : bool, default True
        Also check the interval for the optimal value ``V*``.
    n : tuple of int, default (1000, 2000)
        Checkpoints: rounds of inference at which the intervals are read, all from one run.
    estimator : {"auto", "shared", "own"}, default "auto"
        See the module docstring.
    uniform_from : int, optional
        Also check time-uniform coverage: every interval is read at every round of
        inference from ``uniform_from`` (n₀) to the last checkpoint, as the fixed-n interval
        and as the confidence sequence (:mod:`lrbandit_gym.experiments.validate_uniform`).
    tuning_n : int, optional
        Round at which the confidence sequences are tightest (default 1000).
    description : str
        A line saying what the setting is for (the grid's).
    """

    env: Mapping[str, Any] = field(default_factory=dict)
    policy: Any = "epsilon-greedy"
    policy_kwargs: Mapping[str, Any] = field(default_factory=dict)
    rank: int | None = None
    warm_start: int | None = None
    targets: Any = "paper"
    value: bool = True
    n: tuple[int, ...] = (1000, 2000)
    estimator: str = "auto"
    uniform_from: int | None = None
    tuning_n: int | None = None
    description: str = ""

    def replace(self, **changes) -> ValidationSetting:
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """A one-line description of the setting."""
        env = ", ".join(f"{k}={_short(v)}" for k, v in self.env.items())
        pol = self.policy if isinstance(self.policy, str) else getattr(self.policy, "__name__", "?")
        kw = ", ".join(f"{k}={_short(v)}" for k, v in self.policy_kwargs.items())
        targets = self.targets if isinstance(self.targets, str | None) else "user"
        return (
            f"env({env}); policy {pol}({kw}); rank {self.rank or 'of env'}; warm start "
            f"{self.warm_start or 'default'}; targets {targets}; V* {'yes' if self.value else 'no'}"
            f"; n = {', '.join(map(str, self.n))}; estimator {self.estimator}"
        )


def _short(v) -> str:
    if isinstance(v, list | tuple | np.ndarray):
        return "(" + ", ".join(_short(x) for x in np.asarray(v).ravel().tolist()) + ")"
    return f"{v:g}" if isinstance(v, float) else str(v)


# --------------------------------------------------------------------------- targets
def load_targets(spec: Any, d1: int, d2: int) -> dict[str, np.ndarray]:
    """The named targets of a setting (see :attr:`ValidationSetting.targets`).

    Raises
    ------
    SettingError
        (``field == "targets"``) for an unknown preset, a missing or unreadable file, or a
        matrix that is not finite with shape ``(d1, d2)``.
    """
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        found = dict(spec)
    elif isinstance(spec, str | Path) and str(spec).endswith(".npz"):
        try:
            with np.load(spec, allow_pickle=False) as data:
                found = {name: np.array(data[name]) for name in data.files}
        except (OSError, ValueError) as exc:
            raise SettingError(
                "targets", f"cannot read targets file {str(spec)!r}: {exc}"
            ) from None
        if not found:
            raise SettingError("targets", f"targets file {str(spec)!r} holds no arrays")
    elif spec == "paper":
        if min(d1, d2) < 3:
            raise SettingError(
                "targets", f"targets 'paper' need d1, d2 >= 3 (T2 uses e3); got ({d1}, {d2})"
            )
        found = paper_targets(d1, d2)
    elif spec == "entry":
        t = np.zeros((d1, d2))
        t[0, 0] = 1.0
        found = {"e11": t}
    elif isinstance(spec, str) and re.fullmatch(r"random(:\d+)?", spec):
        seed = int(spec.split(":")[1]) if ":" in spec else 0
        rng = np.random.default_rng(seed)
        u, v = rng.standard_normal(d1), rng.standard_normal(d2)
        found = {f"uv{seed}": np.outer(u / np.linalg.norm(u), v / np.linalg.norm(v))}
    else:
        raise SettingError(
            "targets",
            "targets must be 'paper', 'entry', 'random', 'random:SEED', a .npz file or a "
            f"mapping of names to ({d1}, {d2}) matrices; got {spec!r}",
        )
    out = {}
    for name, t in found.items():
        arr = np.asarray(t, dtype=float)
        if arr.shape != (d1, d2):
            raise SettingError(
                "targets", f"target {name!r} must have shape ({d1}, {d2}); got {arr.shape}"
            )
        if not np.isfinite(arr).all():
            raise SettingError("targets", f"target {name!r} has NaN or inf entries")
        out[str(name)] = arr
    return out


# --------------------------------------------------------------------------- building
def _make_env(env_kwargs: Mapping[str, Any], n_trials: int):
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the env)

    kwargs = dict(env_kwargs)
    if "noise_std" in kwargs and not np.isscalar(kwargs["noise_std"]):
        kwargs["noise_std"] = np.asarray(kwargs["noise_std"], dtype=float)
    if "singular_values" in kwargs and not np.isscalar(kwargs["singular_values"]):
        kwargs["singular_values"] = np.asarray(kwargs["singular_values"], dtype=float)
    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=n_trials,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
        **kwargs,
    )


def _sizes(venv, setting: ValidationSetting) -> tuple[int, int, int, int, str]:
    p = venv.unwrapped.problem
    rank = p.rank if setting.rank is None else setting.rank
    return p.d1, p.d2, rank, p.n_actions, p.context


def _warm_start(setting: ValidationSetting, venv) -> int:
    from agents import default_warm_start_rounds

    if setting.warm_start is not None:
        return int(setting.warm_start)
    d1, d2, rank, k, context = _sizes(venv, setting)
    return default_warm_start_rounds(d1, d2, rank, k, context)


def _make_policy(setting: ValidationSetting, venv, seed):
    """The policy of ``setting`` on ``venv``."""
    if callable(setting.policy):
        return setting.policy(venv, seed=seed)
    from agents import EpsilonGreedy, LinearEpsilonGreedy, Softmax, UniformRandom

    kwargs = dict(setting.policy_kwargs)
    if setting.policy in _LOW_RANK:
        cls = EpsilonGreedy if setting.policy == "epsilon-greedy" else Softmax
        _, _, rank, _, _ = _sizes(venv, setting)
        return cls(venv, rank=rank, warm_start=_warm_start(setting, venv), seed=seed, **kwargs)
    cls = UniformRandom if setting.policy == "uniform" else LinearEpsilonGreedy
    return cls(venv, seed=seed, **kwargs)


def _shares(setting: ValidationSetting, agent) -> bool:
    from agents import LowRankSGD

    has = isinstance(getattr(agent, "estimator", None), LowRankSGD)
    if setting.estimator == "shared" and not has:
        raise SettingError(
            "estimator",
            "estimator='shared' needs a policy with a low-rank estimator (epsilon-greedy, "
            f"softmax); {type(agent).__name__} has none: use 'own' or 'auto'",
        )
    return has and setting.estimator != "own"


def _sgd_kwargs(setting: ValidationSetting) -> dict[str, Any]:
    keys = ("step_scale", "step_gain", "step_offset", "step_decay")
    return {k: setting.policy_kwargs[k] for k in keys if k in setting.policy_kwargs}


class InferenceStack:
    """The inference wrappers of a chunk and the quantities they report.

    Attributes
    ----------
    env : VectorEnv
        The outermost layer (step it).
    parameters : VectorParameterInference or None
    value : VectorValueInference or None
    policies : VectorPolicyEvaluation or None
        With ``V*`` and a policy with an exploration floor (ε-greedy, uniform): the values
        of two fixed target policies, always arm 0 and uniform, whose truths are exact
        (``E<M_a, X>``) under any context law.
    quantities : tuple of Quantity
        Every ``<M_a, T>``, every ``<M_b − M_a, T>`` (``b > a``), ``V*``, ``V(arm 0)`` and
        ``V(uniform)``, in order.
    estimator : LowRankSGD
        The estimate the intervals are debiased against.
    """

    def __init__(self, venv, agent, setting: ValidationSetting, targets: dict[str, np.ndarray]):
        from inference import (
            VectorParameterInference,
            VectorPolicyEvaluation,
            VectorValueInference,
        )

        d1, d2, rank, k, _ = _sizes(venv, setting)
        shared = _shares(setting, agent)
        own = {} if shared else {"rank": rank, "warm_start": _warm_start(setting, venv)}
        own.update({} if shared else _sgd_kwargs(setting))
        est = {"estimator": agent.estimator} if shared else {}
        env = venv
        self.parameters = self.value = None
        if targets:
            env = self.parameters = VectorParameterInference(env, targets, **est, **own)
        self.policies = None
        if setting.value:
            if self.parameters is not None:  # shares the parameter wrapper's estimator
                own, est = {}, {"estimator": self.parameters.estimator}
            env = self.value = VectorValueInference(env, **est, **own)
        if setting.value and setting.policy in _EXPLORING:
            # Two fixed targets whose values are exact for any context law: always arm 0
            # (far from the logging policy wherever arm 0 is not greedy) and uniform.  Only
            # under a policy with an exploration floor: elsewhere (softmax) an arm's
            # propensity may vanish, and the wrapper refuses a target it cannot evaluate.
            B = venv.num_envs
            zeros, uniform = np.zeros(B, dtype=np.int64), np.full((B, k), 1.0 / k)
            targets_pv = {"arm 0": lambda obs: zeros, "uniform": lambda obs: uniform}
            env = self.policies = VectorPolicyEvaluation(
                env, targets_pv, estimator=self.value.estimator
            )
        self.env = env
        self.shared = shared
        self.estimator = env.estimator
        first = self.parameters if self.parameters is not None else self.value
        self.owner = agent if shared else first  # whose warm start the check judged
        self._first = first
        base = venv.unwrapped
        q = []
        for name, t in targets.items():
            truth = base.linear_form(t)
            q += [Quantity(f"<M_{a}, {name}>", name, (a,), float(truth[a])) for a in range(k)]
            q += [
                Quantity(f"<M_{b} - M_{a}, {name}>", name, (b, a), float(truth[b] - truth[a]))
                for a in range(k)
                for b in range(a + 1, k)
            ]
        if setting.value:
            q.append(Quantity("V*", None, (), float(base.optimal_value)))
        if self.policies is not None:
            means = base.problem.params.mean(axis=(1, 2)) if base.context == "completion" else None
            arm0 = 0.0 if means is None else float(means[0])  # E<M_0, X>
            unif = 0.0 if means is None else float(means.mean())
            q.append(Quantity("V(arm 0)", None, (), arm0, policy="arm 0"))
            q.append(Quantity("V(uniform)", None, (), unif, policy="uniform"))
        self.quantities = tuple(q)
        self.true_params = np.asarray(base.true_params)

    @property
    def n_obs(self) -> int:
        """Rounds that have entered inference."""
        return int(self._first.core.n_obs)

    def intervals(self, confidence_level: float, **kwargs) -> list:
        """Every quantity's :class:`~inference.IntervalEstimate` (arrays over trials), in
        the order of :attr:`quantities`; ``kwargs`` go to the wrappers' ``interval`` and
        ``difference``."""
        out = []
        for q in self.quantities:
            if q.policy is not None:
                out.append(self.policies.interval(q.policy, confidence_level, **kwargs))
            elif q.target is None:
                out.append(self.value.interval(confidence_level, **kwargs))
            elif len(q.arms) == 1:
                out.append(
                    self.parameters.interval(q.arms[0], q.target, confidence_level, **kwargs)
                )
            else:
                b, a = q.arms
                out.append(self.parameters.difference(b, a, q.target, confidence_level, **kwargs))
        return out

    def value_bias(self) -> np.ndarray:
        """``R̂_n`` over the corrected ``V*`` interval's standard error per trial, ``(B,)``
        (NaN without ``V*`` or its correction): above 1 the wrapper warns."""
        found = None if self.value is None else self.value.played_regret()
        if found is None:
            return np.full(self.env.num_envs, np.nan)
        regret, variance = found
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            se = np.asarray(self.value.core.interval().standard_error, dtype=float)
        return regret / np.sqrt(se * se + variance)

    def estimation_error(self) -> np.ndarray:
        """``‖M̂_a − M_a‖_F`` of the estimate inference reads, ``(B, K)``."""
        est = np.asarray(self.estimator.estimates)
        return np.sqrt(((est - self.true_params) ** 2).sum(axis=(-1, -2)))


class Reader:
    """Reads a chunk's intervals at the rounds it asks for.

    The chunk's loop calls :meth:`due` every round after inference has started (``n >= 1``
    rounds of inference) and :meth:`read` when it returns True; :meth:`result` gives arrays
    whose last axis is the trial axis (merged over chunks by concatenation), and
    :meth:`summarize` turns the merged arrays into table rows (each with ``n``,
    ``quantity``, ``truth`` and the fields of
    :func:`~lrbandit_gym.experiments.studies.coverage_stats`, on which the verdict is
    taken).  Subclasses must be picklable (they are built in the worker processes).

    Parameters
    ----------
    setting : ValidationSetting
    quantities : tuple of Quantity
    n_trials : int
        Trials of the chunk.
    confidence_level : float
    """

    name = "reader"

    def __init__(self, setting, quantities, n_trials: int, confidence_level: float):
        self.setting = setting
        self.quantities = quantities
        self.n_trials = n_trials
        self.confidence_level = confidence_level

    @property
    def last(self) -> int:
        """The last round of inference it needs (the chunk runs until every reader's)."""
        return max(self.setting.n)

    def due(self, n: int) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, n: int, stack: InferenceStack) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def result(self) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def summarize(
        cls, arrays: dict[str, np.ndarray], quantities, setting, confidence_level: float
    ) -> list[dict[str, Any]]:  # pragma: no cover - abstract
        raise NotImplementedError


class CheckpointReader(Reader):
    """The fixed-``n`` intervals of every quantity at the setting's checkpoints ``n``."""

    name = "checkpoints"

    def __init__(self, setting, quantities, n_trials: int, confidence_level: float):
        super().__init__(setting, quantities, n_trials, confidence_level)
        self.checkpoints = sorted(set(int(n) for n in setting.n))
        shape = (len(self.checkpoints), len(quantities), n_trials)
        self.arrays = {
            key: np.full(shape, np.nan) for key in ("estimate", "standard_error", "low", "high")
        }

    def due(self, n: int) -> bool:
        return n in self.checkpoints

    def read(self, n: int, stack: InferenceStack) -> None:
        c = self.checkpoints.index(n)
        for j, ci in enumerate(stack.intervals(self.confidence_level)):
            for key in self.arrays:
                self.arrays[key][c, j] = np.asarray(getattr(ci, key), dtype=float)

    def result(self) -> dict[str, np.ndarray]:
        return dict(self.arrays)

    @classmethod
    def summarize(cls, arrays, quantities, setting, confidence_level):
        rows = []
        for c, n in enumerate(sorted(set(int(n) for n in setting.n))):
            for j, q in enumerate(quantities):
                s = coverage_stats(
                    arrays["estimate"][c, j],
                    arrays["standard_error"][c, j],
                    arrays["low"][c, j],
                    arrays["high"][c, j],
                    q.truth,
                )
                rows.append({"n": n, "quantity": q.label, "truth": q.truth, **s})
        return rows


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
    if not isinstance(setting.value, bool):
        raise SettingError("value", f"value must be true or false; got {setting.value!r}")
    try:
        venv = _make_env(setting.env, 1)
    except (ValueError, TypeError) as exc:
        m = _ENV_FIELDS.match(str(exc))
        raise SettingError(f"env.{m.group(1)}" if m else "env", str(exc)) from None
    d1, d2, rank, k, _ = _sizes(venv, setting)
    if setting.rank is not None and rank > min(d1, d2):
        raise SettingError("rank", f"rank must be <= min(d1, d2) = {min(d1, d2)}; got {rank}")
    targets = load_targets(setting.targets, d1, d2)
    if not targets and not setting.value:
        raise SettingError("targets", "nothing to check: no targets and value = false")
    try:
        agent = _make_policy(setting, venv, np.random.SeedSequence(0))
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
        raise SettingError("estimator", str(exc)) from None
    return targets


def _chunk_bytes(setting: ValidationSetting) -> int:
    """Bytes per trial of a chunk's largest buffers (warm-start contexts; the linear
    policy's inverse Gram matrices)."""
    venv = _make_env(setting.env, 1)
    d1, d2, _, k, _ = _sizes(venv, setting)
    warm = _warm_start(setting, venv)
    per = warm * (d1 * d2 * 4 + 24)
    low_rank = setting.policy in _LOW_RANK
    copies = 2 if low_rank and setting.estimator == "own" else 1
    total = per * copies
    if setting.policy == "linear-epsilon-greedy":
        total += k * (d1 * d2) ** 2 * 8
    return total


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
    "value_bias" (C, B) (:meth:`InferenceStack.value_bias`), "min_propensity" (B,),
    "warm_start_ratio" (B, K), "warnings": [(category, message)],
    "rounds": rounds played, "failure": None or why the chunk stopped early}``; ``report(k)``
    is called every 50 rounds with the rounds played since the last call.  A
    ``FloatingPointError`` of the policy or the wrappers (a diverging estimator, which stops
    every trial of the batch) ends the chunk early instead of raising.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _run_chunk(setting, n_trials, seed, confidence_level, readers, report)
    seen: dict[tuple, int] = {}
    for w in caught:
        key = (w.category, str(w.message))
        seen[key] = seen.get(key, 0) + 1
    out["warnings"] = list(seen)
    return out


def _run_chunk(setting, n_trials, seed, confidence_level, readers, report):
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    env_seed, agent_seed = ss.spawn(2)
    venv = _make_env(setting.env, n_trials)
    d1, d2, _, k, _ = _sizes(venv, setting)
    targets = load_targets(setting.targets, d1, d2)
    agent = _make_policy(setting, venv, agent_seed)
    stack = InferenceStack(venv, agent, setting, targets)
    if stack.shared and hasattr(agent, "check_warm_start"):
        agent.check_warm_start = True  # the held-out check of the policy's warm start
    active = [cls(setting, stack.quantities, n_trials, confidence_level) for cls in readers]
    last = max(r.last for r in active)
    checkpoints = sorted(set(int(n) for n in setting.n))
    error = np.full((len(checkpoints), n_trials, k), np.nan)
    bias = np.full((len(checkpoints), n_trials), np.nan)
    min_prop = np.full(n_trials, np.nan)
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
            min_prop = np.fmin(min_prop, np.asarray(props).min(axis=-1))
        for reader in active:
            if reader.due(n):
                reader.read(n, stack)
        if n in checkpoints:
            error[checkpoints.index(n)] = stack.estimation_error()
            bias[checkpoints.index(n)] = stack.value_bias()
    if report is not None and pending:
        report(pending)
    check = getattr(stack.owner, "warm_start_check", None)
    ratio = np.full((n_trials, k), np.nan) if check is None else np.asarray(check.ratio)
    return {
        "quantities": stack.quantities,
        "readers": {r.name: r.result() for r in active},
        "estimation_error": error,
        "value_bias": bias,
        "min_propensity": min_prop,
        "warm_start_ratio": ratio.reshape(n_trials, k),
        "rounds": rounds,
        "failure": failure,
    }


def _run_job(job, readers, confidence_level, report=None):
    setting, size, seed, kernels = job
    return engine.call(kernels, run_chunk, setting, size, seed, confidence_level, readers, report)


_QUEUE = None  # a worker process's progress queue (see _init_worker)


def _init_worker(queue) -> None:
    from lrbandit_gym.experiments.studies import single_threaded_blas

    global _QUEUE
    _QUEUE = queue
    single_threaded_blas()


def _worker_job(job, readers, confidence_level):
    queue = _QUEUE
    return _run_job(job, readers, confidence_level, None if queue is None else queue.put)


def _map_chunks(jobs_list, n_jobs, readers, confidence_level, bar) -> list:
    """Every chunk's result, in this process (one job or one chunk) or in worker processes
    whose progress comes back through a queue; Ctrl-C raises :class:`~.parallel.Interrupted`
    with the chunks that finished, within a second (:func:`~.parallel.process_pool_map`)."""
    import functools

    from lrbandit_gym.experiments.parallel import local_map, process_pool_map

    if n_jobs == 1 or len(jobs_list) == 1:
        run = functools.partial(
            _run_job, readers=readers, confidence_level=confidence_level, report=bar.update
        )
        return local_map(run, jobs_list, 1)
    import multiprocessing
    import queue as queue_module

    q = multiprocessing.get_context().Queue()

    def drain() -> None:
        while True:
            try:
                bar.update(q.get_nowait())
            except queue_module.Empty:
                break

    run = functools.partial(_worker_job, readers=readers, confidence_level=confidence_level)
    workers = min(n_jobs, len(jobs_list))
    return process_pool_map(
        run, jobs_list, workers, initializer=_init_worker, initargs=(q,), poll=drain
    )


class _NoBar:
    def update(self, k: int) -> None:
        pass

    def close(self) -> None:
        pass


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
) -> ValidationResult:
    """Run :class:`ValidationSetting` ``setting`` (see :func:`validate` for the arguments;
    ``readers`` are the :class:`Reader` classes each chunk runs, :class:`CheckpointReader`
    first)."""
    from inference.results import InsufficientDataWarning  # noqa: F401  (package check)
    from lrbandit_gym.validation import check_confidence_level

    start = time.perf_counter()
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
        level = check_confidence_level(confidence_level)
    except ValueError as exc:
        raise SettingError("confidence_level", str(exc)) from None
    readers = tuple(readers)
    if setting.uniform_from is not None:
        from lrbandit_gym.experiments.validate_uniform import UniformReader

        if UniformReader not in readers:
            readers += (UniformReader,)
    jobs_list = chunk_jobs(setting, trials, batch_size, seed)
    venv = _make_env(setting.env, 1)
    # Rounds a trial plays: the policy's warm start (the wrappers' own one, if longer or
    # the only one), then the inference rounds.
    per_chunk = _warm_start(setting, venv) + max(setting.n)
    bar = _NoBar()
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=per_chunk * len(jobs_list),
            unit="round",
            desc=f"validate ({trials} trials, {len(jobs_list)} chunk(s))",
            file=sys.stderr,
        )
    stopped = None  # Ctrl-C: the chunks that finished make a partial result
    try:
        chunks = _map_chunks(jobs_list, jobs, readers, level, bar)
    except Interrupted as exc:
        if not exc.results:
            raise
        stopped, chunks = exc, list(exc.results.values())
    finally:
        bar.close()
    trials_done = trials if stopped is None else sum(jobs_list[i][1] for i in stopped.results)
    quantities = chunks[0]["quantities"]
    arrays: dict[str, np.ndarray] = {}
    rows: list[dict[str, Any]] = []
    uniform_rows: list[dict[str, Any]] = []
    for cls in readers:
        merged = {
            key: np.concatenate([c["readers"][cls.name][key] for c in chunks], axis=-1)
            for key in chunks[0]["readers"][cls.name]
        }
        prefix = "" if cls is readers[0] else f"{cls.name}:"
        arrays.update({prefix + key: v for key, v in merged.items()})
        summary = cls.summarize(merged, quantities, setting, level)
        if cls.name == "uniform":  # judged on its own (validate_uniform.uniform_verdict)
            uniform_rows = summary
            continue
        for row in summary:
            rows.append({**row, "quantity": prefix + row["quantity"]})
    arrays["checkpoints"] = np.array(sorted(set(int(n) for n in setting.n)))
    arrays["estimation_error"] = np.concatenate([c["estimation_error"] for c in chunks], axis=1)
    arrays["min_propensity"] = np.concatenate([c["min_propensity"] for c in chunks])
    arrays["value_bias"] = np.concatenate([c["value_bias"] for c in chunks], axis=1)
    arrays["warm_start_ratio"] = np.concatenate([c["warm_start_ratio"] for c in chunks])
    status, line, band = verdict(rows, level)
    failed = [c["failure"] for c in chunks if c["failure"] is not None]
    if failed:
        status = "FAILED"
        line = (
            f"FAILED: {len(failed)} of {len(chunks)} chunk(s) stopped early, their trials "
            f"without intervals from then on (coverage above is over the rest); first: "
            f"{failed[0]}"
        )
    flag_cells(rows, level)
    # Warnings that differ only in their numbers (say, a median over a chunk's trials)
    # are one: the first chunk's text is shown, with how many chunks raised it.
    counts: dict[tuple, list] = {}
    for c in chunks:
        for category, message in c["warnings"]:
            key = (category, re.sub(r"\d+(\.\d+)?", "#", message))
            counts.setdefault(key, [message, 0])[1] += 1
    messages = []
    for (category, _), (message, count) in counts.items():
        messages.append(f"{message} [{category.__name__}, {count} of {len(chunks)} chunk(s)]")
        warnings.warn(message, category, stacklevel=2)
    uniform_line = ""
    if uniform_rows:
        from lrbandit_gym.experiments.validate_uniform import uniform_verdict

        uniform_line = uniform_verdict(uniform_rows, level)
    result = ValidationResult(
        setting=setting,
        rows=rows,
        uniform_rows=uniform_rows,
        uniform_verdict=uniform_line,
        status=status,
        verdict=line,
        band=band,
        quantities=quantities,
        arrays=arrays,
        trials=trials,
        seed=seed,
        batch_size=batch_size,
        confidence_level=level,
        warnings=messages,
        seconds=time.perf_counter() - start,
        partial=stopped is not None,
        trials_done=trials_done,
    )
    if stopped is not None:
        raise RunInterrupted(result, trials_done, trials) from None
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
) -> ValidationResult:
    """Monte Carlo check of the intervals' coverage in any setting.

    Parameters
    ----------
    env : mapping, optional
        ``MatrixContextBandit-v0`` arguments (:data:`ENV_KEYS`).
    policy, policy_kwargs, rank, warm_start, targets, value, n, estimator
        The setting (:class:`ValidationSetting`).
    trials : int, default 200
        Independent trials (all share the truth drawn from ``truth_seed``).
    seed : int, default 0
        Root of the ``SeedSequence`` that seeds every chunk.
    batch_size : int, optional
        Trials per chunk (default 100, fewer when a chunk's warm-start buffers would exceed
        1 GiB).  Results depend on it (through the seeds), not on ``jobs``.
    jobs : int, default 1
        Worker processes (one BLAS thread each).
    confidence_level : float, default 0.95
        Nominal coverage of the intervals checked.
    progress : bool, default True
        Show a progress bar (tqdm) on standard error.
    uniform_from, tuning_n : int, optional
        Also check time-uniform coverage from round ``uniform_from`` on, of the fixed-n
        intervals and of the confidence sequences tuned at ``tuning_n``
        (:class:`ValidationSetting`); the result then holds ``uniform_rows`` and
        ``uniform_verdict``.

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
    >>> from lrbandit_gym.experiments.validate import validate
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
    )
    return run_validation(
        setting,
        trials=trials,
        seed=seed,
        batch_size=batch_size,
        jobs=jobs,
        confidence_level=confidence_level,
        progress=progress,
    )


# --------------------------------------------------------------------------- the grid
#: Settings outside the paper's (docs/reproduction.md, "Validity outside the paper"): each
#: with the problem-sized default warm start unless it says otherwise, 95% intervals for
#: every arm, every difference of arms and ``V*``.  ``lrbandit validate --grid NAME``.
GRID: dict[str, ValidationSetting] = {
    "unequal": ValidationSetting(
        env={"d1": 30, "d2": 12, "rank": 2, "noise_std": (0.1, 0.3)},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(500, 1500),
        description="unequal dimensions (30 x 12), rank 2, unequal noise across arms "
        "(σ = 0.1, 0.3), ε-greedy",
    ),
    "softmax3": ValidationSetting(
        env={"d1": 15, "d2": 15, "rank": 1, "n_actions": 3},
        policy="softmax",
        policy_kwargs={"temperature": 1.0},
        n=(500, 1500),
        description="3 arms, rank 1, softmax (τ = 1)",
    ),
    "completion": ValidationSetting(
        env={"d1": 10, "d2": 10, "rank": 1, "context": "completion", "noise_std": 0.02},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1, "step_gain": 0.003},
        warm_start=4000,
        n=(1000, 3000),
        description="completion contexts (10 x 10), rank 1, σ = 0.02, ε-greedy, with the "
        "warm start the check asks for (4000 rounds) and a gentler step (gain 0.003)",
    ),
    "completion-default": ValidationSetting(
        env={"d1": 10, "d2": 10, "rank": 1, "context": "completion", "noise_std": 0.02},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 3000),
        description="completion with every default (400-round warm start, gain 0.03): the "
        "warm-start check warns and the intervals under-cover",
    ),
    "completion-hard": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 1, "context": "completion"},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 3000),
        description="completion contexts (20 x 20), rank 1, σ = 0.1 (entries about 0.05), "
        "ε-greedy: far from enough data",
    ),
    "student-t": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "n_actions": 4, "noise": "student_t", "noise_std": 0.2},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.2},
        n=(500, 1500),
        description="4 arms, rank 2, Student-t noise (3 d.o.f., σ = 0.2), ε-greedy (ε = 0.2)",
    ),
    "rank5": ValidationSetting(
        env={"d1": 25, "d2": 25, "rank": 5},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 2000),
        description="high rank for the size (d = 25, r = 5), ε-greedy",
    ),
    "rank7": ValidationSetting(
        env={"d1": 50, "d2": 50, "rank": 7},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 3000),
        description="the paper's Table 2 at rank 7 (d = 50), with the problem-sized warm start "
        "(4600 rounds) and the default step",
    ),
    "low-snr": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "noise_std": 1.0},
        policy="epsilon-greedy",
        n=(1000, 3000),
        description="low signal-to-noise: 2 arms, rank 2, σ = 1 (10 times the paper's), "
        "ε-greedy with every default: the greedy rules' regret is large and V* warns",
    ),
    "five-arms": ValidationSetting(
        env={"d1": 12, "d2": 12, "rank": 1, "n_actions": 5, "noise": "uniform", "noise_std": 0.3},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.3},
        n=(1000, 2000),
        description="5 arms, rank 1, uniform noise (σ = 0.3), ε-greedy (ε = 0.3)",
    ),
    "rectangular": ValidationSetting(
        env={"d1": 6, "d2": 60, "rank": 3},
        policy="epsilon-greedy",
        n=(1000, 2000),
        description="very rectangular (6 x 60), rank 3, ε-greedy with every default",
    ),
    "laplace": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 4, "noise": "laplace"},
        policy="softmax",
        policy_kwargs={"temperature": 0.5},
        n=(1000, 2000),
        description="Laplace noise, rank 4 (20 x 20), softmax (τ = 0.5)",
    ),
    "rank5-short": ValidationSetting(
        env={"d1": 25, "d2": 25, "rank": 5},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        warm_start=600,
        n=(1000, 2000),
        description="rank5 with a 600-round warm start (default 1600): the warm-start check warns",
    ),
}
