"""The warnings of ``lrbandit validate``'s trials, read against its verdict.

A run records, per trial and checkpoint, whether each of the library's per-trial checks
fired (:data:`~lrbandit_gym.experiments.validate.CHECKPOINTED`).  :func:`warned_verdict`
names in the verdict line the warnings that fired in more than :data:`WARNED_SHARE` of the
trials: a ``VALID`` verdict under a warning that fires in every trial holds at the run's
resolution only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inference.cores.weight_share import SHARE_LIMIT

__all__ = ["WARNED_SHARE", "warned_verdict"]


#: A run's own warning that fires in more than this share of its trials (or chunks) is named
#: in the verdict line: a calibrated setting should see it in at most 5% of its trials
#: (docs/reproduction.md, "Warnings: precision and recall").
WARNED_SHARE = 0.05


def warned_verdict(
    status: str,
    line: str,
    arrays: dict[str, np.ndarray],
    chunk_warnings: Sequence[Sequence[tuple[type, str]]] = (),
) -> str:
    """The verdict ``line`` with the warnings the trials raised in more than
    :data:`WARNED_SHARE` of them: the Lindeberg check (a parameter read-out's share above
    :data:`~inference.cores.weight_share.SHARE_LIMIT` at some checkpoint), the context check, and
    the chunk-level ``WarmStartWarning`` (``chunk_warnings``: each chunk's recorded
    ``(category, message)`` pairs, from
    :func:`~lrbandit_gym.experiments.run_warnings.recorded_warnings`).  A ``VALID`` or
    ``OVER-COVERS`` verdict under such a warning holds at the run's resolution only: the
    warned intervals may under-cover by less than its band."""
    if status not in ("VALID", "OVER-COVERS", "UNDER-COVERS"):
        return line
    found = []
    per_trial = (
        (
            "round_share",
            SHARE_LIMIT,
            "the Lindeberg check (SmallPropensityWarning: one round "
            f"above {SHARE_LIMIT:g} of an arm's variance)",
        ),
        ("context_flag", 0.5, "the context check (ContextLawWarning)"),
    )
    for key, limit, name in per_trial:
        values = arrays.get(key)
        if values is None or not np.isfinite(values).any():
            continue
        share = float(np.mean((values > limit).any(axis=0)))
        if share > WARNED_SHARE:
            found.append(f"{name} in {share:.0%} of trials")
    raised = [any(c.__name__ == "WarmStartWarning" for c, _ in chunk) for chunk in chunk_warnings]
    share = float(np.mean(raised)) if raised else 0.0
    if share > WARNED_SHARE:
        found.append(f"the warm-start check (WarmStartWarning) in {share:.0%} of chunks")
    if not found:
        return line
    warned = "; ".join(found)
    if status == "UNDER-COVERS":
        return f"{line}; warned: {warned}"
    return f"{line}; but warned: {warned}: the intervals may under-cover by less than the band"
