"""The checks of one round, made once for every inference core of a wrapper (:class:`RoundCheck`).

Before the inner step the action, its propensities (from the
:class:`~lrbandit_gym.Decision` or ``propensity_fn``) and the context the environment
returned last are checked: the action in range, the pmf a distribution that gives the
action positive mass, the context finite (and, for completion contexts, exactly one-hot).
After the step, the next observation is taken and the reward is checked finite.
:class:`RoundCheck` owns the last observation, so the round's context is the one the agent
acted on.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from agents.estimator import LowRankSGD
from inference.results import SmallPropensityWarning
from lrbandit_gym.decision import Decision, decision_propensities
from lrbandit_gym.input_checks import MAX_MAGNITUDE, check_magnitude, check_propensities
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like, one_hot_contexts

__all__ = ["SMALL_PROPENSITY", "CheckedRound", "RoundCheck"]

#: A chosen arm's propensity below this (a weight 1/π above 1000) raises
#: :class:`~inference.results.SmallPropensityWarning`, once per wrapper.
SMALL_PROPENSITY = 1e-3


class CheckedRound(NamedTuple):
    """A round's input as checked before the inner step."""

    actions: np.ndarray
    """The actions, shape (B,) (``(1,)`` for a single env)."""
    propensities: np.ndarray
    """The logging pmfs, shape (B, K)."""
    contexts: np.ndarray | OneHotContexts
    """The contexts in the batched layout (B, d1, d2), or their one-hot index form."""
    fingerprint: np.ndarray | None
    """The contexts' fingerprint for the checking estimator's product cache (None when
    that estimator is not a :class:`~agents.LowRankSGD`)."""
    obs: Any
    """The observation as the environment returned it (target policies read it)."""
    ready: bool
    """Whether the checking estimator's estimate is ready (its warm start over), read once
    for every tracker that shares it."""


