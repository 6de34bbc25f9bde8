"""The parameter read-out a caller gets with ``projection="auto"`` (docs/method.md §12).

The low-rank read-outs (``"tangent"``, the paper's ``"paper"``) need the estimate close to
the truth, which the SGD does not reach along directions the contexts barely take; the
debiased mean (``"none"``) does not, at the price of a wider interval.  ``"auto"`` takes the
debiased mean where the law's second moment is ill-conditioned on its range (condition
number above :data:`~lrbandit_gym.context_law.CONDITION_LIMIT`: real images), and the
tangent-space read-out elsewhere (every law of the paper, correlated and scaled Gaussian
contexts, uneven completion).  The choice is made once, before the first round: the
running sums of the two read-outs differ.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lrbandit_gym.context_law import (
    CONDITION_LIMIT,
    ContextLaw,
    SecondMomentLaw,
    condition_number,
)
from lrbandit_gym.onehot import OneHotContexts

__all__ = ["PROJECTIONS", "choose_projection", "contexts_condition_number"]

#: The read-outs :class:`~inference.LinearFormInference` takes.
PROJECTIONS = ("auto", "tangent", "paper", "none")


def choose_projection(
    projection: str,
    law: ContextLaw,
    point_estimate: str = "one-step",
    condition: float | None = None,
) -> str:
    """The read-out ``projection`` stands for under ``law``.

    Parameters
    ----------
    projection : {"auto", "tangent", "paper", "none"}
        Anything but "auto" is returned as given.
    law : ContextLaw
        The law the debiasing divides by.
    point_estimate : {"one-step", "projection"}, default "one-step"
        "projection" (the paper's rank-``r`` truncation) keeps a low-rank read-out:
        "auto" then gives "tangent".
    condition : float, optional
        The condition number to judge by; default the law's own.  An estimated law has none
        before its contexts arrive: without ``condition`` it gives "tangent" (its read-outs
        warn when the running estimate turns out ill-conditioned, naming
        ``projection="none"``).

    Returns
    -------
    str
        "tangent", "paper" or "none".
    """
    if projection != "auto":
        return projection
    if point_estimate == "projection":
        return "tangent"
    if condition is None:
        if law.estimated:
            return "tangent"
        condition = law.condition_number()
    return "none" if condition > CONDITION_LIMIT else "tangent"


def contexts_condition_number(contexts: Any, structure: str) -> float:
    """The condition number on its range of the second moment an estimated law of
    ``structure`` reaches on ``contexts``: a log's, all known before its replay.

    Parameters
    ----------
    contexts : ndarray of shape (n, d1, d2), or OneHotContexts
        Dense contexts, or completion contexts (then the entries' frequencies).
    structure : {"full", "kronecker"}
        As :class:`~lrbandit_gym.context_law.EstimatedLaw`'s (centred Kronecker factors with
        a mean, as the running estimate; the mean's rank-one part is left out here).
    """
    if isinstance(contexts, OneHotContexts):
        counts = np.bincount(
            contexts.rows * contexts.d2 + contexts.cols, minlength=contexts.d1 * contexts.d2
        )
        seen = counts[counts > 0]
        return float(seen.max() / seen.min())
    if structure == "full":
        return SecondMomentLaw.of_contexts(contexts).condition_number()
    X = np.asarray(contexts, dtype=float)
    centred = X - X.mean(axis=0)
    rows = np.einsum("nij,nkj->ik", centred, centred) / X.shape[0]
    cols = np.einsum("nij,nik->jk", centred, centred) / X.shape[0]
    return float(condition_number(rows) * condition_number(cols))
