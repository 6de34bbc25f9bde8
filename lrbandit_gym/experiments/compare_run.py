"""The work units of :mod:`lrbandit_gym.experiments.compare`: one agent on a chunk of trials.

Common random numbers.  Trial ``i`` of a comparison is a single ``MatrixContextBandit-v0``
reset with seed ``s_i``; its environment draws, per round, one noise value and the next
context from its own generator whatever the action, so every agent that plays trial ``i``
sees the same contexts and the same standardized noise.  Our agents play many trials at once
on :class:`TrialBatchEnv`, a vector env made of those single environments (trial ``i`` there
is exactly the single env of seed ``s_i``); agents that play one trial at a time, and
stable-baselines3 models inside ``model.learn()``, get that single env itself.

Inference.  On every trajectory a :class:`~inference.ParameterInference` (targets ``T``)
and a :class:`~inference.ValueInference` (``V*``) watch the agent's own actions and
propensities: sharing the agent's :class:`~agents.LowRankSGD` when it has one (the paper's
procedure), otherwise running their own estimator warm-started on the first ``warm_start``
rounds (weighted by ``1/π``).  A policy that gives some arm probability 0 cannot be
evaluated by inverse-propensity weighting: such trials are marked invalid, and a round the
wrappers refuse (``ValueError``) ends inference for that chunk while the agent plays on; the
round and the reason are kept in the unit's ``refusals``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

from lrbandit_gym.decision import split_decision
from lrbandit_gym.experiments.montecarlo import merge_trials
from lrbandit_gym.problem import GroundTruthMixin

__all__ = ["ComparisonSetting", "TrialBatchEnv", "make_trial_env", "merge_units", "run_unit"]


@dataclass(frozen=True)
class ComparisonSetting:
    """What every agent of a comparison shares.

    Attributes
    ----------
    env_kwargs : dict
        Keyword arguments of ``MatrixContextBandit-v0`` (``d1``, ``d2``, ``rank``, …).
    rounds : int
        Rounds every trial plays.
    targets : dict of str to ndarray (d1, d2)
        The linear forms ``T`` whose ``<M_a, T>`` the wrappers infer.
    checkpoints : tuple of int
        Rounds after which intervals and estimation errors are read.
    warm_start : int
        Rounds of the wrappers' own warm start (agents without a shared estimator).
    rank : int
        Rank of the wrappers' own estimator.
    confidence_level : float
    """

    env_kwargs: dict
    rounds: int
    targets: dict = field(default_factory=dict)
    checkpoints: tuple = ()
    warm_start: int = 400
    rank: int = 2
    confidence_level: float = 0.95


def make_trial_env(env_kwargs: Mapping[str, Any], *, flatten: bool = False) -> gym.Env:
    """One trial's environment: ``gym.make`` without episode truncation."""
    return gym.make(
        "lrbandit_gym:MatrixContextBandit-v0",
        max_episode_steps=None,
        flatten=flatten,
        **dict(env_kwargs),
    )


