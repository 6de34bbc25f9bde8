"""The linear forms ``<M_a, T>`` as an inference wrapper keeps them (:class:`ParameterTracker`).

Each round feeds :class:`~inference.LinearFormInference` (Algorithms 2-3) the estimate before
the round's update: from a shared :class:`~agents.LowRankSGD`, only what the core reads (the
products ``X V_a`` and ``Xᵀ U_a`` of the pulled arms, shared with the estimator's own update,
and the arms that moved, :class:`~inference.wrappers.shared_estimator.SharedEstimate`); from
any other
estimator with factors, copies of all of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.estimator import LowRankSGD
from inference.cores.linear_form import LinearFormInference
from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.round_check import CheckedRound
from inference.wrappers.shared_estimator import SharedEstimate
from inference.wrappers.tracker import Tracker
from lrbandit_gym.rounds import Round

__all__ = ["ParameterTracker"]


class ParameterTracker(Tracker):
    """Intervals for ``<M_a, T>`` and arm differences, fed round by round.

    Parameters
    ----------
    shape, estimator, own
        As for :class:`~inference.wrappers.tracker.Tracker`.
    targets : mapping of str to array (d1, d2)
        The linear forms ``T``, by name.
    projection, point_estimate, context_law, check_contexts, design_variance
        As for :class:`~inference.LinearFormInference`.
    """

    info_key = "parameter_inference"

    def __init__(
        self,
        shape,
        estimator,
        own,
        targets,
        *,
        projection: str,
        point_estimate: str,
        context_law,
        check_contexts: bool,
        design_variance: str = "auto",
    ) -> None:
        super().__init__(shape, estimator, own)
        self.core = LinearFormInference(
            self.d1,
            self.d2,
            self.rank,
            self.n_actions,
            targets,
            context=self.context,
            projection=projection,
            point_estimate=point_estimate,
            n_trials=self.n_trials,
            context_law=context_law,
            check_contexts=check_contexts,
            design_variance=design_variance,
        )
        self.target_names = self.core.target_names

    @property
    def core(self) -> LinearFormInference:
        """The core fed.  Assigning another core of the same sizes (a negative control of a
        validity study) re-wires the feed from the estimator, so it sees every round."""
        return self._core

    @core.setter
    def core(self, core: LinearFormInference) -> None:
        self._core = core
        self._feed = (
            SharedEstimate(self.estimator, core) if isinstance(self.estimator, LowRankSGD) else None
        )

    # ------------------------------------------------------------------ one round
    def snapshot(self, checked: CheckedRound, fingerprint) -> Any:
        if self._feed is None:  # any estimator with factors: copies of all of them
            u, v = (np.array(f, copy=True) for f in self.estimator.factors)
            return "factors", ((u, v) if self.n_trials is not None else (u[None], v[None]))
        return "parts", self._feed.snapshot(checked.contexts, checked.actions, fingerprint)

    def stage(self, snapshot, round_: Round):
        kind, parts = snapshot
        if kind == "factors":
            estimate = self._core.estimate_parts(*parts, round_.actions)
            return kind, self._core.propose(round_, estimate), parts
        # The feed's core is this tracker's: its propose(), without the hand-off's call.
        return kind, self._core.propose(round_, parts.estimate), parts

    def commit(self, staged, round_: Round) -> dict[str, Any]:
        kind, terms, parts = staged
        if kind == "factors":
            self._core.commit(terms)
        else:
            self._feed.commit(terms, parts)
        return self.running_info()

    def skip(self, round_: Round) -> dict[str, Any]:
        # A round before inference starts still tells an estimated law about the contexts,
        # and the remainder's variance how many pulls the estimate rests on.
        self._core.observe_context(round_.contexts, round_.actions)
        return self.running_info()

    def restored(self) -> None:
        if self._feed is not None:
            self._feed.forget()

    def running_info(self) -> dict[str, Any]:
        core = self._core
        n = core.n_obs
        info: dict[str, Any] = {"n_obs": n}
        if n:
            se = core.standard_errors(remainder=False)  # (…, K, n_T), eq. (15)
            sigma2 = core.state.sigma_sum / n  # the core's sigma2, read once a round
            info["sigma2"] = sigma2 if core.batched else sigma2[0]
            by_target = {}
            for k, name in enumerate(self.target_names):
                by_target[name] = se[..., k]
            info["standard_error"] = by_target
        return info

    # ------------------------------------------------------------------ read-out
    def interval(
        self, arm, target, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N
    ) -> IntervalEstimate:
        with self.one_warning():
            return self._core.interval(arm, target, confidence_level, kind=kind, tuning_n=tuning_n)

    def difference(
        self,
        arm_a,
        arm_b,
        target,
        confidence_level=0.95,
        *,
        kind="fixed",
        tuning_n=DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        with self.one_warning():
            return self._core.difference(
                arm_a, arm_b, target, confidence_level, kind=kind, tuning_n=tuning_n
            )

    def results(self, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N):
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
