"""The work units of :mod:`lrbandit_gym.experiments.compare.run`: one agent on a chunk of trials.

Common random numbers.  Trial ``i`` of a comparison is a single ``MatrixContextBandit-v0``
reset with seed ``s_i``; its environment draws, per round, one noise value and the next
context from its own generator whatever the action, so every agent that plays trial ``i``
sees the same contexts and the same standardized noise.  Our agents play many trials at once
on :class:`TrialBatchEnv`, a vector env made of those single environments (trial ``i`` there
is exactly the single env of seed ``s_i``); agents that play one trial at a time, and
stable-baselines3 models inside ``model.learn()``, get that single env itself.

Inference.  On every trajectory the wrappers of
:mod:`lrbandit_gym.experiments.compare.stack` (parameters ``<M_a, T>``, ``V*`` and the
values of two fixed target policies) watch the agent's own actions and propensities:
sharing the agent's :class:`~agents.LowRankSGD` when it has one (the paper's procedure),
otherwise running their own estimator warm-started on the first ``warm_start`` rounds
(weighted by ``1/π``).  A policy that gives some arm probability 0 cannot be evaluated by
inverse-propensity weighting: such trials are marked invalid (``valid``, and
``policy_valid`` for the target policies), and the rounds the wrappers refused and why are
kept in the unit's ``refusals`` (inference ended for the chunk) and ``policy_refusals``
(only the target policies' inference ended).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

from lrbandit_gym.decision import split_decision
from lrbandit_gym.experiments.compare.stack import PropensityTracker, TrajectoryInference
from lrbandit_gym.experiments.montecarlo import merge_trials
from lrbandit_gym.experiments.policy_targets import TARGET_POLICIES
from lrbandit_gym.experiments.run_warnings import recorded_warnings
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
    """Counts the steps of a single env and keeps the last result (what
    :class:`~lrbandit_gym.experiments.compare.stack.TrajectoryInference` reads)."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0
        self.last_step = None

    def step(self, action):
        self.last_step = self.env.step(action)
        self.steps += 1
        return self.last_step


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
        self.policy_estimate = np.full((b, c, len(TARGET_POLICIES)), np.nan)
        self.policy_se = np.full((b, c, len(TARGET_POLICIES)), np.nan)
        self.error = np.full((b, c, n_actions), np.nan)
        self.context_sum = np.zeros(b)
        self.has_estimate = False
        self.t = 0

    def round(self, context, regret, stack: TrajectoryInference, estimates, truth) -> None:
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
        self.policy_estimate[:, c] = read["policy_estimate"]
        self.policy_se[:, c] = read["policy_se"]
        if estimates is not None:
            try:
                m = np.asarray(estimates(), dtype=float)
            except (RuntimeError, ValueError, AttributeError):
                return  # no estimate yet (a warm start)
            m = m.reshape((-1,) + truth.shape)
            self.error[:, c] = np.linalg.norm(m - truth, axis=(-2, -1))

    def result(
        self, valid, minimum, stack: TrajectoryInference, seconds, agent_seconds
    ) -> dict[str, Any]:
        """The unit's arrays (trials first); ``valid``: parameter and ``V*`` inference is
        defined on the trial; ``policy_valid``: the target policies' is."""
        b = self.regret.shape[0]
        refused = (
            [] if stack.policy_reason is None else [(stack.policy_refused_at, stack.policy_reason)]
        )
        return {
            "regret": self.regret,
            "estimate": self.estimate,
            "se": self.se,
            "value_estimate": self.value_estimate,
            "value_se": self.value_se,
            "policy_estimate": self.policy_estimate,
            "policy_se": self.policy_se,
            "estimation_error": self.error if self.has_estimate else None,
            "context_sum": self.context_sum,
            "valid": np.asarray(valid, dtype=bool).reshape(-1),
            "min_propensity": np.asarray(minimum, dtype=float).reshape(-1),
            "refusals": [] if stack.alive else [(stack.refused_at, stack.reason)],
            "policy_valid": np.full(b, stack.policies_alive),
            "policy_refusals": refused,
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
    tracker = PropensityTracker(fn, setting.warm_start) if callable(fn) else None
    stack = TrajectoryInference(base, setting, _low_rank_estimator(agent), tracker, vector)
    truth = np.asarray(base.unwrapped.true_params)
    b = base.num_envs if vector else 1
    log = _Log(setting, b, len(setting.targets), truth.shape[0])
    estimates = _estimates_of(agent)
    log.has_estimate = estimates is not None
    minimum = np.full(b, np.inf)
    agent_seconds = 0.0
    start = time.perf_counter()
    obs, _ = stack.env.reset()
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

    def __init__(self, stack: TrajectoryInference, log: _Log, truth):
        super().__init__(stack.env)
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
    tracker = PropensityTracker(agent.action_probs, setting.warm_start)
    counted = _Counted(env)
    stack = TrajectoryInference(counted, setting, None, tracker, vector=False)
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
SUMMED, LISTED = ("seconds", "agent_seconds"), ("refusals", "policy_refusals", "warnings")


def merge_units(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-trial (or per-unit) results as one, trials concatenated in order
    (:func:`~lrbandit_gym.experiments.montecarlo.merge_trials`)."""
    return merge_trials(parts, trial_axis=0, summed=SUMMED, listed=LISTED)


def run_unit(kind: str, *args) -> dict[str, Any]:
    """Run one unit (``kind``: "batched", "per_trial" or "sb3") with one BLAS thread, so
    the numbers do not depend on which process runs it; its distinct warnings are kept under
    ``"warnings"`` (:func:`~lrbandit_gym.experiments.run_warnings.recorded_warnings`)."""
    from threadpoolctl import threadpool_limits

    runner = {"batched": run_batched, "per_trial": run_per_trial, "sb3": run_sb3}[kind]
    with threadpool_limits(1), recorded_warnings() as caught:
        out = runner(*args)
    out["warnings"] = [caught]  # one list per unit (merged units list them side by side)
    return out
