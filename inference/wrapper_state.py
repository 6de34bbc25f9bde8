"""Saving and restoring an inference wrapper (:class:`WrapperState`).

A wrapper's ``state_dict()`` nests the states of its parts beside its own counters: the
inference core (``"core"``), its own estimator and warm-start buffer (``"estimator"``,
``"buffer"``; None when it shares an agent's estimator, or once the warm start is over),
the last observation (``"obs"``) and whatever the wrapper adds (:meth:`WrapperState._extra_state`,
the ``V*`` wrapper's ``"regret"``).  It follows the scheme of :mod:`agents.state`:
:func:`agents.state.save_state` stores it flat (``"core.n"``, ``"regret.rules.seen"``, ...)
and ``load_state_dict`` takes either layout; every part is validated on copies first, and
only then is anything assigned, so a state that fails changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.state import check_part, read_int, sub_state
from lrbandit_gym.input_checks import check_magnitude
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like

__all__ = ["WrapperState"]


class WrapperState:
    """``state_dict`` and ``load_state_dict`` of the inference wrappers; mixed into
    :class:`~inference.wrapper_base.InferenceWrapperBase`, whose fields it reads."""

    def state_dict(self) -> dict[str, Any]:
        """Wrapper, core and (own) estimator state; a resumed run gives identical intervals
        (target policies are not saved)."""
        return {**self._state_common(), "core": self.core.state_dict(), **self._extra_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`: every part (counters, core, own estimator and
        warm-start buffer, observation, and the wrapper's own additions) is validated
        before any is assigned, so a state that fails raises :class:`ValueError` naming the
        key and changes nothing."""
        state = self._nested(state)
        extra = self._check_extra_state(state)
        self._load_common(state)
        self._apply_extra_state(extra)

    def _nested(self, state: Any) -> Any:
        """``state`` in the nested layout of :meth:`state_dict`, whichever layout it came
        in (:func:`agents.state.load_state` gives the flat one, parts left out for None)."""
        if not isinstance(state, Mapping) or "core" in state:
            return state
        nested = {key: value for key, value in state.items() if "." not in key}
        nested.setdefault("obs", None)
        for part in ("estimator", "buffer", "core"):
            nested[part] = sub_state(state, part)
        nested.update(self._nested_extra(state))
        return nested

    def _nested_extra(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The wrapper's own parts of a flat ``state``, nested as :meth:`_extra_state`
        gives them."""
        return {}

    def _extra_state(self) -> dict[str, Any]:
        """The wrapper's own parts beyond the common ones (none by default)."""
        return {}

    def _check_extra_state(self, state: Mapping[str, Any]) -> Any:
        """Validate the wrapper's own parts of ``state``, changing nothing."""
        return None

    def _apply_extra_state(self, checked: Any) -> None:
        """Assign what :meth:`_check_extra_state` returned (cannot fail)."""

    def _state_common(self) -> dict[str, Any]:
        return {
            "rounds_seen": self.rounds_seen,
            "rounds_skipped": self.rounds_skipped,
            "estimator": self.estimator.state_dict() if self.owns_estimator else None,
            "buffer": None if self._warm_start is None else self._warm_start.state_dict(),
            "obs": None if self._obs is None else np.array(self._obs, copy=True),
        }

    def _check_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Check a wrapper's :meth:`state_dict` against this wrapper, changing nothing.

        Every part is validated before anything is assigned, as the agents do
        (:mod:`agents.state`): the round counters are non-negative integers, the core's
        state passes its ``validate_state_dict``, the own estimator's state and warm-start
        buffer (rebuilt on a new buffer) pass theirs and agree (during the warm start an
        uninitialised estimator beside a buffer of ``rounds_seen`` rounds, after it an
        initialised one that has taken ``rounds_seen - warm_start`` steps), a wrapper that
        shares its estimator holds neither, and the stored observation is a finite context
        of this environment's shape.

        Returns
        -------
        dict
            The validated counters, the rebuilt buffer and a copy of the observation.

        Raises
        ------
        ValueError
            Naming the first key of ``state`` that fails a check.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        keys = ("rounds_seen", "rounds_skipped", "estimator", "buffer", "obs", "core")
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(f"state is missing keys {missing}")
        seen = read_int(state["rounds_seen"], "state['rounds_seen']")
        skipped = read_int(state["rounds_skipped"], "state['rounds_skipped']")
        if skipped > seen:
            raise ValueError(
                f"state['rounds_skipped'] = {skipped} exceeds state['rounds_seen'] = {seen}"
            )
        validate = getattr(self.core, "validate_state_dict", None)
        if validate is None:  # a core that checks only as it loads: load into a copy
            validate = copy.deepcopy(self.core).load_state_dict
        check_part(validate, state["core"], "core")
        buffer = None
        if self.owns_estimator:
            est = check_part(self.estimator.validate_state_dict, state["estimator"], "estimator")
            if state["buffer"] is not None:
                buffer = check_part(self._warm_start.restored_store, state["buffer"], "buffer")
                if est["initialized"] or buffer.n != seen:
                    raise ValueError(
                        f"state['buffer'] holds {buffer.n} warm-start rounds beside "
                        f"state['rounds_seen'] = {seen} and an estimator with initialized = "
                        f"{est['initialized']}: during the own warm start the buffer holds "
                        "every round seen and the estimator is not initialised yet"
                    )
            elif not est["initialized"] or est["t"] != seen - self.warm_start_rounds:
                raise ValueError(
                    f"state['buffer'] is None, so the own warm start of "
                    f"{self.warm_start_rounds} rounds is over, but state['estimator'] has "
                    f"initialized = {est['initialized']} and t = {est['t']} (expected an "
                    f"initialised estimator with t = rounds_seen - {self.warm_start_rounds} "
                    f"= {seen - self.warm_start_rounds})"
                )
        else:
            for key in ("estimator", "buffer"):
                if state[key] is not None:
                    raise ValueError(
                        f"state[{key!r}] must be None: this wrapper shares its estimator "
                        "(the state was saved by a wrapper with its own; restore the shared "
                        "estimator through its owner)"
                    )
        obs = None if state["obs"] is None else self._check_obs(state["obs"])
        return {"rounds_seen": seen, "rounds_skipped": skipped, "buffer": buffer, "obs": obs}

    def _check_obs(self, obs) -> np.ndarray:
        """A copy of a stored observation, checked as a context of this environment: the
        shape, finite entries (of magnitude up to MAX_MAGNITUDE), or an index in range."""
        try:
            arr = np.array(obs, copy=True)
            x = self._context(arr)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"state['obs'] is not a context of this environment: {exc}") from None
        if self.context == "completion" and (
            isinstance(x, OneHotContexts) or is_index_like(x, self.n_trials)
        ):
            check_index(arr, self.d1, self.d2, self.n_trials, name="state['obs']")
        else:
            check_magnitude(x, "state['obs']", batched=self.n_trials is not None)
        return arr

    def _load_common(self, state: Mapping[str, Any]) -> None:
        """Restore a wrapper's :meth:`state_dict`: :meth:`_check_state` validates every part
        first, so a state that fails changes nothing; then each part is assigned (the core
        and the estimator from states already validated, which cannot fail)."""
        checked = self._check_state(state)
        self.core.load_state_dict(state["core"])
        self._restored()
        self.rounds_seen = checked["rounds_seen"]
        self.rounds_skipped = checked["rounds_skipped"]
        if self.owns_estimator:
            self.estimator.load_state_dict(state["estimator"])
            self._warm_start.adopt(checked["buffer"])
        if checked["obs"] is not None:
            self._set_obs(checked["obs"])
