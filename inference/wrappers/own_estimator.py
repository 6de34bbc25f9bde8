"""An inference wrapper's own estimator, for when no agent's is shared (:class:`OwnEstimator`).

A wrapper cannot choose actions, so its own :class:`~agents.LowRankSGD` is warm-started on
the first rounds it sees, by nuclear-norm least squares weighted by ``1/π`` (a buffered
fit: the streaming one needs uniform rounds), and takes the SGD step of Algorithm 1 on every
round after.  :meth:`OwnEstimator.prepare` runs everything of a round that can fail and
returns what commits it, which cannot fail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agents.estimator import LowRankSGD
from agents.state import check_part
from agents.warm_start import DEFAULT_MAX_MEMORY_BYTES, WarmStart
from lrbandit_gym.rounds import Round

__all__ = ["OwnEstimator"]


class OwnEstimator:
    """A :class:`~agents.LowRankSGD` with its ``1/π``-weighted warm start.

    Parameters
    ----------
    shape : agents.base.ProblemShape
        The environment's sizes and context law.
    rank : int
        The estimator's rank.
    warm_start : int or None
        Rounds of the warm start (None: sized from the problem by
        :func:`agents.warm_start.default_warm_start_rounds`).
    sgd_kwargs : mapping
        ``step_scale``, ``step_offset``, ``step_decay`` of the estimator.
    """

    def __init__(self, shape, rank: int, warm_start: int | None, sgd_kwargs: Mapping) -> None:
        self.estimator = LowRankSGD(
            shape.d1,
            shape.d2,
            rank,
            shape.n_actions,
            n_trials=shape.n_trials,
            context=shape.context,
            **sgd_kwargs,
        )
        self.warm_start = WarmStart(
            shape.d1,
            shape.d2,
            shape.n_actions,
            self.estimator.rank,
            context=shape.context,
            n_trials=shape.n_trials,
            rounds=warm_start,
            method="buffer",
            max_memory_bytes=DEFAULT_MAX_MEMORY_BYTES,
            ways_out="share the agent's estimator (estimator=agent.estimator) or pass a "
            "shorter warm_start=",
        )
        #: Rounds of the warm start, after which inference starts.
        self.rounds = self.warm_start.rounds
        #: The held-out check of the warm start
        #: (:class:`agents.warm_start.check.WarmStartCheck`), once it has run.
        self.check = None

    def prepare(self, round_: Round, who: str) -> Callable[[], None]:
        """The round's share of the warm start or of the SGD step, prepared: everything that
        can fail (the warm-start fit and its held-out check, the step and its divergence
        guard) runs here and leaves the estimator as it was; the returned ``commit()``
        absorbs it and cannot fail.  ``who`` names the wrapper in a warm-start warning."""
        warm = self.warm_start
        if warm.active:
            props = round_.propensities
            weights = 1.0 / props[np.arange(props.shape[0]), round_.actions]
            if not warm.last_round_next:
                return lambda: warm.add_round(round_, weights)
            # This round completes the warm start: fit with it now, defined for every arm
            # (even one the logging policy never played), and check it on held-out rounds
            # (a warning when M_init is too far from the truth for the theory).  A failing
            # fit takes the round back out of the buffer.
            warm.add_round(round_, weights)
            M_init, check = warm.finish(check=True, who=f"{who}'s own warm start", stacklevel=3)

            def start() -> None:
                # Rounds of the logging policy, weighted 1/π: WarmStart.hand_off says why
                # they cap nothing.
                warm.hand_off(self.estimator, M_init, uniform=False)
                self.check = check

            return start
        proposal = self.estimator.propose_step(round_)
        return lambda: self.estimator.commit_step(proposal)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The estimator's state and the warm-start buffer's (None once it is over)."""
        return self.estimator.state_dict(), self.warm_start.state_dict()

    def check_state(self, estimator: Any, buffer: Any, rounds_seen: int) -> Any:
        """Check a saved estimator and buffer against each other and ``rounds_seen``,
        changing nothing: during the warm start an uninitialised estimator beside a buffer
        of ``rounds_seen`` rounds, after it an initialised one that has taken
        ``rounds_seen - rounds`` steps.  Returns the rebuilt buffer (None after the warm
        start) for :meth:`load_state`."""
        est = check_part(self.estimator.validate_state_dict, estimator, "estimator")
        if buffer is not None:
            store = check_part(self.warm_start.restored_store, buffer, "buffer")
            if est["initialized"] or store.n != rounds_seen:
                raise ValueError(
                    f"state['buffer'] holds {store.n} warm-start rounds beside "
                    f"state['rounds_seen'] = {rounds_seen} and an estimator with initialized = "
                    f"{est['initialized']}: during the own warm start the buffer holds "
                    "every round seen and the estimator is not initialised yet"
                )
            return store
        if not est["initialized"] or est["t"] != rounds_seen - self.rounds:
            raise ValueError(
                f"state holds no 'buffer.<key>' entries, so the own warm start of "
                f"{self.rounds} rounds is over, but state['estimator'] has initialized = "
                f"{est['initialized']} and "
                f"t = {est['t']} (expected an initialised estimator with t = rounds_seen - "
                f"{self.rounds} = {rounds_seen - self.rounds})"
            )
        return None

    def load_state(self, estimator: Any, store: Any) -> None:
        """Install a state :meth:`check_state` accepted (cannot fail)."""
        self.estimator.load_state_dict(estimator)
        self.warm_start.adopt(store)
