"""What ``lrbandit validate`` checks: a :class:`ValidationSetting` (an environment
configuration of ``MatrixContextBandit-v0``, a policy from :mod:`agents`, targets ``T``,
checkpoints ``n`` and who estimates ``M̂`` for inference), its targets
(:func:`load_targets`), and the environment and policy of a chunk built from it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lrbandit_gym.experiments.studies import paper_targets

__all__ = [
    "ENV_KEYS",
    "ESTIMATORS",
    "EXPLORING_POLICIES",
    "LOW_RANK_POLICIES",
    "POLICIES",
    "SettingError",
    "ValidationSetting",
    "load_targets",
    "make_env",
    "make_policy",
    "problem_sizes",
    "sgd_kwargs",
    "shares_estimator",
    "warm_start_rounds",
]

#: Policies by name: ``"epsilon-greedy"`` (:class:`agents.EpsilonGreedy`: ``epsilon``,
#: ``decay``), ``"softmax"`` (:class:`agents.Softmax`: ``temperature``), both low-rank
#: (``step_scale``, ``step_offset``, ``step_decay`` too); ``"uniform"``
#: (:class:`agents.UniformRandom`) and ``"linear-epsilon-greedy"``
#: (:class:`agents.LinearEpsilonGreedy`: ``epsilon``, ``ridge``).
POLICIES = ("epsilon-greedy", "softmax", "uniform", "linear-epsilon-greedy")
#: Policies whose propensities have a floor: the checks add the values of two fixed target
#: policies (always arm 0, uniform) under them
#: (:class:`~lrbandit_gym.experiments.validate.stack.InferenceStack`).
EXPLORING_POLICIES = ("epsilon-greedy", "uniform", "linear-epsilon-greedy")
#: Policies with a low-rank estimator (which inference may share).
LOW_RANK_POLICIES = ("epsilon-greedy", "softmax")

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
    "context_std",
    "context_corr",
    "entry_probs",
    "contexts",
    "params",
    "observation",
)


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
        from the problem, :func:`agents.warm_start.default_warm_start_rounds`).
    targets : str or mapping, default "paper"
        ``"paper"`` (``T1 = e1e1ᵀ``, ``T2 = e1e1ᵀ + 2e2e2ᵀ − 3e3e3ᵀ``), ``"entry"``
        (``e11 = e1e1ᵀ``), ``"center-smooth"`` (the middle entry, and a smooth bump of unit
        Frobenius norm: an image's pixel and region), ``"random"`` or ``"random:SEED"`` (a
        rank-one ``u vᵀ`` with unit ``u``, ``v``), a path to a ``.npz`` of named
        ``(d1, d2)`` matrices, a mapping of names to matrices, or None for ``V*`` only
        (:func:`load_targets`).
    value : bool, default True
        Also check the interval for the optimal value ``V*``.
    n : tuple of int, default (1000, 2000)
        Checkpoints: rounds of inference at which the intervals are read, all from one run.
    estimator : {"auto", "shared", "own"}, default "auto"
        Who estimates ``M̂`` for inference (:data:`ESTIMATORS`; see
        :mod:`~lrbandit_gym.experiments.validate.run`).
    uniform_from : int, optional
        Also check time-uniform coverage: every interval is read at every round of
        inference from ``uniform_from`` (n₀) to the last checkpoint, as the fixed-n interval
        and as the confidence sequence (:mod:`lrbandit_gym.experiments.validate.uniform`).
    tuning_n : int, optional
        Round at which the confidence sequences are tightest (default 1000).
    context_law : str, optional
        The law the parameter intervals divide by (default: the environment's;
        ``"estimated"``: estimated from the contexts; docs/method.md §1).
    projection : str, optional
        The parameter intervals' read-out (default the wrappers', ``"auto"``; ``"none"``:
        the debiased mean without the low-rank step, docs/method.md §12).
    design_variance : str, optional
        The parameter intervals' design variance (default the wrappers', ``"auto"``;
        ``"pulled"`` is eq. (14), docs/method.md §13).
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
    context_law: str | None = None
    projection: str | None = None
    design_variance: str | None = None
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
            + (f"; context law {self.context_law}" if self.context_law else "")
            + (f"; projection {self.projection}" if self.projection else "")
            + (f"; design variance {self.design_variance}" if self.design_variance else "")
        )


def _short(v) -> str:
    if isinstance(v, list | tuple | np.ndarray):
        return "(" + ", ".join(_short(x) for x in np.asarray(v).ravel().tolist()) + ")"
    return f"{v:g}" if isinstance(v, float) else str(v)


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
    elif spec == "center-smooth":
        center = np.zeros((d1, d2))
        center[d1 // 2, d2 // 2] = 1.0
        bump = np.outer(np.hanning(d1 + 2)[1:-1], np.hanning(d2 + 2)[1:-1])
        found = {"center": center, "smooth": bump / np.linalg.norm(bump)}
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
            "targets must be 'paper', 'entry', 'center-smooth', 'random', 'random:SEED', a "
            f".npz file or a mapping of names to ({d1}, {d2}) matrices; got {spec!r}",
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


def make_env(env_kwargs: Mapping[str, Any], n_trials: int):
    """The native vector env of ``n_trials`` trials of ``MatrixContextBandit-v0`` with the
    setting's arguments, without episode truncation."""
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the env)

    kwargs = dict(env_kwargs)
    if isinstance(kwargs.get("entry_probs"), str):
        kwargs["entry_probs"] = named_entry_probs(kwargs["entry_probs"], kwargs)
    if isinstance(kwargs.get("contexts"), str):
        kwargs["contexts"] = named_contexts(kwargs["contexts"])
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


