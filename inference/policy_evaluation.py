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
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import VectorWrapper

from agents.estimator import LowRankSGD
from inference.policy_value import PolicyValueInference, check_target_pmfs
from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrapper_base import InferenceWrapperBase
from lrbandit_gym.input_checks import MIN_PROPENSITY
from lrbandit_gym.rounds import Round

__all__ = ["GREEDY", "PolicyEvaluation", "VectorPolicyEvaluation"]

#: The target that stands for the greedy rule ``argmax_a <M̂_{a,t−1}, X_t>`` of the estimate
#: the wrapper reads (ties to the lowest arm); its value estimate is the mean value of the
#: greedy rules over the rounds absorbed.
GREEDY = "greedy"


def _check_policies(policies: Any) -> dict[str, Any]:
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError(
            "policies must be a non-empty mapping of names to target policies (a callable "
            f"obs -> pmf or action, an agent with action_probs, or {GREEDY!r}); got "
            f"{policies!r}"
        )
    out = {}
    for name, policy in policies.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"policy names must be non-empty strings; got {name!r}")
        if not (policy == GREEDY if isinstance(policy, str) else True):
            raise ValueError(
                f"policies[{name!r}] must be a callable, an agent with action_probs, or "
                f"{GREEDY!r}; got {policy!r}"
            )
        if not isinstance(policy, str) and not (
            callable(getattr(policy, "action_probs", None)) or callable(policy)
        ):
            raise ValueError(
                f"policies[{name!r}] must be a callable obs -> pmf or action, an agent with "
                f"action_probs(obs), or {GREEDY!r}; got {type(policy).__name__}"
            )
        out[name] = policy
    return out


class _PolicyEvaluationBase(InferenceWrapperBase):
    """Everything of the policy-evaluation wrappers but the Gymnasium wrapper class
    (``_layer``), constructor included."""

    info_key = "policy_evaluation"

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
        policies = _check_policies(policies)
        self._setup(env, rank, estimator, propensity_fn, warm_start, sgd_kwargs)
        self._targets = policies
        self.policy_names = tuple(policies)
        self.core = PolicyValueInference(self.n_actions, self.policy_names, n_trials=self.n_trials)

    # ------------------------------------------------------------------ per round
    def _predictions(self, xb) -> np.ndarray:
        if isinstance(self.estimator, LowRankSGD):  # shares the agent's X V of this round
            return self.estimator.predict_checked(xb, self._fp)
        return self._predict_dense(xb)

    def _target_pmf(self, name: str, policy: Any, predictions: np.ndarray) -> np.ndarray:
        """One target's pmf at the current context, batched ``(B, K)``."""
        B, K = predictions.shape
        if isinstance(policy, str):  # GREEDY
            pmf = np.zeros((B, K))
            pmf[np.arange(B), predictions.argmax(axis=1)] = 1.0
            return pmf
        ask = getattr(policy, "action_probs", None)
        out = ask(self._obs_raw) if callable(ask) else policy(self._obs_raw)
        arr = np.asarray(out)
        single = self.n_trials is None
        if arr.dtype.kind in "iu" and arr.shape == (() if single else (B,)):
            arms = arr.reshape(B)
            if ((arms < 0) | (arms >= K)).any():
                raise ValueError(
                    f"target policy {name!r} returned action {out!r}, outside [0, {K})"
                )
            pmf = np.zeros((B, K))
            pmf[np.arange(B), arms] = 1.0
            return pmf
        if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
            raise ValueError(
                f"target policy {name!r} must return a pmf over the {K} arms or an integer "
                f"action; got {out!r}"
            )
        expected = (K,) if single else (B, K)
        if arr.shape != expected:
            raise ValueError(
                f"target policy {name!r} returned a pmf of shape {arr.shape}; expected "
                f"{expected} (or an integer action)"
            )
        return arr.astype(float).reshape(B, K)

    def _snapshot(self, xb, actions, props):
        pred = self._predictions(xb)
        pmfs = np.stack([self._target_pmf(n, p, pred) for n, p in self._targets.items()], axis=1)
        pmfs = check_target_pmfs(
            pmfs,
            len(self._targets),
            self.n_actions,
            self.n_trials,
            layout="batched",
            names=self.policy_names,
        )
        # Overlap: a target may only play arms the logging policy could have played.
        short = (pmfs > 0) & (props[:, None, :] < MIN_PROPENSITY)
        if short.any():
            b, j, a = (int(i[0]) for i in np.nonzero(short))
            where = "" if self.n_trials is None else f" in trial {b}"
            raise ValueError(
                f"target policy {self.policy_names[j]!r} plays arm {a} with probability "
                f"{pmfs[b, j, a]:.3g}{where}, where the logging policy's propensity is "
                f"{props[b, a]!r} < MIN_PROPENSITY = {MIN_PROPENSITY:g}: its value there "
                "cannot be estimated from this data; log with a policy that explores every "
                "arm the targets may play (e.g. epsilon-greedy)"
            )
        return pred, pmfs

    def _stage(self, snapshot, round_: Round):
        """The round's terms computed and checked before any layer commits."""
        pred, pmfs = snapshot
        return self.core.propose(round_, pred, pmfs)

    def _absorb(self, staged, round_: Round):
        self.core.commit(staged)

    def _restored(self) -> None:
        pass

    def _running_info(self) -> dict[str, Any]:
        return {"n_obs": self.core.n_obs}

    # ------------------------------------------------------------------ read-out
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
        with self._one_warning():
            return self.core.interval(policy, confidence_level, kind=kind, tuning_n=tuning_n)

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
        with self._one_warning():
            return self.core.difference(
                policy_a, policy_b, confidence_level, kind=kind, tuning_n=tuning_n
            )

    def results(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> list[tuple[str, IntervalEstimate]]:
        """Every target's value and every pairwise difference as ``(label, estimate)``."""
        opts = {"kind": kind, "tuning_n": tuning_n}
        names = self.policy_names
        rows = [(f"V({p})", self.interval(p, confidence_level, **opts)) for p in names]
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                rows.append((f"V({b}) - V({a})", self.difference(b, a, confidence_level, **opts)))
        return rows

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
