"""The optimal value ``V*`` as an inference wrapper keeps it (:class:`ValueTracker`).

Each round feeds :class:`~inference.OptimalValueInference` (Section 4) every arm's prediction
before the round's update.  The read-out checks the regret of the greedy rules the estimate
evaluates (:mod:`inference.cores.played_regret`, docs/method.md §10) against the one-step estimate
of a parameter tracker of the same wrapper that shares the estimator, or of an own core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.estimator import LowRankSGD
from agents.state import flat_part
from inference.cores.optimal_value import OptimalValueInference
from inference.cores.played_regret import CORRECTIONS, RegretCorrection, correct_interval
from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.round_check import CheckedRound
from inference.wrappers.tracker import Tracker
from lrbandit_gym.rounds import Round

__all__ = ["UNCHECKED", "ValueTracker"]

#: What a ``correction="none"`` interval's ``method`` adds: the paper's interval does not
#: allow for the greedy rules' regret, and no warning separates its misses from its covers
#: (docs/method.md §10), so the result itself says that it may not cover.
UNCHECKED = (
    "; correction='none': the paper's interval, with no allowance for the regret of the "
    "greedy rules played, may not cover where that regret is large against the standard "
    "error (docs/method.md §10)"
)


class ValueTracker(Tracker):
    """Interval and test for ``V*``, fed round by round.

    Parameters
    ----------
    shape, estimator, own
        As for :class:`~inference.wrappers.tracker.Tracker`.
    propensities : {"known", "estimated"}
        As for :class:`~inference.OptimalValueInference`.
    correction : {"auto", "regret", "none"}
        As for :class:`~inference.ValueInference`.
    regret_reservoir : int or None
        Rounds the regret check keeps.
    reference : ParameterTracker or None
        A parameter tracker sharing the estimator, whose one-step estimate the regret
        check reads (None: an own core).
    """

    info_key = "value_inference"

    def __init__(
        self,
        shape,
        estimator,
        own,
        *,
        propensities: str,
        correction: str,
        regret_reservoir: int | None,
        reference=None,
    ) -> None:
        if correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {CORRECTIONS}; got {correction!r}")
        super().__init__(shape, estimator, own)
        self.core = OptimalValueInference(
            self.n_actions, n_trials=self.n_trials, propensities=propensities
        )
        possible = isinstance(estimator, LowRankSGD) and self.core.propensities == "known"
        if correction == "regret" and not possible:
            raise ValueError(
                "correction='regret' needs a LowRankSGD estimator and known propensities "
                f"(got {type(estimator).__name__}, propensities={propensities!r}); pass "
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
        self.regret_check = (
            RegretCorrection(self, regret_reservoir, reference)
            if self.correction != "none"
            else None
        )
        # Only the regret check's own reference core has a round to stage.
        self.stages = self.regret_check is not None and self.regret_check.own is not None
        self._store = estimator.store if isinstance(estimator, LowRankSGD) else None
        # R̂_n and its variance at the rounds absorbed so far: a read-out of the fixed-n
        # interval and of the sequence at the same round share one pass over the reservoir.
        self._rounds = 0
        self._regret_read: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None

    # ------------------------------------------------------------------ one round
    def snapshot(self, checked: CheckedRound, fingerprint) -> Any:
        if self._store is not None:  # the agent's predictions of this round, shared
            pred = self._store.predict_checked(checked.contexts, fingerprint)
        else:
            pred = self.predictions(checked.contexts, fingerprint)
        self.core.check_predictions(pred, checked.propensities)  # 1/(1 - e_t) must exist
        if not self.stages:  # no check, or a shared reference: no parts
            return pred, None
        return pred, self.regret_check.snapshot(checked.contexts, checked.actions, fingerprint)

    def stage(self, snapshot, round_: Round):
        predictions, parts = snapshot
        return predictions, self.regret_check.stage(parts, round_)

    def commit(self, staged, round_: Round) -> dict[str, Any]:
        predictions, regret = staged
        self._rounds += 1
        self.core.absorb(predictions, round_.actions, round_.rewards, round_.propensities)
        if self.regret_check is not None:
            self.regret_check.absorb(regret, round_, predictions)
        estimate, standard_error = self.core.running_values()  # running_info(), n >= 1
        return {"n_obs": self.core.n_obs, "estimate": estimate, "standard_error": standard_error}

    def restored(self) -> None:
        self._rounds += 1  # a new state: R̂_n is read afresh
        if self.regret_check is not None:
            self.regret_check.forget()

    def _regret(self) -> tuple[np.ndarray, np.ndarray]:
        """``(R̂_n, var)`` now, computed once per round absorbed."""
        if self._regret_read is None or self._regret_read[0] != self._rounds:
            self._regret_read = (self._rounds, self.regret_check.regret(self.core.n_obs))
        regret, variance = self._regret_read[1]
        return regret.copy(), variance.copy()

    def running_info(self) -> dict[str, Any]:
        n = self.core.n_obs
        if not n:
            return {"n_obs": n}
        estimate, standard_error = self.core.running_values()
        return {"n_obs": n, "estimate": estimate, "standard_error": standard_error}

    # ------------------------------------------------------------------ read-out
    def played_regret(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(R̂_n, var)`` per trial, or None without the check (see
        :meth:`inference.ValueInference.played_regret`)."""
        if self.regret_check is None or not self.core.n_obs:
            return None
        return self._regret()

    def _corrected(self, ci, level, kind, tuning_n, **extra) -> IntervalEstimate:
        if self.correction == "none":  # says, in the result, that it may not cover
            return dataclasses.replace(ci, method=ci.method + UNCHECKED)
        if self.regret_check is None or not self.core.n_obs:
            return ci
        regret, variance = self._regret()
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

    def interval(
        self, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N
    ) -> IntervalEstimate:
        with self.one_warning():
            ci = self.core.interval(confidence_level, kind=kind, tuning_n=tuning_n)
        return self._corrected(ci, confidence_level, kind, tuning_n)

    def test_greater(
        self, v0, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N
    ) -> IntervalEstimate:
        with self.one_warning():
            ci = self.core.test_greater(v0, confidence_level, kind=kind, tuning_n=tuning_n)
        if self.correction != "none" and (self.regret_check is None or not self.core.n_obs):
            return ci
        v = np.broadcast_to(
            np.asarray(v0, dtype=float), (1 if self.n_trials is None else self.n_trials,)
        )
        return self._corrected(
            ci, confidence_level, kind, tuning_n, null_value=v, alternative="greater"
        )

    def results(self, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N):
        return [("V*", self.interval(confidence_level, kind=kind, tuning_n=tuning_n))]

    # ------------------------------------------------------------------ state
    def extra_state(self) -> dict[str, Any]:
        """The regret check's reservoir and own reference core (None without the check)."""
        return {"regret": None if self.regret_check is None else self.regret_check.state_dict()}

    def check_extra_state(self, state: Mapping[str, Any]) -> Any:
        regret = flat_part(state, "regret")
        if regret is not None:
            regret = {"rules": flat_part(regret, "rules"), "own": flat_part(regret, "own")}
        return None if self.regret_check is None else self.regret_check.check_state(regret)

    def apply_extra_state(self, checked: Any) -> None:
        if checked is not None:
            self.regret_check.apply_state(checked)
