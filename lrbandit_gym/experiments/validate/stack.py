"""The inference wrappers that ``lrbandit validate`` stacks on a chunk's vector env, and
the quantities they report (:class:`InferenceStack`).

The wrappers share the policy's estimator (``estimator="shared"``, the paper's procedure)
or run their own, warm-started on the first ``warm_start`` rounds they see (``"own"``):
:class:`~inference.VectorParameterInference` reads every target, every arm and every
difference of arms, :class:`~inference.VectorValueInference` reads ``V*``, and under a
policy with an exploration floor :class:`~inference.VectorPolicyEvaluation` reads the
values of two fixed target policies whose truths are exact.
"""

from __future__ import annotations

import warnings

import numpy as np

from lrbandit_gym.experiments.policy_targets import (
    policy_label,
    target_policies,
    target_policy_values,
)
from lrbandit_gym.experiments.validate.report import Quantity
from lrbandit_gym.experiments.validate.setting import (
    EXPLORING_POLICIES,
    ValidationSetting,
    problem_sizes,
    sgd_kwargs,
    shares_estimator,
    warm_start_rounds,
)

__all__ = ["InferenceStack"]


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
        from inference import build_stack, stack_layers

        d1, d2, rank, k, _ = problem_sizes(venv, setting)
        shared = shares_estimator(setting, agent)
        own = {} if shared else {"rank": rank, "warm_start": warm_start_rounds(setting, venv)}
        own.update({} if shared else sgd_kwargs(setting))
        est = {"estimator": agent.estimator} if shared else {}
        # The parameter read-outs' options the setting gives (else the wrappers' defaults).
        given = {
            "context_law": setting.context_law,
            "projection": setting.projection,
            "design_variance": setting.design_variance,
        }
        options = {key: value for key, value in given.items() if value is not None}
        # Two fixed targets whose values are exact for any context law: always arm 0 (far
        # from the logging policy wherever arm 0 is not greedy) and uniform.  Only with V*
        # and under a policy with an exploration floor: elsewhere (softmax) an arm's
        # propensity may vanish, and the wrapper refuses a target it cannot evaluate.
        exploring = setting.value and setting.policy in EXPLORING_POLICIES
        env = build_stack(
            venv,
            targets,
            value=setting.value,
            policies=target_policies(k, venv.num_envs) if exploring else None,
            **est,
            **own,
            **options,
        )
        layers = stack_layers(env)
        self.parameters = layers.get("parameters")
        self.value = layers.get("value")
        self.policies = layers.get("policies")
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
            values = target_policy_values(base)
            q += [Quantity(policy_label(p), None, (), values[p], policy=p) for p in values]
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
        (NaN without ``V*`` or its correction): above ``WARN_RATIO`` the paper's interval
        would raise ``ValueBiasWarning``; the default interval allows for it."""
        found = None if self.value is None else self.value.played_regret()
        if found is None:
            return np.full(self.env.num_envs, np.nan)
        regret, variance = found
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            se = np.asarray(self.value.core.interval().standard_error, dtype=float)
        return regret / np.sqrt(se * se + variance)

    def round_share(self) -> np.ndarray:
        """The parameter intervals' largest Lindeberg share over the arms, ``(B,)`` (NaN
        without parameter inference): above ``SHARE_LIMIT`` their read-outs warn."""
        if self.parameters is None:
            return np.full(self.env.num_envs, np.nan)
        return np.asarray(self.parameters.core.round_shares()).max(axis=-1)

    def checkpoint_diagnostics(self) -> dict[str, np.ndarray]:
        """The per-trial diagnostics a checkpoint records, ``(B,)`` each, by name."""
        return {
            "value_bias": self.value_bias(),
            "round_share": self.round_share(),
            "design_share": self.design_share(),
            "context_flag": self.context_flags(),
        }

    def design_share(self) -> np.ndarray:
        """The parameter intervals' largest Lindeberg share of a design term over the arms
        and targets, ``(B,)`` (NaN without parameter inference)."""
        if self.parameters is None:
            return np.full(self.env.num_envs, np.nan)
        return np.asarray(self.parameters.core.design_shares()).max(axis=(-1, -2))

    def context_flags(self) -> np.ndarray:
        """Where the parameter read-outs raise :class:`~inference.ContextLawWarning`, as
        1.0 / 0.0 per trial, ``(B,)`` (NaN without parameter inference): the core's
        :meth:`~inference.LinearFormInference.law_flags`."""
        if self.parameters is None:
            return np.full(self.env.num_envs, np.nan)
        return np.asarray(self.parameters.core.law_flags()).astype(float)

    def estimation_error(self) -> np.ndarray:
        """``‖M̂_a − M_a‖_F`` of the estimate inference reads, ``(B, K)``."""
        est = np.asarray(self.estimator.estimates)
        return np.sqrt(((est - self.true_params) ** 2).sum(axis=(-1, -2)))
