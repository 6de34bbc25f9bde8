"""Gymnasium wrappers that record the rounds played as a log (:mod:`lrbandit_gym.logs.format`).

:class:`RecordRounds` (single env) and :class:`VectorRecordRounds` (the native vector env of
``MatrixContextBandit-v0``) pass every action inward unchanged and keep, for each round, the
context acted on, the action, the reward, the logging policy's pmf (from the
:class:`~lrbandit_gym.Decision` passed to ``step`` or from ``propensity_fn``) and the oracle
values of ``info`` under the ``oracle_`` prefix.  ``to_log()`` returns the log, ``save()``
writes it.

They stack with the inference wrappers and with Gymnasium's own in either order.  The log
holds every round the environment played: below an inference wrapper, a round the wrapper
refuses after the inner step (a diverging step of its estimator) is recorded, since it was
played, though no inference absorbed it.

A step that resets the environment is not a round: its action is ignored and its reward is
0.  Gymnasium's ``Autoreset`` below :class:`RecordRounds`, and a vector env with
``autoreset_mode=NEXT_STEP`` under :class:`VectorRecordRounds`, take one after each episode
ends; the recorders pass it through unrecorded and keep its observation as the context of
the next round, so the log holds the real rounds only.
"""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from lrbandit_gym.context_law import as_context_law
from lrbandit_gym.decision import decision_propensities
from lrbandit_gym.input_checks import (
    MAX_MAGNITUDE,
    check_actions,
    check_propensities,
)
from lrbandit_gym.logs.format import FORMAT_VERSION, ORACLE_PREFIX, save_log
from lrbandit_gym.memory import check_memory

__all__ = ["ORACLE_KEYS", "RecordRounds", "VectorRecordRounds"]

#: The keys of the bandit's ``info`` recorded as oracle columns (``oracle_`` + key).
ORACLE_KEYS = ("expected_rewards", "optimal_action", "regret")

_DOC_MEMORY = """
    What is stored, per round and trial: the context (``d1·d2`` entries of ``dtype``, or for
    completion contexts observed as an index the pair ``(j, k)``, 16 bytes), the action,
    reward and chosen-arm propensity (8 bytes each), the pmf (``8·K`` bytes) and the oracle
    columns (``8·K + 16`` bytes).  At ``d1 = d2 = 50``, ``K = 2`` with float32 contexts that
    is about 10 kB a round: 1.0 GB for 10⁵ rounds (``nbytes`` says how much is held).  The
    columns are preallocated and doubled when full (amortised O(1) a round, no list of
    arrays); ``capacity`` preallocates a known length and avoids every copy.
"""


def _autoreset_below(env) -> gym.wrappers.Autoreset | None:
    """Gymnasium's ``Autoreset`` between ``env`` (included) and the bandit, if any."""
    base = env.unwrapped
    while env is not None and env is not base:
        if isinstance(env, gym.wrappers.Autoreset):
            return env
        env = getattr(env, "env", None)
    return None


