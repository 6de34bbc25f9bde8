"""The action an agent takes together with the exact propensities it used.

Valid inference on adaptively collected data needs ``pi_t(a) = P(a_t = a | F_{t-1}, X_t)``
for every round (docs/method.md §2).  Agents therefore return a :class:`Decision` rather than a
bare integer, and ``env.step(decision)`` accepts it: the base environment only reads
``decision.action``, inference wrappers read the propensities too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Decision", "decision_propensities", "split_decision"]


class Decision(NamedTuple):
    """An action with the probability mass function it was drawn from.

    Attributes
    ----------
    action : int or ndarray of shape (B,)
        The chosen arm (batched under a vector environment).
    propensities : ndarray of shape (K,) or (B, K)
        ``pi_t(a)`` for every arm ``a``; sums to 1 and is positive at ``action``.
    """

    action: Any
    propensities: np.ndarray


def split_decision(action: Any) -> tuple[Any, np.ndarray | None]:
    """Return ``(action, propensities)`` from a :class:`Decision` or ``(action, None)``.

    Duck-typed on the two attribute names so that any object carrying them works.
    """
    if isinstance(action, Decision) or (
        hasattr(action, "action") and hasattr(action, "propensities")
    ):
        return action.action, np.asarray(action.propensities)
    return action, None


def decision_propensities(action: Any, propensity_fn: Any, obs: Any, needs: str):
    """``(action, propensities)`` of a step: from a :class:`Decision`, or for a bare action
    from ``propensity_fn(obs)``.

    Raises
    ------
    ValueError
        For a bare action without ``propensity_fn``, beginning with ``needs`` (who needs
        the propensities, and why): a propensity is never assumed.
    """
    if isinstance(action, Decision):  # split_decision's common case, without its call
        return action.action, np.asarray(action.propensities)
    arm, props = split_decision(action)
    if props is None:
        if propensity_fn is None:
            raise ValueError(
                f"{needs}: pass the agent's Decision to env.step (agents' act() returns one), "
                f"or give propensity_fn=lambda obs: pmf at construction; got a bare action "
                f"{arm!r}"
            )
        props = propensity_fn(obs)
    return arm, props