def named_entry_probs(spec: str, env_kwargs: Mapping[str, Any]) -> np.ndarray:
    """``"zipf:ALPHA"``: entry frequencies ``∝ (j + 1)^-α (k + 1)^-α``, popular rows and
    columns first, as in rating data."""
    match = re.fullmatch(r"zipf:(\d+(\.\d+)?)", spec)
    if match is None:
        raise SettingError("env.entry_probs", f"entry_probs must be 'zipf:ALPHA'; got {spec!r}")
    alpha = float(match.group(1))
    d1, d2 = int(env_kwargs.get("d1", 50)), int(env_kwargs.get("d2", 50))
    return np.outer(np.arange(1, d1 + 1.0) ** -alpha, np.arange(1, d2 + 1.0) ** -alpha)


def named_contexts(spec: str) -> np.ndarray:
    """``"digits"``: scikit-learn's 1797 handwritten digits (8 x 8), standardised with one
    global mean and standard deviation, as a careful user would."""
    if spec != "digits":
        raise SettingError("env.contexts", f"contexts must be 'digits' or an array; got {spec!r}")
    from lrbandit_gym.digits import digits_arrays

    images = np.concatenate(list(digits_arrays(scale="none").values())[::2])
    return (images - images.mean()) / images.std()


def problem_sizes(venv, setting: ValidationSetting) -> tuple[int, int, int, int, str]:
    """``(d1, d2, rank of the estimates, K, context law)`` of ``setting`` on ``venv``."""
    p = venv.unwrapped.problem
    rank = p.rank if setting.rank is None else setting.rank
    return p.d1, p.d2, rank, p.n_actions, p.context


def warm_start_rounds(setting: ValidationSetting, venv) -> int:
    """The setting's warm-start rounds, or the problem-sized default."""
    from agents.warm_start import default_warm_start_rounds

    if setting.warm_start is not None:
        return int(setting.warm_start)
    d1, d2, rank, k, context = problem_sizes(venv, setting)
    return default_warm_start_rounds(d1, d2, rank, k, context)


def make_policy(setting: ValidationSetting, venv, seed):
    """The policy of ``setting`` on ``venv``."""
    if callable(setting.policy):
        return setting.policy(venv, seed=seed)
    from agents import EpsilonGreedy, LinearEpsilonGreedy, Softmax, UniformRandom

    kwargs = dict(setting.policy_kwargs)
    if setting.policy in LOW_RANK_POLICIES:
        cls = EpsilonGreedy if setting.policy == "epsilon-greedy" else Softmax
        _, _, rank, _, _ = problem_sizes(venv, setting)
        # None: the policy's default, which extends when the signal asks for it
        return cls(venv, rank=rank, warm_start=setting.warm_start, seed=seed, **kwargs)
    cls = UniformRandom if setting.policy == "uniform" else LinearEpsilonGreedy
    return cls(venv, seed=seed, **kwargs)


def shares_estimator(setting: ValidationSetting, agent) -> bool:
    """Whether the wrappers share the policy's low-rank estimator (``setting.estimator``);
    :class:`SettingError` for ``"shared"`` without one."""
    from agents import LowRankSGD

    has = isinstance(getattr(agent, "estimator", None), LowRankSGD)
    if setting.estimator == "shared" and not has:
        raise SettingError(
            "estimator",
            "estimator='shared' needs a policy with a low-rank estimator (epsilon-greedy, "
            f"softmax); {type(agent).__name__} has none: use 'own' or 'auto'",
        )
    return has and setting.estimator != "own"


def sgd_kwargs(setting: ValidationSetting) -> dict[str, Any]:
    """The step arguments of the policy that the wrappers' own estimator takes too."""
    keys = ("step_scale", "step_gain", "step_offset", "step_decay")
    return {k: setting.policy_kwargs[k] for k in keys if k in setting.policy_kwargs}
