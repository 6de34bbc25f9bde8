"""Gymnasium wrappers that keep online confidence intervals while any agent plays.

:class:`ParameterInference` (linear forms ``<M_a, T>`` and arm differences, Section 3) and
:class:`~inference.ValueInference` (the optimal policy value, Section 4, in
:mod:`inference.wrappers.value_inference`) watch ``step()``: they record
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

from functools import partial

import gymnasium as gym
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import VectorWrapper

from inference.cores.linear_form import LinearFormInference
from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.inference_wrapper import InferenceWrapperBase
from inference.wrappers.parameter_tracker import ParameterTracker

__all__ = ["ParameterInference", "VectorParameterInference"]


class _ParameterInferenceBase(InferenceWrapperBase):
    """The parameter preset: one :class:`~inference.wrappers.parameter_tracker.ParameterTracker`."""

    def __init__(
        self,
        env,
        targets,
        rank: int = 3,
        *,
        estimator=None,
        propensity_fn=None,
        projection: str = "auto",
        point_estimate: str = "one-step",
        warm_start=None,
        context_law=None,
        check_contexts: bool = True,
        design_variance: str = "auto",
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
            design_variance=design_variance,
            **sgd_kwargs,
        )
        law = getattr(env.unwrapped, "context_law", None) if context_law is None else context_law
        tracker = partial(
            ParameterTracker,
            targets=targets,
            projection=projection,
            point_estimate=point_estimate,
            context_law=law,
            check_contexts=check_contexts,
            design_variance=design_variance,
        )
        self._attach(env, tracker, rank, estimator, propensity_fn, warm_start, sgd_kwargs)
        self.target_names = self.tracker.target_names

    @property
    def core(self) -> LinearFormInference:
        """The inference core the wrapper feeds and reads.

        Assigning another core (of the same sizes, e.g. a negative control of a validity
        study) re-wires the feed from the estimator, so the new core sees every round.
        """
        return self.tracker.core

    @core.setter
    def core(self, core: LinearFormInference) -> None:
        self.tracker.core = core

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
        return self.tracker.interval(arm, target, confidence_level, kind=kind, tuning_n=tuning_n)

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
        return self.tracker.difference(
            arm_a, arm_b, target, confidence_level, kind=kind, tuning_n=tuning_n
        )

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
    projection : {"auto", "tangent", "paper", "none"}, default "auto"
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
    design_variance : {"auto", "pulled", "all-rounds"}, default "auto"
        The design part ``Ŝ²`` of the standard error (docs/method.md §13): "auto" takes,
        on dense contexts, each round's context and the arm's propensity in it wherever
        that propensity is at least 0.01, and eq. (14)'s pulled rounds below, and on
        completion contexts eq. (14); "pulled" is eq. (14) alone, "all-rounds" every
        round's term; see :class:`inference.LinearFormInference`.
    **sgd_kwargs
        ``step_scale``, ``step_offset``, ``step_decay`` of the own estimator.

    Notes
    -----
    ``info["parameter_inference"]`` after each step holds ``n_obs`` and, once inference has
    started, ``sigma2`` (K,) and ``standard_error`` (a dict target → (K,)): values that need
    no pass over ``d1 x d2`` matrices.  Point estimates do: read them with :meth:`interval`.
    So does the one-step remainder's variance, which the interval's ``standard_error``
    adds to ``σ̂Ŝ/√n`` (docs/method.md §4): ``info``'s ``standard_error`` is ``σ̂Ŝ/√n``.
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