class TrialBatchEnv(GroundTruthMixin, VectorEnv):
    """Single environments, one per trial seed, stepped together as a vector env.

    Trial ``i`` is the single ``MatrixContextBandit-v0`` reset with ``seeds[i]``, so a
    batched agent sees exactly the contexts and noise that an agent playing that trial alone
    sees (common random numbers across batched and one-trial agents).  Episodes never end.
    Actions: an integer array ``(B,)`` or a batched :class:`lrbandit_gym.Decision`; infos
    ``"expected_rewards"`` ``(B, K)``, ``"optimal_action"`` and ``"regret"`` ``(B,)``.

    Attributes
    ----------
    steps : int
        Steps taken since the last reset.
    last_step : tuple
        What the last :meth:`step` returned.
    """

    metadata = {"render_modes": []}

    def __init__(self, env_kwargs: Mapping[str, Any], seeds, flatten: bool = False):
        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise ValueError("TrialBatchEnv needs at least one trial seed")
        self.envs = [make_trial_env(env_kwargs, flatten=flatten).unwrapped for _ in self.seeds]
        first = self.envs[0]
        self.problem = first.problem
        self.num_envs = len(self.seeds)
        self.flatten = bool(flatten)
        self.single_observation_space = first.observation_space
        self.single_action_space = spaces.Discrete(first.problem.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self.steps = 0
        self.last_step = None

    def reset(self, *, seed=None, options=None):
        """Reset every trial with its own seed (``seed`` must be None: the seeds are fixed)."""
        if seed is not None:
            raise ValueError("TrialBatchEnv's trials are seeded at construction; pass seed=None")
        obs = np.stack([env.reset(seed=s)[0] for env, s in zip(self.envs, self.seeds, strict=True)])
        self.steps = 0
        return obs, {}

    def step(self, actions):
        arm, _ = split_decision(actions)
        arms = np.asarray(arm)
        if arms.shape != (self.num_envs,) or not np.issubdtype(arms.dtype, np.integer):
            raise ValueError(
                f"actions must be an integer array of shape ({self.num_envs},); "
                f"got {arms.dtype} array of shape {arms.shape}"
            )
        obs, rewards = [], np.empty(self.num_envs)
        expected = np.empty((self.num_envs, self.problem.n_actions))
        best = np.empty(self.num_envs, dtype=np.int64)
        regret = np.empty(self.num_envs)
        for i, (env, a) in enumerate(zip(self.envs, arms.tolist(), strict=True)):
            o, rewards[i], _, _, info = env.step(a)
            obs.append(o)
            expected[i] = info["expected_rewards"]
            best[i] = info["optimal_action"]
            regret[i] = info["regret"]
        infos = {"expected_rewards": expected, "optimal_action": best, "regret": regret}
        done = np.zeros(self.num_envs, dtype=bool)
        self.steps += 1
        self.last_step = (np.stack(obs), rewards, done, done.copy(), infos)
        return self.last_step


class _Counted(gym.Wrapper):
    """Counts the steps of a single env and keeps the last result (see :class:`_Stack`)."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0
        self.last_step = None

    def step(self, action):
        self.last_step = self.env.step(action)
        self.steps += 1
        return self.last_step


class _Propensities:
    """A ``propensity_fn`` that remembers the smallest propensity it returned after its
    first ``skip`` calls (the wrappers call it once a round)."""

    def __init__(self, fn: Callable, skip: int = 0):
        self.fn = fn
        self.skip = int(skip)
        self.calls = 0
        self.minimum: np.ndarray | float = np.inf

    def __call__(self, obs):
        p = self.fn(obs)
        self.calls += 1
        if self.calls > self.skip:
            self.minimum = np.minimum(self.minimum, np.min(np.asarray(p), axis=-1))
        return p


class _Stack:
    """The two inference wrappers over ``base``, and what to do when they refuse a round."""

    def __init__(self, base, setting: ComparisonSetting, estimator, propensity_fn, vector: bool):
        from inference import (
            ParameterInference,
            ValueInference,
            VectorParameterInference,
            VectorValueInference,
        )

        self.base = base
        self.reason: str | None = None
        self.refused_at = 0
        kw: dict[str, Any] = {"estimator": estimator, "propensity_fn": propensity_fn}
        if estimator is None:
            kw.update(rank=setting.rank, warm_start=setting.warm_start)
        if vector:
            self.params = VectorParameterInference(base, setting.targets, **kw)
            self.value = VectorValueInference(self.params, propensity_fn=propensity_fn)
        else:
            self.params = ParameterInference(base, setting.targets, **kw)
            self.value = ValueInference(self.params, propensity_fn=propensity_fn)

    @property
    def alive(self) -> bool:
        return self.reason is None

    def step(self, action):
        """Step through the wrappers; if they refuse the round, through the bare env.

        The refusal may come after the bare env stepped: then its result stands, unless the
        wrappers returned the env to its state before the step (their all-or-nothing steps
        do so where the env can restore itself), which its generator's state tells.
        """
        if self.alive:
            before = self.base.steps
            state = self._generator_state()
            try:
                return self.value.step(action)
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
                self.reason, self.refused_at = str(exc), before
                moved = self.base.steps != before
                if moved and (state is None or self._generator_state() != state):
                    return self.base.last_step
        return self.base.step(action)

    def _generator_state(self):
        """The single env's generator state (None for :class:`TrialBatchEnv`, which never
        restores itself)."""
        if isinstance(self.base.unwrapped, TrialBatchEnv):
            return None
        return self.base.unwrapped.np_random.bit_generator.state

    def read(self, level: float) -> dict[str, np.ndarray]:
        """Every interval now (NaN before inference starts or after it stopped)."""
        names = list(self.params.target_names)
        k = self.params.n_actions
        b = 1 if self.params.n_trials is None else self.params.n_trials
        est = np.full((b, len(names), k), np.nan)
        se = np.full((b, len(names), k), np.nan)
        v_est = np.full(b, np.nan)
        v_se = np.full(b, np.nan)
        if self.alive:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if self.params.core.n_obs:
                    for j, name in enumerate(names):
                        for arm in range(k):
                            ci = self.params.interval(arm, name, level)
                            est[:, j, arm] = ci.estimate
                            se[:, j, arm] = ci.standard_error
                if self.value.core.n_obs:
                    ci = self.value.interval(level)
                    v_est[:] = ci.estimate
                    v_se[:] = ci.standard_error
        return {"estimate": est, "se": se, "value_estimate": v_est, "value_se": v_se}


class _Log:
    """What one unit records: regret every round; intervals and errors at checkpoints."""

    def __init__(self, setting: ComparisonSetting, n_trials: int, n_targets: int, n_actions: int):
        self.setting = setting
        c = len(setting.checkpoints)
        b = n_trials
        self.regret = np.zeros((b, setting.rounds))
        self.estimate = np.full((b, c, n_targets, n_actions), np.nan)
        self.se = np.full((b, c, n_targets, n_actions), np.nan)
        self.value_estimate = np.full((b, c), np.nan)
        self.value_se = np.full((b, c), np.nan)
        self.error = np.full((b, c, n_actions), np.nan)
        self.context_sum = np.zeros(b)
        self.has_estimate = False
        self.t = 0

    def round(self, context, regret, stack: _Stack, estimates, truth) -> None:
        """Record the round just played: the context acted on, its regret (``(B,)`` or a
        float), and at checkpoints the intervals and ``estimates()``'s errors."""
        if self.t >= self.setting.rounds:
            return
        self.context_sum += (
            np.asarray(context, dtype=float).reshape(self.regret.shape[0], -1).sum(1)
        )
        self.regret[:, self.t] = regret
        self.t += 1
        if self.t not in self.setting.checkpoints:
            return
        c = self.setting.checkpoints.index(self.t)
        read = stack.read(self.setting.confidence_level)
        self.estimate[:, c] = read["estimate"]
        self.se[:, c] = read["se"]
        self.value_estimate[:, c] = read["value_estimate"]
        self.value_se[:, c] = read["value_se"]
        if estimates is not None:
            try:
                m = np.asarray(estimates(), dtype=float)
            except (RuntimeError, ValueError, AttributeError):
                return  # no estimate yet (a warm start)
            m = m.reshape((-1,) + truth.shape)
            self.error[:, c] = np.linalg.norm(m - truth, axis=(-2, -1))

    def result(self, valid, minimum, stack, seconds, agent_seconds) -> dict[str, Any]:
        return {
            "regret": self.regret,
            "estimate": self.estimate,
            "se": self.se,
            "value_estimate": self.value_estimate,
            "value_se": self.value_se,
            "estimation_error": self.error if self.has_estimate else None,
            "context_sum": self.context_sum,
            "valid": np.asarray(valid, dtype=bool).reshape(-1),
            "min_propensity": np.asarray(minimum, dtype=float).reshape(-1),
            "refusals": [] if stack.alive else [(stack.refused_at, stack.reason)],
            "seconds": float(seconds),
            "agent_seconds": float(agent_seconds),
        }


