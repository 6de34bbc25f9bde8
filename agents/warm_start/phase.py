"""The warm-start phase of one low-rank estimator, as one object: :class:`WarmStart`.

Algorithm 1 starts from ``M_init`` within the noise level of the truth (docs/method.md §3).
Both users of the estimator obtain it the same way: the low-rank policies from their own
uniformly random rounds (:mod:`agents.low_rank`), the inference wrappers' own estimator from
the first rounds it sees, weighted by ``1/π`` (:mod:`inference.wrappers.own_estimator`).  A
:class:`WarmStart` does every step of that phase for both:

1. **Sizing.**  ``rounds`` given, or the rule of
   :func:`~agents.warm_start.rules.default_warm_start_rounds` (for the streaming fit
   :func:`~agents.warm_start.streaming.default_streaming_rounds`: one pass needs more).
   With ``extend=True`` (the low-rank policies) the default length grows when the
   warm-start rounds show an error large against the signal (step 4).
2. **Memory.**  Where the rounds are kept: a buffer of the contexts
   (:class:`~agents.warm_start.dense.WarmStartBuffer`), of their indices for completion
   contexts (:class:`~agents.warm_start.completion.CompletionWarmStartBuffer`), or only the
   streaming fit's sums (:class:`~agents.warm_start.streaming.StreamingWarmStart`), chosen
   by :func:`~agents.warm_start.streaming.choose_warm_start_fit`; a phase whose memory
   would exceed ``max_memory_bytes`` is refused at construction.
3. **Fit.**  On the round that fills the store, ``M_init`` by eq. (10),

       M_init,a = argmin_M  (1 / (2 W_a)) Σ_{t: a_t = a} w_t (y_t − <M, X_t>)²  +  λ_a ‖M‖_*   (10)

   defined for every arm (:func:`agents.warm_start.fit.initial_estimate`).
4. **Held-out check.**  When asked, whether ``M_init`` is close enough to the truth for the
   theory (:mod:`agents.warm_start.check`), on stored rounds.  For an extending default
   phase, also its error against the gaps between the arms its greedy rules compare, the
   noise-to-signal ratio ``ρ²`` of :mod:`agents.warm_start.extension`: while at
   least half of the trials have ``ρ² > 1/64`` the phase doubles its length (at most 8
   times :func:`~agents.warm_start.rules.recovery_rounds`, the default's own length but
   for completion contexts, within ``max_memory_bytes``), keeps its rounds and goes on; the
   fit and the measure run again when the longer store is full.
5. **Rollback.**  If the fit or the check fails, the round that completed the phase is
   taken back out (:meth:`WarmStart.discard_last`) and the error raised: the owner is as it
   was before the round.
6. **Hand-off.**  ``M_init`` initialises the estimator and the store is released
   (:meth:`WarmStart.hand_off`, which says how the policies' and the wrappers' hand-offs
   differ); if that fails, the rollback of step 5.
7. **State.**  The store's ``state_dict`` (its ``length`` is the phase's current length,
   extended or not) and a checked restore into a fresh store of that length.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from agents.warm_start.check import WarmStartCheck, check_buffer, check_warm_start, warn_if_far
from agents.warm_start.completion import CompletionWarmStartBuffer, completion_buffer_bytes
from agents.warm_start.dense import WarmStartBuffer, warm_start_buffer_bytes
from agents.warm_start.extension import MAX_EXTENSION, extends, noise_to_signal
from agents.warm_start.rules import default_warm_start_rounds, recovery_rounds
from agents.warm_start.streaming import (
    StreamingWarmStart,
    choose_warm_start_fit,
    default_streaming_rounds,
    streaming_warm_start_bytes,
)
from lrbandit_gym.input_checks import check_positive_int
from lrbandit_gym.rounds import Round

__all__ = ["DEFAULT_MAX_MEMORY_BYTES", "WarmStart", "WarmStartStore"]

#: Largest warm-start memory a policy or a wrapper's own estimator allocates by default.
DEFAULT_MAX_MEMORY_BYTES = 2**31

#: The stores a warm start keeps its rounds in.
WarmStartStore = WarmStartBuffer | CompletionWarmStartBuffer | StreamingWarmStart


class WarmStart:
    """Sizing, memory, fit, held-out check, rollback and state of one warm start.

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    n_actions : int
        Number of arms ``K``.
    rank : int
        Rank ``r`` of the estimator the phase initialises.
    context : {"gaussian", "completion"}, default "gaussian"
    n_trials : int or None, default None
        Batch size ``B`` (None: the unbatched API).
    rounds : int, optional
        Length of the phase; default the rule of
        :func:`~agents.warm_start.rules.default_warm_start_rounds` (of
        :func:`~agents.warm_start.streaming.default_streaming_rounds` for the streaming fit).
    method : {"buffer", "streaming"}, optional
        How ``M_init`` is fitted; default the buffer when it fits in ``max_memory_bytes``,
        else streaming (:func:`~agents.warm_start.streaming.choose_warm_start_fit`).
    max_memory_bytes : int, default 2**31
        Refuse to build when the phase's memory would exceed it.
    ways_out : str
        What the owner's caller can do instead, for the message of that refusal.
    stacklevel : int, default 2
        Of the ``UserWarning`` when the memory, not the caller, chose the streaming fit, as
        for :func:`warnings.warn`, counted from the caller of the constructor.
    extend : bool, default False
        Let the default length grow while the error is large against the signal (the rule
        of :mod:`agents.warm_start.extension`).  Only the default sizing of the buffered fit
        extends: an explicit ``rounds`` is kept exactly.

    Attributes
    ----------
    rounds : int
        Length of the phase; an extending phase's grows (:attr:`default_rounds` times a
        power of 2, at most :attr:`max_rounds`).
    default_rounds : int
        The length the phase starts with.
    max_rounds : int
        The longest it may grow to: :attr:`default_rounds` when it does not extend.
    noise_to_signal : ndarray or None
        The noise-to-signal ratio ``ρ²`` of every trial (shape ``(B,)``, ``(1,)``
        unbatched) at the last full store of an extending phase; None before.
    method : {"buffer", "streaming"}
        The fit in use.
    store : WarmStartBuffer, CompletionWarmStartBuffer, StreamingWarmStart or None
        The rounds so far; None once the phase is over (:meth:`release`).

    Examples
    --------
    >>> ws = WarmStart(4, 3, n_actions=2, rank=1, rounds=30)
    >>> ws.method, ws.rounds, ws.store.n
    ('buffer', 30, 0)
    """

    def __init__(
        self,
        d1: int,
        d2: int,
        n_actions: int,
        rank: int,
        *,
        context: str = "gaussian",
        n_trials: int | None = None,
        rounds: int | None = None,
        method: str | None = None,
        max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
        ways_out: str = "pass a shorter warm start or a larger max_memory_bytes=",
        stacklevel: int = 2,
        extend: bool = False,
    ) -> None:
        self.d1, self.d2, self.n_actions, self.rank = d1, d2, n_actions, rank
        self.context = context
        self.n_trials = n_trials
        self.max_memory_bytes = check_positive_int(max_memory_bytes, "max_memory_bytes")
        if rounds is None:
            length = default_warm_start_rounds(d1, d2, rank, n_actions, context)
        elif isinstance(rounds, bool) or int(rounds) != rounds or rounds < 1:
            raise ValueError(
                f"warm_start must be a positive number of rounds, or None for the rule of "
                f"agents.warm_start.default_warm_start_rounds; got {rounds!r}"
            )
        else:
            length = int(rounds)
        self.method = choose_warm_start_fit(
            method,
            context=context,
            d1=d1,
            d2=d2,
            rounds=length,
            n_trials=n_trials,
            max_memory_bytes=self.max_memory_bytes,
        )
        if self.method == "streaming" and method is None:
            # chosen for memory, not by the caller: say so, the fit is the less accurate one
            buffered = warm_start_buffer_bytes(d1, d2, length, n_trials)
            warnings.warn(
                f"warm start: the buffered fit of {length} rounds would need {buffered} bytes "
                f"({buffered / 2**20:.0f} MiB), above max_memory_bytes = "
                f"{self.max_memory_bytes}; using the streaming fit, whose memory does not "
                "grow with the warm start but whose estimate is less accurate from the same "
                "rounds (docs/performance.md, 'Streaming warm start'). For the buffered fit "
                "pass a larger max_memory_bytes= or fewer trials per policy; pass "
                "warm_start_fit='streaming' to choose it and silence this warning",
                UserWarning,
                stacklevel=stacklevel + 1,
            )
        if self.method == "streaming" and rounds is None:
            # one pass needs more rounds than the buffered fit's default
            length = default_streaming_rounds(d1, d2, rank, n_actions)
        self.rounds = self.default_rounds = length
        self._check_memory(ways_out)
        self.max_rounds = length
        if extend and rounds is None and self.method == "buffer" and n_actions > 1:
            # the cap counts from the recovery rule, which a completion default already
            # exceeds (agents.warm_start.rules)
            longest = max(length, MAX_EXTENSION * recovery_rounds(d1, d2, rank, n_actions, context))
            while longest > length and self._store_bytes(longest) > self.max_memory_bytes:
                longest //= 2
            self.max_rounds = longest
        self.noise_to_signal: np.ndarray | None = None
        self.store: WarmStartStore | None = self.new_store()

    def _store_bytes(self, rounds: int) -> int:
        """Bytes of a buffered store of ``rounds`` rounds."""
        if self.context == "completion":
            return completion_buffer_bytes(rounds, self.n_trials)
        return warm_start_buffer_bytes(self.d1, self.d2, rounds, self.n_trials)

    def allows(self, rounds: int) -> bool:
        """Whether ``rounds`` is a length this phase can have: its default, or, extending,
        the default times a power of 2 up to :attr:`max_rounds`."""
        length = self.default_rounds
        while length < rounds and length < self.max_rounds:
            length *= 2
        return length == rounds

    def _check_memory(self, ways_out: str) -> None:
        """Refuse a phase whose memory exceeds ``max_memory_bytes`` (``ValueError``)."""
        d1, d2, rounds, limit = self.d1, self.d2, self.rounds, self.max_memory_bytes
        if self.method == "streaming":  # independent of the length
            need = streaming_warm_start_bytes(d1, d2, self.n_actions, self.rank, self.n_trials)
            if need > limit:
                raise ValueError(
                    f"the streaming warm start needs {need} bytes ({need / 2**20:.0f} MiB: "
                    f"sums of {d1}x{d2} matrices per arm and trial), above "
                    f"max_memory_bytes = {limit}; pass an initial estimate "
                    "(M_init=), fewer trials per policy, or a larger max_memory_bytes="
                )
            return
        if self.context == "completion":  # indices and values: 32 bytes a round
            need = completion_buffer_bytes(rounds, self.n_trials)
            per_round = "32-byte index rounds"
        else:
            need = warm_start_buffer_bytes(d1, d2, rounds, self.n_trials)
            per_round = f"{d1}x{d2} float32 contexts"
        if need > limit:
            b = 1 if self.n_trials is None else self.n_trials
            raise ValueError(
                f"the warm start of {rounds} rounds needs a buffer of {need} bytes "
                f"({need / 2**20:.0f} MiB: {b} trial(s) x {rounds} rounds x {per_round}), "
                f"above max_memory_bytes = {limit}; {ways_out}"
            )

    def new_store(self, rounds: int | None = None) -> WarmStartStore:
        """An empty store of ``rounds`` rounds (default :attr:`rounds`): the contexts'
        indices for completion contexts (memory independent of ``d1 x d2``), else the
        matrices, or the streaming fit's sums (memory independent of the length)."""
        length = self.rounds if rounds is None else rounds
        if self.method == "streaming":
            return StreamingWarmStart(
                self.d1, self.d2, self.n_actions, length, self.rank, n_trials=self.n_trials
            )
        cls = CompletionWarmStartBuffer if self.context == "completion" else WarmStartBuffer
        return cls(self.d1, self.d2, self.n_actions, length, n_trials=self.n_trials)

    def _extend(self) -> None:
        """Double the phase's length (at most :attr:`max_rounds`): a longer store holding
        the rounds so far replaces the full one."""
        longer = min(2 * self.rounds, self.max_rounds)
        state = self.store.state_dict()
        state["length"] = longer
        store = self.new_store(longer)
        store.load_state_dict(state)
        self.adopt(store)

    # ------------------------------------------------------------------ the rounds
    @property
    def active(self) -> bool:
        """Whether the phase is running (it has a store)."""
        return self.store is not None

    @property
    def last_round_next(self) -> bool:
        """Whether the next round added completes the phase."""
        return self.store.n + 1 >= self.store.length

    def add_round(self, round_: Round, weights: Any = 1.0) -> None:
        """Store one checked round (contexts of shape (B, d1, d2), ``B = 1`` unbatched, or
        :class:`~lrbandit_gym.onehot.OneHotContexts`) with its ``weights``, of shape (B,)
        or a scalar: the store's ``add_round``."""
        self.store.add_round(round_, weights)

    @property
    def nbytes(self) -> int:
        """Bytes the phase holds: its store's ``nbytes`` (0 once the phase is over)."""
        return 0 if self.store is None else self.store.nbytes

    @property
    def full(self) -> bool:
        """Whether every round of the phase has been stored."""
        return self.store.full

    def discard_last(self) -> None:
        """Take the last stored round back out (the store is as it was before it)."""
        self.store.discard_last()

    # ------------------------------------------------------------------ fit and check
    def finish(
        self, *, check: bool, who: str, stacklevel: int = 2
    ) -> tuple[np.ndarray, WarmStartCheck | None] | None:
        """``M_init`` from the full store, and the held-out check when ``check`` (stored
        rounds only; a :class:`~agents.warm_start.check.WarmStartWarning` naming ``who`` when
        the estimate is too far, ``stacklevel`` counted from the caller of this method); or
        None when an extending phase extends instead (module docstring, step 4): the store
        keeps every round, has room for more, and the phase goes on.

        Rollback: if the fit or the check fails, the round that completed the phase is
        taken back out and the error raised (a ``FloatingPointError`` says so).

        Returns
        -------
        M_init : ndarray of shape (K, d1, d2) or (B, K, d1, d2)
            Defined for every arm (:func:`agents.warm_start.fit.initial_estimate`).
        check : WarmStartCheck or None
            The held-out check, when it ran.
        """
        store = self.store
        try:
            M_init = store.initial_estimate(rank=self.rank, context=self.context)
            result = None
            if self.rounds < self.max_rounds:
                result = self._measure(M_init)
                if extends(self.noise_to_signal):
                    self._extend()
                    return None
                if check:
                    warn_if_far(result, who, stacklevel=stacklevel + 1)
                else:
                    result = None
            elif check and not isinstance(store, StreamingWarmStart):
                result = check_buffer(
                    store, rank=self.rank, context=self.context, who=who, stacklevel=stacklevel + 1
                )
        except BaseException as exc:
            store.discard_last()
            if isinstance(exc, FloatingPointError):
                raise FloatingPointError(
                    f"{exc}.  The round that completed the warm start was not absorbed (the "
                    f"buffer keeps its {store.n} earlier rounds)"
                ) from exc
            raise
        return M_init, result

    def _measure(self, M_init: np.ndarray) -> WarmStartCheck:
        """The held-out check of the full store (no warning) and, from it and ``M_init``,
        :attr:`noise_to_signal`."""
        X, actions, rewards, weights = self.store.data()
        result = check_warm_start(
            X,
            actions,
            rewards,
            self.n_actions,
            rank=self.rank,
            weights=weights,
            context=self.context,
        )
        M = np.asarray(M_init)
        if self.n_trials is None:  # a trial axis for the measure
            X, weights, M = X[None], weights[None], M[None]
        self.noise_to_signal = noise_to_signal(M, result, X, weights)
        return result

    def hand_off(self, estimator: Any, M_init: np.ndarray, *, uniform: bool) -> None:
        """Initialise ``estimator`` (a :class:`~agents.estimator.LowRankSGD`) from the
        ``M_init`` of :meth:`finish`, then end the phase (:meth:`release`).

        The low-rank policies and an inference wrapper's own estimator run the same phase
        and differ in one thing, the law of its rounds.  A policy explores uniformly: its
        rounds carry weight 1, the held-out check is opt-in, and ``uniform=True`` hands the
        phase's length (extended or not) to the estimator as ``prior_rounds``, so that the
        SGD's step never outruns the average of those rounds
        (:func:`agents.estimator.step_size.continuing_gain`).  A wrapper sees the rounds
        some other policy played: they carry weight ``1/π``, the held-out check always runs,
        and ``uniform=False`` hands no prior rounds (that cap's average is over uniformly
        explored rounds, which these are not); it hands off in the commit of the round that
        completed the phase, after :meth:`finish` ran in its preparation.

        Rollback: if ``initialize`` fails, the round that completed the phase is taken back
        out (:meth:`discard_last`) and the error raised; the phase goes on.
        """
        try:
            estimator.initialize(M_init, prior_rounds=self.rounds if uniform else 0)
        except BaseException:
            self.discard_last()
            raise
        self.release()

    def release(self) -> None:
        """End the phase: the store gives its memory up (to
        :mod:`agents.warm_start.memory_pool` when that pool is on) and is dropped."""
        if self.store is not None:
            self.store.release()
        self.store = None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any] | None:
        """The store's state (flat, plain arrays), or None once the phase is over."""
        return None if self.store is None else self.store.state_dict()

    def restored_store(self, state: dict[str, Any], rounds: int | None = None) -> WarmStartStore:
        """A new store of ``rounds`` rounds (default :attr:`rounds`; one that
        :meth:`allows`) holding a saved :meth:`state_dict`, checked first (``ValueError``);
        this object does not change (:meth:`adopt` installs the store)."""
        if rounds is not None and rounds != self.rounds:
            if not self.allows(rounds):
                raise ValueError(
                    f"a warm start of {rounds} rounds is not one this phase can have (its "
                    f"default {self.default_rounds}"
                    + (
                        f", doubled up to {self.max_rounds})"
                        if self.max_rounds > self.default_rounds
                        else ")"
                    )
                )
        store = self.new_store(rounds)
        store.load_state_dict(state)
        return store

    def adopt(self, store: WarmStartStore | None, rounds: int | None = None) -> None:
        """Make ``store`` (from :meth:`restored_store`, or None: the phase is over) this
        phase's, releasing the one it replaces; ``rounds`` (one that :meth:`allows`) is the
        phase's length from now on (default: the store's, or unchanged)."""
        if self.store is not None and self.store is not store:
            self.store.release()
        self.store = store
        if rounds is None and store is not None:
            rounds = store.length
        if rounds is not None:
            self.rounds = int(rounds)
