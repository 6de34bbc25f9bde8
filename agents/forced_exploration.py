"""Forced exploration around any policy (Appendix A, Algorithm 5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.base import PolicyBase
from lrbandit_gym.decision import Decision, split_decision

__all__ = ["ForcedExploration"]


class ForcedExploration:
    """Take any arm pulled fewer than ``p0·t^{1−β}`` times; otherwise defer to ``policy``.

    A forced round is deterministic given the past, so its pmf is one-hot on the forced arm
    (the lowest-indexed arm among those behind schedule).  Inference that weights by
    ``1/π`` then sees probability-one rounds, and the arms not taken have ``π = 0``: for the
    value of the optimal policy use the estimated-propensity variant of Appendix A.

    Parameters
    ----------
    policy : PolicyBase
        The wrapped policy (ε-greedy, softmax, ensemble sampling, ...).
    p0 : float
        Scale of the pull schedule, ``0 < p0 ≤ 1/K``.
    beta : float
        Exponent, ``0 ≤ β < 1``.
    """

    def __init__(self, policy: PolicyBase, p0: float = 0.05, beta: float = 0.1):
        if not isinstance(policy, PolicyBase):
            raise ValueError(f"policy must be a PolicyBase; got {type(policy).__name__}")
        k = policy.n_actions
        if not (0.0 < p0 <= 1.0 / k):
            raise ValueError(f"p0 must be in (0, 1/K] = (0, {1.0 / k:.4g}]; got {p0!r}")
        if not (0.0 <= beta < 1.0):
            raise ValueError(f"beta must be in [0, 1); got {beta!r}")
        self.policy = policy
        self.p0 = float(p0)
        self.beta = float(beta)
        b = 1 if policy.n_trials is None else policy.n_trials
        self.pulls = np.zeros((b, k), dtype=np.int64)
        self.t = 0

    def __getattr__(self, name: str):
        # Everything not overridden (estimates, estimator, sizes) is the wrapped policy's.
        if name == "policy":
            raise AttributeError(name)
        return getattr(self.policy, name)

    def _forced(self) -> np.ndarray:
        """Forced arm per trial, or −1 where no arm is behind schedule (round t+1)."""
        need = self.p0 * (self.t + 1) ** (1.0 - self.beta)
        behind = self.pulls < need
        return np.where(behind.any(axis=1), np.argmax(behind, axis=1), -1)

    def action_probs(self, obs) -> np.ndarray:
        probs = np.array(self.policy.action_probs(obs), dtype=float, ndmin=2)
        forced = self._forced()
        rows = np.flatnonzero(forced >= 0)
        probs[rows] = 0.0
        probs[rows, forced[rows]] = 1.0
        return probs if self.policy.batched else probs[0]

    def act(self, obs) -> Decision:
        forced = self._forced()
        if not (forced >= 0).any():
            return self.policy.act(obs)
        decision = self.policy.act(obs)
        action = np.array(decision.action, ndmin=1).copy()
        probs = np.array(decision.propensities, dtype=float, ndmin=2).copy()
        rows = np.flatnonzero(forced >= 0)
        action[rows] = forced[rows]
        probs[rows] = 0.0
        probs[rows, forced[rows]] = 1.0
        if self.policy.batched:
            return Decision(action, probs)
        return Decision(int(action[0]), probs[0])

    def update(self, obs, decision, reward) -> None:
        self.policy.update(obs, decision, reward)
        action, _ = split_decision(decision)
        b = np.arange(self.pulls.shape[0])
        self.pulls[b, np.array(action, ndmin=1)] += 1
        self.t += 1

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "pulls": self.pulls.copy(), "t": self.t}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.pulls[...] = state["pulls"]
        self.t = int(state["t"])
