"""The machinery every inference wrapper shares (:class:`InferenceWrapperBase`).

Each step an inference wrapper resolves the round's propensities (from the
:class:`~lrbandit_gym.Decision` or ``propensity_fn``), checks the action and the context
before the inner step (the propensities, the context's finiteness and, for completion
contexts, that it is exactly one-hot), and after it checks the reward and prepares its
update: its core's round (:meth:`InferenceWrapperBase._stage`) and, when it has no agent's
estimator to share, its own :class:`~agents.LowRankSGD`'s (warm-started on the first rounds
it sees, weighted by ``1/π``).  A stack of inference wrappers steps all or nothing through
the protocol of :mod:`inference.stack_step`; wrappers that change rewards, observations or
actions are refused below an inference wrapper at construction
(:mod:`inference.gym_layers`): it would estimate from the changed data.  Saving and
restoring is :mod:`inference.wrapper_state`; the public wrappers are in
:mod:`inference.wrappers`, :mod:`inference.value_wrappers` and
:mod:`inference.policy_evaluation`.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import AutoresetMode, VectorEnv

from agents.base import problem_shape
from agents.estimator import LowRankSGD
from agents.warm_start import DEFAULT_MAX_MEMORY_BYTES, WarmStart
from inference.gym_layers import (
    layers_below,
    refuse_reset_steps,
    refuse_transforming_layers,
    undo_for,
)
from inference.results import (
    InsufficientDataWarning,
    SmallPropensityWarning,
    format_table,
    interval_rows,
    warn_insufficient,
)
from inference.sequences import DEFAULT_TUNING_N
from inference.stack_step import CheckedInput, StackStep
from inference.wrapper_state import WrapperState
from lrbandit_gym.decision import split_decision
from lrbandit_gym.input_checks import MAX_MAGNITUDE, check_magnitude, check_propensities
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like, one_hot_contexts
from lrbandit_gym.rounds import Round

__all__ = ["InferenceWrapperBase"]

#: A chosen arm's propensity below this (a weight 1/π above 1000) raises
#: :class:`~inference.results.SmallPropensityWarning`, once per wrapper.
SMALL_PROPENSITY = 1e-3


def _nothing() -> None:
    """A prepared update with nothing to do (or to undo)."""


class InferenceWrapperBase(WrapperState):
    """Estimator handling, propensity resolution and bookkeeping shared by all wrappers.

    A public wrapper mixes this base with its Gymnasium wrapper class, ``_layer``
    (``gym.Wrapper`` for a single env, ``VectorWrapper`` for a vector env, as ``_vector``
    says); its constructor calls :meth:`_open`, then :meth:`_setup`, then builds its core.
    Its share of each round is four hooks, which :meth:`step` calls in this order:

    * ``_snapshot(xb, actions, propensities)``, before the inner step: what the core reads
      of the estimate the agent acted on (and the checks that need no reward);
    * ``_stage(snapshot, round_)``, after it: the core's round computed and checked on the
      :class:`~lrbandit_gym.rounds.Round`, everything that can fail, nothing written;
    * ``_absorb(staged, round_)``, when the outermost wrapper commits: writes it (cannot
      fail);
    * ``_running_info()``: what ``info[info_key]`` reports after the step.
    """

    info_key = "inference"
    _vector: bool
    _layer: type

    def _open(self, env, **recorded) -> None:
        """Refuse the wrong kind of environment, record the constructor's arguments
        (``recorded``: Gymnasium's ``spec`` of the stack) and initialise the Gymnasium
        wrapper class."""
        self._check_kind(env)
        RecordConstructorArgs.__init__(self, **recorded)
        self._layer.__init__(self, env)

    def _setup(self, env, rank, estimator, propensity_fn, warm_start, sgd_kwargs) -> None:
        base = env.unwrapped
        self._bandit = base  # the base environment a step checkpoints (StackStep)
        self._shape = problem_shape(base)
        self.d1, self.d2 = self._shape.d1, self._shape.d2
        self.n_actions = self._shape.n_actions
        self.n_trials = self._shape.n_trials if self._vector else None
        #: The law of the contexts: "completion" (one-hot ``e_j e_kᵀ``) or a dense one.
        self.context = self._shape.context
        if propensity_fn is not None and not callable(propensity_fn):
            raise ValueError(f"propensity_fn must be callable; got {propensity_fn!r}")
        self.propensity_fn = propensity_fn
        if estimator is None:
            estimator = self._inner_estimator(env)
        self.owns_estimator = estimator is None
        if estimator is None:
            estimator = LowRankSGD(
                self.d1,
                self.d2,
                rank,
                self.n_actions,
                n_trials=self.n_trials,
                context=self._shape.context,
                **sgd_kwargs,
            )
            # Weighted by 1/pi, so always the buffered fit (streaming needs uniform rounds).
            self._warm_start = WarmStart(
                self.d1,
                self.d2,
                self.n_actions,
                estimator.rank,
                context=self._shape.context,
                n_trials=self.n_trials,
                rounds=warm_start,
                method="buffer",
                max_memory_bytes=DEFAULT_MAX_MEMORY_BYTES,
                ways_out="share the agent's estimator (estimator=agent.estimator) or pass a "
                "shorter warm_start=",
            )
            self.warm_start_rounds = self._warm_start.rounds
        else:
            for name in ("d1", "d2", "n_actions", "n_trials"):
                mine = getattr(self, name)
                if getattr(estimator, name) != mine:
                    raise ValueError(
                        f"estimator.{name}={getattr(estimator, name)!r} does not match the "
                        f"environment's {mine!r}"
                    )
            self.warm_start_rounds = 0
            self._warm_start = None
        #: The held-out check of the own estimator's warm start
        #: (:class:`agents.warm_start.check.WarmStartCheck`), once it has run.
        self.warm_start_check = None
        self.estimator = estimator
        self.rank = estimator.rank
        self._obs = None
        self._fp = None  # fingerprint of the last context (LowRankSGD estimators)
        self._checked = None  # this step's checked action and context (see _resolve)
        self._joined = None  # the stack's step in flight, handed down from above (join)
        # Below this wrapper: the nearest inference wrapper (which a step is handed down
        # to), and how to undo the wrappers that count a step when a round is refused after
        # the inner step (inference.gym_layers).
        layers = list(layers_below(env))
        self._inner = next((w for w in layers if isinstance(w, InferenceWrapperBase)), None)
        self._undo = tuple(u for u in map(undo_for, layers) if u is not None)
        self.rounds_seen = 0
        self.rounds_skipped = 0
        self._small_propensity_warned = False

    def _batched(self, x):
        """The context ``x`` from :meth:`_context` in the batched layout (B, d1, d2), or as
        :class:`~lrbandit_gym.onehot.OneHotContexts` (already batched)."""
        if isinstance(x, OneHotContexts) or self.n_trials is not None:
            return x
        return x[None]

    @classmethod
    def _check_kind(cls, env) -> None:
        """Refuse the wrong kind of environment before any wrapper state exists."""
        base = getattr(env, "unwrapped", env)
        is_vector = isinstance(base, VectorEnv)
        if cls._vector and not is_vector:
            raise ValueError(f"{cls.__name__} wraps a vector env; got {type(env).__name__}")
        if not cls._vector and is_vector:
            raise ValueError(
                f"{cls.__name__} wraps a single env; use Vector{cls.__name__} for a vector env"
            )
        if is_vector and not hasattr(base, "problem"):
            raise ValueError(
                f"{cls.__name__} needs the native vector env of MatrixContextBandit-v0, "
                f'got {type(base).__name__}: build it with gym.make_vec("MatrixContextBandit-v0"'
                ', num_envs=B, vectorization_mode="vector_entry_point")'
            )
        if (
            is_vector
            and getattr(base, "max_episode_steps", None) is not None
            and getattr(base, "autoreset_mode", None) == AutoresetMode.NEXT_STEP
        ):
            raise ValueError(
                f"{cls.__name__} cannot watch a vector env with autoreset_mode=NEXT_STEP and "
                f"max_episode_steps={base.max_episode_steps}: the step after a truncation "
                "ignores the action and returns reward 0, which is not a round of data; use "
                'autoreset_mode="SameStep" (the default) or max_episode_steps=None'
            )
        refuse_transforming_layers(env, cls.__name__)
        refuse_reset_steps(env, cls.__name__)

    @staticmethod
    def _inner_estimator(env):
        while env is not None:
            if isinstance(env, InferenceWrapperBase):
                return env.estimator
            env = getattr(env, "env", None)
        return None

    def _context(self, obs) -> np.ndarray | OneHotContexts:
        """The observation as a context: ``(d1, d2)`` (``(B, d1, d2)`` under a vector env),
        or, for a completion index ``[j, k]``, :class:`~lrbandit_gym.onehot.OneHotContexts`
        (checked by :meth:`_check_context` before it is used)."""
        b = self.n_trials
        if self.context == "completion" and is_index_like(obs, b):
            idx = np.asarray(obs)
            if idx.dtype.kind in "iu":
                idx = idx.reshape(-1, 2).astype(np.int64, copy=False)
                return OneHotContexts.unchecked(idx[:, 0], idx[:, 1], self.d1, self.d2)
            return idx  # refused by _check_context
        shape = (self.d1, self.d2) if b is None else (b, self.d1, self.d2)
        return np.asarray(obs, dtype=float).reshape(shape)

    def _resolve(self, action, handed: CheckedInput | None):
        """``(action, propensities)`` checked against the last context, before any step;
        ``handed`` is the input the inference wrapper above checked in this step, if any."""
        if self._obs is None:
            raise RuntimeError("Call reset() before step().")
        if (
            handed is not None
            and handed.action is action
            and handed.obs is self._obs_raw
            and handed.estimator is self.estimator
            and (handed.from_decision or handed.propensity_fn is self.propensity_fn)
        ):
            # The inference wrapper just above checked this very action and context
            # within this step: nothing can have changed them since.
            self._fp = handed.fingerprint
            if self.context == "completion" and not isinstance(self._x, OneHotContexts):
                ctx = one_hot_contexts(self._batched(self._x))  # as _check_context does
                if ctx is not None:
                    self._x = ctx
            self._checked = handed
            return handed.actions, handed.propensities
        arm, props = split_decision(action)
        from_decision = props is not None
        if props is None:
            if self.propensity_fn is None:
                raise ValueError(
                    f"{type(self).__name__} needs the propensity of every action: pass the "
                    "agent's Decision to env.step (agents' act() returns one), or give "
                    "propensity_fn=lambda obs: pmf at construction; got a bare action "
                    f"{arm!r}"
                )
            props = self.propensity_fn(self._obs_raw)
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
        if not self._small_propensity_warned:
            self._warn_small_propensity(actions, props)
        self._fp = self._check_context()
        self._checked = CheckedInput(
            action,
            self._obs_raw,
            self.estimator,
            from_decision,
            self.propensity_fn,
            actions,
            props,
            self._fp,
        )
        return actions, props

    def _warn_small_propensity(self, actions: np.ndarray, props: np.ndarray) -> None:
        """Warn, once per wrapper, when the chosen arm's propensity falls below
        :data:`SMALL_PROPENSITY` (a weight ``1/π`` above 1000): the theory wants the weights
        bounded, and softmax at a low temperature breaks that (docs/reproduction.md, the
        grid's ``laplace`` setting: a parameter cell covered 0.923)."""
        if props.shape[0] == 1 and props[0, actions[0]] >= SMALL_PROPENSITY:
            return  # one trial, not small (the common case), without small-array costs
        chosen = props[np.arange(props.shape[0]), actions]
        if not (chosen < SMALL_PROPENSITY).any():
            return
        self._small_propensity_warned = True
        i = int(np.argmin(chosen))
        where = f" (trial {i})" if self.n_trials is not None else ""
        warnings.warn(
            SmallPropensityWarning(
                f"{type(self).__name__}: the logging policy chose arm {int(actions[i])} with "
                f"propensity {chosen[i]:.3g}{where}, a weight 1/pi of {1 / chosen[i]:.3g}: the "
                "intervals' central limit theorem wants the weights bounded (pi_t >= p0 > 0, "
                "docs/method.md §8), and with weights this large they may under-cover; log "
                "with more exploration (a higher softmax temperature, or epsilon-greedy). "
                "Warned once per wrapper."
            ),
            stacklevel=4,
        )

    def _check_context(self) -> np.ndarray | None:
        """Refuse a non-finite context before the step.  With a :class:`LowRankSGD` the
        check is the context's fingerprint (one pass), which is returned for the
        estimator's product cache; otherwise None.

        A completion index is checked for range; a dense one-hot completion context is
        replaced by its index form (one pass), which the estimator and the core read at
        O((d1 + d2) r)."""
        if self.context == "completion" and (
            isinstance(self._x, OneHotContexts) or is_index_like(self._x, self.n_trials)
        ):
            check_index(self._obs_raw, self.d1, self.d2, self.n_trials, name="the context")
            if isinstance(self.estimator, LowRankSGD):
                return self.estimator.fingerprint(self._x)
            return None
        fp = None
        if isinstance(self.estimator, LowRankSGD):
            xb = self._batched(self._x)
            fp = self.estimator.fingerprint(xb)
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
                    self._x = ctx  # its fingerprint is the dense one's
                return fp
        if not np.isfinite(self._x).all():
            raise ValueError("the context the environment returned is not finite (NaN or inf)")
        check_magnitude(
            self._x, "the context the environment returned", batched=self.n_trials is not None
        )
        if self.context == "completion" and one_hot_contexts(self._batched(self._x)) is None:
            self._refuse_not_one_hot(self._batched(self._x))
        return fp  # finite entries (their fingerprint overflowed), or not a LowRankSGD

    def _refuse_not_one_hot(self, xb) -> None:
        """Refuse a dense completion context that is not exactly ``e_j e_kᵀ`` (one entry,
        equal to 1), before the step: the warm start, the SGD step and the cores read it as
        its index, so a scaled or spread context would be absorbed wrongly or fail midway."""
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

    @staticmethod
    def _check_reward(reward, b):
        if b is None and isinstance(reward, float) and abs(reward) <= MAX_MAGNITUDE:
            return np.array([reward])  # a single env's reward, the common case (NaN fails)
        r = np.array(reward, dtype=float, ndmin=1)
        if not np.isfinite(r).all():
            i = int(np.argmax(~np.isfinite(r)))
            where = "" if b is None else f" (trial {i})"
            raise ValueError(f"reward must be finite; got {r[i]!r}{where}")
        check_magnitude(r, "reward", batched=b is not None)  # its square must be finite
        return r

    def _stage(self, snapshot, round_: Round):
        """Everything of the round's absorption that can fail, run before any layer of the
        step commits; returns what :meth:`_absorb` takes (by default the snapshot itself)."""
        return snapshot

    def _skipped(self, round_: Round) -> None:
        """A round that enters no inference (before the estimate is ready); nothing by
        default."""

    def _predict_dense(self, xb) -> np.ndarray:
        """Every arm's prediction, ``(B, K)``, from an estimator other than a
        :class:`LowRankSGD`: it reads the context ``xb`` (batched) as a matrix, unbatched for
        a single env."""
        x = xb.dense() if isinstance(xb, OneHotContexts) else xb
        return np.array(self.estimator.predict(x if self.n_trials is not None else x[0]), ndmin=2)

    def _estimate_ready(self) -> bool:
        return bool(self.estimator.initialized)

    def _prepare_own(self, x, actions, rewards, props):
        """The own estimator's share of the round, prepared: ``(commit, abort)``.

        Everything that can fail (the warm-start fit, the SGD step and its divergence guard)
        runs here and changes nothing that ``abort`` does not undo; ``commit`` cannot fail.
        """
        if not self.owns_estimator:
            return _nothing, _nothing
        own_round = Round(self._batched(x), actions, rewards, props, self._fp)
        warm = self._warm_start
        if warm is not None and warm.active:
            weights = 1.0 / props[np.arange(props.shape[0]), actions]
            if not warm.last_round_next:
                return (lambda: warm.add_round(own_round, weights)), _nothing
            # This round completes the warm start: fit with it now, defined for every arm
            # (even one the logging policy never played), and check it on held-out rounds
            # (a warning when M_init is too far from the truth for the theory).
            warm.add_round(own_round, weights)
            M_init, check = warm.finish(
                check=True,
                who=f"{type(self).__name__}'s own warm start",
                stacklevel=4,  # the caller of the wrapper's step()
            )

            def start():
                self.estimator.initialize(M_init)
                self.warm_start_check = check
                warm.release()

            return start, warm.discard_last
        proposal = self.estimator.propose_step(own_round)
        return (lambda: self.estimator.commit_step(proposal)), _nothing

    def _prepare(self, snapshot, round_: Round, x, obs):
        """This wrapper's share of the checked ``round_`` (context ``x`` as :meth:`_context`
        gave it), prepared: ``(commit, abort)``; ``commit(info)`` absorbs it, moves to the
        next context ``obs`` and writes the running values into ``info``.  The core's share
        is staged first (:meth:`_stage`: computed and checked, so a round its sums cannot
        absorb is refused here, before any layer commits)."""
        staged = None if snapshot is None else self._stage(snapshot, round_)
        commit_own, abort = self._prepare_own(
            x, round_.actions, round_.rewards, round_.propensities
        )

        def commit(info):
            if snapshot is not None:
                self._absorb(staged, round_)
            else:
                self.rounds_skipped += 1
                self._skipped(round_)
            commit_own()
            self.rounds_seen += 1
            self._set_obs(obs)
            info[self.info_key] = self._running_info()

        return commit, abort

    def join(self, step: StackStep | None) -> None:
        """Take part in ``step``, the stack's step in flight that an inference wrapper above
        began, as the next inference wrapper below it; ``None`` leaves it
        (:mod:`inference.stack_step`)."""
        self._joined = step

    def step(self, action):
        """Step the inner env with ``action`` unchanged and absorb the round: one step of
        the stack, all or nothing (:mod:`inference.stack_step`).

        The round is checked, the inner step taken and every inference wrapper's update
        prepared (everything that can fail); only then is it committed, by the outermost
        inference wrapper for the whole stack below it.  If anything fails after the inner
        step, the prepared updates are dropped and the base environment is returned to its
        state before the step (:meth:`MatrixContextBanditEnv.restore`), as are the wrappers
        between that counted the step (``self._undo``, from
        :func:`inference.gym_layers.undo_for`), so every layer is as it was and the step can
        be retried.  The step reaches the nearest inference wrapper below through such
        wrappers, so it commits with this one.
        """
        self._checked = None
        joined = self._joined
        actions, props = self._resolve(action, None if joined is None else joined.checked)
        x = self._x
        xb = self._batched(x)
        snapshot = self._snapshot(xb, actions, props) if self._estimate_ready() else None
        stack_step = StackStep(self._bandit, self._undo) if joined is None else joined
        inner = self._inner
        try:
            if inner is None:
                obs, reward, terminated, truncated, info = self.env.step(action)
            else:
                stack_step.checked = self._checked
                inner.join(stack_step)
                try:
                    obs, reward, terminated, truncated, info = self.env.step(action)
                finally:
                    inner.join(None)
            rewards = self._check_reward(reward, self.n_trials)
            stack_step.add(*self._prepare(snapshot, Round(xb, actions, rewards, props), x, obs))
        except BaseException:
            if joined is None:
                stack_step.undo()
            raise
        if joined is not None:
            return obs, reward, terminated, truncated, info
        info = dict(info)
        stack_step.commit(info)
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._set_obs(obs)
        return obs, info

    def _set_obs(self, obs) -> None:
        self._obs_raw = obs
        self._obs = obs
        self._x = self._context(obs)

    def _rounds_needed_message(self) -> str:
        if self.owns_estimator:
            left = self.warm_start_rounds - self.rounds_seen
            return (
                f"the wrapper's warm start needs {max(left, 0)} more round(s) "
                f"({self.warm_start_rounds} in all) before inference starts"
            )
        return "the shared estimator has not finished its warm start yet"

    @contextlib.contextmanager
    def _one_warning(self):
        """Before inference starts, say why and for how long, instead of the core's
        generic "no rounds observed" warning."""
        if self.core.n_obs:
            yield
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsufficientDataWarning)
            yield
        warn_insufficient(
            f"no round has entered the inference yet: {self._rounds_needed_message()}; "
            "returning NaN",
            stacklevel=4,
        )

    def summary(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> str:
        """A text table of :meth:`results`: every quantity this wrapper reports (trial 0
        under a vector env)."""
        rows = self.results(confidence_level, kind=kind, tuning_n=tuning_n)
        return format_table(rows, self.n_trials, confidence_level)

    def to_frame(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ):
        """Every interval of this wrapper and of the inference wrappers below it in the
        stack, as a pandas DataFrame (needs pandas): one row per quantity and trial, with
        columns ``quantity``, ``trial``, ``estimate``, ``low``, ``high``,
        ``standard_error`` and ``p_value``, outermost wrapper first.  ``kind`` and
        ``tuning_n`` choose fixed-n intervals or confidence sequences, as in ``interval``."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_frame() needs pandas: pip install pandas") from exc
        records = []
        env = self
        while env is not None:
            if isinstance(env, InferenceWrapperBase):
                for label, ci in env.results(confidence_level, kind=kind, tuning_n=tuning_n):
                    for trial, row in enumerate(interval_rows(ci)):
                        records.append({"quantity": label, "trial": trial, **row})
            env = getattr(env, "env", None)
        return pd.DataFrame.from_records(records)
