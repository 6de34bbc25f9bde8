"""Saving and restoring a :class:`~inference.cores.linear_form.LinearFormCore`'s running sums.

The state is the configuration, the targets, ``n`` and the arrays of
:class:`~inference.cores.debiased_sum.DebiasedSum` with the ``σ̂²`` and ``Ŝ²`` sums and the pull
counts; a restored state is checked in full before anything is replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.state import check_config, check_count, copy_arrays, read_bool
from inference.cores.debiased_sum import DebiasedSum

__all__ = ["LinearFormPersistence"]


class LinearFormPersistence:
    """:meth:`state_dict`, :meth:`validate_state_dict` and :meth:`load_state_dict` of
    :class:`~inference.cores.linear_form.LinearFormCore` (mixed into it)."""

    _CONFIG = tuple("kind d1 d2 rank n_actions n_trials context context_law projection".split())
    _ARRAYS = (
        "acc",
        "held",
        "last_U",
        "last_V",
        "ring_U",
        "ring_V",
        "sigma_sum",
        "S2_sum",
        "V_sum",
    )

    def state_dict(self) -> dict[str, Any]:
        """Configuration and running sums as plain Python / numpy values (copies).

        Arrays are in the internal batched layout (leading trial axis, ``B = 1`` when
        unbatched; ``n_trials`` is stored as 0 then).
        """
        return {
            "kind": self._kind,
            "d1": self.d1,
            "d2": self.d2,
            "rank": self.rank,
            "n_actions": self.n_actions,
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "context": self.context,
            "context_law": self.context_law.name,
            "projection": self.projection,
            "target_names": list(self._names),
            "targets": self._T.copy(),
            "n": int(self._n),
            **self._sum.state_dict(),
            "sigma_sum": self._sigma_sum.copy(),
            "S2_sum": self._S2_sum.copy(),
            "V_sum": self._V_sum.copy(),
            "pulls": self._pulls.copy(),
            **self._weights.state_dict(),
            **self._design.state_dict(),
            **self._check.state_dict(),
            **(self._whitener.state_dict() if self._whitener.estimated else {}),
        }

    def validate_state_dict(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` against this object, changing nothing.

        The configuration and targets must be this object's, every array must have its
        shape, dtype and finite entries, the counts (``n``, ``held``, ``pulls``) must be
        non-negative integers with no arm pulled more often than ``n``, the sums of
        squares (``sigma_sum``, ``S2_sum``) non-negative and ``initialized`` a bool.

        Returns
        -------
        dict
            Validated copies (``n``, ``ring_n``, ``initialized`` and the arrays), for
            :meth:`load_state_dict`.

        Raises
        ------
        ValueError
            Naming the first key that fails a check.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        mine = self.state_dict()
        # The parts' arrays are checked by the parts, naming the key that fails.
        required = {
            k: v for k, v in mine.items() if not k.startswith(("weight_", "check_", "law_"))
        }
        check_config(state, required, (*self._CONFIG, "target_names"))
        try:
            same = np.array_equal(np.asarray(state["targets"], dtype=float), self._T)
        except (TypeError, ValueError):
            same = False
        if not same:
            raise ValueError("state['targets'] does not match this object's targets")
        new = copy_arrays(state, mine, (*self._ARRAYS, "pulls"))
        n = check_count(state["n"], "n")
        ring_n = DebiasedSum.check_ring_n(state["ring_n"])
        initialized = read_bool(state["initialized"], "state['initialized']")
        for key in ("held", "pulls", "sigma_sum", "S2_sum", "V_sum"):
            if (new[key] < 0).any():
                raise ValueError(f"state[{key!r}] must be >= 0, got minimum {new[key].min()!r}")
        if (new["pulls"].sum(axis=-1) > n).any():
            raise ValueError(
                f"state['pulls'] counts more pulls than state['n'] = {n} rounds, got "
                f"{new['pulls'].tolist()}"
            )
        if n > 0 and not initialized:
            raise ValueError(f"state['initialized'] is False but state['n'] = {n} rounds")
        weights = self._weights.check_state(state)
        design = self._design.check_state(state)
        check = self._check.check_state(state)
        law = self._whitener.check_state(state) if self._whitener.estimated else None
        return {
            "n": n,
            "ring_n": ring_n,
            "initialized": initialized,
            "weights": weights,
            "design": design,
            "context_check": check,
            "law": law,
            **new,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`: everything is validated first
        (:meth:`validate_state_dict`), so a failure changes nothing."""
        new = self.validate_state_dict(state)
        self._n = new["n"]
        self._generation += 1
        self._sum.load(new, new["ring_n"], new["initialized"])
        self._sigma_sum = new["sigma_sum"]
        self._S2_sum = new["S2_sum"]
        self._V_sum = new["V_sum"]
        self._pulls = new["pulls"]
        self._weights.load(new["weights"])
        self._design.load(new["design"])
        self._check.load(new["context_check"])
        if new["law"] is not None:
            self._whitener.load(new["law"])
        self._cache = {}
