"""Policies that act on a :class:`~agents.estimator.LowRankSGD` estimate (ε-greedy, softmax).

Each keeps one estimator (batched under a vector env), starts with a warm-start phase of
uniformly random actions whose data are fitted by nuclear-norm penalised least squares
(eq. (10)), then learns online by Algorithm 1 with the exact propensities it reports.

The warm start is sized from the problem by default
(:func:`agents.warm_start.default_warm_start_rounds`) and, when its rounds show an error
large against the differences between arms, extended (:mod:`agents.warm_start.extension`);
it is refused at construction when its buffer would exceed ``max_memory_bytes``, and it
cannot fail on legitimate data: an arm with too few pulls gets a defined start
(:func:`agents.warm_start.initial_estimate`, with a warning), and a fit that fails
numerically leaves the policy as it was before the round.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.base import PolicyBase, sample_actions
from agents.estimator import LowRankSGD
from agents.state import flat_part, read_int
from agents.warm_start.phase import DEFAULT_MAX_MEMORY_BYTES, WarmStart
from agents.warm_start.streaming import WARM_START_FITS
from lrbandit_gym.decision import Decision
from lrbandit_gym.input_checks import check_choice, check_positive_int, check_propensities
from lrbandit_gym.rounds import Round

__all__ = ["EpsilonGreedy", "LowRankPolicy", "Softmax"]


class LowRankPolicy(PolicyBase):
    """Base of the policies built on the online low-rank SGD estimator.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        ``MatrixContextBandit-v0`` (single or vector); sizes are read from it.
    rank : int, default 3
        Rank of the estimates.
    warm_start : int, optional
        Rounds of uniformly random exploration whose data fit ``M_init`` (eq. (10)); ignored
        when ``M_init`` is given.  Default: sized from the problem by
        :func:`agents.warm_start.default_warm_start_rounds` (2100 rounds at the paper's
        d = 50, r = 3, K = 2; the paper's studies use its own 2000), doubled up to 8 times while
        the error is large against the differences between arms
        (:mod:`agents.warm_start.extension`; measuring it costs about one more fit;
        ``warm_start_rounds`` follows).  A length given here is kept exactly.
    M_init : array of shape (K, d1, d2) or (B, K, d1, d2), optional
        A user-supplied initial estimate; skips the warm start.
    step_scale : float, optional
        ``c_η`` of the paper's absolute step ``c_η·max(t, t*)^{-α}`` (its studies pass 0.1).
        Default None: the scale-free step of :mod:`agents.estimator.step_size`, whose gain does not
        depend on ``d1, d2``, the context law or ``‖M‖`` (docs/method.md §3, "Step size").
    step_gain : float, optional
        ``g`` of the scale-free step (default 0.03, docs/method.md §3); not with
        ``step_scale``.
    step_offset, step_decay : float
        ``t*`` and ``α`` of either step (defaults 300, 0.99).
    warm_start_fit : {"buffer", "streaming"}, optional
        How ``M_init`` is fitted from the warm start (Gaussian contexts): "buffer" stores
        every round and fits eq. (10) on them (:class:`~agents.warm_start.WarmStartBuffer`),
        "streaming" sees each round once with memory independent of the length
        (:class:`~agents.warm_start.streaming.StreamingWarmStart`).  Default: the buffer
        when it fits in ``max_memory_bytes``, else streaming
        (:func:`~agents.warm_start.streaming.choose_warm_start_fit`).  Without
        ``warm_start=`` the streaming fit plays
        :func:`~agents.warm_start.streaming.default_streaming_rounds` rounds (10 per degree
        of freedom instead of 3.5: one pass needs more).
    max_memory_bytes : int, default 2**31
        Refuse to build when the warm start's memory
        (:func:`~agents.warm_start.streaming.streaming_warm_start_bytes` for the streaming
        fit, independent of its length) or the warm-start buffer
        (:func:`agents.warm_start.warm_start_buffer_bytes`: the contexts of every warm-start
        round of every trial, in float32; for completion contexts
        :func:`agents.warm_start.completion_buffer_bytes`, 32 bytes a round) would exceed it.
    seed : int or SeedSequence, optional
        Seed of the policy's own generator.
    d1, d2, n_actions, context, n_trials
        Sizes for streams without an environment.

    Attributes
    ----------
    check_warm_start : bool, default False
        Set it to True before the warm start ends to run the held-out check of
        :mod:`agents.warm_start.check` on the warm-start rounds (about one more fit): a
        :class:`~agents.warm_start.check.WarmStartWarning` when ``M_init`` is too far from
        the truth for the theory, and the result in ``warm_start_check``.
    """

    #: Run the held-out check of the warm start (see the class docstring).
    check_warm_start: bool = False
    #: Its :class:`~agents.warm_start.check.WarmStartCheck`, once it has run.
    warm_start_check = None

    def __init__(
        self,
        env=None,
        *,
        rank: int = 3,
        warm_start: int | None = None,
        M_init=None,
        step_scale: float | None = None,
        step_offset: float = 300,
        step_decay: float = 0.99,
        max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
        step_gain: float | None = None,
        warm_start_fit: str | None = None,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        super().__init__(
            env, seed=seed, d1=d1, d2=d2, n_actions=n_actions, context=context, n_trials=n_trials
        )
        self.estimator = LowRankSGD(
            self.d1,
            self.d2,
            rank,
            self.n_actions,
            n_trials=self.n_trials,
            context=self.context,
            step_scale=step_scale,
            step_offset=step_offset,
            step_decay=step_decay,
            step_gain=step_gain,
        )
        self.rank = self.estimator.rank
        self.max_memory_bytes = check_positive_int(max_memory_bytes, "max_memory_bytes")
        self.warm_start_rounds = 0
        self.warm_start_fit = None
        #: The warm-start phase (:class:`~agents.warm_start.WarmStart`); None with M_init.
        self._warm_start = None
        if warm_start_fit is not None:
            check_choice(warm_start_fit, "warm_start_fit", WARM_START_FITS)
        if M_init is not None:
            self.estimator.initialize(M_init)
            return
        self._warm_start = WarmStart(
            self.d1,
            self.d2,
            self.n_actions,
            self.rank,
            context=self.context,
            n_trials=self.n_trials,
            rounds=warm_start,
            method=warm_start_fit,
            max_memory_bytes=self.max_memory_bytes,
            ways_out="pass a shorter warm start (warm_start=), an initial estimate (M_init=), "
            "fewer trials per policy, or a larger max_memory_bytes=",
            stacklevel=4,  # the caller of the subclass's constructor
            extend=True,
        )
        self.warm_start_fit = self._warm_start.method
        self.warm_start_rounds = self._warm_start.rounds

    def _batch(self, obs) -> np.ndarray:
        """Validate an observation through the estimator: ``(B, d1, d2)`` (completion
        contexts as :class:`~lrbandit_gym.onehot.OneHotContexts`, from their index or their
        one-hot matrix), and its fingerprint in ``self._fingerprint`` for the estimator's
        product cache (one pass over the context checks it and keys the products that act()
        and update() share)."""
        x, self._fingerprint = self.estimator.check_context(self._unflatten(obs))
        return x

    @property
    def in_warm_start(self) -> bool:
        """True while the policy explores uniformly to fit its initial estimate."""
        return not self.estimator.initialized

    @property
    def estimates(self) -> np.ndarray:
        """Current ``M̂_a``: ``(K, d1, d2)``, or ``(B, K, d1, d2)`` under a vector env."""
        return self.estimator.estimates

    @property
    def online_rounds(self) -> int:
        """Rounds learned by SGD after the warm start (the ``t`` of ε_t schedules)."""
        return self.estimator.t

    def _predictions(self, x: np.ndarray) -> np.ndarray:
        """``<M̂_a, X>`` for a checked batched context, checked finite (else
        ``FloatingPointError``, before anything is drawn)."""
        with np.errstate(over="ignore", invalid="ignore"):  # checked next
            preds = self.estimator.predict_checked(x, self._fingerprint)
        self._check_predictions(preds, x)
        return preds

    def _probs(self, x: np.ndarray) -> np.ndarray:
        if self.in_warm_start:
            return np.full((x.shape[0], self.n_actions), 1.0 / self.n_actions)
        # x is validated (B, d1, d2) (B = 1 unbatched), the estimator's internal layout.
        return self._greedy_probs(self._predictions(x))

    def _greedy_probs(self, preds: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _learn(self, x, actions, rewards, props) -> None:
        if props is None:
            raise ValueError(
                "decision must carry propensities (pass the Decision returned by act())"
            )
        b = self.n_trials
        props = check_propensities(props if b is not None else props[0], actions, self.n_actions, b)
        # Everything is checked, in the estimator's batched layout (B = 1 unbatched).
        round_ = Round(x, actions, rewards, props, self._fingerprint)
        if self.in_warm_start:
            self._absorb_warm_start_round(round_)
            return
        # The step raises FloatingPointError before writing anything if it diverges.
        self.estimator.step(round_)

    def _absorb_warm_start_round(self, round_: Round) -> None:
        """Store a warm-start round; the last one fits ``M_init`` and initialises the SGD.

        If that fit fails, the round is taken back out of the warm start and the error
        raised: the policy is as it was before the round.
        """
        warm = self._warm_start
        # The round was checked by update(); weights are 1 (uniform).
        warm.add_round(round_, 1.0)
        if not warm.full:
            return
        # opt-in: the held-out check costs about one more fit (agents.warm_start.check)
        finished = warm.finish(
            check=self.check_warm_start,
            who=f"{type(self).__name__}'s warm start",
            stacklevel=4,  # the caller of update()
        )
        if finished is None:  # the default warm start extends (agents.warm_start.extension)
            self.warm_start_rounds = warm.rounds
            return
        M_init, check = finished
        # Uniform rounds: their number caps the SGD's step (WarmStart.hand_off).
        warm.hand_off(self.estimator, M_init, uniform=True)
        if check is not None:
            self.warm_start_check = check

    def state_dict(self) -> dict[str, Any]:
        """The flat state (:mod:`agents.state`): ``t``, the generator, ``warm_start_rounds``
        (the warm start's length, extended or not), the estimator's state under
        ``estimator.*`` and, during the warm start, the buffer's under ``buffer.*``."""
        state = super().state_dict()
        state["warm_start_rounds"] = int(self.warm_start_rounds)
        state.update({f"estimator.{k}": v for k, v in self.estimator.state_dict().items()})
        buffer = None if self._warm_start is None else self._warm_start.state_dict()
        if buffer is not None:
            state.update({f"buffer.{k}": v for k, v in buffer.items()})
        return state

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` (the flat layout of :mod:`agents.state`), changing nothing.

        Besides the parts' own checks: the warm-start length must be this policy's (for
        the default warm start, its length or one it extends to), a state in the warm start
        holds a buffer of ``t`` rounds and an uninitialised estimator, and a state after it
        an initialised estimator that has absorbed ``t - warm_start_rounds`` rounds.

        Raises
        ------
        ValueError
            On any invalid or inconsistent entry.
        """
        checked = super().validate_state_dict(state)
        est_state = flat_part(state, "estimator")
        if est_state is None:
            raise ValueError("state is missing the estimator's state ('estimator.*' keys)")
        est = self.estimator.validate_state_dict(est_state)
        t = checked["t"]
        if "warm_start_rounds" not in state:
            raise ValueError("state is missing key 'warm_start_rounds'")
        rounds = read_int(state["warm_start_rounds"], "state['warm_start_rounds']")
        extended = self._warm_start is not None and self._warm_start.allows(rounds)
        if rounds != self.warm_start_rounds and not extended:
            raise ValueError(
                f"state['warm_start_rounds'] = {rounds} does not match this policy's "
                f"warm start of {self.warm_start_rounds} rounds (build it with "
                + (f"warm_start={rounds})" if rounds else "M_init=)")
            )
        buf_state = flat_part(state, "buffer")
        buffer = None
        if buf_state is not None:
            if self.warm_start_rounds == 0:
                raise ValueError(
                    "state holds a warm-start buffer but this policy has no warm start "
                    "(it was built with M_init)"
                )
            buffer = self._warm_start.restored_store(buf_state, rounds)
            if est["initialized"] or buffer.n != t:
                raise ValueError(
                    f"inconsistent state: in the warm start the buffer must hold t = {t} "
                    f"rounds (it holds {buffer.n}) and the estimator must be uninitialised "
                    f"(initialized = {est['initialized']})"
                )
        elif not est["initialized"] or est["t"] != t - rounds:
            raise ValueError(
                f"inconsistent state: after a warm start of {rounds} rounds "
                f"the estimator must be initialised with t - {rounds} = "
                f"{t - rounds} rounds absorbed; it has initialized = "
                f"{est['initialized']}, t = {est['t']} (and no warm-start buffer is stored)"
            )
        checked["estimator"] = est_state
        checked["buffer"] = buffer
        checked["warm_start_rounds"] = rounds
        return checked

    def _apply_state(self, checked: dict[str, Any]) -> None:
        super()._apply_state(checked)
        self.estimator.load_state_dict(checked["estimator"])  # validated: cannot fail
        self.warm_start_rounds = checked["warm_start_rounds"]
        if self._warm_start is not None:
            self._warm_start.adopt(checked["buffer"], self.warm_start_rounds)


def _greedy_mask(preds: np.ndarray) -> np.ndarray:
    """Rows of ``preds`` → indicator of the arms attaining the maximum (ties kept)."""
    return preds == preds.max(axis=-1, keepdims=True)


class EpsilonGreedy(LowRankPolicy):
    """ε-greedy on the low-rank estimate (docs/method.md §2).

    The greedy arm gets ``1 − ε_t + ε_t/K`` and every other arm ``ε_t/K``; ties split the
    greedy mass uniformly.  ``ε_t = epsilon`` if ``decay == 0`` else ``epsilon·t^{-decay}``
    with ``t`` the online round (after the warm start), the paper's ``p0·t^{-β}``.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        ``MatrixContextBandit-v0`` (single or vector); sizes are read from it.
    epsilon : float, default 0.1
        Exploration probability ``ε`` (or ``p0`` with ``decay``), in (0, 1].
    decay : float, default 0.0
        ``β`` of ``ε_t = epsilon·t^{-β}``; 0 keeps ε constant.
    rank, warm_start, M_init, step_scale, step_gain, step_offset, step_decay, warm_start_fit
        As in :class:`LowRankPolicy`.
    max_memory_bytes, seed
        As in :class:`LowRankPolicy`.
    d1, d2, n_actions, context, n_trials
        Sizes for streams without an environment.
    """

    def __init__(
        self,
        env=None,
        *,
        epsilon: float = 0.1,
        decay: float = 0.0,
        rank: int = 3,
        warm_start: int | None = None,
        M_init=None,
        step_scale: float | None = None,
        step_offset: float = 300,
        step_decay: float = 0.99,
        max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
        step_gain: float | None = None,
        warm_start_fit: str | None = None,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        eps = float(epsilon)
        if not (0.0 < eps <= 1.0):
            raise ValueError(f"epsilon must be in (0, 1]; got {epsilon!r}")
        if not (np.isfinite(decay) and decay >= 0):
            raise ValueError(f"decay must be finite and >= 0; got {decay!r}")
        self.epsilon = eps
        self.decay = float(decay)
        super().__init__(
            env,
            rank=rank,
            warm_start=warm_start,
            M_init=M_init,
            step_scale=step_scale,
            step_offset=step_offset,
            step_decay=step_decay,
            max_memory_bytes=max_memory_bytes,
            step_gain=step_gain,
            warm_start_fit=warm_start_fit,
            seed=seed,
            d1=d1,
            d2=d2,
            n_actions=n_actions,
            context=context,
            n_trials=n_trials,
        )

    def epsilon_at(self, t: int) -> float:
        """ε_t for online round ``t ≥ 1``."""
        return self.epsilon if self.decay == 0 else self.epsilon * max(t, 1) ** (-self.decay)

    def _greedy_probs(self, preds: np.ndarray) -> np.ndarray:
        eps = self.epsilon_at(self.online_rounds + 1)
        mask = _greedy_mask(preds)
        greedy = mask / mask.sum(axis=-1, keepdims=True)
        return (1.0 - eps) * greedy + eps / self.n_actions

    def act(self, obs) -> Decision:
        """Toss the ε_t coin, then explore uniformly or act greedily (ties uniform).

        The pmf reported is that of the action (:meth:`action_probs`); whether the coin sent
        the round to exploration is kept in :attr:`last_explored` (``(B,)`` bool), which
        the exploration-only baseline of Appendix B.1 needs.
        """
        x = self._batch(obs)
        b = x.shape[0]
        if self.in_warm_start:
            probs = np.full((b, self.n_actions), 1.0 / self.n_actions)
            actions = self.rng.integers(0, self.n_actions, size=b)
            explored = np.ones(b, dtype=bool)
        else:
            preds = self._predictions(x)  # x: validated by _batch; raises before any draw
            eps = self.epsilon_at(self.online_rounds + 1)
            mask = _greedy_mask(preds)
            probs = (1.0 - eps) * mask / mask.sum(axis=-1, keepdims=True) + eps / self.n_actions
            explored = self.rng.random(b) < eps
            uniform = self.rng.integers(0, self.n_actions, size=b)
            greedy = sample_actions(self.rng, mask / mask.sum(axis=-1, keepdims=True))
            actions = np.where(explored, uniform, greedy)
        self.last_explored = explored if self.batched else bool(explored[0])
        if self.batched:
            return Decision(actions, probs)
        return Decision(int(actions[0]), probs[0])


class Softmax(LowRankPolicy):
    """Boltzmann exploration ``π_t(a) ∝ exp(<M̂_a, X_t>/τ)`` (docs/method.md §2; paper: τ = 1).

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        ``MatrixContextBandit-v0`` (single or vector); sizes are read from it.
    temperature : float, default 1.0
        ``τ > 0``.
    rank, warm_start, M_init, step_scale, step_gain, step_offset, step_decay, warm_start_fit
        As in :class:`LowRankPolicy`.
    max_memory_bytes, seed
        As in :class:`LowRankPolicy`.
    d1, d2, n_actions, context, n_trials
        Sizes for streams without an environment.
    """

    def __init__(
        self,
        env=None,
        *,
        temperature: float = 1.0,
        rank: int = 3,
        warm_start: int | None = None,
        M_init=None,
        step_scale: float | None = None,
        step_offset: float = 300,
        step_decay: float = 0.99,
        max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
        step_gain: float | None = None,
        warm_start_fit: str | None = None,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ):
        if not (np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be finite and > 0; got {temperature!r}")
        self.temperature = float(temperature)
        super().__init__(
            env,
            rank=rank,
            warm_start=warm_start,
            M_init=M_init,
            step_scale=step_scale,
            step_offset=step_offset,
            step_decay=step_decay,
            max_memory_bytes=max_memory_bytes,
            step_gain=step_gain,
            warm_start_fit=warm_start_fit,
            seed=seed,
            d1=d1,
            d2=d2,
            n_actions=n_actions,
            context=context,
            n_trials=n_trials,
        )

    def _greedy_probs(self, preds: np.ndarray) -> np.ndarray:
        z = (preds - preds.max(axis=-1, keepdims=True)) / self.temperature
        w = np.exp(z)
        return w / w.sum(axis=-1, keepdims=True)
