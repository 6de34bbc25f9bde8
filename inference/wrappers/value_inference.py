"""Gymnasium wrappers that keep online confidence intervals for the optimal value ``V*``.

:class:`ValueInference` (Section 4) and its vector twin :class:`VectorValueInference` watch
``step()`` as the parameter wrappers of :mod:`inference.wrappers` do (propensities, own or
shared estimator, all-or-nothing steps: see that module) and feed
:class:`~inference.OptimalValueInference` the predictions of every arm before the round's
update.  Their read-out checks the regret of the greedy rules the estimate evaluates
(:mod:`inference.cores.played_regret`, docs/method.md §10).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import VectorWrapper

from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.inference_wrapper import InferenceWrapperBase
from inference.wrappers.layer_checks import layers_below
from inference.wrappers.parameter_tracker import ParameterTracker
from inference.wrappers.value_tracker import ValueTracker

__all__ = ["ValueInference", "VectorValueInference"]


class _ValueInferenceBase(InferenceWrapperBase):
    """The ``V*`` preset: one :class:`~inference.wrappers.value_tracker.ValueTracker`."""

    def __init__(
        self,
        env,
        rank: int = 3,
        *,
        estimator=None,
        propensity_fn=None,
        propensities: str = "known",
        warm_start=None,
        correction: str = "auto",
        regret_reservoir: int | None = None,
        **sgd_kwargs,
    ):
        self._open(
            env,
            rank=rank,
            estimator=estimator,
            propensity_fn=propensity_fn,
            propensities=propensities,
            warm_start=warm_start,
            correction=correction,
            regret_reservoir=regret_reservoir,
            **sgd_kwargs,
        )

        def tracker(shape, estimator, own):
            # The regret check reads the one-step estimate of a parameter tracker below
            # that shares the estimator, when there is one.
            below = next(
                (
                    w.tracker
                    for w in layers_below(env)
                    if isinstance(w, InferenceWrapperBase)
                    and isinstance(w.tracker, ParameterTracker)
                    and w.estimator is estimator
                ),
                None,
            )
            return ValueTracker(
                shape,
                estimator,
                own,
                propensities=propensities,
                correction=correction,
                regret_reservoir=regret_reservoir,
                reference=below,
            )

        self._attach(env, tracker, rank, estimator, propensity_fn, warm_start, sgd_kwargs)

    @property
    def correction(self) -> str:
        """ "check" (the paper's V̂_n, its interval bias-aware with the estimated regret of
        the greedy rules played, docs/method.md §10), "regret" (V̂_n plus that regret) or
        "none" (the paper's V̂_n, unchecked)."""
        return self.tracker.correction

    def played_regret(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(R̂_n, var)``: the estimated regret of the greedy rules played and its sampling
        variance, arrays of shape ``(B,)`` (``(1,)`` for one bandit; NaN in a trial whose
        propensities fell below ``MIN_REFERENCE_PROPENSITY``, which is not corrected); None
        when ``correction="none"`` (docs/method.md §10)."""
        return self.tracker.played_regret()

    def interval(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``V*`` (Section 4, Theorem 4.2), or with
        ``kind="sequence"`` the anytime-valid confidence sequence tuned at ``tuning_n``.

        By default the estimate is the paper's ``V̂_n`` and the interval is bias-aware: ``V*``
        between ``V̂_n`` and ``V̂_n + R̂_n``, with ``R̂_n`` the estimated regret of
        the greedy rules played; it allows for the regret, so it does not warn, and its
        ``method`` says how large the regret is.  ``correction="regret"`` adds ``R̂_n``
        to the estimate (docs/method.md §10)."""
        return self.tracker.interval(confidence_level, kind=kind, tuning_n=tuning_n)

    def test_greater(
        self,
        v0: float,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """One-sided test of ``H0: V* ≤ v0`` (eq. 5), with the one-sided interval at
        ``confidence_level``; ``kind="sequence"`` makes the p-value anytime-valid (see
        :meth:`inference.OptimalValueInference.test_greater`)."""
        return self.tracker.test_greater(v0, confidence_level, kind=kind, tuning_n=tuning_n)

    @property
    def value_inference(self):
        """This wrapper: ``env.get_wrapper_attr("value_inference")`` finds it in a stack."""
        return self


class ValueInference(_ValueInferenceBase, gym.Wrapper, RecordConstructorArgs):
    """Online confidence interval and test for the optimal policy value ``V*`` (Section 4).

    Parameters are those of :class:`ParameterInference` without ``targets`` and
    ``projection``, plus ``propensities``: "known" (the reported pmf) or "estimated"
    (Appendix A: the pmf is an estimate, e.g. an ensemble's model fractions);
    ``correction``: "auto" (default) keeps the paper's ``V̂_n`` and makes the interval
    bias-aware with the estimated regret ``R̂_n`` of the greedy rules it evaluates (up to
    the corrected upper end; its ``method`` says how large ``R̂_n`` is);
    "regret" adds ``R̂_n`` to the estimate; "none" is the paper's estimate unchecked.
    ``R̂_n`` is read against the one-step estimate of a
    :class:`ParameterInference` below that shares the estimator (or of an own core) on a
    reservoir of ``regret_reservoir`` past rounds (default 256, fewer for many trials of
    large contexts: :func:`inference.cores.played_regret.default_reservoir_size`;
    docs/method.md §10). Without a low-rank estimator or with estimated propensities the
    check cannot be made and "auto" is "none" (the interval's ``method`` says which).
    ``info["value_inference"]`` holds the running ``V̂_n``, its standard error and ``n_obs``.
    """

    _vector = False
    _layer = gym.Wrapper


class VectorValueInference(_ValueInferenceBase, VectorWrapper, RecordConstructorArgs):
    """Vector twin of :class:`ValueInference`."""

    _vector = True
    _layer = VectorWrapper
