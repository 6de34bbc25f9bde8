"""The read-outs of a ``lrbandit validate`` chunk: a :class:`Reader` is asked every round
of inference whether it reads (``due(n)``) and then reads the chunk's
:class:`~lrbandit_gym.experiments.validate.stack.InferenceStack`; after the run its arrays,
merged over chunks, become table rows (``summarize``).  :class:`CheckpointReader` reads
the fixed-``n`` intervals at the checkpoints; the time-uniform reader is
:class:`~lrbandit_gym.experiments.validate.uniform.UniformReader`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lrbandit_gym.experiments.coverage import coverage_stats

if TYPE_CHECKING:
    from lrbandit_gym.experiments.validate.stack import InferenceStack

__all__ = ["CheckpointReader", "Reader"]


class Reader:
    """Reads a chunk's intervals at the rounds it asks for.

    The chunk's loop calls :meth:`due` every round after inference has started (``n >= 1``
    rounds of inference) and :meth:`read` when it returns True; :meth:`result` gives arrays
    whose last axis is the trial axis (merged over chunks by concatenation), and
    :meth:`summarize` turns the merged arrays into table rows (each with ``n``,
    ``quantity``, ``truth`` and the fields of
    :func:`~lrbandit_gym.experiments.coverage.coverage_stats`, on which the verdict is
    taken).  Subclasses must be picklable (they are built in the worker processes).

    Parameters
    ----------
    setting : ValidationSetting
    quantities : tuple of Quantity
    n_trials : int
        Trials of the chunk.
    confidence_level : float
    """

    name = "reader"

    def __init__(self, setting, quantities, n_trials: int, confidence_level: float):
        self.setting = setting
        self.quantities = quantities
        self.n_trials = n_trials
        self.confidence_level = confidence_level

    @property
    def last(self) -> int:
        """The last round of inference it needs (the chunk runs until every reader's)."""
        return max(self.setting.n)

    def due(self, n: int) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, n: int, stack: InferenceStack) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def result(self) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def summarize(
        cls, arrays: dict[str, np.ndarray], quantities, setting, confidence_level: float
    ) -> list[dict[str, Any]]:  # pragma: no cover - abstract
        raise NotImplementedError


class CheckpointReader(Reader):
    """The fixed-``n`` intervals of every quantity at the setting's checkpoints ``n``."""

    name = "checkpoints"

    def __init__(self, setting, quantities, n_trials: int, confidence_level: float):
        super().__init__(setting, quantities, n_trials, confidence_level)
        self.checkpoints = sorted(set(int(n) for n in setting.n))
        shape = (len(self.checkpoints), len(quantities), n_trials)
        self.arrays = {
            key: np.full(shape, np.nan) for key in ("estimate", "standard_error", "low", "high")
        }

    def due(self, n: int) -> bool:
        return n in self.checkpoints

    def read(self, n: int, stack: InferenceStack) -> None:
        c = self.checkpoints.index(n)
        for j, ci in enumerate(stack.intervals(self.confidence_level)):
            for key in self.arrays:
                self.arrays[key][c, j] = np.asarray(getattr(ci, key), dtype=float)

    def result(self) -> dict[str, np.ndarray]:
        return dict(self.arrays)

    @classmethod
    def summarize(cls, arrays, quantities, setting, confidence_level):
        rows = []
        for c, n in enumerate(sorted(set(int(n) for n in setting.n))):
            for j, q in enumerate(quantities):
                s = coverage_stats(
                    arrays["estimate"][c, j],
                    arrays["standard_error"][c, j],
                    arrays["low"][c, j],
                    arrays["high"][c, j],
                    q.truth,
                )
                rows.append({"n": n, "quantity": q.label, "truth": q.truth, **s})
        return rows
