"""Whether an interval rests on many rounds or on a few heavy ones: the largest share of a
round in the predictable variance of an inverse-propensity estimate.

Every interval of this package is a martingale central limit theorem: the estimate is an
average of terms whose conditional variances at round ``t`` are proportional to a
*predictable* factor ``v_t``, known before the action is drawn, ``1/π_t(a)`` for arm
``a``'s parameter (eq. (13)-(14)) and ``Σ_a π(a|X_t)²/π_t(a)`` for the value of a target
policy ``π`` (docs/method.md §9).  The theorem needs Lindeberg's condition, that no single
round carries a non-vanishing share of the total (docs/method.md §8):

    share_n = max_{t ≤ n} v_t / Σ_{t ≤ n} v_t → 0.                                  (L)

With propensities bounded below by ``p0`` the share is at most ``1 / (n p0 E[v])`` and falls
like ``1/n`` (ε-greedy with ``ε = 0.1`` and two arms: about 0.004 after 500 rounds).  A
softmax policy at a low temperature gives arms propensities of ``1e-9`` on some contexts:
one such round then holds most of the arm's total, whatever ``n``, and the estimate's
distribution is a mixture of "the rare pull happened" and "it did not", which no normal
interval describes.  The share is observable at every read-out, costs two running arrays,
and does not depend on whether the rare arm was pulled: it flags the design, not the luck
of the draw.

:data:`SHARE_LIMIT` = 0.25 (one round holding a quarter of the total: the interval rests on
fewer than four rounds' worth of variance) lies far above bounded designs, above the shares
that softmax at a moderate temperature reaches where its intervals are calibrated, and
below those of softmax at a low temperature, where they under-cover; docs/method.md §8 gives
the shares measured in the grid.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from inference.results import SmallPropensityWarning, trials_phrase

__all__ = ["DESIGN_SHARE_LIMIT", "SHARE_LIMIT", "WeightShare", "warn_heavy_rounds"]

#: Largest share (L) of one round in a quantity's predictable variance that a read-out
#: accepts without a :class:`~inference.results.SmallPropensityWarning`.
SHARE_LIMIT = 0.25
#: The level at which ``lrbandit validate`` counts a parameter's realized design terms
#: (``Ŝ²``) as held by one round: ε-greedy's exploration rounds (weight ``K/ε``) hold
#: shares near 0.12 where every interval covers, and shares above one half occur both
#: where the intervals miss (images) and where they cover (uneven completion), so it is
#: a diagnostic, not a warning.
DESIGN_SHARE_LIMIT = 0.5


class WeightShare:
    """Running sum and maximum of the predictable variance factors ``v_t`` of ``m``
    quantities in ``B`` trials: O(B m) memory and work per round, whatever the rounds.

    Parameters
    ----------
    n_trials : int
        ``B`` (1 for an unbatched core).
    n_quantities : int
        ``m``: the arms of a parameter core, the target policies of a policy-value core.
    prefix : str, default "weight"
        Its keys in a state: ``{prefix}_sum`` and ``{prefix}_max``.
    """

    def __init__(self, n_trials: int, n_quantities: int, prefix: str = "weight") -> None:
        self._sum = np.zeros((n_trials, n_quantities))
        self._max = np.zeros((n_trials, n_quantities))
        self._keys = (f"{prefix}_sum", f"{prefix}_max")

    def add(self, factors: np.ndarray) -> None:
        """Absorb one round's ``v_t``, shape ``(B, m)``, ``>= 0`` (``inf`` where a
        propensity the quantity needs is zero)."""
        self._sum += factors
        np.maximum(self._max, factors, out=self._max)

    def add_block(self, trials: np.ndarray, blocks: np.ndarray, factors: np.ndarray) -> None:
        """Absorb one round whose ``v_t`` are zero except in one block of ``w`` consecutive
        quantities per trial: quantities ``blocks[b]·w`` to ``blocks[b]·w + w − 1`` of trial
        ``trials[b]`` take ``factors[b]``, shape ``(B, w)``, ``>= 0``.  The same as
        :meth:`add` of the full ``(B, m)`` array: adding 0 to a sum and taking the maximum
        with 0 leave them as they are."""
        w = factors.shape[1]
        if len(trials) == 1:  # one trial: basic slices of its block, no gathers
            lo = int(blocks[0]) * w
            total, top = (
                self._sum[int(trials[0]), lo : lo + w],
                self._max[int(trials[0]), lo : lo + w],
            )
            total += factors[0]
            np.maximum(top, factors[0], out=top)
            return
        B, m = self._sum.shape
        total = self._sum.reshape(B, m // w, w)  # views: the arrays are contiguous
        top = self._max.reshape(B, m // w, w)
        total[trials, blocks] += factors
        top[trials, blocks] = np.maximum(top[trials, blocks], factors)

    def forget(self) -> None:
        """Mark the sums unknown (NaN): a round entered without its factors."""
        self._sum.fill(np.nan)
        self._max.fill(np.nan)

    def shares(self) -> np.ndarray:
        """``share_n`` of (L), ``(B, m)``: NaN before the first round and where the state
        was saved after :meth:`forget`; 1 where a factor is infinite."""
        with np.errstate(invalid="ignore", divide="ignore"):
            out = self._max / self._sum
        return np.where(np.isinf(self._max), 1.0, out)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {self._keys[0]: self._sum.copy(), self._keys[1]: self._max.copy()}

    def check_state(self, state: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Validated copies of ``state``'s two arrays, changing nothing; NaN arrays for a
        state saved after :meth:`forget` (the check then stays silent).

        Raises
        ------
        ValueError
            Naming the key that is missing or whose array has the wrong shape, a negative or
            NaN entry (NaN is accepted only in both arrays throughout), or a maximum above
            the sum.
        """
        arrays = []
        for key in self._keys:
            if key not in state:
                raise ValueError(f"state is missing key {key!r}")
            try:
                arr = np.array(state[key], dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"state[{key!r}] must be a real array") from None
            if arr.shape != self._sum.shape:
                raise ValueError(
                    f"state[{key!r}] must have shape {self._sum.shape}, got {arr.shape}"
                )
            if not ((arr >= 0).all() or np.isnan(arr).all()):
                raise ValueError(
                    f"state[{key!r}] must be >= 0 (inf allowed), or NaN throughout, got {arr!r}"
                )
            arrays.append(arr)
        total, top = arrays
        if np.isnan(total).all() and np.isnan(top).all():
            return total, top  # unknown (forget), as saved
        if np.isnan(total).any() or np.isnan(top).any():
            a, b = self._keys
            raise ValueError(
                f"state[{a!r}] and state[{b!r}] must both be NaN throughout "
                "(unknown) or both hold no NaN; got NaN in "
                + (repr(a) if np.isnan(total).any() else repr(b))
                + " only: the Lindeberg check would stay silent for good"
            )
        if (top > total).any():
            raise ValueError(f"state[{self._keys[1]!r}] exceeds state[{self._keys[0]!r}] somewhere")
        return total, top

    def load(self, arrays: tuple[np.ndarray, np.ndarray]) -> None:
        """Assign what :meth:`check_state` returned (cannot fail)."""
        self._sum, self._max = arrays


