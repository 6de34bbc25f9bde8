"""The all-or-nothing step of a stack of inference wrappers (:class:`StackStep`).

Inference wrappers stack (``ValueInference(ParameterInference(env))``): stepping the outer
one steps the inner one, through any Gymnasium wrappers between, down to the bandit.  A
round enters every inference wrapper of the stack or none of them, and every layer checks
what it can before the bandit steps.  The wrappers coordinate through one public protocol,
never through each other's fields:

1. The outermost inference wrapper checks the round's action, propensities and context
   (a :class:`CheckedInput`) and begins a :class:`StackStep`, which checkpoints the bandit
   and saves the Gymnasium wrappers below that count a step (:func:`inference.gym_layers.undo_for`).
2. Before stepping inward, every inference wrapper puts its checked input on the step
   (:attr:`StackStep.checked`) and hands the step to the nearest inference wrapper below
   (its public ``join(step)``; ``join(None)`` once the inner step returns).  That wrapper
   reuses the checked input when it sees the very same action, context and estimator, so
   nothing is checked twice.
3. After the inner step, every wrapper prepares its update, everything of it that can fail
   (:meth:`StackStep.add` takes its ``commit`` and ``abort``).  Once all have prepared, the
   outermost commits them together (:meth:`StackStep.commit`, which cannot fail); if
   anything failed instead, :meth:`StackStep.undo` aborts the prepared updates and returns
   the bandit and the counting wrappers to their state before the step, so the step can be
   retried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from inference.gym_layers import StepUndo

__all__ = ["CheckedInput", "StackStep"]


class CheckedInput(NamedTuple):
    """One step's action and context as an inference wrapper checked them, before the
    bandit steps; the identities (``action``, ``obs``, ``estimator``, ``propensity_fn``)
    let the wrapper below tell that it would check the very same objects."""

    action: Any
    obs: Any
    estimator: Any
    from_decision: bool
    propensity_fn: Any
    actions: np.ndarray
    propensities: np.ndarray
    fingerprint: np.ndarray | None


class StackStep:
    """One step of a stack of inference wrappers in flight, begun by the outermost.

    Parameters
    ----------
    base : gymnasium.Env
        The bandit (``env.unwrapped``), checkpointed now when it offers ``checkpoint()``.
    undo : tuple of StepUndo
        The Gymnasium wrappers below that count a step, saved now.
    """

    __slots__ = ("_base", "_checkpoint", "_prepared", "_saved", "_undo", "checked")

    def __init__(self, base, undo: tuple[StepUndo, ...]) -> None:
        #: The checked input of the inference wrapper that handed this step down last.
        self.checked: CheckedInput | None = None
        self._prepared: list[tuple[Callable[[dict], None], Callable[[], None]]] = []
        self._base = base
        self._checkpoint = base.checkpoint() if hasattr(base, "checkpoint") else None
        self._undo = undo
        self._saved = [u.save() for u in undo] if undo else None

    def add(self, commit: Callable[[dict], None], abort: Callable[[], None]) -> None:
        """A wrapper's prepared update: ``commit(info)`` absorbs it and cannot fail,
        ``abort()`` undoes what preparing it changed."""
        self._prepared.append((commit, abort))

    def commit(self, info: dict) -> None:
        """Commit every prepared update, innermost first, each writing into ``info``."""
        for commit, _ in self._prepared:
            commit(info)

    def undo(self) -> None:
        """Abort the prepared updates (outermost first) and restore the counting wrappers
        and the bandit to their state before the step."""
        for _, abort in reversed(self._prepared):
            abort()
        if self._saved is not None:
            for u, state in zip(self._undo, self._saved, strict=True):
                u.restore(state)
        if self._checkpoint is not None:
            self._base.restore(self._checkpoint)
