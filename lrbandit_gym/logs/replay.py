"""A bandit that replays a log: the logged contexts and, for the logged actions, the logged
rewards (:class:`LogReplayEnv`).

It lets the inference wrappers run on a saved log exactly as they ran live
(:func:`inference.analyze`): the wrappers see the same contexts, actions, rewards and
propensities in the same order, and give the same intervals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from lrbandit_gym.context_law import law_from_arrays
from lrbandit_gym.decision import split_decision
from lrbandit_gym.logs.format import COMPLETION_LAWS, ORACLE_PREFIX, LogFormatError, validate_log
from lrbandit_gym.memory import check_memory

__all__ = ["LogReplayEnv"]


class LogReplayEnv(gym.Env):
    """Replay a log round by round.

    ``reset()`` returns the context of row 0; ``step(action)`` takes the logged action of
    the current row (any other action is refused: only its reward was observed), returns the
    logged reward and the next row's context, and truncates after the last row.  Contexts
    come as the log stores them: ``(d1, d2)`` matrices, or for ``context_index`` logs the
    int64 pair ``(j, k)`` (the ``observation="index"`` form of ``MatrixContextBandit-v0``).
    ``info`` holds the row's oracle columns, if the log has them, under their simulator
    names.

    Parameters
    ----------
    log : mapping
        A log (validated by :func:`lrbandit_gym.logs.validate_log` on construction).

    Attributes
    ----------
    d1, d2, n_actions, context : the log's sizes and context law (as the bandit exposes them)
    n_rounds : int
        Rows in the log.
    row : int
        The row whose context was returned last (the round the next step plays).
    """

    metadata = {"render_modes": []}

    def __init__(self, log: Mapping[str, Any]):
        self.log = validate_log(log)
        self.d1 = int(self.log["d1"])
        self.d2 = int(self.log["d2"])
        self.n_actions = int(self.log["n_actions"])
        try:  # agents and wrappers hold a (d1, d2) matrix per arm
            check_memory(
                8 * self.d1 * self.d2 * self.n_actions,
                "d1 x d2",
                f"{self.d1} x {self.d2}",
                f"one (d1, d2) matrix per arm ({self.n_actions} arms)",
            )
        except ValueError as exc:
            raise LogFormatError("d1", str(exc)) from None
        law = str(self.log["context_law"])
        #: The contexts' form, as the bandit's ``context``: one-hot entries or dense.
        self.context = "completion" if law in COMPLETION_LAWS else "gaussian"
        #: The log's law (:mod:`lrbandit_gym.context_law`), the wrappers' default.
        self.context_law = law_from_arrays(law, self.log, self.d1, self.d2)
        self._index = "context_index" in self.log
        self.observation = "index" if self._index else "matrix"
        self._contexts = self.log["context_index" if self._index else "context"]
        self.n_rounds = int(self.log["action"].shape[0])
        if self._index:
            self.observation_space = spaces.MultiDiscrete([self.d1, self.d2])
        else:
            self.observation_space = spaces.Box(
                -np.inf, np.inf, (self.d1, self.d2), dtype=self._contexts.dtype
            )
        self.action_space = spaces.Discrete(self.n_actions)
        self._oracle = {
            name[len(ORACLE_PREFIX) :]: arr
            for name, arr in self.log.items()
            if name.startswith(ORACLE_PREFIX)
        }
        self.row = None

    def _obs(self, row: int) -> np.ndarray:
        return np.array(self._contexts[min(row, self.n_rounds - 1)], copy=True)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.row = 0
        return self._obs(0), {}

    def step(self, action):
        if self.row is None:
            raise RuntimeError("Call reset() before step().")
        if self.row >= self.n_rounds:
            raise RuntimeError(f"the log's {self.n_rounds} rounds have all been replayed")
        arm, _ = split_decision(action)
        t = self.row
        logged = int(self.log["action"][t])
        if np.ndim(arm) != 0 or np.asarray(arm).dtype.kind not in "iu":
            raise ValueError(
                f"row {t}: an action is an integer arm (not a bool or a float); got {arm!r}"
            )
        if int(arm) != logged:
            raise ValueError(
                f"row {t}: the log played arm {logged}; a replay can only take the logged "
                f"action (got {arm!r})"
            )
        reward = float(self.log["reward"][t])
        info = {key: arr[t] for key, arr in self._oracle.items()}
        self.row = t + 1
        truncated = self.row >= self.n_rounds
        return self._obs(self.row), reward, False, truncated, info
