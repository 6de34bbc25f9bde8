"""Gymnasium wrappers that keep online confidence intervals while any agent plays.

:class:`ParameterInference` (linear forms ``<M_a, T>`` and arm differences, Section 3) and
:class:`~inference.ValueInference` (the optimal policy value, Section 4, in
:mod:`inference.value_wrappers`) watch ``step()``: they record
the context they last returned, the action, the reward and the propensities, and pass the
action inward unchanged, so they stack and the base environment takes the action from it.
Their vector twins :class:`VectorParameterInference` and ``VectorValueInference`` do the
same for ``gym.make_vec(..., vectorization_mode="vector_entry_point")``, giving B independent
sets of intervals from one run.

Propensities arrive with the action (``env.step(agent.act(obs))`` passes a
:class:`~lrbandit_gym.Decision`) or from ``propensity_fn(obs) -> pmf`` given at construction
(needed when a library such as stable-baselines3 drives the loop).  A bare action with
neither is an error: a propensity is never assumed.

Estimator: by default a wrapper runs its own :class:`~agents.estimator.LowRankSGD` on what
it observes.  It cannot choose actions, so its warm start fits the first ``warm_start``
rounds it sees by nuclear-norm least squares weighted by ``1/π`` (inverse propensity), and
inference starts after it.  Handed an agent's estimator (``estimator=agent.estimator``) it
shares it and does no duplicate work, and then reproduces the paper's procedure exactly:
each round it reads the estimate *before* the agent's update (the standard loop
``act → step → update``), and rounds before the agent's warm start has finished are not
used.  A wrapper stacked on another inference wrapper without an ``estimator`` shares the
inner one's.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import VectorWrapper

from agents.estimator import LowRankSGD
from inference.linear_form import LinearFormInference
from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.shared_estimator import SharedEstimate
from inference.wrapper_base import InferenceWrapperBase
from lrbandit_gym.rounds import Round

__all__ = ["ParameterInference", "VectorParameterInference"]


class _ParameterInferenceBase(InferenceWrapperBase):
    """Everything of the parameter wrappers but the Gymnasium wrapper class (``_layer``),
    constructor included."""

    info_key = "parameter_inference"

    def __init__(
        self,
        env,
        targets,
        rank: int = 3,
        *,
        estimator=None,
        propensity_fn=None,
        projection: str = "tangent",
        point_estimate: str = "one-step",
        warm_start=None,
        context_law=None,
        check_contexts: bool = True,
        **sgd_kwargs,
    ):
        self._open(
            env,
            targets=targets,
            rank=rank,
            estimator=estimator,
            propensity_fn=propensity_fn,
            projection=projection,
            point_estimate=point_estimate,
            warm_start=warm_start,
            context_law=context_law,
            check_contexts=check_contexts,
            **sgd_kwargs,
        )
        self._setup(env, rank, estimator, propensity_fn, warm_start, sgd_kwargs)
        self.core = LinearFormInference(
            self.d1,
            self.d2,
            self.rank,
            self.n_actions,
            targets,
            context=self._shape.context,
            projection=projection,
            point_estimate=point_estimate,
            n_trials=self.n_trials,
            context_law=getattr(env.unwrapped, "context_law", None)
            if context_law is None
            else context_law,
            check_contexts=check_contexts,
        )
        self.target_names = self.core.target_names

    @property
    def core(self) -> LinearFormInference:
        """The inference core the wrapper feeds and reads.

        Assigning another core (of the same sizes, e.g. a negative control of a validity
        study) re-wires the feed from the estimator, so the new core sees every round.
        """
        return self._core

    @core.setter
    def core(self, core: LinearFormInference) -> None:
        self._core = core
        self._feed = (
            SharedEstimate(self.estimator, core) if isinstance(self.estimator, LowRankSGD) else None
        )

    def _snapshot(self, xb, actions, props):
        if self._feed is None:  # any estimator with factors: copies of all of them
            u, v = (np.array(f, copy=True) for f in self.estimator.factors)
            return "factors", ((u, v) if self.n_trials is not None else (u[None], v[None]))
        # A LowRankSGD: only what the core reads, the products X V_a and Xᵀ U_a of the
        # pulled arms shared with the estimator's own update of this round.
        return "parts", self._feed.snapshot(xb, actions, self._fp)

    def _stage(self, snapshot, round_: Round):
        """The core's round computed and checked before any layer commits (a round whose
        squares its running sums cannot hold raises here): ``(kind, terms, parts)``."""
        kind, parts = snapshot
        # Inputs were validated before the step (decision, reward).
        if kind == "factors":
            estimate = self.core.estimate_parts(*parts, round_.actions)
            return kind, self.core.propose(round_, estimate), parts
        return kind, self._feed.propose(parts, round_), parts

    def _absorb(self, staged, round_: Round):
        kind, terms, parts = staged
        if kind == "factors":
            self.core.commit(terms)
        else:
            self._feed.commit(terms, parts)

    def _skipped(self, round_: Round) -> None:
        # A round before inference starts still tells an estimated law about the contexts.
        self._core.observe_context(round_.contexts)

    def _restored(self) -> None:
        if self._feed is not None:
            self._feed.forget()

    def _running_info(self) -> dict[str, Any]:
        core = self._core
        n = core.n_obs
        info: dict[str, Any] = {"n_obs": n}
        if n:
            sigma2 = core.sigma2
            se = core.standard_errors()  # (…, K, n_T)
            info["sigma2"] = sigma2
            info["standard_error"] = {name: se[..., k] for k, name in enumerate(self.target_names)}
        return info

    def interval(
        self,
        arm: int,
        target: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``<M_arm, T>`` (Algorithms 2-3), or with
        ``kind="sequence"`` the anytime-valid confidence sequence tuned at ``tuning_n``
        (see :meth:`inference.LinearFormInference.interval`)."""
        with self._one_warning():
            return self.core.interval(arm, target, confidence_level, kind=kind, tuning_n=tuning_n)

    def difference(
        self,
        arm_a: int,
        arm_b: int,
        target: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``<M_a − M_b, T>`` (Corollary 3.3); ``kind`` and
        ``tuning_n`` as in :meth:`interval`."""
        with self._one_warning():
            return self.core.difference(
                arm_a, arm_b, target, confidence_level, kind=kind, tuning_n=tuning_n
            )

    def results(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> list[tuple[str, IntervalEstimate]]:
        """Every arm, target and pairwise difference as ``(label, IntervalEstimate)``."""
        opts = {"kind": kind, "tuning_n": tuning_n}
        rows = []
        for name in self.target_names:
            for a in range(self.n_actions):
                rows.append((f"<M_{a}, {name}>", self.interval(a, name, confidence_level, **opts)))
            for a in range(self.n_actions):
                for b in range(a + 1, self.n_actions):
                    ci = self.difference(b, a, name, confidence_level, **opts)
                    rows.append((f"<M_{b} - M_{a}, {name}>", ci))
        return rows

    @property
    def parameter_inference(self):
        """This wrapper: ``env.get_wrapper_attr("parameter_inference")`` finds it in a stack."""
        return self


class ParameterInference(_ParameterInferenceBase, gym.Wrapper, RecordConstructorArgs):
    """Online confidence intervals for ``<M_a, T>`` and arm differences (Algorithms 2-3).

    Parameters
    ----------
    env : gymnasium.Env
        A ``MatrixContextBandit-v0`` environment (wrapped or not).
    targets : mapping of str to array (d1, d2)
        The linear forms ``T`` of interest, by name.
    rank : int, default 3
        Rank of the wrapper's own estimator (ignored when ``estimator`` is given).
    estimator : LowRankSGD, optional
        An agent's estimator to share (then the agent must update it after each step).
    propensity_fn : callable, optional
        ``propensity_fn(obs) -> pmf`` for loops that pass bare actions.
    projection : {"tangent", "paper"}, default "tangent"
        ``G_t`` in ``Ŝ²`` (docs/method.md §4); see :class:`inference.LinearFormInference`.
    point_estimate : {"one-step", "projection"}, default "one-step"
        How ``<M_a, T>`` is estimated from the debiased average: the one-step estimate
        around the current low-rank estimate, or the paper's rank-``r`` truncation (eq. (12));
        see :class:`inference.LinearFormInference`.
    warm_start : int, optional
        Rounds of the own estimator's warm start (default: sized from the problem by
        :func:`agents.warm_start.default_warm_start_rounds`, as the policies' is).
    context_law : str or ContextLaw, optional
        The contexts' law, whose second moment the debiasing divides by (docs/method.md §1):
        default the environment's (``env.unwrapped.context_law``); ``"estimated"`` for
        contexts of an unknown law (a user's own: images, logged features), estimated from
        every context the wrapper sees; or a law of :mod:`lrbandit_gym.context_law`.
    check_contexts : bool, default True
        Check the contexts against the law every round; a read-out where they do not match
        warns (:class:`~inference.ContextLawWarning`).
    **sgd_kwargs
        ``step_scale``, ``step_offset``, ``step_decay`` of the own estimator.

    Notes
    -----
    ``info["parameter_inference"]`` after each step holds ``n_obs`` and, once inference has
    started, ``sigma2`` (K,) and ``standard_error`` (a dict target → (K,)): values that need
    no pass over ``d1 x d2`` matrices.  Point estimates do: read them with :meth:`interval`.
    """

    _vector = False
    _layer = gym.Wrapper


class VectorParameterInference(_ParameterInferenceBase, VectorWrapper, RecordConstructorArgs):
    """Vector twin of :class:`ParameterInference`: B independent sets of intervals.

    Results are :class:`~inference.IntervalEstimate` objects whose fields are arrays of
    shape ``(B,)``.
    """

    _vector = True
    _layer = VectorWrapper
