"""One checked round in the batched layout: what every layer below the edge takes.

A round enters the library at an *edge*: a public ``update``/``add``/``step`` of an estimator,
a warm-start store, an inference core or a wrapper.  The edge checks it once with
:func:`check_round` (shapes, finiteness, magnitudes, arms in range, propensities that are a
pmf and positive at the pulled arm) and passes the resulting :class:`Round` inward; nothing
below the edge checks it again, and nothing below it raises on user input.  Holding a
:class:`Round` is the statement "these arrays passed the checks".
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from lrbandit_gym.input_checks import (
    check_actions,
    check_context,
    check_propensities,
    check_rewards,
)
from lrbandit_gym.onehot import OneHotContexts


class Round(NamedTuple):
    """One round for ``B`` trials, checked (build it with :func:`check_round`).

    Attributes
    ----------
    contexts : ndarray of shape (B, d1, d2), or OneHotContexts
        The contexts ``X_t``.
    actions : ndarray of int64, shape (B,)
        The pulled arms ``a_t``.
    rewards : ndarray of shape (B,)
        The observed rewards ``y_t``.
    propensities : ndarray of shape (B, K), or None
        ``pi_t(a)`` for every arm, positive at ``a_t``; None where the caller has none.
    fingerprint : ndarray of shape (B,), or None
        The contexts' fingerprints ``<X, W>`` where the edge computed them (the estimator's
        product cache keys on them).
    """

    contexts: np.ndarray | OneHotContexts
    actions: np.ndarray
    rewards: np.ndarray
    propensities: np.ndarray | None
    fingerprint: np.ndarray | None = None

    @property
    def n_trials(self) -> int:
        """``B``, the number of trials in the round."""
        return int(self.actions.shape[0])


def check_round(
    contexts: Any,
    actions: Any,
    rewards: Any,
    propensities: Any,
    *,
    shape: tuple[int, int, int],
    n_trials: int | None,
    bounded: bool = True,
    require_propensities: bool = True,
) -> Round:
    """Check one round's inputs and return them as a :class:`Round` (batched layout).

    Parameters
    ----------
    contexts, actions, rewards, propensities
        As the public entry points take them: unbatched (``n_trials=None``: one context of
        shape ``(d1, d2)``, one integer action, one reward, ``K`` propensities) or batched
        (leading axis ``B = n_trials``).  One-hot contexts in index form pass as they are.
    shape : tuple ``(d1, d2, K)``
        The problem's context shape and number of arms.
    n_trials : int or None
        ``B``; None for the unbatched API.
    bounded : bool, default True
        Whether context entries beyond ``MAX_MAGNITUDE`` are refused (paths that sum or
        store contexts need it).
    require_propensities : bool, default True
        Whether ``propensities`` must be given.

    Raises
    ------
    ValueError
        Naming the argument and the offending value (and trial, when batched); raised before
        the caller changes any state.
    """
    d1, d2, n_actions = shape
    if isinstance(contexts, OneHotContexts):
        X = contexts
    else:
        X = check_context(contexts, d1, d2, n_trials, "X", bounded=bounded)
        if n_trials is None:
            X = X[None]
    a = check_actions(actions, n_actions, n_trials)
    y = check_rewards(rewards, n_trials)
    if propensities is None:
        if require_propensities:
            raise ValueError(
                "propensities must be given (an array of pi_t(a) for every arm), got None"
            )
        p = None
    else:
        p = check_propensities(propensities, a, n_actions, n_trials)
    return Round(X, a, y, p)
