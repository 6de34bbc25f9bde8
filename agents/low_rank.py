"""Policies that act on a :class:`~agents.estimator.LowRankSGD` estimate (ε-greedy, softmax).

Each keeps one estimator (batched under a vector env), starts with a warm-start phase of
uniformly random actions whose data are fitted by nuclear-norm penalised least squares
(eq. (10)), then learns online by Algorithm 1 with the exact propensities it reports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.base import PolicyBase, sample_actions
from agents.estimator import LowRankSGD
from agents.warm_start import DEFAULT_WARM_START_ROUNDS, WarmStartBuffer
from lrbandit_gym.decision import Decision
from lrbandit_gym.validation import check_propensities

__all__ = ["EpsilonGreedy", "LowRankPolicy", "Softmax"]


class LowRankPolicy(PolicyBase):
    """Base of the policies built on the online low-rank SGD estimator.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        ``MatrixContextBandit-v0`` (single or vector); sizes are read from it.
    rank : int, default 3
        Rank of the estimates.
    warm_start : int, default ``DEFAULT_WARM_START_ROUNDS``
        Rounds of uniformly random exploration whose data fit ``M_init`` (eq. (10)); ignored
        when ``M_init`` is given.
    M_init : array of shape (K, d1, d2) or (B, K, d1, d2), optional
        A user-supplied initial estimate; skips the warm start.
    step_scale, step_offset, step_decay : float
        Step size ``c_η·max(t, t*)^{-α}`` of Algorithm 1 (defaults 0.1, 300, 0.99).
    seed : int or SeedSequence, optional
        Seed of the policy's own generator.
    d1, d2, n_actions, context, n_trials
        Sizes for streams without an environment.
    """

    def __init__(
        self,
        env=None,
        *,
        rank: int = 3,
        warm_start: int = DEFAULT_WARM_START_ROUNDS,
        M_init=None,
        step_scale: float = 0.1,
        step_offset: float = 300,
        step_decay: float = 0.99,
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
        self.estimator = LowRankSGD(
            self.d1,
            self.d2,
            rank,
            self.n_actions,
            n_trials=self.n_trials,
            context=self.context,
            step_scale=step_scale,
            step_offset=step_offset,
            step_decay=step_decay,
        )
        self.rank = self.estimator.rank
        self.warm_start_rounds = 0
        self._buffer = None
        if M_init is not None:
            self.estimator.initialize(M_init)
        else:
            if isinstance(warm_start, bool) or int(warm_start) != warm_start or warm_start < 1:
                raise ValueError(
                    f"warm_start must be a positive number of rounds (or pass M_init); "
                    f"got {warm_start!r}"
                )
            self.warm_start_rounds = int(warm_start)
            self._buffer = WarmStartBuffer(
                self.d1, self.d2, self.n_actions, self.warm_start_rounds, n_trials=self.n_trials
            )

    def _batch(self, obs) -> np.ndarray:
        """Validate an observation through the estimator: ``(B, d1, d2)``, and its
        fingerprint in ``self._fingerprint`` for the estimator's product cache (one pass over
        the context checks it and keys the products that act() and update() share)."""
        x, self._fingerprint = self.estimator.check_context(self._unflatten(obs))
        return x

    @property
    def in_warm_start(self) -> bool:
        """True while the policy explores uniformly to fit its initial estimate."""
        return not self.estimator.initialized

    @property
    def estimates(self) -> np.ndarray:
        """Current ``M̂_a``: ``(K, d1, d2)``, or ``(B, K, d1, d2)`` under a vector env."""
        return self.estimator.estimates

    @property
    def online_rounds(self) -> int:
        """Rounds learned by SGD after the warm start (the ``t`` of ε_t schedules)."""
        return self.estimator.t

    def _probs(self, x: np.ndarray) -> np.ndarray:
        if self.in_warm_start:
            return np.full((x.shape[0], self.n_actions), 1.0 / self.n_actions)
        # x is validated (B, d1, d2) (B = 1 unbatched), the estimator's internal layout.
        return self._greedy_probs(self.estimator.predict_validated(x, self._fingerprint))

    def _greedy_probs(self, preds: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _learn(self, x, actions, rewards, props) -> None:
        if props is None:
            raise ValueError(
                "decision must carry propensities (pass the Decision returned by act())"
            )
        b = self.n_trials
        props = check_propensities(props if b is not None else props[0], actions, self.n_actions, b)
        if self.in_warm_start:
            # x, actions and rewards were validated by update(); weights are 1 (uniform).
            self._buffer.add_validated(x, actions, rewards, 1.0)
            if self._buffer.full:
                self.estimator.initialize(self._buffer.fit(context=self.context, rank=self.rank))
                self._buffer.release()  # the bounded buffer is only needed once
                self._buffer = None
            return
        # Everything is validated, in the estimator's batched layout (B = 1 unbatched).
        self.estimator.step_validated(x, actions, rewards, props, self._fingerprint)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["estimator"] = self.estimator.state_dict()
        state["buffer"] = None if self._buffer is None else self._buffer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.estimator.load_state_dict(state["estimator"])
        if state["buffer"] is None:
            self._buffer = None
        else:
            self._buffer = WarmStartBuffer(
                self.d1, self.d2, self.n_actions, self.warm_start_rounds, n_trials=self.n_trials
            )
            self._buffer.load_state_dict(state["buffer"])


def _greedy_mask(preds: np.ndarray) -> np.ndarray:
    """Rows of ``preds`` → indicator of the arms attaining the maximum (ties kept)."""
    return preds == preds.max(axis=-1, keepdims=True)


class EpsilonGreedy(LowRankPolicy):
    """ε-greedy on the low-rank estimate (docs/method.md §2).

    The greedy arm gets ``1 − ε_t + ε_t/K`` and every other arm ``ε_t/K``; ties split the
    greedy mass uniformly.  ``ε_t = epsilon`` if ``decay == 0`` else ``epsilon·t^{-decay}``
    with ``t`` the online round (after the warm start), the paper's ``p0·t^{-β}``.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        ``MatrixContextBandit-v0`` (single or vector); sizes are read from it.
    epsilon : float, default 0.1
        Exploration probability ``ε`` (or ``p0`` with ``decay``), in (0, 1].
    decay : float, default 0.0
        ``β`` of ``ε_t = epsilon·t^{-β}``; 0 keeps ε constant.
    rank, warm_start, M_init, step_scale, step_offset, step_decay, seed
        As in :class:`LowRankPolicy`.
    d1, d2, n_actions, context, n_trials
        Sizes for streams without an environment.
    """

    def __init__(
        self,
        env=None,
        *,
        epsilon: float = 0.1,
        decay: float = 0.0,
        rank: int = 3,
        warm_start: int = DEFAULT_WARM_START_ROUNDS,
        M_init=None,
        step_scale: float = 0.1,
        step_offset: float = 300,
        step_decay: float = 0.99,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        eps = float(epsilon)
        if not (0.0 < eps <= 1.0):
            raise ValueError(f"epsilon must be in (0, 1]; got {epsilon!r}")
        if not (np.isfinite(decay) and decay >= 0):
            raise ValueError(f"decay must be finite and >= 0; got {decay!r}")
        self.epsilon = eps
        self.decay = float(decay)
        super().__init__(
            env,
            rank=rank,
            warm_start=warm_start,
            M_init=M_init,
            step_scale=step_scale,
            step_offset=step_offset,
            step_decay=step_decay,
            seed=seed,
            d1=d1,
            d2=d2,
            n_actions=n_actions,
            context=context,
            n_trials=n_trials,
        )

    def epsilon_at(self, t: int) -> float:
        """ε_t for online round ``t ≥ 1``."""
        return self.epsilon if self.decay == 0 else self.epsilon * max(t, 1) ** (-self.decay)

    def _greedy_probs(self, preds: np.ndarray) -> np.ndarray:
        eps = self.epsilon_at(self.online_rounds + 1)
        mask = _greedy_mask(preds)
        greedy = mask / mask.sum(axis=-1, keepdims=True)
        return (1.0 - eps) * greedy + eps / self.n_actions

    def act(self, obs) -> Decision:
        """Toss the ε_t coin, then explore uniformly or act greedily (ties uniform).

        The pmf reported is that of the action (:meth:`action_probs`); whether the coin sent
        the round to exploration is kept in :attr:`last_explored` (``(B,)`` bool), which
        the exploration-only baseline of Appendix B.1 needs.
        """
        x = self._batch(obs)
        b = x.shape[0]
        if self.in_warm_start:
            probs = np.full((b, self.n_actions), 1.0 / self.n_actions)
            actions = self.rng.integers(0, self.n_actions, size=b)
            explored = np.ones(b, dtype=bool)
        else:
            preds = self.estimator.predict_validated(x, self._fingerprint)  # x: validated by _batch
            eps = self.epsilon_at(self.online_rounds + 1)
            mask = _greedy_mask(preds)
            probs = (1.0 - eps) * mask / mask.sum(axis=-1, keepdims=True) + eps / self.n_actions
            explored = self.rng.random(b) < eps
            uniform = self.rng.integers(0, self.n_actions, size=b)
            greedy = sample_actions(self.rng, mask / mask.sum(axis=-1, keepdims=True))
            actions = np.where(explored, uniform, greedy)
        self.last_explored = explored if self.batched else bool(explored[0])
        if self.batched:
            return Decision(actions, probs)
        return Decision(int(actions[0]), probs[0])


class Softmax(LowRankPolicy):
    """Boltzmann exploration ``π_t(a) ∝ exp(<M̂_a, X_t>/τ)`` (docs/method.md §2; paper: τ = 1).

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        ``MatrixContextBandit-v0`` (single or vector); sizes are read from it.
    temperature : float, default 1.0
        ``τ > 0``.
    rank, warm_start, M_init, step_scale, step_offset, step_decay, seed
        As in :class:`LowRankPolicy`.
    d1, d2, n_actions, context, n_trials
        Sizes for streams without an environment.
    """

    def __init__(
        self,
        env=None,
        *,
        temperature: float = 1.0,
        rank: int = 3,
        warm_start: int = DEFAULT_WARM_START_ROUNDS,
        M_init=None,
        step_scale: float = 0.1,
        step_offset: float = 300,
        step_decay: float = 0.99,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        if not (np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be finite and > 0; got {temperature!r}")
        self.temperature = float(temperature)
        super().__init__(
            env,
            rank=rank,
            warm_start=warm_start,
            M_init=M_init,
            step_scale=step_scale,
            step_offset=step_offset,
            step_decay=step_decay,
            seed=seed,
            d1=d1,
            d2=d2,
            n_actions=n_actions,
            context=context,
            n_trials=n_trials,
        )

    def _greedy_probs(self, preds: np.ndarray) -> np.ndarray:
        z = (preds - preds.max(axis=-1, keepdims=True)) / self.temperature
        w = np.exp(z)
        return w / w.sum(axis=-1, keepdims=True)