class _Recorder:
    """The storage and the step logic shared by the single and the vector recorder."""

    _vector = False

    def _init_recorder(self, env, propensity_fn, dtype, capacity, oracle) -> None:
        base = env.unwrapped
        missing = [a for a in ("d1", "d2", "n_actions", "context") if not hasattr(base, a)]
        if missing:
            raise ValueError(
                f"{type(self).__name__} records a MatrixContextBandit-like environment exposing "
                f"d1, d2, n_actions and context; {type(base).__name__} lacks {missing}"
            )
        if propensity_fn is not None and not callable(propensity_fn):
            raise ValueError(f"propensity_fn must be callable; got {propensity_fn!r}")
        if dtype is not None and np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype must be None, float32 or float64; got {dtype!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer; got {capacity!r}")
        row_bytes = 8 * (int(base.d1) * int(base.d2) + 3 + int(base.n_actions))
        trials = int(self.num_envs) if self._vector else 1
        check_memory(capacity * trials * row_bytes, "capacity", capacity, "recorded columns")
        self.d1, self.d2 = int(base.d1), int(base.d2)
        self.n_actions = int(base.n_actions)
        self._form = str(base.context)
        law = getattr(base, "context_law", None)
        if law is None or isinstance(law, str):
            law = as_context_law(law or self._form, self.d1, self.d2)
        #: The contexts' law, written into the log (:mod:`lrbandit_gym.context_law`).
        self.context_law = law
        self.n_trials = int(self.num_envs) if self._vector else None
        self.propensity_fn = propensity_fn
        self.oracle = bool(oracle)
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._capacity = capacity
        self._cols: dict[str, np.ndarray] | None = None  # allocated at the first observation
        self._index = None  # whether contexts are stored as (j, k), set by the first one
        self._oracle_keys: tuple[str, ...] | None = None  # set by the first step
        self.n_rounds = 0
        self._has_obs = False
        self._last_obs = None
        # What says that the next step is a reset, not a round: Gymnasium's Autoreset below a
        # single recorder; under a vector env with NEXT_STEP autoreset, the trials whose
        # episode the last step ended (None when a vector env resets within the step).
        self._autoreset_layer = None if self._vector else _autoreset_below(env)
        next_step = getattr(base, "metadata", {}).get("autoreset_mode") == AutoresetMode.NEXT_STEP
        self._resetting = np.zeros(self._B, dtype=bool) if self._vector and next_step else None

    # ----------------------------------------------------------------------- storage
    @property
    def _B(self) -> int:
        return 1 if self.n_trials is None else self.n_trials

    def _allocate(self, obs) -> None:
        """The columns, sized from the first observation (its form and dtype)."""
        arr = np.asarray(obs)
        B, K = self._B, self.n_actions
        index_shape = (2,) if self.n_trials is None else (B, 2)
        self._index = (
            self._form == "completion" and arr.dtype.kind in "iu" and arr.shape == index_shape
        )
        if self._index:
            ctx = ("context_index", (B, 2), np.int64)
        else:
            dtype = self._dtype
            if dtype is None:
                dtype = arr.dtype if arr.dtype in (np.float32, np.float64) else np.float64
            ctx = ("context", (B, self.d1, self.d2), dtype)
        specs = [
            ctx,
            ("action", (B,), np.int64),
            ("reward", (B,), np.float64),
            ("propensity", (B,), np.float64),
            ("pmf", (B, K), np.float64),
        ]
        cap = self._capacity
        self._cols = {name: np.empty((cap, *shape), dtype) for name, shape, dtype in specs}

    def _reserve(self, rows: int) -> None:
        """Room for ``rows`` rows: double the columns until they fit (amortised O(1))."""
        cap = next(iter(self._cols.values())).shape[0]
        if rows <= cap:
            return
        while cap < rows:
            cap *= 2
        for name, old in self._cols.items():
            new = np.empty((cap, *old.shape[1:]), old.dtype)
            new[: min(len(old), self.n_rounds + 1)] = old[: self.n_rounds + 1]
            self._cols[name] = new

    def _store_obs(self, obs) -> None:
        """Write the context just returned into the next row (the round it starts)."""
        if self._cols is None:
            self._allocate(obs)
        self._reserve(self.n_rounds + 1)
        row = self.n_rounds
        B = self._B
        if self._index:
            arr = np.asarray(obs)
            if arr.dtype.kind not in "iu" or arr.size != 2 * B:
                raise ValueError(
                    f"{type(self).__name__} recorded index contexts (j, k) and now got an "
                    f"observation of shape {arr.shape}, dtype {arr.dtype}"
                )
            self._cols["context_index"][row] = arr.reshape(B, 2)
        else:
            arr = np.asarray(obs)
            if arr.size != B * self.d1 * self.d2:
                raise ValueError(
                    f"{type(self).__name__} records ({self.d1}, {self.d2}) contexts; got an "
                    f"observation of shape {arr.shape}"
                )
            self._cols["context"][row] = arr.reshape(B, self.d1, self.d2)
        self._has_obs = True

    @property
    def nbytes(self) -> int:
        """Bytes held by the recorded columns (their allocated capacity)."""
        return 0 if self._cols is None else sum(a.nbytes for a in self._cols.values())

    # -------------------------------------------------------------------------- steps
    def _check_fits(self, obs) -> None:
        """Refuse a dense context with an entry beyond float32's range when the contexts
        are stored as float32 (it would be stored as ``inf`` and fail at :meth:`save`)."""
        dtype = self._dtype
        if self._cols is not None and "context" in self._cols:
            dtype = self._cols["context"].dtype
        if dtype != np.float32:
            return
        arr = np.asarray(obs, dtype=np.float64)
        big = np.abs(arr) > np.finfo(np.float32).max
        if big.any():
            raise ValueError(
                f"{type(self).__name__} stores float32 contexts, which hold magnitudes up to "
                f"{float(np.finfo(np.float32).max):.4g}; got a context entry of "
                f"{arr.flat[int(np.argmax(big))]!r}: record with dtype=np.float64"
            )

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._check_fits(obs)
        self._store_obs(obs)
        self._last_obs = obs
        if self._resetting is not None:
            self._resetting = np.zeros(self._B, dtype=bool)
        return obs, info

    def _next_is_reset(self) -> bool:
        """Whether the coming step resets the environment instead of playing a round (the
        step after an episode ends, under an autoreset that takes a step for it)."""
        if self._autoreset_layer is not None:
            return bool(self._autoreset_layer.autoreset)
        if self._resetting is None or not self._resetting.any():
            return False
        if not self._resetting.all():
            raise ValueError(
                f"{type(self).__name__}: the next step resets trials "
                f"{np.flatnonzero(self._resetting).tolist()} and plays a round in the others, "
                "and a log's rows hold every trial's round; record with "
                'autoreset_mode="SameStep" or max_episode_steps=None'
            )
        return True

    def _skip_reset(self, action):
        """Pass the reset step through unrecorded; its observation starts the next round."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._check_fits(obs)
        self._store_obs(obs)
        self._last_obs = obs
        if self._resetting is not None:
            self._resetting = np.logical_or(terminated, truncated).reshape(self._B)
        return obs, reward, terminated, truncated, info

    def _resolve(self, action) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The action(s), the pmf rows ``(B, K)`` and the chosen arms' propensities, checked
        before the inner step."""
        if not self._has_obs:
            raise RuntimeError("Call reset() before step().")
        arm, props = decision_propensities(
            action,
            self.propensity_fn,
            self._last_obs,
            f"{type(self).__name__} records the logging policy's propensities",
        )
        actions = check_actions(arm, self.n_actions, self.n_trials)
        pmf = check_propensities(
            props, actions, self.n_actions, self.n_trials, require_chosen_positive=False
        )
        chosen = pmf[np.arange(self._B), actions]
        if not (chosen > 0).all():
            i = int(np.argmax(~(chosen > 0)))
            where = "" if self.n_trials is None else f" (trial {i})"
            raise ValueError(
                f"the propensity of the arm played must be > 0; got pmf {pmf[i].tolist()} "
                f"for action {int(actions[i])}{where}"
            )
        return actions, pmf, chosen

    def _oracle(self, info) -> dict[str, np.ndarray]:
        """The oracle values of ``info`` as ``(B, ...)`` arrays; the keys are fixed by the
        first step."""
        if not self.oracle:
            return {}
        if self._oracle_keys is None:
            self._oracle_keys = tuple(k for k in ORACLE_KEYS if k in info)
            for key in self._oracle_keys:
                value = np.asarray(info[key])
                shape = value.shape if self._vector else (1, *value.shape)
                cap = self._cols["action"].shape[0]
                dtype = np.int64 if value.dtype.kind in "iub" else np.float64
                self._cols[ORACLE_PREFIX + key] = np.empty((cap, *shape), dtype)
        out = {}
        for key in self._oracle_keys:
            if key not in info:
                raise ValueError(
                    f"info lacks {key!r}, which earlier steps had: this step is not a round "
                    "of the bandit's, and the recorder refuses to log it as one (a wrapper "
                    "below that resets the environment within step() gives such a step: put "
                    "it above the recorder, or use gymnasium.wrappers.Autoreset, whose reset "
                    "steps the recorder skips)"
                )
            value = np.asarray(info[key])
            out[key] = value if self._vector else value[None]
        return out

    def step(self, action):
        """Step the inner env with ``action`` unchanged and record the round.

        The action and the propensities are checked before the inner step; a reward that is
        not finite, or a next context the float32 storage cannot hold, is refused after it:
        the environment has stepped, the round is not recorded, and recording goes on from
        the context the step returned.  A step that resets the environment (the module
        docstring) is passed through unrecorded.
        """
        if not self._has_obs:
            raise RuntimeError("Call reset() before step().")
        if self._next_is_reset():
            return self._skip_reset(action)
        actions, pmf, chosen = self._resolve(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        try:
            rewards = np.asarray(reward, dtype=np.float64).reshape(self._B)
            if not (np.abs(rewards) <= MAX_MAGNITUDE).all():
                i = int(np.argmax(~(np.abs(rewards) <= MAX_MAGNITUDE)))
                raise ValueError(
                    f"{type(self).__name__} cannot record a reward of {rewards[i]!r}: a log's "
                    f"rewards are finite with magnitude at most {MAX_MAGNITUDE:g}"
                )
            oracle = self._oracle(info)
            self._check_fits(obs)
        except Exception as exc:
            note = f"{type(self).__name__}: the environment has stepped; the round is not recorded"
            try:
                self._check_fits(obs)
            except ValueError:  # the next round's context cannot be stored either
                self._has_obs = False
                note += ", and reset() is needed to record more"
            else:
                self._store_obs(obs)
                self._last_obs = obs
            exc.add_note(note)
            raise
        row = self.n_rounds
        cols = self._cols
        cols["action"][row] = actions
        cols["reward"][row] = rewards
        cols["propensity"][row] = chosen
        cols["pmf"][row] = pmf
        for key, value in oracle.items():
            cols[ORACLE_PREFIX + key][row] = value
        self.n_rounds += 1
        self._store_obs(obs)
        self._last_obs = obs
        if self._resetting is not None:
            self._resetting = np.logical_or(terminated, truncated).reshape(self._B)
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------------ output
    def to_log(self, trial: int = 0) -> dict[str, np.ndarray]:
        """The rounds recorded so far as a log (the format of :mod:`lrbandit_gym.logs`).

        The columns are read-only views of the recorder's buffers (no copy); copy them to
        keep them past a :meth:`restore`.  ``trial`` picks the trial of a vector env.
        """
        if self.n_rounds == 0:
            raise ValueError("no round has been recorded yet: step the environment first")
        B = self._B
        if isinstance(trial, bool) or not isinstance(trial, int | np.integer) or not 0 <= trial < B:
            raise ValueError(f"trial must be an integer in [0, {B}); got {trial!r}")
        n = self.n_rounds
        log = {}
        for name, arr in self._cols.items():
            if name.startswith(ORACLE_PREFIX) and self._oracle_keys is None:
                continue
            view = arr[:n, trial]
            view.flags.writeable = False
            log[name] = view
        log["d1"] = np.asarray(self.d1)
        log["d2"] = np.asarray(self.d2)
        log["n_actions"] = np.asarray(self.n_actions)
        log["context_law"] = np.asarray(self.context_law.name)
        log.update(self.context_law.arrays())
        log["format_version"] = np.asarray(FORMAT_VERSION)
        return log

    def save(self, path: str | os.PathLike, *, overwrite: bool = False, trial: int = 0) -> Path:
        """Write :meth:`to_log` to ``path`` (``.npz``, or ``.parquet`` with pyarrow), by
        suffix, atomically; an existing file is refused unless ``overwrite=True``
        (:func:`lrbandit_gym.logs.save_log`)."""
        return save_log(self.to_log(trial), path, overwrite=overwrite)


class RecordRounds(_Recorder, gym.Wrapper, RecordConstructorArgs):
    __doc__ = (
        """Record every round played as a log: context, action, reward, pmf, oracle.

    Parameters
    ----------
    env : gymnasium.Env
        A ``MatrixContextBandit-v0`` environment (wrapped or not; it must expose ``d1``,
        ``d2``, ``n_actions`` and ``context`` on ``env.unwrapped``).
    propensity_fn : callable, optional
        ``propensity_fn(obs) -> pmf`` for loops that pass bare actions; otherwise pass the
        agent's :class:`~lrbandit_gym.Decision` to ``step``.  A bare action with neither is
        refused: a log's propensities are never assumed.
    dtype : {None, numpy.float32, numpy.float64}, default None
        Dtype of the stored dense contexts; None keeps the observation's (float32 or
        float64).  float32 halves the memory of float64 contexts (and rounds them).
    capacity : int, default 1024
        Rows allocated at first; doubled whenever full.
    oracle : bool, default True
        Keep the oracle values of ``info`` (``expected_rewards``, ``optimal_action``,
        ``regret``) as the ``oracle_*`` columns.
"""
        + _DOC_MEMORY
    )

    def __init__(
        self,
        env: gym.Env,
        *,
        propensity_fn=None,
        dtype=None,
        capacity: int = 1024,
        oracle: bool = True,
    ):
        if isinstance(env.unwrapped, VectorEnv):
            raise ValueError("RecordRounds wraps a single env; use VectorRecordRounds")
        RecordConstructorArgs.__init__(
            self, propensity_fn=propensity_fn, dtype=dtype, capacity=capacity, oracle=oracle
        )
        gym.Wrapper.__init__(self, env)
        self._init_recorder(env, propensity_fn, dtype, capacity, oracle)


class VectorRecordRounds(_Recorder, VectorWrapper, RecordConstructorArgs):
    """Vector twin of :class:`RecordRounds` for
    ``gym.make_vec("MatrixContextBandit-v0", num_envs=B, vectorization_mode="vector_entry_point")``:
    the B trials are recorded side by side, and ``to_log(trial=b)`` / ``save(path, trial=b)``
    give trial ``b``'s log.  Memory is B times the single recorder's."""

    _vector = True

    def __init__(
        self,
        env: VectorEnv,
        *,
        propensity_fn=None,
        dtype=None,
        capacity: int = 1024,
        oracle: bool = True,
    ):
        if not isinstance(env.unwrapped, VectorEnv):
            raise ValueError("VectorRecordRounds wraps a vector env; use RecordRounds")
        RecordConstructorArgs.__init__(
            self, propensity_fn=propensity_fn, dtype=dtype, capacity=capacity, oracle=oracle
        )
        VectorWrapper.__init__(self, env)
        self._init_recorder(env, propensity_fn, dtype, capacity, oracle)
