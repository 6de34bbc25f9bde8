"""The inference wrappers that watch one agent's trajectory in ``lrbandit compare``
(:class:`TrajectoryInference`), and what they do when a round is refused.

Three wrappers stack over the trial env: :class:`~inference.ParameterInference` (every
``<M_a, T>``), :class:`~inference.ValueInference` (``V*``) and on top
:class:`~inference.PolicyEvaluation`, the values of the fixed target policies of
:mod:`lrbandit_gym.experiments.policy_targets` (docs/method.md §9).  The innermost hosts the
round for all three (:mod:`inference.wrappers.inference_wrapper`), so a refused round changes none
of them.

A round the wrappers refuse ends inference for the chunk of trials while the agent plays
on.  A target policy that the agent's propensities cannot support (the uniform target under
a greedy policy, which gives some arm probability 0) is refused before the env steps: that
ends only the target policies' inference, and the round goes on through the two wrappers
below, whose numbers are then those of a stack without the policy layer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from lrbandit_gym.experiments.policy_targets import TARGET_POLICIES, target_policies

__all__ = ["REFUSALS", "PropensityTracker", "TrajectoryInference"]


class PropensityTracker:
    """A ``propensity_fn`` that remembers the smallest propensity it returned after its
    first ``skip`` calls (the wrappers call it once a round)."""

    def __init__(self, fn: Callable, skip: int = 0):
        self.fn = fn
        self.skip = int(skip)
        self.calls = 0
        self.minimum: np.ndarray | float = np.inf
        self.last = None
        self.repeating = False

    def repeat_last(self) -> None:
        """Answer the next call with the last propensities, uncounted: the same round asked
        again (a layer that refused before the step, then the layers below it)."""
        self.repeating = True

    def __call__(self, obs):
        if self.repeating:
            self.repeating = False
            return self.last
        p = self.fn(obs)
        self.last = p
        self.calls += 1
        if self.calls > self.skip:
            self.minimum = np.minimum(self.minimum, np.min(np.asarray(p), axis=-1))
        return p


#: What the inference wrappers raise when they refuse a round.
REFUSALS = (ValueError, FloatingPointError, np.linalg.LinAlgError)


class TrajectoryInference:
    """The three inference wrappers over ``base`` (parameters, ``V*``, and on top the target
    policies' values), and what to do when they refuse a round.

    Attributes
    ----------
    env : gymnasium.Env or VectorEnv
        The outermost wrapper (reset it).
    reason, refused_at
        Why and after how many rounds the wrappers refused a round (None, 0: they did not);
        ``policy_reason`` and ``policy_refused_at`` for a refused target policy.
    """

    def __init__(self, base, setting, estimator, propensity_fn, vector: bool):
        from inference import build_stack, stack_layers

        self.base = base
        self.vector = bool(vector)
        self.propensity_fn = propensity_fn
        self.reason: str | None = None
        self.refused_at = 0
        self.policy_reason: str | None = None
        self.policy_refused_at = 0
        kw: dict[str, Any] = {"estimator": estimator, "propensity_fn": propensity_fn}
        if estimator is None:
            kw.update(rank=setting.rank, warm_start=setting.warm_start)
        n_trials = base.num_envs if vector else None
        policies = target_policies(base.unwrapped.n_actions, n_trials)
        top = build_stack(base, setting.targets, policies=policies, **kw)
        layers = stack_layers(top)
        self.params, self.value, self.policies = (
            layers["parameters"],
            layers["value"],
            layers["policies"],
        )
        self.env = self.policies

    @property
    def alive(self) -> bool:
        return self.reason is None

    @property
    def policies_alive(self) -> bool:
        return self.alive and self.policy_reason is None

    def step(self, action):
        """Step through the wrappers; if they refuse the round, through the bare env.

        A target policy refused before the bare env stepped ends only the target policies'
        inference: the round goes on for the two wrappers below.  A refusal after the bare
        env stepped ends the inference of the chunk, and the step's result stands.
        """
        if self.policies_alive:
            before, state = self.base.steps, self._generator_state()
            calls = getattr(self.propensity_fn, "calls", None)
            try:
                return self.policies.step(action)
            except REFUSALS as exc:
                if self.base.steps != before:
                    return self._refused(exc, before, state, action)
                self.policy_reason, self.policy_refused_at = str(exc), before
                self.policies.host.remove_tracker(self.policies.tracker)
                if calls is not None and self.propensity_fn.calls != calls:
                    self.propensity_fn.repeat_last()
        if self.alive:
            before, state = self.base.steps, self._generator_state()
            try:
                return self.value.step(action)
            except REFUSALS as exc:
                return self._refused(exc, before, state, action)
        return self.base.step(action)

    def _refused(self, exc: Exception, before: int, state, action):
        """End inference for the chunk and return the round's result: the bare env's step
        if the refusal came after it and it stands, else a step of the bare env now."""
        self.reason, self.refused_at = str(exc), before
        moved = self.base.steps != before
        if moved and (state is None or self._generator_state() != state):
            return self.base.last_step
        return self.base.step(action)

    def _generator_state(self):
        """The single env's generator state (None for the vector env of a chunk of trials,
        :class:`~lrbandit_gym.experiments.compare.units.TrialBatchEnv`, which never restores
        itself)."""
        if self.vector:
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
        p_est = np.full((b, len(TARGET_POLICIES)), np.nan)
        p_se = np.full((b, len(TARGET_POLICIES)), np.nan)
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
                if self.policies_alive and self.policies.core.n_obs:
                    for j, policy in enumerate(TARGET_POLICIES):
                        ci = self.policies.interval(policy, level)
                        p_est[:, j] = ci.estimate
                        p_se[:, j] = ci.standard_error
        return {
            "estimate": est,
            "se": se,
            "value_estimate": v_est,
            "value_se": v_se,
            "policy_estimate": p_est,
            "policy_se": p_se,
        }
