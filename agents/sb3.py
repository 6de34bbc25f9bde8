"""A stable-baselines3 model as an agent that reports the exact pmf of every action it plays.

Inference on adaptively collected data weights every round by ``1/π_t(a_t)``
(docs/method.md §2), so a stable-baselines3 (SB3) model can be evaluated only if the
probability of the action it actually took is known.  :class:`SB3Agent` computes it from the
model's own state, the same way SB3 draws the action:

* a categorical policy (PPO, A2C, or any ``ActorCriticPolicy`` on a discrete action space):
  the probabilities of the policy's categorical distribution at the observation;
* a Q-network (DQN): the ε-mixture SB3's ``predict(deterministic=False)`` draws from,
  ``π(a) = ε/K + (1 − ε)·1{a = argmax_b Q(x, b)}`` at the model's current
  ``exploration_rate`` ε, and uniform while ``num_timesteps < learning_starts`` (SB3's
  training loop samples the action space uniformly then).

Both are read at call time, so ``agent.action_probs`` can be an inference wrapper's
``propensity_fn`` while ``model.learn()`` drives the loop: the wrapper calls it inside
``env.step``, after SB3 chose the action and before it updates the network or the
exploration rate.  The torch import happens on first use, so importing :mod:`agents` does
not need the ``sb3`` extra.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lrbandit_gym.decision import Decision

__all__ = ["SB3Agent"]

_KINDS = ("categorical", "q_network")


class SB3Agent:
    """Wrap a stable-baselines3 model (PPO, A2C, DQN, …) as an agent with exact propensities.

    Parameters
    ----------
    model : stable_baselines3.common.base_class.BaseAlgorithm
        A model on a discrete action space with either a categorical policy (its policy has
        ``get_distribution``) or a Q-network (its policy has ``q_net`` and the model an
        ``exploration_rate``, as DQN).

    Attributes
    ----------
    model : BaseAlgorithm
        The wrapped model; train it with ``model.learn()`` as usual.
    kind : {"categorical", "q_network"}
        How the propensities are computed.
    n_actions : int
        Number of arms ``K``.

    Notes
    -----
    Observations may come flat ``(d1·d2,)`` or as matrices ``(d1, d2)``, single or batched:
    they are reshaped to the model's observation space, so the same agent serves an
    environment made with or without ``flatten=True``.  Propensities are computed from the
    raw observation: a model trained behind ``VecNormalize`` or frame stacking sees another
    input than the one passed here, and its propensities would not be those of its actions.

    ``act`` plays as SB3's own training loop does at the model's current step (uniform before
    ``learning_starts`` for DQN, then ``model.predict(obs, deterministic=False)``) and
    returns the pmf of that draw.  ``update`` does nothing: an SB3 model learns in
    ``model.learn()``, which owns its rollout or replay buffer.

    Examples
    --------
    >>> from stable_baselines3 import PPO  # doctest: +SKIP
    >>> model = PPO("MlpPolicy", env, gamma=0.0)  # doctest: +SKIP
    >>> agent = SB3Agent(model)  # doctest: +SKIP
    >>> fn = agent.action_probs  # doctest: +SKIP
    >>> watched = ParameterInference(env, targets, propensity_fn=fn)  # doctest: +SKIP
    >>> model.set_env(watched); model.learn(2000)  # doctest: +SKIP
    """

    def __init__(self, model: Any):
        policy = getattr(model, "policy", None)
        space = getattr(model, "action_space", None)
        n = getattr(space, "n", None)
        if policy is None or n is None:
            raise ValueError(
                "SB3Agent needs a stable-baselines3 model on a discrete action space "
                f"(with .policy and action_space.n); got {type(model).__name__}"
            )
        if hasattr(policy, "q_net") and hasattr(model, "exploration_rate"):
            kind = "q_network"
        elif hasattr(policy, "get_distribution"):
            kind = "categorical"
        else:
            raise ValueError(
                f"SB3Agent supports categorical policies (PPO, A2C) and Q-networks (DQN); "
                f"{type(model).__name__}'s policy {type(policy).__name__} has neither "
                "get_distribution nor q_net"
            )
        self.model = model
        self.kind = kind
        self.n_actions = int(n)
        self._obs_shape = tuple(model.observation_space.shape)
        self._obs_size = int(np.prod(self._obs_shape))

    def __repr__(self) -> str:
        return f"SB3Agent({type(self.model).__name__}, kind={self.kind!r})"

    # -- observations -----------------------------------------------------------------
    def _reshape(self, obs) -> tuple[np.ndarray, bool]:
        """``obs`` in the model's layout, and whether it is a batch."""
        x = np.asarray(obs)
        if x.size == self._obs_size:
            return x.reshape(self._obs_shape), False
        if x.ndim >= 1 and x.shape[0] and x.size == x.shape[0] * self._obs_size:
            return x.reshape((x.shape[0],) + self._obs_shape), True
        raise ValueError(
            f"observation of shape {x.shape} does not fit the model's observation space "
            f"{self._obs_shape} (single or batched)"
        )

    @property
    def in_warm_up(self) -> bool:
        """True while SB3's training loop samples actions uniformly (DQN before
        ``learning_starts``); always False for categorical policies."""
        if self.kind != "q_network":
            return False
        return int(self.model.num_timesteps) < int(getattr(self.model, "learning_starts", 0))

    # -- propensities -----------------------------------------------------------------
    def action_probs(self, obs) -> np.ndarray:
        """``π(a)`` for every arm at ``obs``: ``(K,)``, or ``(B, K)`` for a batch.

        Usable as ``propensity_fn`` of the inference wrappers, also inside
        ``model.learn()``; float64 rows that sum to 1.
        """
        import torch

        x, batched = self._reshape(obs)
        model = self.model
        b = x.shape[0] if batched else 1
        if self.in_warm_up:
            probs = np.full((b, self.n_actions), 1.0 / self.n_actions)
        else:
            with torch.no_grad():
                obs_t, _ = model.policy.obs_to_tensor(x)
                if self.kind == "categorical":
                    dist = model.policy.get_distribution(obs_t)
                    probs = dist.distribution.probs.cpu().numpy().astype(np.float64)
                else:
                    greedy = model.policy.q_net(obs_t).argmax(dim=1).cpu().numpy()
                    eps = float(model.exploration_rate)
                    probs = np.full((b, self.n_actions), eps / self.n_actions)
                    probs[np.arange(b), greedy] += 1.0 - eps
            probs = probs.reshape(b, self.n_actions)
            probs /= probs.sum(axis=1, keepdims=True)
        return probs if batched else probs[0]

    def act(self, obs) -> Decision:
        """Draw an action as SB3's training loop would now, with the pmf it was drawn from."""
        x, batched = self._reshape(obs)
        probs = self.action_probs(x)
        if self.in_warm_up:
            n = x.shape[0] if batched else 1
            action = np.array([self.model.action_space.sample() for _ in range(n)])
        else:
            action, _ = self.model.predict(x, deterministic=False)
        action = np.asarray(action).astype(np.int64)
        if batched:
            return Decision(action.reshape(-1), probs)
        return Decision(int(action.reshape(-1)[0]), probs)

    def update(self, obs, decision, reward) -> None:
        """Nothing: an SB3 model learns in ``model.learn()`` (see the class notes)."""
