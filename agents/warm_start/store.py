"""What every warm-start store shares: the rounds' actions, rewards and weights, and the
protocol the policies and the wrappers use (docs/method.md §3, eq. (10)).

:class:`~agents.warm_start.dense.WarmStartBuffer` (dense contexts) and
:class:`~agents.warm_start.completion.CompletionWarmStartBuffer` (completion contexts as
indices) differ only in how they keep a round's context; everything else lives here: the
counters, the pulls per arm, the fit and the initial estimate from :meth:`data`, and the
checks of a saved state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agents.state import plain, read_int, same_value
from agents.warm_start.fit import initial_estimate, nuclear_norm_fit
from lrbandit_gym.input_checks import check_finite, check_positive_int

__all__ = ["RoundCounter", "RoundStore"]


class RoundCounter:
    """The configuration and the count of rounds of every warm start, stored
    (:class:`RoundStore`) or streamed (:class:`~agents.warm_start.streaming.StreamingWarmStart`).

    Subclasses call :meth:`_init_rounds` in ``__init__`` and count rounds in ``_n``.
    """

    def _init_rounds(
        self, d1: int, d2: int, n_actions: int, length: int, n_trials: int | None
    ) -> int:
        """Check and keep the configuration; return the number of trials ``B`` stored."""
        self.d1 = check_positive_int(d1, "d1")
        self.d2 = check_positive_int(d2, "d2")
        self.n_actions = check_positive_int(n_actions, "n_actions")
        self.length = check_positive_int(length, "length")
        self.n_trials = None if n_trials is None else check_positive_int(n_trials, "n_trials")
        self._n = 0
        return self._B

    @property
    def _B(self) -> int:
        return 1 if self.n_trials is None else self.n_trials

    @property
    def n(self) -> int:
        """Rounds stored so far."""
        return self._n

    @property
    def full(self) -> bool:
        """Whether ``length`` rounds have been stored."""
        return self._n >= self.length


class RoundStore(RoundCounter):
    """Base of the warm-start buffers.

    Subclasses call :meth:`_init_rounds` in ``__init__``, implement :meth:`data` (the stored
    ``(X, actions, rewards, weights)``, with a leading trial axis when batched) and
    :meth:`_round_arrays`, and set :attr:`_default_context`.
    """

    #: The context law the fit assumes unless the caller says otherwise.
    _default_context = "gaussian"

    # ------------------------------------------------------------------ the rounds
    def data(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def _round_arrays(self) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        """``(actions, weights)`` of the stored rounds, shape (B, n)."""
        raise NotImplementedError

    @property
    def pulls(self) -> np.ndarray:
        """Stored rounds with positive weight per arm: ``(K,)``, or ``(B, K)`` batched."""
        actions, weights = self._round_arrays()
        counts = (
            (actions[:, :, None] == np.arange(self.n_actions)) & (weights[:, :, None] > 0)
        ).sum(axis=1)
        return counts[0] if self.n_trials is None else counts

    def _full_error(self, error: type[Exception]) -> Exception:
        return error(f"{type(self).__name__} is full ({self.length} rounds); call fit() or clear()")

    def _require_rounds(self, what: str) -> None:
        if self._n == 0:
            raise RuntimeError(
                f"{type(self).__name__}.{what} called on an empty buffer; add rounds first"
            )

    def clear(self) -> None:
        """Forget the stored rounds (the memory stays allocated)."""
        self._n = 0

    def discard_last(self) -> None:
        """Forget the last stored round, e.g. when the fit it completed failed (the
        buffer is then as it was before that round's ``add``)."""
        if self._n == 0:
            raise RuntimeError(f"{type(self).__name__}.discard_last called on an empty buffer")
        self._n -= 1

    # ------------------------------------------------------------------ the fit
    def fit(self, **kwargs: Any) -> Any:
        """``M_init`` from the stored rounds: (K, d1, d2) or (B, K, d1, d2).

        Keyword arguments go to :func:`agents.warm_start.nuclear_norm_fit` (``context`` is
        the store's unless given; ``solver="factored"`` by default when ``rank`` is given;
        ``full_output=True`` returns its :class:`~agents.warm_start.NuclearNormFit`).
        """
        self._require_rounds("fit")
        if "weights" in kwargs:
            raise ValueError("weights come from add(); do not pass weights to fit")
        kwargs.setdefault("context", self._default_context)
        X, a, r, w = self.data()
        return nuclear_norm_fit(X, a, r, self.n_actions, weights=w, **kwargs)

    def initial_estimate(self, *, rank: int, context: str | None = None, seed: int = 0) -> Any:
        """A start for :meth:`~agents.estimator.LowRankSGD.initialize` from the stored
        rounds, defined for every arm: :func:`agents.warm_start.initial_estimate`
        (``context``: the store's unless given).

        Returns
        -------
        ndarray of shape (K, d1, d2) or (B, K, d1, d2)

        Raises
        ------
        RuntimeError
            On an empty buffer.
        FloatingPointError
            If the fit fails (nothing changes: the buffer keeps its rounds).
        """
        self._require_rounds("initial_estimate")
        context = self._default_context if context is None else context
        X, a, r, w = self.data()
        return initial_estimate(
            X, a, r, self.n_actions, rank=rank, weights=w, context=context, seed=seed
        )

    # ------------------------------------------------------------------ saved states
    def _check_state(
        self,
        state: Mapping[str, Any],
        config: tuple[str, ...],
        shapes: Callable[[int], Mapping[str, tuple[int, ...]]],
        integer: tuple[str, ...],
    ) -> tuple[int, dict[str, np.ndarray]]:
        """The checks every store's ``validate_state_dict`` makes: the ``config`` keys equal
        this store's, ``n`` an integer in ``[0, length]``, the arrays of ``shapes(n)`` present
        with those shapes, an integer dtype for the ``integer`` keys and a real one
        otherwise, finite rewards, actions in range and finite non-negative weights.
        Returns ``(n, arrays)``; nothing changes."""
        mine = self.state_dict()
        for key in config:
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            if not same_value(state[key], mine[key]):
                raise ValueError(
                    f"state[{key!r}] = {plain(state[key])!r} does not match this buffer's "
                    f"{mine[key]!r}"
                )
        if "n" not in state:
            raise ValueError("state is missing key 'n'")
        n = read_int(state["n"], "state['n']")
        if n > self.length:
            raise ValueError(f"state['n'] must be an integer in [0, {self.length}], got {n!r}")
        arrays = {}
        for key, shape in shapes(n).items():
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            arr = np.asarray(state[key])
            if arr.shape != shape:
                raise ValueError(f"state[{key!r}] must have shape {shape}, got {arr.shape}")
            if arr.dtype.kind not in ("iu" if key in integer else "f"):
                raise ValueError(f"state[{key!r}] must be a real array, got dtype {arr.dtype}")
            arrays[key] = arr
        check_finite(arrays["rewards"], "state['rewards']")
        acts = arrays["actions"]
        if ((acts < 0) | (acts >= self.n_actions)).any():
            raise ValueError(f"state['actions'] must be integers in [0, {self.n_actions})")
        wts = arrays["weights"]
        if not np.isfinite(wts).all() or (wts < 0).any():
            raise ValueError("state['weights'] must be finite and >= 0")
        return n, arrays
