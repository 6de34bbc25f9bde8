"""Gymnasium wrappers that keep online confidence intervals for the optimal value ``V*``.

:class:`ValueInference` (Section 4) and its vector twin :class:`VectorValueInference` watch
``step()`` as the parameter wrappers of :mod:`inference.wrappers` do (propensities, own or
shared estimator, all-or-nothing steps: see that module) and feed
:class:`~inference.OptimalValueInference` the predictions of every arm before the round's
update.  Their read-out checks the regret of the greedy rules the estimate evaluates
(:mod:`inference.played_regret`, docs/method.md §10).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import VectorWrapper

from agents.estimator import LowRankSGD
from agents.state import sub_state
from inference.optimal_value import OptimalValueInference
from inference.played_regret import CORRECTIONS, RegretCorrection, correct_interval
from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrapper_base import InferenceWrapperBase
from lrbandit_gym.rounds import Round

__all__ = ["ValueInference", "VectorValueInference"]


class _ValueInferenceBase(InferenceWrapperBase):
    """Everything of the ``V*`` wrappers but the Gymnasium wrapper class (``_layer``),
    constructor included."""

    info_key = "value_inference"

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
        if correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {CORRECTIONS}; got {correction!r}")
        self._setup(env, rank, estimator, propensity_fn, warm_start, sgd_kwargs)
        self.core = OptimalValueInference(
            self.n_actions, n_trials=self.n_trials, propensities=propensities
        )
        possible = isinstance(self.estimator, LowRankSGD) and self.core.propensities == "known"
        if correction == "regret" and not possible:
            raise ValueError(
                "correction='regret' needs a LowRankSGD estimator and known propensities "
                f"(got {type(self.estimator).__name__}, propensities={propensities!r}); pass "
                "correction='none' for the paper's estimate"
            )
        #: "check" (the paper's V̂_n, its interval bias-aware with the estimated regret
        #: of the greedy rules played, docs/method.md §10), "regret" (V̂_n plus that
        #: regret) or "none" (the paper's V̂_n, unchecked).
        self.correction = (
            "none"
            if correction == "none" or not possible
            else "regret"
            if correction == "regret"
            else "check"
        )
        self._regret = (
            RegretCorrection(self, regret_reservoir) if self.correction != "none" else None
        )

    def _snapshot(self, xb, actions, props):
        if isinstance(self.estimator, LowRankSGD):  # shares the agent's X V of this round
            pred = self.estimator.predict_checked(xb, self._fp)
        else:
            pred = self._predict_dense(xb)
        self.core.check_predictions(pred, props)  # before the step: 1/(1 - e_t) must exist
        if self._regret is None:
            return pred, None
        return pred, self._regret.snapshot(xb, actions, self._fp)

    def _stage(self, snapshot, round_: Round):
        """The regret correction's own reference core staged before any layer commits (a
        round it cannot absorb raises here): ``(predictions, staged)``."""
        predictions, parts = snapshot
        if self._regret is None:
            return predictions, None
        return predictions, self._regret.stage(parts, round_)

    def _absorb(self, staged, round_: Round):
        predictions, regret = staged
        self.core.update(predictions, round_)
        if self._regret is not None:
            self._regret.absorb(regret, round_, predictions)

    def _restored(self) -> None:
        if self._regret is not None:
            self._regret.forget()

    def played_regret(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(R̂_n, var)``: the estimated regret of the greedy rules played and its sampling
        variance, arrays of shape ``(B,)`` (``(1,)`` for one bandit; NaN in a trial whose
        propensities fell below ``MIN_REFERENCE_PROPENSITY``, which is not corrected); None
        when ``correction="none"`` (docs/method.md §10)."""
        if self._regret is None or not self.core.n_obs:
            return None
        return self._regret.regret(self.core.n_obs)

    def _corrected(self, ci, level, kind, tuning_n, **extra) -> IntervalEstimate:
        if self._regret is None or not self.core.n_obs:
            return ci
        regret, variance = self._regret.regret(self.core.n_obs)
        return correct_interval(
            ci,
            regret,
            variance,
            shift=self.correction == "regret",
            kind=kind,
            tuning_n=tuning_n,
            level=level,
            batched=self.n_trials is not None,
            **extra,
        )

    def _running_info(self) -> dict[str, Any]:
        n = self.core.n_obs
        info: dict[str, Any] = {"n_obs": n}
        if n:
            info["estimate"] = self.core.estimate
            info["standard_error"] = np.sqrt(self.core.S2_V / n)
        return info

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
        with self._one_warning():
            ci = self.core.interval(confidence_level, kind=kind, tuning_n=tuning_n)
        return self._corrected(ci, confidence_level, kind, tuning_n)

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
        with self._one_warning():
            ci = self.core.test_greater(v0, confidence_level, kind=kind, tuning_n=tuning_n)
        if self._regret is None or not self.core.n_obs:
            return ci
        v = np.broadcast_to(
            np.asarray(v0, dtype=float), (1 if self.n_trials is None else self.n_trials,)
        )
        return self._corrected(
            ci, confidence_level, kind, tuning_n, null_value=v, alternative="greater"
        )

    def results(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> list[tuple[str, IntervalEstimate]]:
        """The optimal value's interval as ``[("V*", IntervalEstimate)]``."""
        return [("V*", self.interval(confidence_level, kind=kind, tuning_n=tuning_n))]

    @property
    def value_inference(self):
        """This wrapper: ``env.get_wrapper_attr("value_inference")`` finds it in a stack."""
        return self

    def _extra_state(self) -> dict[str, Any]:
        """The regret check's reservoir and own reference core (None without the check)."""
        return {"regret": None if self._regret is None else self._regret.state_dict()}

    def _nested_extra(self, state) -> dict[str, Any]:
        regret = sub_state(state, "regret")
        if regret is not None:
            regret = {"rules": sub_state(regret, "rules"), "own": sub_state(regret, "own")}
        return {"regret": regret}

    def _check_extra_state(self, state):
        return None if self._regret is None else self._regret.check_state(state.get("regret"))

    def _apply_extra_state(self, checked) -> None:
        if checked is not None:
            self._regret.apply_state(checked)


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
    large contexts: :func:`inference.played_regret.default_reservoir_size`;
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