def _low_rank_estimator(agent):
    from agents import LowRankSGD

    est = getattr(agent, "estimator", None)
    return est if isinstance(est, LowRankSGD) else None


def _estimates_of(agent) -> Callable[[], Any] | None:
    """A reader of the agent's ``estimates`` (a class attribute, so that asking does not
    evaluate a property that raises during a warm start), or None."""
    if not hasattr(type(agent), "estimates"):
        return None
    return lambda: agent.estimates


def _play(agent, base, setting: ComparisonSetting, vector: bool) -> dict[str, Any]:
    """Play ``setting.rounds`` rounds of ``agent`` on ``base`` under the inference wrappers."""
    fn = getattr(agent, "action_probs", None)
    tracker = _Propensities(fn, setting.warm_start) if callable(fn) else None
    stack = _Stack(base, setting, _low_rank_estimator(agent), tracker, vector)
    truth = np.asarray(base.unwrapped.true_params)
    b = base.num_envs if vector else 1
    log = _Log(setting, b, len(setting.targets), truth.shape[0])
    estimates = _estimates_of(agent)
    log.has_estimate = estimates is not None
    minimum = np.full(b, np.inf)
    agent_seconds = 0.0
    start = time.perf_counter()
    obs, _ = stack.value.reset()
    for t in range(setting.rounds):
        t0 = time.perf_counter()
        decision = agent.act(obs)
        t1 = time.perf_counter()
        _, props = split_decision(decision)
        if props is None and tracker is None and stack.alive:
            stack.reason = "the agent reports no propensities (no Decision, no action_probs)"
            stack.refused_at = t
        next_obs, reward, _, _, info = stack.step(decision)
        if props is not None and t >= setting.warm_start:
            minimum = np.minimum(minimum, np.asarray(props, dtype=float).reshape(b, -1).min(1))
        t2 = time.perf_counter()
        agent.update(obs, decision, reward)
        agent_seconds += (t1 - t0) + (time.perf_counter() - t2)
        log.round(obs, info["regret"], stack, estimates, truth)
        obs = next_obs
    seconds = time.perf_counter() - start
    if tracker is not None and np.all(np.isinf(minimum)):
        minimum = np.broadcast_to(tracker.minimum, (b,)).astype(float)
    valid = np.isfinite(minimum) & (minimum > 0) & stack.alive
    return log.result(valid, minimum, stack, seconds, agent_seconds)


