"""What every policy shares: reading the problem from an environment, exact propensities,
drawing actions from them, and its own random generator.

A policy follows the protocol ``act(obs) -> Decision``, ``update(obs, decision, reward)``,
``action_probs(obs)`` (the full pmf, without drawing) and ``estimates``.  Under a vector
environment every array gains a leading axis of length ``n_trials``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agents.state import (
    FORMAT_VERSION,
    check_format_version,
    flat_part,
    generator_state,
    generator_state_from,
    read_int,
)
from lrbandit_gym.decision import Decision, split_decision
from lrbandit_gym.input_checks import check_actions, check_context, check_rewards
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like

__all__ = ["Decision", "Policy", "PolicyBase", "ProblemShape", "problem_shape", "sample_actions"]


@runtime_checkable
class Policy(Protocol):
    """Anything that can act and learn, in the style of stable-baselines3's protocols."""

    def act(self, obs: np.ndarray) -> Decision: ...

    def update(self, obs: np.ndarray, decision: Decision, reward: Any) -> None: ...

    def action_probs(self, obs: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class ProblemShape:
    """Sizes a policy needs: ``d1, d2, n_actions, context`` and ``n_trials`` (None = single)."""

    d1: int
    d2: int
    n_actions: int
    context: str
    n_trials: int | None


def problem_shape(
    env=None,
    *,
    d1: int | None = None,
    d2: int | None = None,
    n_actions: int | None = None,
    context: str | None = None,
    n_trials: int | None = None,
) -> ProblemShape:
    """Read the sizes from ``env`` (single or vector, wrapped or not) or take them explicitly.

    Explicit values must agree with the environment's when both are given.
    """
    if env is not None:
        base = getattr(env, "unwrapped", env)
        found = {}
        if hasattr(base, "num_envs") and not hasattr(base, "d1"):
            raise ValueError(
                f"env must be the native vector env of MatrixContextBandit-v0, got "
                f'{type(base).__name__}: build it with gym.make_vec("MatrixContextBandit-v0", '
                'num_envs=B, vectorization_mode="vector_entry_point") (Gymnasium\'s sync and '
                "async vector envs step copies of the single env one by one)"
            )
        for name in ("d1", "d2", "n_actions", "context"):
            if not hasattr(base, name):
                raise ValueError(
                    f"env must be a MatrixContextBandit environment exposing {name!r}; "
                    f"got {type(base).__name__}"
                )
            found[name] = getattr(base, name)
        found["n_trials"] = getattr(env, "num_envs", None) if hasattr(base, "num_envs") else None
        given = {
            "d1": d1,
            "d2": d2,
            "n_actions": n_actions,
            "context": context,
            "n_trials": n_trials,
        }
        for name, value in given.items():
            if value is not None and value != found[name]:
                raise ValueError(
                    f"{name}={value!r} disagrees with the environment's {found[name]!r}"
                )
        return ProblemShape(**found)
    missing = [n for n, v in (("d1", d1), ("d2", d2)) if v is None]
    if missing:
        raise ValueError(f"without an env, pass the sizes explicitly; missing {missing}")
    return ProblemShape(
        int(d1),
        int(d2),
        2 if n_actions is None else int(n_actions),
        "gaussian" if context is None else context,
        n_trials,
    )


def sample_actions(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """Draw one arm per row of ``probs`` (shape ``(B, K)``) by inversion; never a zero-mass arm."""
    cdf = np.cumsum(probs, axis=-1)
    cdf[..., -1] = 1.0
    u = rng.random(probs.shape[:-1])
    return np.argmax(cdf > u[..., None], axis=-1)


class PolicyBase(ABC):
    """Shared plumbing: problem sizes, a private generator, batching and validation.

    Subclasses implement :meth:`_probs` on a batched context ``(B, d1, d2)`` and may override
    :meth:`_learn`.  A call that fails raises before any state changes: :meth:`_probs` runs
    (and checks its predictions, :meth:`_check_predictions`) before the generator draws,
    and :meth:`_learn` either absorbs the whole round or nothing.

    The state (:meth:`state_dict`) is a flat dict of arrays and scalars in the key scheme of
    :mod:`agents.state`, so it saves with ``np.savez`` and loads with
    ``np.load(allow_pickle=False)``; subclasses extend :meth:`validate_state_dict` (every
    check, no change) and :meth:`_apply_state` (the assignment, which cannot fail).
    """

    def __init__(
        self, env=None, *, seed=None, d1=None, d2=None, n_actions=None, context=None, n_trials=None
    ):
        self.shape = problem_shape(
            env, d1=d1, d2=d2, n_actions=n_actions, context=context, n_trials=n_trials
        )
        self.d1, self.d2 = self.shape.d1, self.shape.d2
        self.n_actions = self.shape.n_actions
        self.context = self.shape.context
        self.n_trials = self.shape.n_trials
        self.seed_sequence = (
            seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        )
        self.rng = np.random.default_rng(self.seed_sequence)
        self.t = 0  # rounds learned from

    @property
    def batched(self) -> bool:
        return self.n_trials is not None

    def _batch(self, obs) -> np.ndarray:
        """Validate an observation and return it as ``(B, d1, d2)`` (flat obs accepted; a
        completion index ``[j, k]`` becomes its one-hot matrix, for the policies that work
        on matrices)."""
        b = self.n_trials
        x = self._unflatten(obs)
        if self.context == "completion" and is_index_like(x, b):
            return check_index(x, self.d1, self.d2, b).dense()
        x = check_context(x, self.d1, self.d2, b)
        return x[None] if b is None else x

    def _unflatten(self, obs) -> np.ndarray:
        """``obs`` as an array, flat observations reshaped to matrices (not validated; an
        integer completion index ``[j, k]`` is left as it is)."""
        x = np.asarray(obs)
        b = self.n_trials
        flat = (self.d1 * self.d2,) if b is None else (b, self.d1 * self.d2)
        if x.shape == flat and not (self.context == "completion" and x.dtype.kind in "iu"):
            x = x.reshape((self.d1, self.d2) if b is None else (b, self.d1, self.d2))
        return x

    def _out(self, arr: np.ndarray):
        return arr if self.batched else arr[0]

    @abstractmethod
    def _probs(self, x: np.ndarray) -> np.ndarray:
        """The pmf over arms for batched contexts ``(B, d1, d2)``, shape ``(B, K)``."""

    def action_probs(self, obs) -> np.ndarray:
        """``π_t(a)`` for every arm at this context, without drawing (docs/method.md §2)."""
        return self._out(self._probs(self._batch(obs)))

    def act(self, obs) -> Decision:
        """Draw an action from :meth:`action_probs` and return it with the full pmf."""
        probs = self._probs(self._batch(obs))
        actions = sample_actions(self.rng, probs)
        if self.batched:
            return Decision(actions, probs)
        return Decision(int(actions[0]), probs[0])

    def _validated_step(self, obs, decision, reward):
        """Return batched ``(x, actions, rewards, propensities or None)`` after validation."""
        action, props = split_decision(decision)
        x = self._batch(obs)
        b = self.n_trials
        actions = check_actions(action, self.n_actions, b)
        rewards = check_rewards(reward, b)
        actions = np.atleast_1d(actions)
        rewards = np.atleast_1d(np.asarray(rewards, dtype=float))
        if props is not None:
            props = np.asarray(props, dtype=float)
            props = props[None] if b is None else props
        return x, actions, rewards, props

    def update(self, obs, decision, reward) -> None:
        """Learn from one round: the context acted on, the decision taken and its reward.

        All or nothing: invalid input raises ``ValueError`` and a round that cannot be
        absorbed numerically ``FloatingPointError``, before any state changes.
        """
        x, actions, rewards, props = self._validated_step(obs, decision, reward)
        self._learn(x, actions, rewards, props)
        self.t += 1

    def _learn(self, x, actions, rewards, props) -> None:  # noqa: B027  (optional hook)
        """Absorb a validated batched round; stateless policies keep the default."""

    def _check_predictions(self, preds: np.ndarray, x: np.ndarray) -> None:
        """Raise ``FloatingPointError`` if predicted rewards (B, ...) are not finite.

        A context far outside the estimates' scale (say entries of 1e200) overflows
        ``<M_hat_a, X>``; no pmf can be computed from it, and the call must fail before the
        generator draws.
        """
        if np.isfinite(preds).all():
            return
        bad = ~np.isfinite(preds.reshape(preds.shape[0], -1)).all(axis=1)
        b = int(np.argmax(bad))
        where = f" (trial {b})" if self.batched else ""
        top = 1.0 if isinstance(x, OneHotContexts) else float(np.abs(x[b]).max())
        raise FloatingPointError(
            f"{type(self).__name__}: the predicted rewards at this obs are not finite"
            f"{where}: {preds[b].ravel()[:4].tolist()}; the context's largest entry is "
            f"{top:.3g}, too large for the scale of the estimates. "
            "Rescale the contexts (and rewards) to order 1; nothing was drawn or changed"
        )

    # -- save and resume ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain data that :meth:`load_state_dict` restores (the generator state included).

        A flat dict (key scheme of :mod:`agents.state`): ``format_version``, ``t`` and the
        generator state ``rng.bit_generator``, ``rng.state``; subclasses add theirs.
        """
        return {"format_version": FORMAT_VERSION, "t": int(self.t), **generator_state(self.rng)}

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict`, changing nothing; returns what :meth:`load_state_dict`
        assigns.

        Raises
        ------
        ValueError
            On a missing key or an invalid value (another ``format_version``, negative
            ``t``, an invalid generator state, ...).
        """
        check_format_version(state)
        flat_part(state, "rng")  # refuses the generator held as a dict
        if "t" not in state:
            raise ValueError("state is missing key 't'")
        return {"t": read_int(state["t"], "state['t']"), "rng": generator_state_from(state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`: everything is validated first
        (:meth:`validate_state_dict`), so a failure changes nothing."""
        self._apply_state(self.validate_state_dict(state))

    def _apply_state(self, checked: dict[str, Any]) -> None:
        """Assign a validated state (nothing here raises)."""
        self.t = checked["t"]
        self.rng.bit_generator.state = checked["rng"]
