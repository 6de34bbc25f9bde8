"""Time-uniform coverage in ``lrbandit validate``: every interval read at every round.

:class:`UniformReader` reads each quantity's interval at every round of inference from
``setting.uniform_from`` (n₀) to the last checkpoint, as the fixed-n interval and as the
confidence sequence (docs/method.md §7, tuned at ``setting.tuning_n``), and keeps per trial
whether the truth stayed inside at all of those rounds.  :func:`uniform_verdict` judges the
sequences one-sided (an anytime-valid procedure may cover more than the nominal level, never
less); the fixed-n intervals' time-uniform coverage is reported, not judged: it is expected
to be far below the level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from lrbandit_gym.experiments.coverage import coverage_interval
from lrbandit_gym.experiments.validate.readers import Reader

__all__ = ["UniformReader", "uniform_verdict"]

KINDS = ("fixed", "sequence")


class UniformReader(Reader):
    """Time-uniform coverage of the fixed-n intervals and of the confidence sequences."""

    name = "uniform"

    def __init__(self, setting, quantities, n_trials: int, confidence_level: float):
        super().__init__(setting, quantities, n_trials, confidence_level)
        from inference.sequences import DEFAULT_TUNING_N

        self.first = int(setting.uniform_from)
        self.tuning_n = int(setting.tuning_n or DEFAULT_TUNING_N)
        self.covered = {kind: np.ones((len(quantities), n_trials), bool) for kind in KINDS}

    def due(self, n: int) -> bool:
        return self.first <= n <= self.last

    def read(self, n: int, stack) -> None:
        truths = [q.truth for q in self.quantities]
        for kind in KINDS:
            cis = stack.intervals(self.confidence_level, kind=kind, tuning_n=self.tuning_n)
            for j, (ci, truth) in enumerate(zip(cis, truths, strict=True)):
                self.covered[kind][j] &= np.asarray(ci.contains(truth), dtype=bool)

    def result(self) -> dict[str, np.ndarray]:
        return {f"{kind}_covered": c.astype(float) for kind, c in self.covered.items()}

    @classmethod
    def summarize(cls, arrays, quantities, setting, confidence_level):
        from inference.results import critical_value
        from inference.sequences import DEFAULT_TUNING_N, sequence_factor

        first, last = int(setting.uniform_from), max(setting.n)
        tuning = int(setting.tuning_n or DEFAULT_TUNING_N)
        ratio = math.sqrt(last) * float(sequence_factor(last, 1 - confidence_level, tuning))
        ratio /= critical_value(confidence_level)
        rows = []
        for j, q in enumerate(quantities):
            row: dict[str, Any] = {
                "quantity": q.label,
                "n0": first,
                "N": last,
                "tuning_n": tuning,
                "width_ratio": ratio,
            }
            for kind in KINDS:
                c = arrays[f"{kind}_covered"][j]
                p = float(np.mean(c))
                row[f"uniform_{kind}"] = p
                row[f"uniform_{kind}_mcse"] = math.sqrt(p * (1 - p) / c.size)
                interval = coverage_interval(int(np.sum(c)), c.size)
                row[f"uniform_{kind}_low"], row[f"uniform_{kind}_high"] = interval
                row["trials"] = int(c.size)
            rows.append(row)
        return rows


def uniform_verdict(
    rows: Sequence[dict[str, Any]], confidence_level: float, family_level: float = 0.99
) -> str:
    """One line on the confidence sequences' time-uniform coverage.

    The rule: with ``m`` cells of ``N`` trials, a sequence is flagged when its time-uniform
    coverage lies below ``L − z·sqrt(L(1 − L)/N)``, ``z = Φ⁻¹(1 − (1 − family_level)/m)``
    (one-sided Bonferroni).  ``ANYTIME-VALID`` when no cell is flagged, else
    ``SEQUENCES UNDER-COVER``; the fixed-n intervals' lowest time-uniform coverage is quoted
    for comparison.
    """
    if not rows:
        return ""
    from scipy.special import ndtri

    level, m = confidence_level, len(rows)
    trials = min(r["trials"] for r in rows)
    band = float(ndtri(1 - (1 - family_level) / m)) * math.sqrt(level * (1 - level) / trials)
    low = [r for r in rows if r["uniform_sequence"] < level - band]
    worst = min(rows, key=lambda r: r["uniform_sequence"])
    fixed = min(r["uniform_fixed"] for r in rows)
    span = f"every round n = {rows[0]['n0']}..{rows[0]['N']}"
    tail = (
        f"lowest {worst['quantity']}: {worst['uniform_sequence']:.3f}; the fixed-n intervals "
        f"read the same way cover down to {fixed:.3f}"
    )
    if low:
        return (
            f"SEQUENCES UNDER-COVER: {len(low)} of {m} confidence sequences left the truth at "
            f"some round ({span}) in more than {1 - level:g} + {band:.3f} of trials; {tail}"
        )
    return (
        f"ANYTIME-VALID: all {m} confidence sequences kept the truth inside at {span} in at "
        f"least {level:g} − {band:.3f} of trials ({family_level:.0%} one-sided family-wise "
        f"band); {tail}"
    )
