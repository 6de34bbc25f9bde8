"""The two fixed target policies whose values ``lrbandit validate`` and ``lrbandit compare``
infer while another policy plays (:class:`~inference.PolicyEvaluation`, docs/method.md §9).

*Always arm 0* (far from the logging policy wherever arm 0 is not greedy) and *uniform*.
Their values ``V(π) = E[Σ_a π(a|X) <M_a, X>]`` are exact under the environment's context
law, which makes them a check of the policy-value intervals with a known truth:
``V(arm 0) = E<M_0, X>`` and ``V(uniform) = (1/K) Σ_a E<M_a, X>``, with ``E<M_a, X> = 0``
for mean-zero Gaussian contexts and the mean entry of ``M_a`` for completion contexts
``e_j e_kᵀ`` drawn uniformly.

The uniform target plays every arm, so it can be evaluated only under a logging policy
that gives every arm a propensity of at least ``MIN_PROPENSITY``; the wrapper refuses it
before the step otherwise (a greedy or deterministic policy).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["TARGET_POLICIES", "policy_label", "target_policies", "target_policy_values"]

#: The target policies' names, in the order of every table.
TARGET_POLICIES = ("arm 0", "uniform")


def policy_label(name: str) -> str:
    """A target policy's value as tables name it: ``"V(arm 0)"``."""
    return f"V({name})"


def target_policies(n_actions: int, n_trials: int | None = None) -> dict[str, Callable]:
    """The target policies as :class:`~inference.PolicyEvaluation` takes them: callables of
    the observation, batched over ``n_trials`` under a vector env (None: a single env)."""
    if n_trials is None:
        uniform = np.full(n_actions, 1.0 / n_actions)
        return {"arm 0": lambda obs: 0, "uniform": lambda obs: uniform}
    zeros = np.zeros(n_trials, dtype=np.int64)
    uniforms = np.full((n_trials, n_actions), 1.0 / n_actions)
    return {"arm 0": lambda obs: zeros, "uniform": lambda obs: uniforms}


def target_policy_values(base) -> dict[str, float]:
    """The exact value of every target policy in the environment ``base`` (single or
    vector, unwrapped), by name."""
    values = base.problem.arm_values  # E<M_a, X>
    return {"arm 0": float(values[0]), "uniform": float(values.mean())}
