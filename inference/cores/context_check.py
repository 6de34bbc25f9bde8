"""Whether the contexts match the law the debiasing uses: a check on a few probe matrices.

The correction of Algorithm 2 is unbiased when ``E[<A, X> Σ⁻¹ vec X] = vec A`` for every
``A`` (docs/method.md §1), with ``Σ`` the second moment of the law in use: the law must
have the contexts' second moment.  For a probe ``A_j`` the law predicts

    E[q_tj] = 1,    q_tj = <A_j, X_t>² / e_j,    e_j = vec A_jᵀ Σ vec A_j,               (C)

and contexts of another law move the mean (entries of s.d. 0.5 declared standard Gaussian:
0.25).  The check keeps the running sums of ``<A_j, X_t>²`` and of its square for
:data:`N_PROBES` probes, ``O(N_PROBES · d1 d2)`` a round (``O(N_PROBES)`` for completion
indices), and reads a t-statistic per probe against ``e_j``.  For an estimated law ``e_j``
comes from the estimate at the read-out, fitted to the same contexts: the check then speaks
of the estimate's structure (contexts that are not matrix-normal under
``"estimated-kronecker"``), not of its noise; a ``"full"`` estimate fits every probe by
construction.  The probes are chosen for the misspecifications that matter:
the all-ones matrix and a smooth ramp (correlated or shifted entries move them most), the
top rows and the left columns (uneven entry frequencies, uneven scales), and four fixed
random matrices.

A read-out warns (:class:`ContextLawWarning`) once :data:`MIN_ROUNDS` rounds are in, where
some probe is both significant (``|t| > Z_LIMIT``; ``q`` is skewed, a scaled χ² with one
degree of freedom for Gaussian contexts, so the t-statistic needs that many rounds before
its lower tail is normal: with fewer, one trial in ten of the right law reads ``|t| > 4.5``
at 25 rounds) and relevant (``|q̄ − 1| > RELATIVE_LIMIT``): after many rounds a
discrepancy too small to matter is significant too, and an estimated law is never exact.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from inference.results import trials_phrase
from lrbandit_gym.onehot import OneHotContexts

__all__ = [
    "MIN_ROUNDS",
    "N_PROBES",
    "RELATIVE_LIMIT",
    "Z_LIMIT",
    "ContextCheck",
    "ContextLawWarning",
]

N_PROBES = 8
#: Rounds before the check may speak.
MIN_ROUNDS = 200
#: ``|t|`` above which a probe's mean differs from the law's prediction.
Z_LIMIT = 4.5
#: ``|q̄ − 1|`` below which a difference is too small to matter for the intervals.
RELATIVE_LIMIT = 0.1
_PROBE_NAMES = (
    "all ones",
    "ramp",
    "top rows",
    "left columns",
    "random 1",
    "random 2",
    "random 3",
    "random 4",
)


class ContextLawWarning(UserWarning):
    """The contexts do not have the second moment of the law the debiasing uses: the
    parameter intervals may not cover (docs/method.md §1)."""


def probes(d1: int, d2: int) -> np.ndarray:
    """The :data:`N_PROBES` probe matrices for ``(d1, d2)`` contexts, shape (k, d1, d2)."""
    out = np.empty((N_PROBES, d1, d2))
    out[0] = 1.0
    out[1] = np.outer(np.linspace(-1, 1, d1) + 0.5, np.linspace(-1, 1, d2) + 0.5)
    out[2] = 0.0
    out[2, : max(1, d1 // 2)] = 1.0
    out[3] = 0.0
    out[3, :, : max(1, d2 // 2)] = 1.0
    out[4:] = np.random.default_rng(20261127).standard_normal((N_PROBES - 4, d1, d2))
    return out


class ContextCheck:
    """Running sums of (C) for ``B`` trials against the law ``law`` stands for.

    Parameters
    ----------
    d1, d2 : int
    n_trials : int
        ``B`` (1 for an unbatched core).
    law : object
        The law in use: a :class:`~lrbandit_gym.context_law.ContextLaw` or a running
        estimate (:class:`~inference.cores.running_law.RunningSecondMoment`), with
        ``predicted_moment``.
    """

    def __init__(self, d1: int, d2: int, n_trials: int, law: Any) -> None:
        self._A = probes(d1, d2)
        self._flat = self._A.reshape(N_PROBES, -1).T.copy()  # (d1 d2, k)
        self._law = law
        self._B = n_trials
        self._sum = np.zeros((n_trials, N_PROBES))
        self._sq = np.zeros((n_trials, N_PROBES))
        self.n = 0

    def _predicted(self) -> np.ndarray:
        """``e_j = vec A_jᵀ Σ vec A_j`` per trial and probe, (B or 1, k)."""
        law = self._law
        if getattr(law, "estimated", False):
            if law.n == 0:
                return np.full((self._B, N_PROBES), np.nan)
            return law.predicted_moment(self._A)
        return law.predicted_moment(self._A)[None]

    def add(self, X: np.ndarray | OneHotContexts, compiled: bool = False) -> None:
        """Absorb one round's contexts ``(B, d1, d2)`` (or one-hot indices); ``compiled``:
        the round runs the compiled kernels (the caller's round has checked the engine)."""
        if isinstance(X, OneHotContexts):
            u = self._A[:, X.rows, X.cols].T  # (B, k)
        elif X.shape[0] == 1 and compiled:  # one context: one loop, no temporaries
            from inference.cores import _kernels

            _kernels.probe_moments(X.reshape(1, -1), self._flat, self._sum, self._sq)
            self.n += 1
            return
        else:
            u = X.reshape(X.shape[0], -1) @ self._flat
        u2 = u * u
        self._sum += u2
        self._sq += u2 * u2
        self.n += 1

    def statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """``(q̄ − 1, t)`` per trial and probe, shape (B, k); NaN before two rounds."""
        n = self.n
        if n < 2:
            nan = np.full_like(self._sum, np.nan)
            return nan, nan
        with np.errstate(divide="ignore", invalid="ignore"):
            e = self._predicted()
            mean = self._sum / n / e
            var = np.maximum(self._sq / n - (self._sum / n) ** 2, 0.0) / (e * e) * n / (n - 1)
            t = (mean - 1.0) / np.sqrt(var / n)
        # A probe whose value never varies (the all-ones probe on completion contexts)
        # has no noise: its mean either equals the prediction, to rounding, or differs.
        exact = np.abs(mean - 1.0) <= 1e-9
        t = np.where(var > 0, t, np.where(exact, 0.0, np.inf))
        return mean - 1.0, t

    def _flagged_probes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`statistics` and, per trial and probe, whether it is significant and
        relevant, shape (B, k) each."""
        dev, t = self.statistics()
        bad = (np.abs(t) > Z_LIMIT) & (np.abs(dev) > RELATIVE_LIMIT)
        return dev, t, bad & (self.n >= MIN_ROUNDS)

    def flagged(self) -> np.ndarray:
        """Per trial, whether some probe is significant and relevant, shape (B,)."""
        return self._flagged_probes()[2].any(axis=1)

    def warn(self, what: str, law: str, batched: bool, stacklevel: int = 3) -> None:
        """Warn where :meth:`flagged`, naming the law, the worst probe and the knob."""
        dev, t, probe_bad = self._flagged_probes()
        bad = probe_bad.any(axis=1)
        if not bad.any():
            return
        # The worst probe among those that flag (significant and relevant), never one
        # that is significant alone.
        score = np.where(probe_bad, np.abs(t), -1.0)
        b, j = np.unravel_index(int(np.argmax(np.nan_to_num(score, nan=-1.0))), score.shape)
        where = trials_phrase(bad, batched, b)
        ratio = 1.0 + dev[b, j]
        warnings.warn(
            ContextLawWarning(
                f"{what}: the contexts do not match the context law {law}{where}: along the "
                f"probe {_PROBE_NAMES[j]!r} their second moment is {ratio:.3g} times what the "
                f"law predicts (t = {t[b, j]:.3g} over {self.n} rounds). The debiasing divides "
                "by the law's second moment, so the interval may not cover. Declare the law "
                "the contexts have (context_law=KroneckerLaw(...), SecondMomentLaw(...), "
                'EntryLaw(...)), or let it be estimated from them: context_law="estimated" '
                "(docs/method.md §1)."
            ),
            stacklevel=stacklevel,
        )

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        return {"check_sum": self._sum.copy(), "check_sq": self._sq.copy(), "check_n": self.n}

    def check_state(self, state: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, int]:
        """Validated copies of the check's entries of ``state``, changing nothing."""
        arrays = []
        for key in ("check_sum", "check_sq"):
            if key not in state:
                raise ValueError(f"state lacks {key!r} (the context check's sums)")
            arr = np.array(state[key], dtype=float)
            if arr.shape != self._sum.shape or not np.isfinite(arr).all():
                raise ValueError(
                    f"state[{key!r}] must be a finite array of shape {self._sum.shape}"
                )
            arrays.append(arr)
        if (arrays[1] < 0).any():
            raise ValueError("state['check_sq'] must be >= 0")
        n = state.get("check_n")
        if isinstance(n, np.ndarray) and n.ndim == 0:
            n = n.item()
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise ValueError(f"state['check_n'] must be a non-negative integer; got {n!r}")
        return arrays[0], arrays[1], int(n)

    def load(self, checked: tuple[np.ndarray, np.ndarray, int]) -> None:
        self._sum, self._sq, self.n = checked
