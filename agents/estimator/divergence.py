"""Divergence guard of the low-rank SGD (:class:`agents.estimator.LowRankSGD`).

When the step size of eq. (8) is too large for the scale of the contexts and rewards, the
iteration overshoots and the factors grow geometrically (docs/method.md §3).  They stay
finite for many rounds (up to ~1e150) while predictions and the inference built on them are
already meaningless, so a non-finite result alone would catch the divergence far too late.

The guard bounds the singular values instead.  A consistent run keeps every estimate within
a small multiple of its truth, and a warm-started one starts close to it, so an estimate a
million times larger than the initial scale (:data:`DIVERGENCE_FACTOR`; the floor 1 covers
zero or tiny starts) only arises from a diverging iteration.  In the paper's studies the
estimates stay within the noise level of their truth (singular values 1, or 15 in the value
study), six orders of magnitude below the bound.  Problems whose estimates legitimately grow
that much from their start (say, a start at zero for rewards of order 1e7) pass
``max_singular_value`` explicitly.

This module holds the bound (:func:`fixed_bound`, :func:`initial_bound`), the check of a
proposed step against it (:func:`check_within_bound`) and the messages that name the
failing round (:func:`diverged`, :func:`step_details`); the estimator calls them from
:meth:`~agents.estimator.LowRankSGD.propose_step`, before anything is written.
"""

from __future__ import annotations

import numpy as np

from agents.estimator.balancing import DIVERGED
from lrbandit_gym.onehot import OneHotContexts

__all__ = [
    "DIVERGENCE_FACTOR",
    "check_within_bound",
    "diverged",
    "fixed_bound",
    "initial_bound",
    "step_details",
]

#: Default divergence bound of :class:`~agents.estimator.LowRankSGD`, relative to the scale
#: at initialisation: ``max_singular_value = DIVERGENCE_FACTOR * max(1, largest initial
#: singular value)``.
DIVERGENCE_FACTOR = 1e6


def fixed_bound(setting: float | None) -> float:
    """The bound before initialisation: the given one, or none (``inf``).

    Parameters
    ----------
    setting : float or None
        The ``max_singular_value`` given to the estimator (None: the default rule).

    Returns
    -------
    float
    """
    return np.inf if setting is None else setting


def initial_bound(sv: np.ndarray, setting: float | None, n_batch: int) -> np.ndarray:
    """The per-trial bound for a start with singular values ``sv``.

    Parameters
    ----------
    sv : ndarray of shape (B, K, r)
        Singular values of the start, decreasing along the last axis.
    setting : float or None
        The ``max_singular_value`` given to the estimator; None for the default rule
        ``DIVERGENCE_FACTOR * max(1, s_max)``, ``s_max`` the trial's largest singular value.
    n_batch : int
        ``B``.

    Returns
    -------
    ndarray of shape (B,)
    """
    if setting is not None:
        return np.full(n_batch, setting)
    top = sv[..., 0].max(axis=-1) if sv.size else np.zeros(n_batch)
    return DIVERGENCE_FACTOR * np.maximum(1.0, top)


def step_details(
    n_trials: int | None,
    Xb: np.ndarray,
    a: np.ndarray,
    y: np.ndarray,
    XV: np.ndarray,
    U: np.ndarray,
    b: int | None,
) -> str:
    """The failing round, for the messages of a refused step (failure path only).

    Parameters
    ----------
    n_trials : int or None
        The estimator's ``n_trials`` (None: the unbatched API, whose messages name no trial).
    Xb : ndarray of shape (B, d1, d2), or OneHotContexts
        The round's contexts.
    a : ndarray of int64, shape (B,)
        The pulled arms.
    y : ndarray of shape (B,)
        The rewards.
    XV : ndarray of shape (B, d1, r)
        ``X V_a`` of the pulled arms.
    U : ndarray of shape (B, d1, r)
        ``U_a`` of the pulled arms before the step.
    b : int or None
        The failing trial, or None to name the trial with the largest residual.

    Returns
    -------
    str
        `` (trial b, arm a: reward y, residual res, largest |X| entry x)``.
    """
    with np.errstate(all="ignore"):
        n = len(y)
        res = y - np.matmul(XV.reshape(n, 1, -1), U.reshape(n, -1, 1))[:, 0, 0]
        if b is None:
            size = np.where(np.isfinite(res), np.abs(res), np.inf)
            b = int(np.argmax(size))
        if isinstance(Xb, OneHotContexts):
            context = f"context e_j e_kᵀ at (j, k) = ({int(Xb.rows[b])}, {int(Xb.cols[b])})"
        else:
            context = f"largest |X| entry {float(np.abs(Xb[b]).max()):.3g}"
    trial = "" if n_trials is None else f"trial {b}, "
    return (
        f" ({trial}arm {int(a[b])}: reward {float(y[b])!r}, residual {float(res[b]):.3g}, "
        f"{context})"
    )


def diverged(
    n_trials: int | None,
    Xb: np.ndarray,
    a: np.ndarray,
    y: np.ndarray,
    XV: np.ndarray,
    U: np.ndarray,
) -> FloatingPointError:
    """The error of a step whose arithmetic overflowed (non-finite factors).

    Parameters are those of :func:`step_details` (the trial with the largest residual is
    named).

    Returns
    -------
    FloatingPointError
        To be raised by the caller; the estimator is unchanged.
    """
    return FloatingPointError(
        DIVERGED + step_details(n_trials, Xb, a, y, XV, U, None) + "; the estimator is unchanged"
    )


def check_within_bound(
    sv_new: np.ndarray,
    bound: np.ndarray,
    setting: float | None,
    n_trials: int | None,
    Xb: np.ndarray,
    a: np.ndarray,
    y: np.ndarray,
    XV: np.ndarray,
    U: np.ndarray,
) -> None:
    """Refuse a step whose new largest singular value exceeds the bound (or is NaN).

    Parameters
    ----------
    sv_new : ndarray of shape (B, r)
        Singular values of the pulled arms' new estimates, decreasing.
    bound : ndarray of shape (B,)
        The bound per trial.
    setting : float or None
        The ``max_singular_value`` given to the estimator (None: the default rule), for
        the message.
    n_trials, Xb, a, y, XV, U
        As in :func:`step_details`, for the message.

    Raises
    ------
    FloatingPointError
        Naming the trial, arm, reward and residual and the knobs (``step_scale``, the warm
        start, ``max_singular_value``).
    """
    over = ~(sv_new[:, 0] <= bound)
    if over.any():
        b = int(np.argmax(over))
        how = (
            "given"
            if setting is not None
            else f"{DIVERGENCE_FACTOR:g} x max(1, the largest initial singular value)"
        )
        raise FloatingPointError(
            f"LowRankSGD step would raise the largest singular value of arm {int(a[b])}'s "
            f"estimate to {sv_new[b, 0]:.3g}, above max_singular_value = "
            f"{bound[b]:.3g} ({how}): the iteration is diverging"
            f"{step_details(n_trials, Xb, a, y, XV, U, b)}.  Reduce step_scale, start "
            "closer to the truth (a longer warm start or a better M_init), or raise "
            "max_singular_value if estimates this large are expected; the estimator is "
            "unchanged"
        )
