"""A log from plain arrays: :func:`make_log`."""

from __future__ import annotations

from typing import Any

import numpy as np

from lrbandit_gym.context_law import ContextLaw, EntryLaw, as_context_law
from lrbandit_gym.logs.format import FORMAT_VERSION, LogFormatError, validate_log

__all__ = ["make_log"]


def make_log(
    contexts: Any = None,
    actions: Any = None,
    rewards: Any = None,
    *,
    pmf: Any = None,
    propensities: Any = None,
    n_actions: int | None = None,
    context_law: Any = None,
) -> dict[str, np.ndarray]:
    """Build a valid log (:mod:`lrbandit_gym.logs.format`) from plain arrays.

    Every missing or inconsistent piece is named in one error, then the log is validated
    whole (:func:`~lrbandit_gym.logs.validate_log`).

    Parameters
    ----------
    contexts : array_like of shape (n, d1, d2), or of int of shape (n, 2)
        The contexts acted on; integer pairs ``(j, k)`` are completion contexts (one
        revealed entry of a ``d1 x d2`` matrix, ``d1``, ``d2`` then taken from the largest
        index unless ``context_law`` gives them).
    actions : array_like of int, shape (n,)
    rewards : array_like, shape (n,)
    pmf : array_like of shape (n, K), optional
        The logging policy's whole pmf (needed for ``V*`` and target policies).
    propensities : array_like of shape (n,), optional
        The chosen arm's probability; read from ``pmf`` when that is given.
    n_actions : int, optional
        ``K``; default ``pmf``'s width (required without ``pmf``).
    context_law : str or ContextLaw, optional
        The contexts' law (:mod:`lrbandit_gym.context_law`).  Default: ``"estimated"``
        for dense contexts (their second moment is estimated at analysis, whatever it is)
        and, for completion contexts, the entries' frequencies in this log
        (:meth:`~lrbandit_gym.context_law.EntryLaw.of_counts`).

    Returns
    -------
    dict of str to ndarray
        The log, validated.

    Raises
    ------
    LogFormatError
        Naming every missing piece at once, or the first column that fails validation.
    """
    missing = [
        name
        for name, value in (("contexts", contexts), ("actions", actions), ("rewards", rewards))
        if value is None
    ]
    if pmf is None and propensities is None:
        missing.append("pmf or propensities")
    if pmf is None and n_actions is None:
        missing.append("n_actions (or pmf)")
    if missing:
        raise LogFormatError(
            missing[0], f"make_log needs {', '.join(missing)}: a log holds every one of them"
        )
    ctx = np.asarray(contexts)
    a = np.asarray(actions)
    index = ctx.dtype.kind in "iu" and ctx.ndim == 2 and ctx.shape[1:] == (2,)
    if not index and ctx.ndim != 3:
        raise LogFormatError(
            "context", f"contexts must be (n, d1, d2) matrices or (n, 2) indices; got {ctx.shape}"
        )
    log: dict[str, Any] = {"action": a, "reward": np.asarray(rewards, dtype=float)}
    if pmf is not None:
        p = np.asarray(pmf, dtype=float)
        log["pmf"] = p
        if p.ndim == 2 and a.ndim == 1 and p.shape[0] == a.shape[0] and a.dtype.kind in "iu":
            ok = (a >= 0) & (a < p.shape[1])
            chosen = np.where(ok, p[np.arange(a.shape[0]), np.where(ok, a, 0)], np.nan)
            log["propensity"] = chosen if propensities is None else np.asarray(propensities)
        else:
            log["propensity"] = np.asarray(propensities if propensities is not None else p)
        K = int(n_actions) if n_actions is not None else int(p.shape[-1])
    else:
        log["propensity"] = np.asarray(propensities, dtype=float)
        K = int(n_actions)
    law = context_law
    if index:
        shape = (int(ctx[:, 0].max()) + 1, int(ctx[:, 1].max()) + 1)
        if isinstance(law, ContextLaw):
            shape = (law.d1, law.d2)
        log["context_index"] = ctx.astype(np.int64)
        if law is None:
            law = EntryLaw.of_counts(ctx[:, 0], ctx[:, 1], shape)
    else:
        shape = ctx.shape[1:]
        log["context"] = ctx
        if law is None:
            law = "estimated"
    law = as_context_law(law, *shape)
    log.update(
        d1=np.asarray(shape[0]),
        d2=np.asarray(shape[1]),
        n_actions=np.asarray(K),
        context_law=np.asarray(law.name),
        format_version=np.asarray(FORMAT_VERSION),
    )
    log.update(law.arrays())
    return validate_log(log)
