"""A warm start for Gaussian contexts whose memory does not grow with its length.

:class:`~agents.warm_start.dense.WarmStartBuffer` keeps every warm-start context and fits
eq. (10) on all of them (several passes over the data): ``length · d1 · d2`` floats per
trial, 20 GB for 20,000 rounds at ``d = 500``.  :class:`StreamingWarmStart` sees every round
once and keeps ``O(K d1 d2)`` numbers per trial whatever the length (docs/method.md §3,
"Streaming warm start"):

1. **Spectral start from streamed moments.**  For i.i.d. N(0, 1) contexts and uniformly
   random actions, ``E[y X | a] = M_a``, so over the first :data:`SPECTRAL_FRACTION` of the
   rounds each arm keeps the running sum ``Σ y_t X_t`` of its rounds; at the end of that
   phase the best rank-r approximation of its mean is the start ``U_0 V_0ᵀ`` (balanced
   factors).  An arm whose mean has rank below ``r`` (no rounds, or all rewards zero) gets
   the fixed rank-r directions of :func:`agents.warm_start.rules.fixed_directions` scaled
   by :data:`~agents.warm_start.rules.START_SCALE` times the root mean square reward, as
   the buffered fit does for such arms.
2. **Refined online.**  Every later round takes one normalised least-mean-squares step of
   the pulled arm's factors, ``U ← U + μ res X V / n_t``, ``V ← V + μ res Xᵀ U / n_t`` with
   ``n_t = ‖X V‖_F² + ‖Xᵀ U‖_F²`` (both from the old factors) and ``μ`` =
   :data:`STREAMING_GAIN`: to first order the step removes the fraction ``μ`` of the
   round's residual, whatever the size of the context or the scale of the rewards.  The
   factors are rebalanced after every step (Lemma 2.1).
3. **Averaged.**  Each arm's estimates ``U Vᵀ`` after its steps in the last
   :data:`TAIL_FRACTION` of the rounds are averaged (Polyak-Ruppert); ``M_init`` is that
   average (the estimator truncates it to rank r).

Rounds must come from uniformly random actions with unit weights (the policies' own warm
start); a weighted stream (``1/π`` from another policy) needs the buffered fit.

Accuracy against the buffered fit (docs/performance.md, "Streaming warm start"): the
buffered fit reuses every round in each of its sweeps and needs about 3.5 rounds per degree
of freedom; one pass needs several times more rounds for the same error, so the policies
keep the buffer wherever it fits in memory (:func:`choose_warm_start_fit`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.estimator.balancing import balance
from agents.state import plain, read_bool, read_int, same_value
from agents.warm_start.dense import warm_start_buffer_bytes
from agents.warm_start.rules import START_SCALE, fixed_directions
from agents.warm_start.store import RoundCounter
from lrbandit_gym.input_checks import (
    check_actions,
    check_choice,
    check_context,
    check_finite,
    check_magnitude,
    check_positive_int,
    check_rewards,
)
from lrbandit_gym.rounds import Round

__all__ = [
    "SPECTRAL_FRACTION",
    "STREAMING_GAIN",
    "STREAMING_ROUNDS_PER_DOF",
    "TAIL_FRACTION",
    "WARM_START_FITS",
    "StreamingWarmStart",
    "choose_warm_start_fit",
    "default_streaming_rounds",
    "streaming_warm_start_bytes",
]

#: Fraction of the warm-start rounds whose moments give the spectral start.
SPECTRAL_FRACTION = 0.2
#: ``μ``: the fraction of a round's residual that its normalised step removes.
STREAMING_GAIN = 1.0
#: Fraction of the rounds over whose estimates each arm's ``M_init`` is averaged.
TAIL_FRACTION = 0.2
#: The warm-start fits a policy can be asked for (``warm_start_fit=``).
WARM_START_FITS = ("buffer", "streaming")
#: Rounds per degree of freedom of the streaming fit's default length (the buffered fit's is
#: :data:`agents.warm_start.rules.ROUNDS_PER_DOF` = 3.5: one pass needs more rounds).
STREAMING_ROUNDS_PER_DOF = 10


def default_streaming_rounds(d1: int, d2: int, rank: int, n_actions: int) -> int:
    """Default length of a streaming warm start: ``10 K r (d1 + d2 − r)`` rounds
    (:data:`STREAMING_ROUNDS_PER_DOF` per degree of freedom), rounded up to a multiple of
    100.  A policy uses it when it picks the streaming fit without a ``warm_start=``.

    >>> default_streaming_rounds(500, 500, 3, 2)
    59900
    """
    dof = int(n_actions) * int(rank) * (int(d1) + int(d2) - int(rank))
    return 100 * max(1, -(-STREAMING_ROUNDS_PER_DOF * dof // 100))


def streaming_warm_start_bytes(
    d1: int, d2: int, n_actions: int, rank: int, n_trials: int | None = None
) -> int:
    """Bytes a :class:`StreamingWarmStart` allocates, independent of its length.

    ``8 B ((2K + 2) d1 d2 + (K + 1)((d1 + d2) r + r) + 8 K)``: per trial and arm the moment
    sum, the tail sum, the factors and the counters, and for the round that completes the
    warm start a copy of the pulled arm's (so that it can be taken back).
    """
    b = 1 if n_trials is None else int(n_trials)
    K, d = int(n_actions), int(d1) * int(d2)
    factors = (int(d1) + int(d2)) * int(rank)
    return 8 * b * ((2 * K + 2) * d + (K + 1) * (factors + rank) + 8 * K)


def choose_warm_start_fit(
    requested: str | None,
    *,
    context: str,
    d1: int,
    d2: int,
    rounds: int,
    n_trials: int | None,
    max_memory_bytes: int,
) -> str:
    """The warm-start fit a policy uses: ``"buffer"`` or ``"streaming"``.

    The rule (docs/method.md §3, "Streaming warm start"): completion contexts always use
    their buffer (it stores indices, a few bytes a round); for Gaussian contexts
    ``requested`` if given, else the buffered fit when its buffer
    (:func:`~agents.warm_start.dense.warm_start_buffer_bytes`) fits in
    ``max_memory_bytes`` (it is the more accurate of the two from the same rounds), and the
    streaming fit otherwise.

    Raises
    ------
    ValueError
        If ``requested`` is not None, "buffer" or "streaming", or is "streaming" for
        completion contexts.
    """
    if requested is not None:
        requested = check_choice(requested, "warm_start_fit", WARM_START_FITS)
    if context == "completion":
        if requested == "streaming":
            raise ValueError(
                "warm_start_fit='streaming' is for Gaussian contexts; completion contexts "
                "keep their buffer of indices (pass warm_start_fit=None or 'buffer')"
            )
        return "buffer"
    if requested is not None:
        return requested
    fits = warm_start_buffer_bytes(d1, d2, rounds, n_trials) <= max_memory_bytes
    return "buffer" if fits else "streaming"


class StreamingWarmStart(RoundCounter):
    """One-pass warm start for Gaussian contexts with memory independent of its length.

    The interface of :class:`~agents.warm_start.dense.WarmStartBuffer` that the policies
    use (``add``, ``add_round``, ``full``, ``n``, ``pulls``, ``initial_estimate``,
    ``discard_last``, ``release``, ``state_dict``), with the algorithm of the module
    docstring in place of storing the rounds.

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    n_actions : int
        Number of arms ``K``.
    length : int
        Warm-start rounds.
    rank : int
        Rank ``r`` of the estimates.
    n_trials : int or None, default None
        Batch size ``B`` (None: unbatched API).
    seed : int, default 0
        Seed of the fixed directions of a rank-deficient spectral start.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> M = np.stack([np.outer(rng.standard_normal(6), rng.standard_normal(5))] * 2)
    >>> ws = StreamingWarmStart(6, 5, n_actions=2, length=400, rank=1)
    >>> for t in range(400):
    ...     X, a = rng.standard_normal((6, 5)), t % 2
    ...     ws.add(X, a, float(np.sum(M[a] * X)) + 0.01 * rng.standard_normal())
    >>> ws.full, ws.initial_estimate(rank=1).shape
    (True, (2, 6, 5))
    """

    def __init__(
        self,
        d1: int,
        d2: int,
        n_actions: int,
        length: int,
        rank: int,
        n_trials: int | None = None,
        *,
        seed: int = 0,
    ) -> None:
        self._trial_count = self._init_rounds(d1, d2, n_actions, length, n_trials)
        self.rank = check_positive_int(rank, "rank")
        if self.rank > min(self.d1, self.d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
        self.seed = int(seed)
        #: Rounds of the spectral phase, then the round from which estimates are averaged.
        self.spectral_rounds = max(1, math.ceil(SPECTRAL_FRACTION * self.length))
        self.tail_start = max(self.spectral_rounds, self.length - int(TAIL_FRACTION * self.length))
        B, K, r = self._trial_count, self.n_actions, self.rank
        self._S = np.zeros((B, K, self.d1, self.d2))  # Σ y X over the spectral phase
        self._T = np.zeros((B, K, self.d1, self.d2))  # Σ of the tail's estimates
        self._W = np.zeros((B, K))  # spectral-phase rounds per arm
        self._Y2 = np.zeros((B, K))  # Σ y² over them
        self._U = np.zeros((B, K, self.d1, r))
        self._V = np.zeros((B, K, self.d2, r))
        self._sv = np.zeros((B, K, r))
        self._tail = np.zeros((B, K), dtype=np.int64)
        self._pulls = np.zeros((B, K), dtype=np.int64)
        self._started = False  # factors set from the moments
        self._undo: dict[str, Any] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes allocated (:func:`streaming_warm_start_bytes`), whatever ``length``."""
        return streaming_warm_start_bytes(
            self.d1, self.d2, self.n_actions, self.rank, self.n_trials
        )

    @property
    def pulls(self) -> np.ndarray:
        """Rounds absorbed per arm: ``(K,)``, or ``(B, K)`` batched."""
        return self._pulls[0].copy() if self.n_trials is None else self._pulls.copy()

    # ------------------------------------------------------------------ absorbing rounds
    def add(self, X: Any, action: Any, reward: Any, weight: Any = 1.0) -> None:
        """Absorb one round (validated first; a rejected round changes nothing).

        Parameters
        ----------
        X : array_like of shape (d1, d2) or (B, d1, d2)
        action : int or array_like of int, shape (B,)
        reward : float or array_like of shape (B,)
        weight : 1.0
            Only unit weights (uniformly random actions) are accepted.

        Raises
        ------
        ValueError
            On invalid input, a weight other than 1, or a full warm start.
        """
        B = self.n_trials
        Xv = check_context(X, self.d1, self.d2, B)
        a = check_actions(action, self.n_actions, B)
        y = check_rewards(reward, B)
        self.add_round(Round(Xv if B is not None else Xv[None], a, y, None), weight)

    def add_round(self, round_: Round, weights: Any = 1.0) -> None:
        """Absorb one checked round (:meth:`add` is this behind the check of the raw
        inputs): its contexts of shape (B, d1, d2) (``B = 1`` unbatched), actions and
        rewards of shape (B,); ``weights`` must be 1 (its propensities are not read).

        Raises
        ------
        ValueError
            If the warm start is full, a weight is not 1 or a context entry exceeds
            :data:`~lrbandit_gym.input_checks.MAX_MAGNITUDE` (nothing changes then).
        FloatingPointError
            If the step of a refining round is not finite (nothing changes then).
        """
        if self.full:
            raise ValueError(
                f"StreamingWarmStart is full ({self.length} rounds); call initial_estimate()"
            )
        w = np.asarray(weights, dtype=np.float64)
        if not np.all(w == 1.0):
            raise ValueError(
                "StreamingWarmStart takes uniformly random rounds with unit weights, got "
                f"weights {w!r}; weighted rounds (1/pi from another policy) need the buffered "
                "fit (agents.warm_start.WarmStartBuffer)"
            )
        trials = np.arange(self._trial_count)
        a = np.asarray(round_.actions, dtype=np.int64).reshape(self._trial_count)
        y = np.asarray(round_.rewards, dtype=np.float64).reshape(self._trial_count)
        X = np.asarray(round_.contexts).reshape(self._trial_count, self.d1, self.d2)
        # The moments sum y X and the refinement squares X: a 1e200 entry would make them
        # infinite for good.
        check_magnitude(X, "X", batched=self.n_trials is not None)
        last = self._n == self.length - 1
        if last:  # keep what this round changes, so that discard_last() can undo it
            self._undo = self._pulled_state(trials, a)
        if self._n < self.spectral_rounds:
            self._S[trials, a] += y[:, None, None] * X
            self._W[trials, a] += 1.0
            self._Y2[trials, a] += y**2
        else:
            if not self._started:
                self._start_from_moments()
            self._refine(X, trials, a, y)
        self._pulls[trials, a] += 1
        self._n += 1

    def _pulled_state(self, trials: np.ndarray, a: np.ndarray) -> dict[str, Any]:
        return {
            "arms": a.copy(),
            "started": self._started,
            **{
                name: getattr(self, name)[trials, a].copy()
                for name in ("_S", "_T", "_W", "_Y2", "_U", "_V", "_sv", "_tail", "_pulls")
            },
        }

    def _start_from_moments(self) -> None:
        """Step 1 of the module docstring: the balanced factors of the moments' top-r SVD."""
        r, K = self.rank, self.n_actions
        W = self._W[..., None, None]
        M0 = np.where(W > 0, self._S / np.where(W > 0, W, 1.0), 0.0)
        u, s, vt = np.linalg.svd(M0, full_matrices=False)
        deficient = ~(s[..., r - 1] > 1e-12 * s[..., 0])
        if deficient.any():
            rho = np.sqrt(np.where(self._W > 0, self._Y2 / np.where(self._W > 0, self._W, 1), 0))
            rho = np.where(rho > 0, rho, 1.0)
            E = fixed_directions(self.d1, self.d2, r, K, self.seed)
            for b, k in np.argwhere(deficient):
                M0[b, k] = M0[b, k] + START_SCALE * rho[b, k] * E[k]
                u[b, k], s[b, k], vt[b, k] = np.linalg.svd(M0[b, k], full_matrices=False)
        root = np.sqrt(s[..., :r])
        self._U = np.ascontiguousarray(u[..., :r] * root[..., None, :])
        self._V = np.ascontiguousarray(vt[..., :r, :].swapaxes(-1, -2) * root[..., None, :])
        self._sv = np.ascontiguousarray(s[..., :r])
        self._started = True

    def _refine(self, X: np.ndarray, trials: np.ndarray, a: np.ndarray, y: np.ndarray) -> None:
        """Step 2 (and 3 in the tail): one normalised step of every trial's pulled arm."""
        U, V = self._U[trials, a], self._V[trials, a]
        XV = np.matmul(X, V)
        XtU = np.matmul(X.swapaxes(-1, -2), U)
        res = y - np.einsum("bir,bir->b", U, XV)
        norm = np.einsum("bir,bir->b", XV, XV) + np.einsum("bjr,bjr->b", XtU, XtU)
        with np.errstate(divide="ignore", invalid="ignore"):
            coef = np.where(norm > 0, STREAMING_GAIN * res / norm, 0.0)[:, None, None]
        U_new, V_new, sv = balance(U + coef * XV, V + coef * XtU)
        self._U[trials, a], self._V[trials, a], self._sv[trials, a] = U_new, V_new, sv
        if self._n >= self.tail_start:
            self._T[trials, a] += np.matmul(U_new, V_new.swapaxes(-1, -2))
            self._tail[trials, a] += 1

    def discard_last(self) -> None:
        """Take back the round that completed the warm start (e.g. when the fit it
        completed failed): the object is then as it was before that round.

        Raises
        ------
        RuntimeError
            If the last round absorbed did not complete the warm start (only that round
            is kept for undoing).
        """
        if self._undo is None or not self.full:
            raise RuntimeError(
                "StreamingWarmStart.discard_last undoes only the round that completed the "
                "warm start"
            )
        undo, self._undo = self._undo, None
        trials, a = np.arange(self._trial_count), undo.pop("arms")
        self._started = undo.pop("started")
        for name, value in undo.items():
            getattr(self, name)[trials, a] = value
        self._n -= 1

    def release(self) -> None:
        """Give the memory up (afterwards the object is empty and full)."""
        for name in ("_S", "_T", "_U", "_V"):  # new empty arrays: a view would keep them
            setattr(self, name, np.zeros(getattr(self, name).shape[:-1] + (0,)))
        self._undo = None
        self._n = 0
        self.length = 0

    # ------------------------------------------------------------------ the estimate
    def initial_estimate(self, *, rank: int, context: str = "gaussian", seed: int = 0) -> Any:
        """``M_init`` for :meth:`~agents.estimator.LowRankSGD.initialize`: each arm's average
        estimate over the tail (its refined start where it had no tail round).

        ``seed`` is accepted for the buffer's interface; the fixed directions use the
        constructor's.

        Returns
        -------
        ndarray of shape (K, d1, d2) or (B, K, d1, d2)

        Raises
        ------
        ValueError
            If ``rank`` differs from the constructor's or ``context`` is not "gaussian".
        RuntimeError
            If no round has been absorbed.
        FloatingPointError
            If the estimate is not finite.
        """
        if rank != self.rank:
            raise ValueError(f"rank must be this warm start's rank = {self.rank}, got {rank!r}")
        check_choice(context, "context", ("gaussian",))
        if self._n == 0:
            raise RuntimeError(
                "StreamingWarmStart.initial_estimate called before any round; add rounds first"
            )
        if not self._started:
            self._start_from_moments()
        current = np.matmul(self._U, self._V.swapaxes(-1, -2))
        count = self._tail[..., None, None]
        M = np.where(count > 0, self._T / np.maximum(count, 1), current)
        if not np.isfinite(M).all():
            raise FloatingPointError(
                "the streaming warm start's estimate is not finite (contexts or rewards too "
                "large for it); rescale them or use the buffered fit (warm_start_fit='buffer')"
            )
        return M[0] if self.n_trials is None else M

    # ------------------------------------------------------------------ persistence
    _CONFIG = ("d1", "d2", "n_actions", "length", "rank", "n_trials", "seed")
    _ARRAYS = ("S", "T", "W", "Y2", "U", "V", "sv", "tail", "pulls")

    def state_dict(self) -> dict[str, Any]:
        """Configuration and state as plain numpy arrays and scalars (copies; flat)."""
        state: dict[str, Any] = {
            "kind": "streaming",
            **{k: getattr(self, k) for k in self._CONFIG},
            "n": self._n,
            "started": self._started,
        }
        state["n_trials"] = 0 if self.n_trials is None else self.n_trials
        state.update({k: getattr(self, f"_{k}").copy() for k in self._ARRAYS})
        return state

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` against this object's configuration, changing nothing.

        Raises
        ------
        ValueError
            On a missing key, a configuration that differs, or arrays of the wrong shape or
            with non-finite entries.
        """
        mine = self.state_dict()
        for key in ("kind", *self._CONFIG):
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            if not same_value(state[key], mine[key]):
                raise ValueError(
                    f"state[{key!r}] = {plain(state[key])!r} does not match this warm start's "
                    f"{mine[key]!r}"
                )
        for key in ("n", "started"):
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
        n = read_int(state["n"], "state['n']")
        if n > self.length:
            raise ValueError(f"state['n'] must be an integer in [0, {self.length}], got {n!r}")
        checked: dict[str, Any] = {"n": n, "started": read_bool(state["started"], "started")}
        for key in self._ARRAYS:
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            arr = np.asarray(state[key])
            if arr.shape != mine[key].shape:
                raise ValueError(
                    f"state[{key!r}] must have shape {mine[key].shape}, got {arr.shape}"
                )
            check_finite(arr.astype(np.float64), f"state[{key!r}]")
            checked[key] = arr.astype(mine[key].dtype, copy=True)
        if int(checked["pulls"].sum()) != n * self._trial_count:
            raise ValueError(
                f"state['pulls'] must add up to state['n'] = {n} in every trial, got "
                f"{checked['pulls'].tolist()}"
            )
        return checked

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; everything is checked first, so a failure changes
        nothing."""
        checked = self.validate_state_dict(state)
        self._n, self._started = checked.pop("n"), checked.pop("started")
        for key, value in checked.items():
            setattr(self, f"_{key}", value)
        self._undo = None
