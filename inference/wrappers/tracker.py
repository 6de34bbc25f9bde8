"""What one inference core needs from a wrapper's rounds (:class:`Tracker`).

An inference wrapper (:mod:`inference.wrappers.inference_wrapper`) checks each round once and
hands it
to every tracker it holds, in three phases:

* :meth:`Tracker.snapshot`, before the inner step: what the core reads of the estimate the
  agent acted on, and the checks that need no reward (a target policy's pmf, a prediction
  whose ``1/(1 − e_t)`` must exist);
* :meth:`Tracker.stage`, after it: the core's round computed and checked, everything that
  can fail, nothing written;
* :meth:`Tracker.commit`, once every tracker has staged: writes it (cannot fail) and
  returns the running values the wrapper puts into ``info``.

A tracker with nothing to stage says so (:attr:`Tracker.stages`), and its snapshot goes to
the commit as it is.  A round before the tracker's estimate is ready (the warm start) goes
to :meth:`Tracker.skip` instead.  The read-outs (``interval``, ``results``) are the tracker's
too; the public wrappers (:class:`~inference.ParameterInference`,
:class:`~inference.ValueInference`, :class:`~inference.PolicyEvaluation`) hand them on.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.estimator import LowRankSGD
from inference.results import InsufficientDataWarning, warn_insufficient
from inference.wrappers.round_check import CheckedRound
from lrbandit_gym.onehot import OneHotContexts
from lrbandit_gym.rounds import Round

__all__ = ["Tracker"]


class Tracker:
    """One inference core fed from the rounds of an inference wrapper.

    Parameters
    ----------
    shape : agents.base.ProblemShape
        The environment's sizes and context law.
    estimator : object
        The estimate the core is debiased against (``M̂_{t−1}``: read before the round's
        update).
    own : OwnEstimator or None
        The wrapper's own estimator when ``estimator`` is it (says how long its warm start
        has left), None when an agent's is shared.
    """

    #: The key of ``info`` the running values go under.
    info_key = "inference"
    #: Whether :meth:`stage` does anything (False: the snapshot goes to :meth:`commit`).
    stages = True
    #: The core fed (set by the subclass).
    core: Any

    def __init__(self, shape, estimator, own=None) -> None:
        self.d1, self.d2, self.n_actions = shape.d1, shape.d2, shape.n_actions
        self.n_trials = shape.n_trials
        self.context = shape.context
        self.estimator = estimator
        self.rank = estimator.rank
        self.own = own
        #: Rounds this tracker has seen, and those of them before its estimate was ready.
        self.rounds_seen = 0
        self.rounds_skipped = 0

    # ------------------------------------------------------------------ one round
    def ready(self) -> bool:
        """Whether the estimate is ready (its warm start over): rounds enter the core."""
        est = self.estimator
        return bool(est.store.initialized if isinstance(est, LowRankSGD) else est.initialized)

    def snapshot(self, checked: CheckedRound, fingerprint) -> Any:
        """Before the inner step: what the core reads of the current estimate.
        ``fingerprint`` is the contexts' for this tracker's estimator, or None."""
        raise NotImplementedError

    def stage(self, snapshot: Any, round_: Round) -> Any:
        """After the step: the core's round computed and checked, nothing written."""
        return snapshot

    def commit(self, staged: Any, round_: Round) -> dict[str, Any]:
        """Write what :meth:`stage` computed (cannot fail); return :meth:`running_info`."""
        raise NotImplementedError

    def skip(self, round_: Round) -> dict[str, Any]:
        """A round before the estimate is ready (nothing is absorbed by default); return
        :meth:`running_info`."""
        return self.running_info()

    def running_info(self) -> dict[str, Any]:
        """What ``info[info_key]`` reports after each step (:meth:`commit` and :meth:`skip`
        return it)."""
        return {"n_obs": self.core.n_obs}

    def predictions(self, xb, fingerprint) -> np.ndarray:
        """Every arm's prediction ``<M̂_a, X>``, shape (B, K), from the current estimate."""
        if isinstance(self.estimator, LowRankSGD):  # shares the agent's X V of this round
            return self.estimator.store.predict_checked(xb, fingerprint)
        x = xb.dense() if isinstance(xb, OneHotContexts) else xb
        return np.array(self.estimator.predict(x if self.n_trials is not None else x[0]), ndmin=2)

    # ------------------------------------------------------------------ read-out
    def results(self, confidence_level: float, *, kind: str, tuning_n: int) -> list:
        """Every quantity as ``(label, IntervalEstimate)``."""
        raise NotImplementedError

    @contextlib.contextmanager
    def one_warning(self):
        """Before inference starts, say why and for how long, instead of the core's
        generic "no rounds observed" warning."""
        if self.core.n_obs:
            yield
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsufficientDataWarning)
            yield
        if self.own is not None:
            left = self.own.rounds - self.rounds_seen
            why = (
                f"the wrapper's warm start needs {max(left, 0)} more round(s) "
                f"({self.own.rounds} in all) before inference starts"
            )
        else:
            why = "the shared estimator has not finished its warm start yet"
        warn_insufficient(
            f"no round has entered the inference yet: {why}; returning NaN", stacklevel=5
        )

    # ------------------------------------------------------------------ state
    def extra_state(self) -> dict[str, Any]:
        """The tracker's own parts of the wrapper's state beyond the core (none)."""
        return {}

    def check_extra_state(self, state: Mapping[str, Any]) -> Any:
        """Validate :meth:`extra_state`'s parts of ``state``, changing nothing."""
        return None

    def apply_extra_state(self, checked: Any) -> None:
        """Assign what :meth:`check_extra_state` returned (cannot fail)."""

    def restored(self) -> None:
        """The core was loaded from a state: forget what was cached about it."""
