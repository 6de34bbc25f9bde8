"""Reference policies: uniform random, the oracle, and the full-rank linear ε-greedy peer."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.linalg.blas import dger as _dger

from agents.base import PolicyBase

__all__ = ["LinearEpsilonGreedy", "Oracle", "UniformRandom"]


class UniformRandom(PolicyBase):
    """Every arm with probability ``1/K``.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        ``MatrixContextBandit-v0`` (single or vector); sizes are read from it.
    seed : int or SeedSequence, optional
        Seed of the policy's own generator.
    d1, d2, n_actions, context, n_trials
        Sizes for streams without an environment.
    """

    def __init__(
        self,
        env=None,
        *,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        super().__init__(
            env, seed=seed, d1=d1, d2=d2, n_actions=n_actions, context=context, n_trials=n_trials
        )

    def _probs(self, x: np.ndarray) -> np.ndarray:
        return np.full((x.shape[0], self.n_actions), 1.0 / self.n_actions)


class Oracle(PolicyBase):
    """Greedy on the true parameters (the regret reference); ties split uniformly.

    Needs the environment (it reads ``env.unwrapped.true_params``) or ``params``.
    """

    def __init__(
        self,
        env=None,
        *,
        params=None,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        super().__init__(
            env, seed=seed, d1=d1, d2=d2, n_actions=n_actions, context=context, n_trials=n_trials
        )
        if params is None:
            if env is None:
                raise ValueError("Oracle needs env or params (the truth it acts on)")
            params = env.unwrapped.true_params
        params = np.asarray(params, dtype=float)
        if params.shape != (self.n_actions, self.d1, self.d2):
            raise ValueError(
                f"params must have shape {(self.n_actions, self.d1, self.d2)}; got {params.shape}"
            )
        self._flat = params.reshape(self.n_actions, -1)

    def _probs(self, x: np.ndarray) -> np.ndarray:
        preds = x.reshape(x.shape[0], -1) @ self._flat.T
        mask = preds == preds.max(axis=1, keepdims=True)
        return mask / mask.sum(axis=1, keepdims=True)


class LinearEpsilonGreedy(PolicyBase):
    """ε-greedy on a full-rank online ridge regression of ``y`` on ``vec(X)``, per arm.

    The classical peer that ignores low rank: ``θ̂_a = (λI + Σ x xᵀ)^{-1} Σ y x`` over the
    arm's pulls, kept by Sherman–Morrison updates of the inverse (``O(p²)`` per round with
    ``p = d1·d2``; memory ``O(K p²)`` per trial, checked against ``max_memory_bytes``).
    """

    def __init__(
        self,
        env=None,
        *,
        epsilon: float = 0.1,
        ridge: float = 1.0,
        max_memory_bytes: int = 2**31,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        super().__init__(
            env, seed=seed, d1=d1, d2=d2, n_actions=n_actions, context=context, n_trials=n_trials
        )
        if not (0.0 < float(epsilon) <= 1.0):
            raise ValueError(f"epsilon must be in (0, 1]; got {epsilon!r}")
        if not (np.isfinite(ridge) and ridge > 0):
            raise ValueError(f"ridge must be finite and > 0; got {ridge!r}")
        self.epsilon = float(epsilon)
        self.ridge = float(ridge)
        p = self.d1 * self.d2
        b = 1 if self.n_trials is None else self.n_trials
        need = b * self.n_actions * p * p * 8
        if need > max_memory_bytes:
            raise ValueError(
                f"LinearEpsilonGreedy needs {need / 2**30:.1f} GiB for {b} trial(s) × "
                f"{self.n_actions} arms × ({p}×{p}) inverse Gram matrices, above "
                f"max_memory_bytes={max_memory_bytes}; use fewer trials or smaller d1·d2"
            )
        self._inv = np.broadcast_to(np.eye(p) / self.ridge, (b, self.n_actions, p, p)).copy()
        self._xy = np.zeros((b, self.n_actions, p))
        self._theta = np.zeros((b, self.n_actions, p))

    @property
    def estimates(self) -> np.ndarray:
        est = self._theta.reshape(self._theta.shape[0], self.n_actions, self.d1, self.d2)
        return self._out(est)

    def _probs(self, x: np.ndarray) -> np.ndarray:
        preds = np.einsum("bkp,bp->bk", self._theta, x.reshape(x.shape[0], -1))
        mask = preds == preds.max(axis=1, keepdims=True)
        return (1 - self.epsilon) * mask / mask.sum(axis=1, keepdims=True) + (
            self.epsilon / self.n_actions
        )

    def _learn(self, x, actions, rewards, props) -> None:
        xf = x.reshape(x.shape[0], -1)
        # One p×p inverse per trial changes, in place: gathering (B, p, p) stacks by fancy
        # indexing would copy ~50 MB per trial at d = 50.  The loop is over the few trials
        # this memory-bound baseline can hold (see max_memory_bytes).
        for b, k in enumerate(actions):
            inv = self._inv[b, k]  # a view
            ax = inv @ xf[b]
            denom = 1.0 + xf[b] @ ax
            # Recursive least squares: θ += (A⁻¹x)(y − xᵀθ)/(1 + xᵀA⁻¹x), and the symmetric
            # rank-1 downdate of A⁻¹ (Sherman–Morrison) in place through BLAS dger on the
            # Fortran-ordered view of the symmetric matrix.
            self._theta[b, k] += ax * ((rewards[b] - xf[b] @ self._theta[b, k]) / denom)
            _dger(-1.0 / denom, ax, ax, a=inv.T, overwrite_a=True)
            self._xy[b, k] += rewards[b] * xf[b]

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(inv=self._inv.copy(), xy=self._xy.copy(), theta=self._theta.copy())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._inv[...] = state["inv"]
        self._xy[...] = state["xy"]
        self._theta[...] = state["theta"]