def warn_heavy_rounds(
    share: np.ndarray,
    n: int,
    what: str,
    batched: bool,
    advice: str,
    stacklevel: int = 3,
) -> None:
    """Warn (:class:`~inference.results.SmallPropensityWarning`) where one round holds more
    than :data:`SHARE_LIMIT` of the predictable variance of ``what``.

    Parameters
    ----------
    share : ndarray of shape (B,)
        The read-out's share (L), the largest over the quantities it combines.
    n : int
        Rounds read.
    what : str
        The quantity read, as its interval's method names it.
    batched : bool
        Whether to name the trials.
    advice : str
        What the user can change beyond reading after more rounds.
    """
    heavy = share > SHARE_LIMIT
    if not heavy.any():
        return
    i = int(np.argmax(np.where(np.isnan(share), -np.inf, share)))
    where = trials_phrase(heavy, batched, i)
    warnings.warn(
        SmallPropensityWarning(
            f"{what} may under-cover: one of its {n} rounds holds {share[i]:.0%} of the "
            f"estimate's predictable variance{where}, above {SHARE_LIMIT:.0%} (weights 1/pi_t "
            "too uneven, or too few rounds: Lindeberg's condition, docs/method.md §8). "
            f"{advice[:1].upper()}{advice[1:]}"
        ),
        stacklevel=stacklevel,
    )
