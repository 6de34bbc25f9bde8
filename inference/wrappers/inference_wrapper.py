"""One inference wrapper holding several trackers (:class:`InferenceWrapperBase`).

The public wrappers (:class:`~inference.ParameterInference`,
:class:`~inference.ValueInference`, :class:`~inference.PolicyEvaluation` and their vector
twins) are presets of this one: each builds one :class:`~inference.wrappers.tracker.Tracker`.  The
innermost inference wrapper of a stack *hosts* the round: wrapping a preset in another (with
any Gymnasium wrappers between that pass the data through) adds the outer one's tracker to
the host, and the outer one's ``step`` passes straight through.  Each step the host

1. checks the round once (:class:`~inference.wrappers.round_check.RoundCheck`: the action, its
   propensities and the context) and takes every tracker's snapshot of the estimate the
   agent acted on, all before the inner step;
2. steps the environment;
3. takes the next observation, checks the reward and stages every tracker's round and
   its own estimator's update (everything that can fail);
4. commits them all (nothing can fail), each tracker returning its running values for
   ``info``.

A round refused in step 3 (a non-finite reward, a diverging step) leaves every tracker and
the estimator unchanged and raises with a note naming the round, while the environment has
stepped, as under any Gymnasium wrapper; the next step starts from the new context.
Wrappers that change rewards, observations or actions are refused below an inference
wrapper at construction (:mod:`inference.wrappers.layer_checks`).
"""

from __future__ import annotations

from typing import Any

from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import AutoresetMode, VectorEnv

from agents.base import problem_shape
from inference.results import format_table, interval_rows
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.layer_checks import (
    layers_below,
    refuse_reset_steps,
    refuse_transforming_layers,
)
from inference.wrappers.own_estimator import OwnEstimator
from inference.wrappers.round_check import RoundCheck
from inference.wrappers.tracker import Tracker
from inference.wrappers.wrapper_state import apply_wrapper_state, check_wrapper_state, wrapper_state
from lrbandit_gym.rounds import Round

__all__ = ["InferenceWrapperBase"]