def run_batched(factory, setting: ComparisonSetting, env_seeds, agent_seed) -> dict[str, Any]:
    """One chunk of trials played by one batched agent (``factory(vector_env, seed)``)."""
    env = TrialBatchEnv(setting.env_kwargs, env_seeds)
    seed = agent_seed
    if not isinstance(seed, np.random.SeedSequence):
        seed = np.random.SeedSequence(seed)
    agent = factory(env, seed=seed)
    return _play(agent, env, setting, vector=True)


def run_per_trial(
    factory, setting: ComparisonSetting, env_seeds, agent_seeds, flatten: bool = False
) -> dict[str, Any]:
    """Trials played one at a time by an agent built per trial (``factory(env, seed)``)."""
    parts = []
    for env_seed, agent_seed in zip(env_seeds, agent_seeds, strict=True):
        env = _Seeded(_Counted(make_trial_env(setting.env_kwargs, flatten=flatten)), env_seed)
        agent = factory(env, seed=np.random.SeedSequence(int(agent_seed)))
        parts.append(_play(agent, env, setting, vector=False))
    return merge_units(parts)


class _Seeded(gym.Wrapper):
    """Resets its env with a fixed seed whatever ``reset`` is asked (a trial's seed)."""

    def __init__(self, env, seed: int):
        super().__init__(env)
        self.trial_seed = int(seed)

    @property
    def steps(self):
        return self.env.steps

    @property
    def last_step(self):
        return self.env.last_step

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=self.trial_seed, options=options)


