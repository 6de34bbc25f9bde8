"""One builder of inference stacks: :func:`build_stack` and :func:`stack_layers`.

A stack is the parameter preset (:class:`~inference.ParameterInference`), the ``V*`` preset
(:class:`~inference.ValueInference`) and the policy preset
(:class:`~inference.PolicyEvaluation`), in that order from the environment out, each one
present or not; under a native vector env their vector twins.  The innermost hosts the
round for all of them and the outer ones share its estimator (module docstring of
:mod:`inference.wrappers.inference_wrapper`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymnasium.vector import VectorEnv

from inference.wrappers.inference_wrapper import InferenceWrapperBase
from inference.wrappers.layer_checks import layers_below
from inference.wrappers.parameter_inference import ParameterInference, VectorParameterInference
from inference.wrappers.policy_evaluation import PolicyEvaluation, VectorPolicyEvaluation
from inference.wrappers.value_inference import ValueInference, VectorValueInference

__all__ = ["build_stack", "stack_layers"]

#: The name of each preset in :func:`stack_layers`, by the property that finds it.
_LAYERS = {
    "parameter_inference": "parameters",
    "value_inference": "value",
    "policy_evaluation": "policies",
}


def build_stack(
    env,
    targets: Mapping[str, Any] | None = None,
    *,
    value: bool = True,
    policies: Mapping[str, Any] | None = None,
    rank: int = 3,
    estimator=None,
    propensity_fn=None,
    warm_start=None,
    projection: str = "auto",
    point_estimate: str = "one-step",
    context_law=None,
    check_contexts: bool = True,
    design_variance: str = "auto",
    propensities: str = "known",
    correction: str = "auto",
    regret_reservoir: int | None = None,
    **sgd_kwargs,
):
    """Wrap ``env`` in the inference presets asked for and return the outermost.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv
        A ``MatrixContextBandit-v0`` environment (wrapped or not, inference wrappers
        included), or its native vector env: the vector twins are used then.
    targets : mapping of str to array (d1, d2), optional
        The linear forms ``<M_a, T>`` to infer: a parameter preset when given (and not
        empty).
    value : bool, default True
        A ``V*`` preset.
    policies : mapping of str to target policy, optional
        A policy preset evaluating these target policies (see
        :class:`~inference.PolicyEvaluation`).
    rank, estimator, propensity_fn, warm_start, **sgd_kwargs
        The estimate every preset reads: ``estimator`` (an agent's, shared), else the
        estimator of an inference wrapper already in ``env``, else one own estimator of
        rank ``rank`` warm-started on ``warm_start`` rounds, which the innermost preset
        runs and the others share.  ``propensity_fn`` as in
        :class:`~inference.ParameterInference`.
    projection, point_estimate, context_law, check_contexts, design_variance
        Of the parameter preset (:class:`~inference.ParameterInference`).
    propensities, correction, regret_reservoir
        Of the ``V*`` preset (:class:`~inference.ValueInference`).

    Returns
    -------
    The outermost wrapper; :func:`stack_layers` finds each preset in it.

    Raises
    ------
    ValueError
        When nothing is asked for (no targets, ``value=False``, no policies).

    Examples
    --------
    >>> import gymnasium as gym
    >>> import numpy as np
    >>> import lrbandit_gym  # noqa: F401  (registers the environment)
    >>> from agents import EpsilonGreedy
    >>> from inference import build_stack, stack_layers
    >>> env = gym.make("MatrixContextBandit-v0", d1=5, d2=5, rank=2, n_actions=2)
    >>> agent = EpsilonGreedy(env, rank=2, warm_start=100, seed=0)
    >>> T = np.zeros((5, 5)); T[0, 0] = 1.0
    >>> env = build_stack(env, {"T": T}, estimator=agent.estimator)
    >>> sorted(stack_layers(env))
    ['parameters', 'value']

    The stack is ``ValueInference(ParameterInference(env, {"T": T},
    estimator=agent.estimator), estimator=agent.estimator)``.
    """
    base = getattr(env, "unwrapped", env)
    vector = isinstance(base, VectorEnv)
    if vector:
        presets = (VectorParameterInference, VectorValueInference, VectorPolicyEvaluation)
    else:
        presets = (ParameterInference, ValueInference, PolicyEvaluation)
    parameter_preset, value_preset, policy_preset = presets
    if not targets and not value and not policies:
        raise ValueError("build_stack needs something to infer: targets, value=True or policies")
    # The own estimator's settings go to the innermost preset, which builds it; the others
    # share the estimator of the host below them.
    hosted = estimator is not None or any(
        isinstance(w, InferenceWrapperBase) for w in layers_below(env)
    )
    own: dict[str, Any] = {} if hosted else {"warm_start": warm_start, **sgd_kwargs}
    top = env
    if targets:
        top = parameter_preset(
            top,
            targets,
            rank,
            estimator=estimator,
            propensity_fn=propensity_fn,
            projection=projection,
            point_estimate=point_estimate,
            context_law=context_law,
            check_contexts=check_contexts,
            design_variance=design_variance,
            **own,
        )
        own = {}
    if value:
        top = value_preset(
            top,
            rank,
            estimator=estimator,
            propensity_fn=propensity_fn,
            propensities=propensities,
            correction=correction,
            regret_reservoir=regret_reservoir,
            **own,
        )
        own = {}
    if policies:
        top = policy_preset(
            top, policies, rank, estimator=estimator, propensity_fn=propensity_fn, **own
        )
    return top


def stack_layers(env) -> dict[str, InferenceWrapperBase]:
    """The presets of a stack by name, in the order :func:`build_stack` stacks them
    (``"parameters"``, ``"value"``, ``"policies"``): for each, the outermost of its kind in
    ``env``; a name is absent when its preset is."""
    found: dict[str, InferenceWrapperBase] = {}
    for layer in layers_below(env):
        if isinstance(layer, InferenceWrapperBase):
            for attr, name in _LAYERS.items():
                if hasattr(type(layer), attr):
                    found.setdefault(name, layer)
    return {name: found[name] for name in _LAYERS.values() if name in found}