class InferenceWrapperBase:
    """What the inference wrappers share: hosting the round, reading out, saving.

    A public wrapper mixes this base with its Gymnasium wrapper class, ``_layer``
    (``gym.Wrapper`` for a single env, ``VectorWrapper`` for a vector env, as ``_vector``
    says); its constructor calls :meth:`_open`, then :meth:`_attach` with its tracker.
    """

    _vector: bool
    _layer: type

    def _open(self, env, **recorded) -> None:
        """Refuse the wrong kind of environment, record the constructor's arguments
        (``recorded``: Gymnasium's ``spec`` of the stack) and initialise the Gymnasium
        wrapper class."""
        self._check_kind(env)
        RecordConstructorArgs.__init__(self, **recorded)
        self._layer.__init__(self, env)

    def _attach(self, env, make_tracker, rank, estimator, propensity_fn, warm_start, sgd_kwargs):
        """Build this wrapper's tracker (``make_tracker(shape, estimator, own)``) on the
        estimator given, the host's, or an own one, and host it or add it to the host."""
        shape = problem_shape(env.unwrapped)
        self.d1, self.d2, self.n_actions = shape.d1, shape.d2, shape.n_actions
        self.n_trials = shape.n_trials if self._vector else None
        #: The law of the contexts: "completion" (one-hot ``e_j e_kᵀ``) or a dense one.
        self.context = shape.context
        host = next((w for w in layers_below(env) if isinstance(w, InferenceWrapperBase)), None)
        if estimator is None and host is not None:
            estimator = host.estimator
        own = None
        if estimator is None:
            own = OwnEstimator(shape, rank, warm_start, sgd_kwargs)
            estimator = own.estimator
        else:
            for name in ("d1", "d2", "n_actions", "n_trials"):
                mine = getattr(self, name)
                if getattr(estimator, name) != mine:
                    raise ValueError(
                        f"estimator.{name}={getattr(estimator, name)!r} does not match the "
                        f"environment's {mine!r}"
                    )
        self.estimator = estimator
        self.rank = estimator.rank
        self.owns_estimator = own is not None
        self.warm_start_rounds = 0 if own is None else own.rounds
        self.propensity_fn = propensity_fn
        self._own = own
        self.tracker: Tracker = make_tracker(shape, estimator, own)
        if host is None:
            self._host = self
            self._check = RoundCheck(shape, estimator, propensity_fn, type(self).__name__)
            self._trackers = [self.tracker]
            self._steps = 0
        else:
            self._host = host
            self._check = None
            host.add_tracker(self.tracker, propensity_fn)
            # The host runs the round: this wrapper's step is the layer's below, bound
            # here so that a step of the stack crosses one inference wrapper's step.
            self.step = self.env.step

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

    # ------------------------------------------------------------------ the host
    @property
    def host(self) -> InferenceWrapperBase:
        """The inference wrapper that runs this one's rounds: itself when no inference
        wrapper is below it, else the innermost one."""
        return self._host

    @property
    def round_check(self) -> RoundCheck | None:
        """The host's checks of every round and its last observation (None on a wrapper
        that is not the host)."""
        return self._check

    def add_tracker(self, tracker: Tracker, propensity_fn=None) -> None:
        """Host ``tracker`` too (an inference wrapper stacked on this one adds its own);
        ``propensity_fn`` is the stacked wrapper's, which must agree with this one's."""
        if self._host is not self:
            self._host.add_tracker(tracker, propensity_fn)
            return
        self._check.adopt_propensity_fn(propensity_fn)
        self._trackers.append(tracker)

    def remove_tracker(self, tracker: Tracker) -> None:
        """Stop feeding ``tracker`` (a stacked wrapper whose inference has ended: a target
        policy the logging policy cannot support); the others go on."""
        if self._host is not self:
            self._host.remove_tracker(tracker)
            return
        self._trackers = [t for t in self._trackers if t is not tracker]

    def step(self, action):
        """Step the inner env with ``action`` unchanged, and feed the round to every tracker
        of the stack (module docstring).  A wrapper that is not the host has no step of
        its own: :meth:`_attach` binds its ``step`` to the layer's below."""
        check = self._check
        checked = check.check(action)
        fp, by = checked.fingerprint, check.estimator
        trackers = self._trackers
        snapshots = []
        for t in trackers:
            if t.estimator is by:  # the checking estimator: its readiness and fingerprint
                snapshots.append(t.snapshot(checked, fp) if checked.ready else None)
            else:
                snapshots.append(t.snapshot(checked, None) if t.ready() else None)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        try:
            rewards = check.after_step(reward, obs)
            round_ = Round(checked.contexts, checked.actions, rewards, checked.propensities)
            staged = []
            for t, s in zip(trackers, snapshots, strict=True):
                staged.append(t.stage(s, round_) if s is not None and t.stages else s)
            own = self._own
            commit_own = (
                None
                if own is None
                else own.prepare(round_._replace(fingerprint=fp), type(self).__name__)
            )
        except Exception as exc:
            exc.add_note(
                f"{type(self).__name__}: round {self._steps} (the environment's step) was "
                "refused after the environment stepped; no inference core or estimator "
                "absorbed it, and the next step continues from the new context"
            )
            raise
        info = dict(info)
        for t, s in zip(trackers, staged, strict=True):
            if s is None:
                t.rounds_skipped += 1
                info[t.info_key] = t.skip(round_)
            else:
                info[t.info_key] = t.commit(s, round_)
            t.rounds_seen += 1
        if commit_own is not None:
            commit_own()
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        if self._host is self:
            self._check.set_obs(obs)
        return obs, info

    # ------------------------------------------------------------------ read-out
    @property
    def rounds_seen(self) -> int:
        """Rounds this wrapper has seen (inference included or not)."""
        return self.tracker.rounds_seen

    @property
    def rounds_skipped(self) -> int:
        """Rounds seen before the estimate was ready (the warm start), not in the inference."""
        return self.tracker.rounds_skipped

    @property
    def core(self):
        """The inference core this wrapper feeds and reads."""
        return self.tracker.core

    @property
    def warm_start_check(self):
        """The held-out check of the own estimator's warm start
        (:class:`agents.warm_start.check.WarmStartCheck`), once it has run; None otherwise."""
        return None if self._own is None else self._own.check

    def results(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> list:
        """Every quantity this wrapper reports, as ``(label, IntervalEstimate)``."""
        return self.tracker.results(confidence_level, kind=kind, tuning_n=tuning_n)

    def summary(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> str:
        """A text table of :meth:`results` (trial 0 under a vector env)."""
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
        for env in (self, *layers_below(self.env)):
            if isinstance(env, InferenceWrapperBase):
                for label, ci in env.results(confidence_level, kind=kind, tuning_n=tuning_n):
                    for trial, row in enumerate(interval_rows(ci)):
                        records.append({"quantity": label, "trial": trial, **row})
        return pd.DataFrame.from_records(records)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The wrapper's counters, core, own estimator (with its warm-start buffer) and the
        last observation, flat (:mod:`inference.wrappers.wrapper_state`); a resumed run
        gives identical intervals (target policies are not saved)."""
        return wrapper_state(self.tracker, self._own, self._host.round_check.obs)

    def load_state_dict(self, state) -> None:
        """Restore a :meth:`state_dict` (as it is, or as :func:`agents.state.load_state`
        reads it back): every part is validated before any is assigned, so a state that
        fails raises :class:`ValueError` naming the key and changes nothing."""
        check = self._host.round_check
        checked = check_wrapper_state(state, self.tracker, self._own, check)
        apply_wrapper_state(checked, self.tracker, self._own, check)
