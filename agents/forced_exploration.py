"""Forced exploration around any policy (Appendix A, Algorithm 5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.base import PolicyBase
from agents.state import (
    FORMAT_VERSION,
    check_format_version,
    flat_part,
    read_int,
    same_value,
)
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
        """Learn through the wrapped policy (which validates the round and raises before any
        change), then count the pull."""
        self.policy.update(obs, decision, reward)
        action, _ = split_decision(decision)
        b = np.arange(self.pulls.shape[0])
        self.pulls[b, np.array(action, ndmin=1)] += 1
        self.t += 1

    def state_dict(self) -> dict[str, Any]:
        """Flat state (:mod:`agents.state`): ``format_version``, ``t``, ``pulls``, ``p0``,
        ``beta`` and the wrapped policy's state under ``policy.*``."""
        state = {f"policy.{k}": v for k, v in self.policy.state_dict().items()}
        state.update(
            format_version=FORMAT_VERSION,
            t=int(self.t),
            pulls=self.pulls.copy(),
            p0=self.p0,
            beta=self.beta,
        )
        return state

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` (the flat layout of :mod:`agents.state`), changing nothing.

        Raises
        ------
        ValueError
            On a missing key, ``p0`` or ``beta`` other than this wrapper's, ``pulls`` of the
            wrong shape or dtype, negative or not adding up to ``t`` in every trial, or an
            invalid state of the wrapped policy.
        """
        check_format_version(state)
        for key in ("t", "pulls", "p0", "beta"):
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
        for key in ("p0", "beta"):
            if not same_value(state[key], getattr(self, key)):
                raise ValueError(
                    f"state[{key!r}] = {state[key]!r} does not match this wrapper's "
                    f"{getattr(self, key)!r}"
                )
        t = read_int(state["t"], "state['t']")
        pulls = np.asarray(state["pulls"])
        if pulls.shape != self.pulls.shape or pulls.dtype.kind not in "iu":
            raise ValueError(
                f"state['pulls'] must be an integer array of shape {self.pulls.shape}, got "
                f"{pulls.dtype} array of shape {pulls.shape}"
            )
        bad = (pulls < 0).any(axis=1) | (pulls.sum(axis=1) != t)
        if bad.any():
            b = int(np.argmax(bad))
            raise ValueError(
                f"state['pulls'] must be non-negative and add up to state['t'] = {t} in every "
                f"trial (one pull per round), got {pulls[b].tolist()} in trial {b}"
            )
        inner = flat_part(state, "policy")
        if inner is None:
            raise ValueError("state is missing the wrapped policy's state ('policy.*' keys)")
        self.policy.validate_state_dict(inner)
        return {"t": t, "pulls": pulls.astype(np.int64, copy=True), "policy": inner}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`: everything (the wrapped policy's state included)
        is validated first, so a failure changes nothing."""
        checked = self.validate_state_dict(state)
        self.policy.load_state_dict(checked["policy"])  # validated: cannot fail
        self.pulls = checked["pulls"]
        self.t = checked["t"]
