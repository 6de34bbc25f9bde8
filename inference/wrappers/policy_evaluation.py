"""Gymnasium wrappers that evaluate candidate policies while another policy plays.

:class:`PolicyEvaluation` (and its vector twin :class:`VectorPolicyEvaluation`) watches the
rounds the logging policy plays, exactly as :class:`~inference.ValueInference` does, and
feeds :class:`~inference.PolicyValueInference` the AIPW terms of every *target* policy: a
callable from the observation to a pmf or an action, an agent (anything with
``action_probs(obs)``, such as the policies of :mod:`agents`), or ``"greedy"``, the greedy
rule of the estimate the wrapper reads.  The target policies are asked for their pmf at the
context *before* the step, so a target never sees the round it is evaluated on; an agent
given as a target is only asked, never updated by the wrapper.

A target may play only arms the logging policy could have played: a pmf that puts mass on
an arm whose logging propensity is below ``MIN_PROPENSITY`` is refused before the step
(the value of that arm there could only be extrapolated, and the interval would not say
so).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import gymnasium as gym
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import VectorWrapper

from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.inference_wrapper import InferenceWrapperBase
from inference.wrappers.policy_tracker import GREEDY, PolicyTracker

__all__ = ["GREEDY", "PolicyEvaluation", "VectorPolicyEvaluation"]


class _PolicyEvaluationBase(InferenceWrapperBase):
    """The policy-evaluation preset: one
    :class:`~inference.wrappers.policy_tracker.PolicyTracker`."""

    def __init__(
        self,
        env,
        policies: Mapping[str, Any],
        rank: int = 3,
        *,
        estimator=None,
        propensity_fn=None,
        warm_start=None,
        **sgd_kwargs,
    ):
        self._open(
            env,
            policies=policies,
            rank=rank,
            estimator=estimator,
            propensity_fn=propensity_fn,
            warm_start=warm_start,
            **sgd_kwargs,
        )
        tracker = partial(PolicyTracker, policies=policies)
        self._attach(env, tracker, rank, estimator, propensity_fn, warm_start, sgd_kwargs)
        self.policy_names = self.tracker.policy_names

    def interval(
        self,
        policy: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for the value of the target ``policy`` (by name), or with
        ``kind="sequence"`` the anytime-valid confidence sequence tuned at ``tuning_n``."""
        return self.tracker.interval(policy, confidence_level, kind=kind, tuning_n=tuning_n)

    def difference(
        self,
        policy_a: str,
        policy_b: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``V(policy_a) − V(policy_b)`` on the same rounds."""
        return self.tracker.difference(
            policy_a, policy_b, confidence_level, kind=kind, tuning_n=tuning_n
        )

    @property
    def policy_evaluation(self):
        """This wrapper: ``env.get_wrapper_attr("policy_evaluation")`` finds it in a stack."""
        return self


_DOC_PARAMETERS = """
    Parameters
    ----------
    env : gymnasium.Env
        A ``MatrixContextBandit-v0`` environment (wrapped or not).
    policies : mapping of str to target policy
        The policies to evaluate, by name: a callable ``obs -> pmf`` (shape ``(K,)``, or
        ``(B, K)`` under a vector env) or ``obs -> action``; an agent with
        ``action_probs(obs)`` (asked, never updated); or ``"greedy"``, the greedy rule of the
        estimate the wrapper reads.
    rank, estimator, propensity_fn, warm_start, **sgd_kwargs
        As for :class:`~inference.ValueInference`: the estimate that supplies the AIPW
        predictions (an agent's, shared, or the wrapper's own).
"""


class PolicyEvaluation(_PolicyEvaluationBase, gym.Wrapper, RecordConstructorArgs):
    __doc__ = (
        """Online confidence intervals for the values of target policies while another
    policy plays (docs/method.md §9).

    Each interval covers the target's value ``V(π) = E[Σ_a π(a|X) <M_a, X>]`` (for a target
    that changes, the mean value of its rules over the rounds absorbed), valid under the
    adaptivity of the logging policy.  ``difference`` compares two targets on the same
    rounds.
"""
        + _DOC_PARAMETERS
    )

    _vector = False
    _layer = gym.Wrapper


class VectorPolicyEvaluation(_PolicyEvaluationBase, VectorWrapper, RecordConstructorArgs):
    """Vector twin of :class:`PolicyEvaluation`: target callables receive the batched
    observation and return ``(B, K)`` pmfs or ``(B,)`` actions."""

    _vector = True
    _layer = VectorWrapper