class RoundCheck:
    """The last observation and the checks of every round's input.

    Parameters
    ----------
    shape : agents.base.ProblemShape
        The environment's sizes and context law.
    estimator : object
        The estimator whose fingerprint doubles as the context's finiteness check (a
        :class:`~agents.LowRankSGD`; any other estimator is checked entry by entry).
    propensity_fn : callable or None
        ``propensity_fn(obs) -> pmf`` for bare actions.
    who : str
        The wrapper's class name, for messages.
    """

    def __init__(self, shape, estimator, propensity_fn, who: str) -> None:
        self.d1, self.d2, self.n_actions = shape.d1, shape.d2, shape.n_actions
        self.n_trials = shape.n_trials
        self.context = shape.context
        self.estimator = estimator
        # The checking estimator's store: its fingerprint checks the context, its
        # ``initialized`` says whether the estimate is ready (None: not a LowRankSGD).
        self._store = estimator.store if isinstance(estimator, LowRankSGD) else None
        self.propensity_fn = None
        self.who = who
        self.adopt_propensity_fn(propensity_fn)
        self.obs = None
        self.x = None
        self.small_propensity_warned = False

    def adopt_propensity_fn(self, propensity_fn) -> None:
        """Resolve bare actions with ``propensity_fn`` (None: none given); a stack gives it
        once, so a different one than the one held is refused."""
        if propensity_fn is None:
            return
        if not callable(propensity_fn):
            raise ValueError(f"propensity_fn must be callable; got {propensity_fn!r}")
        if self.propensity_fn is not None and self.propensity_fn != propensity_fn:
            raise ValueError(
                "stacked inference wrappers were given different propensity_fn: give it "
                "once, to the innermost one"
            )
        self.propensity_fn = propensity_fn

    # ------------------------------------------------------------------ the observation
    def set_obs(self, obs) -> None:
        """The next round's context is ``obs`` (as the environment returned it)."""
        self.x = self.context_of(obs)
        self.obs = obs

    def context_of(self, obs) -> np.ndarray | OneHotContexts:
        """``obs`` as a context: ``(d1, d2)`` (``(B, d1, d2)`` under a vector env), or, for a
        completion index ``[j, k]``, :class:`~lrbandit_gym.onehot.OneHotContexts` (its range
        checked by :meth:`check`)."""
        b = self.n_trials
        if self.context == "completion" and is_index_like(obs, b):
            idx = np.asarray(obs)
            if idx.dtype.kind in "iu":
                idx = idx.reshape(-1, 2).astype(np.int64, copy=False)
                return OneHotContexts.unchecked(idx[:, 0], idx[:, 1], self.d1, self.d2)
            return idx  # refused by check()
        shape = (self.d1, self.d2) if b is None else (b, self.d1, self.d2)
        return np.asarray(obs, dtype=float).reshape(shape)

    # ------------------------------------------------------------------ before the step
    def check(self, action) -> CheckedRound:
        """The round's action, propensities and context, checked before the inner step.

        Raises
        ------
        RuntimeError
            Before the first ``reset()``.
        ValueError
            Naming what is wrong: a bare action without ``propensity_fn``, an action out of
            range, a pmf that is not a distribution or gives the action no mass, a context
            that is not finite or, for completion contexts, not one-hot.
        """
        if self.obs is None:
            raise RuntimeError("Call reset() before step().")
        if isinstance(action, Decision):  # an agent's act(), the common case
            arm, props = action.action, np.asarray(action.propensities)
        else:
            arm, props = decision_propensities(
                action,
                self.propensity_fn,
                self.obs,
                f"{self.who} needs the propensity of every action",
            )
        b = self.n_trials
        actions = np.array(arm, ndmin=1)
        if actions.dtype.kind not in "iu" or actions.shape != (1 if b is None else b,):
            raise ValueError(f"action must be an integer (array of shape ({b},)); got {arm!r}")
        if (
            not 0 <= actions.item() < self.n_actions  # one action, compared as a Python int
            if b is None
            else ((actions < 0) | (actions >= self.n_actions)).any()
        ):
            raise ValueError(f"action must be in [0, {self.n_actions}); got {arm!r}")
        props = check_propensities(props, actions, self.n_actions, b)
        if not self.small_propensity_warned and not (
            props.shape[0] == 1 and props[0, actions[0]] >= SMALL_PROPENSITY
        ):  # one trial, not small (the common case), is decided here without a call
            self._warn_small_propensity(actions, props)
        fp, contexts = self._check_context()
        store = self._store
        ready = store.initialized if store is not None else bool(self.estimator.initialized)
        return CheckedRound(actions, props, contexts, fp, self.obs, ready)

    def _warn_small_propensity(self, actions: np.ndarray, props: np.ndarray) -> None:
        """Warn, once, when the chosen arm's propensity falls below
        :data:`SMALL_PROPENSITY` (a weight ``1/π`` above 1000): the theory wants the weights
        bounded, and softmax at a low temperature breaks that (docs/reproduction.md, the
        grid's ``laplace`` setting)."""
        chosen = props[np.arange(props.shape[0]), actions]
        if not (chosen < SMALL_PROPENSITY).any():
            return
        self.small_propensity_warned = True
        i = int(np.argmin(chosen))
        where = f" (trial {i})" if self.n_trials is not None else ""
        warnings.warn(
            SmallPropensityWarning(
                f"{self.who}: the logging policy chose arm {int(actions[i])} with "
                f"propensity {chosen[i]:.3g}{where}, a weight 1/pi of {1 / chosen[i]:.3g}: the "
                "intervals' central limit theorem wants the weights bounded (pi_t >= p0 > 0, "
                "docs/method.md §8), and with weights this large they may under-cover; log "
                "with more exploration (a higher softmax temperature, or epsilon-greedy). "
                "Warned once per wrapper."
            ),
            stacklevel=4,
        )

    def _check_context(self) -> tuple[np.ndarray | None, np.ndarray | OneHotContexts]:
        """Refuse a non-finite context; return ``(fingerprint, contexts)``, the contexts in
        the batched layout (B, d1, d2) or as :class:`~lrbandit_gym.onehot.OneHotContexts`.
        With a :class:`LowRankSGD` the check is the context's fingerprint (one pass), which
        is returned for the estimator's product cache; otherwise None.  A dense one-hot
        completion context is replaced by its index form (one pass), which the estimator and
        the cores read at O((d1 + d2) r)."""
        store = self._store
        if self.context == "completion" and (
            isinstance(self.x, OneHotContexts) or is_index_like(self.x, self.n_trials)
        ):
            check_index(self.obs, self.d1, self.d2, self.n_trials, name="the context")
            return (None if store is None else store.fingerprint(self.x)), self.x
        x = self.x
        xb = x if self.n_trials is not None or isinstance(x, OneHotContexts) else x[None]
        fp = None
        if store is not None:
            fp = store.fingerprint(xb)
            # An entry beyond MAX_MAGNITUDE shows in the fingerprint (short of an exact
            # cancellation against the fixed weights); a NaN fails the comparison.
            if (
                abs(fp.item()) <= MAX_MAGNITUDE  # one context: a Python float
                if fp.size == 1
                else (np.abs(fp) <= MAX_MAGNITUDE).all()
            ):
                if self.context == "completion":
                    ctx = one_hot_contexts(xb)
                    if ctx is None:
                        self._refuse_not_one_hot(xb)
                    self.x = xb = ctx  # its fingerprint is the dense one's
                return fp, xb
        if not np.isfinite(self.x).all():
            raise ValueError("the context the environment returned is not finite (NaN or inf)")
        check_magnitude(
            self.x, "the context the environment returned", batched=self.n_trials is not None
        )
        if self.context == "completion":
            ctx = one_hot_contexts(xb)
            if ctx is None:
                self._refuse_not_one_hot(xb)
        return fp, xb  # finite entries whose fingerprint overflowed, or not a LowRankSGD

    def _refuse_not_one_hot(self, xb) -> None:
        """Refuse a dense completion context that is not exactly ``e_j e_kᵀ`` (one entry,
        equal to 1): the warm start, the SGD step and the cores read it as its index, so a
        scaled or spread context would be absorbed wrongly."""
        flat = np.asarray(xb).reshape(len(xb), -1)
        nonzero = flat != 0
        one_hot = (nonzero.sum(axis=1) == 1) & (flat.sum(axis=1, where=nonzero) == 1)
        trial = int(np.argmax(~one_hot))
        values = flat[trial][nonzero[trial]]
        where = "" if self.n_trials is None else f" (trial {trial})"
        raise ValueError(
            f"the context the environment returned{where} is not a one-hot completion "
            f"context e_j e_kᵀ (exactly one non-zero entry, equal to 1): it has {values.size} "
            f"non-zero entries, {values[:3].tolist()!r}{'…' if values.size > 3 else ''}; "
            "an observation wrapper below the inference wrappers, or an environment that is "
            "not MatrixContextBandit-v0's completion law, gives such contexts"
        )

    # ------------------------------------------------------------------ after the step
    def after_step(self, reward, obs) -> np.ndarray:
        """Take ``obs`` as the next round's context (first: a refused reward still leaves
        the next round ready) and return the reward as an array of shape (B,), finite and of
        magnitude up to ``MAX_MAGNITUDE`` (its square must be finite)."""
        self.x = self.context_of(obs)
        self.obs = obs
        b = self.n_trials
        if b is None and isinstance(reward, float) and abs(reward) <= MAX_MAGNITUDE:
            return np.array([reward])  # a single env's reward, the common case (NaN fails)
        r = np.array(reward, dtype=float, ndmin=1)
        if not np.isfinite(r).all():
            i = int(np.argmax(~np.isfinite(r)))
            where = "" if b is None else f" (trial {i})"
            raise ValueError(f"reward must be finite; got {r[i]!r}{where}")
        check_magnitude(r, "reward", batched=b is not None)
        return r
