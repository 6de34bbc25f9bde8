"""The play loop: an agent acts, the environment steps, the agent learns, for a number of
rounds (in the spirit of stable-baselines3's ``evaluate_policy``)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

__all__ = ["play"]


def play(
    env,
    agent,
    rounds: int,
    *,
    obs: Any = None,
    seed: int | None = None,
    learn: bool = True,
) -> Any:
    """Play ``rounds`` rounds of ``agent`` on ``env``; returns the last observation.

    Each round is ::

        decision = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(decision)
        if learn:
            agent.update(obs, decision, reward)
        obs = next_obs

    and a single env whose episode ends (``terminated or truncated``) is reset before the
    next round (a vector env resets its own sub-envs).  ``MatrixContextBandit-v0`` never
    ends an episode, so a loop runs exactly ``rounds`` rounds of one stream.

    Parameters
    ----------
    env
        A Gymnasium env or vector env, wrapped or not (e.g. under the inference wrappers).
    agent
        Anything with ``act(obs)`` and ``update(obs, decision, reward)``
        (:class:`agents.Policy`).
    rounds
        How many rounds to play, a non-negative integer.
    obs
        The observation to act on first, as returned by the last ``play`` or ``env.step``;
        ``None`` resets ``env`` first (with ``seed``).
    seed
        The seed of that first reset; only when ``obs`` is ``None``.
    learn
        Whether the agent learns from each round (``False``: it only acts).

    Returns
    -------
    The observation after the last round, for the next round (``play(..., obs=obs)``
    continues the same stream).
    """
    if isinstance(rounds, (bool, np.bool_)):
        raise ValueError(f"rounds must be a non-negative integer, got {rounds!r}")
    try:
        rounds = operator.index(rounds)
    except TypeError:
        raise ValueError(f"rounds must be a non-negative integer, got {rounds!r}") from None
    if rounds < 0:
        raise ValueError(f"rounds must be a non-negative integer, got {rounds}")
    if obs is None:
        obs, _ = env.reset(seed=seed)
    elif seed is not None:
        raise ValueError("seed seeds the first reset: give obs or seed, not both")
    for _ in range(rounds):
        decision = agent.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(decision)
        if learn:
            agent.update(obs, decision, reward)
        if np.ndim(terminated) == 0 and (terminated or truncated):
            next_obs, _ = env.reset()
        obs = next_obs
    return obs