def run_sb3(factory, setting: ComparisonSetting, env_seeds, model_seeds) -> dict[str, Any]:
    """Trials of a stable-baselines3 model trained by its own ``model.learn()`` loop.

    Per trial: ``model = factory(env, seed)`` on the flattened trial env, then the model's
    env is replaced by the same env under the inference wrappers (propensities from
    :class:`agents.SB3Agent`) and a recorder, seeded with the trial's seed, and
    ``model.learn(total_timesteps=rounds)`` runs.
    """
    import torch

    torch.set_num_threads(1)
    parts = [
        _sb3_trial(factory, setting, int(e), int(m))
        for e, m in zip(env_seeds, model_seeds, strict=True)
    ]
    return merge_units(parts)


class _Recorder(gym.Wrapper):
    """Top of an SB3 trial's env: steps the inference stack and logs every round."""

    def __init__(self, stack: _Stack, log: _Log, truth):
        super().__init__(stack.value)
        self.stack = stack
        self.log = log
        self.truth = truth
        self.env_seconds = 0.0
        self.obs = None

    def reset(self, *, seed=None, options=None):
        self.obs, info = self.env.reset(seed=seed, options=options)
        return self.obs, info

    def step(self, action):
        start = time.perf_counter()
        out = self.stack.step(action)
        self.env_seconds += time.perf_counter() - start
        self.log.round(self.obs, out[4]["regret"], self.stack, None, self.truth)
        self.obs = out[0]
        return out


def _sb3_trial(factory, setting, env_seed: int, model_seed: int) -> dict[str, Any]:
    from agents import SB3Agent

    env = make_trial_env(setting.env_kwargs, flatten=True)
    model = factory(env, seed=model_seed)
    agent = SB3Agent(model)
    tracker = _Propensities(agent.action_probs, setting.warm_start)
    counted = _Counted(env)
    stack = _Stack(counted, setting, None, tracker, vector=False)
    truth = np.asarray(env.unwrapped.true_params)
    log = _Log(setting, 1, len(setting.targets), truth.shape[0])
    recorder = _Recorder(stack, log, truth)
    model.set_env(recorder)
    model.get_env().seed(env_seed)  # SB3 resets with this seed at the start of learn()
    start = time.perf_counter()
    model.learn(total_timesteps=setting.rounds)
    seconds = time.perf_counter() - start
    if log.t < setting.rounds:
        raise RuntimeError(f"model.learn() played {log.t} of {setting.rounds} rounds")
    minimum = float(np.min(tracker.minimum))
    valid = np.array([minimum > 0 and stack.alive])
    agent_seconds = max(seconds - recorder.env_seconds, 0.0)
    return log.result(valid, [minimum], stack, seconds, agent_seconds)


#: How the per-trial results of a unit merge (:func:`merge_units`): these are summed,
#: these joined as lists, the other arrays concatenated along the trial axis (0).
SUMMED, LISTED = ("seconds", "agent_seconds"), ("refusals",)


def merge_units(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-trial (or per-unit) results as one, trials concatenated in order
    (:func:`~lrbandit_gym.experiments.montecarlo.merge_trials`)."""
    return merge_trials(parts, trial_axis=0, summed=SUMMED, listed=LISTED)


def run_unit(kind: str, *args) -> dict[str, Any]:
    """Run one unit (``kind``: "batched", "per_trial" or "sb3") with one BLAS thread, so
    the numbers do not depend on which process runs it."""
    from threadpoolctl import threadpool_limits

    runner = {"batched": run_batched, "per_trial": run_per_trial, "sb3": run_sb3}[kind]
    with threadpool_limits(1):
        return runner(*args)
