"""Saving and restoring an inference wrapper: :func:`wrapper_state` and :func:`check_wrapper_state`.

A wrapper's state is flat, as the agents' are (:mod:`agents.state`): its round counters and
last observation (``"obs"``, absent before the first reset) under their own keys, and the
state of each part under ``"<part>.<key>"``: the core (``"core.n"``, ...), the wrapper's own
estimator and warm-start buffer (``"estimator.U"``, ``"buffer.X"``; absent when it shares an
agent's estimator, the buffer once the warm start is over) and the tracker's additions (the
``V*`` tracker's ``"regret.rules.<key>"``, ``"regret.own.<key>"``), under
``"format_version"`` :data:`STATE_VERSION`.  So :func:`agents.state.save_state` stores it
as it is and :func:`agents.state.load_state` gives it back.  Every part is validated before
anything is assigned, so a state that fails changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.state import check_part, flat_part, flat_state, read_int
from lrbandit_gym.input_checks import check_magnitude
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like

__all__ = ["STATE_VERSION", "apply_wrapper_state", "check_wrapper_state", "wrapper_state"]

#: The version of the wrapper state's layout (its ``"format_version"`` entry).
STATE_VERSION = 1

_KEYS = ("format_version", "rounds_seen", "rounds_skipped")


def wrapper_state(tracker, own, obs) -> dict[str, Any]:
    """The flat state of a wrapper holding ``tracker`` (and ``own``, its own estimator, or
    None) at observation ``obs``."""
    state: dict[str, Any] = {
        "format_version": STATE_VERSION,
        "rounds_seen": tracker.rounds_seen,
        "rounds_skipped": tracker.rounds_skipped,
    }
    if obs is not None:
        state["obs"] = np.array(obs, copy=True)
    parts = {"core": tracker.core.state_dict()}
    if own is not None:
        parts["estimator"], parts["buffer"] = own.state_dict()
    parts.update(tracker.extra_state())
    state.update(flat_state(parts))
    return state


def check_wrapper_state(state: Any, tracker, own, round_check) -> dict[str, Any]:
    """Check a wrapper's state against the wrapper, changing nothing.

    The layout's version, the round counters (non-negative integers), the core's state (its
    ``validate_state_dict``), the own estimator's state and warm-start buffer
    (:meth:`~inference.wrappers.own_estimator.OwnEstimator.check_state`; a wrapper that shares its
    estimator holds neither), the stored observation (a finite context of this environment)
    and the tracker's own parts.

    Returns
    -------
    dict
        What :func:`apply_wrapper_state` installs.

    Raises
    ------
    ValueError
        Naming the first key of ``state`` that fails a check.
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    missing = [k for k in _KEYS if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    version = read_int(state["format_version"], "state['format_version']")
    if version != STATE_VERSION:
        raise ValueError(
            f"state['format_version'] = {version}: this version of lrbandit-gym reads wrapper "
            f"states of format {STATE_VERSION}"
        )
    seen = read_int(state["rounds_seen"], "state['rounds_seen']")
    skipped = read_int(state["rounds_skipped"], "state['rounds_skipped']")
    if skipped > seen:
        raise ValueError(
            f"state['rounds_skipped'] = {skipped} exceeds state['rounds_seen'] = {seen}"
        )
    core = tracker.core
    validate = getattr(core, "validate_state_dict", None)
    if validate is None:  # a core that checks only as it loads: load into a copy
        validate = copy.deepcopy(core).load_state_dict
    core_state = flat_part(state, "core")
    if core_state is None:
        raise ValueError("state holds no 'core.<key>' entries: the core's state is missing")
    check_part(validate, core_state, "core")
    estimator, buffer = flat_part(state, "estimator"), flat_part(state, "buffer")
    store = None
    if own is not None:
        if estimator is None:
            raise ValueError(
                "state holds no 'estimator.<key>' entries: this wrapper runs its own "
                "estimator (the state was saved by a wrapper that shares one)"
            )
        store = own.check_state(estimator, buffer, seen)
    else:
        for key, value in (("estimator", estimator), ("buffer", buffer)):
            if value is not None:
                raise ValueError(
                    f"state[{key!r}] must be absent: this wrapper shares its estimator "
                    "(the state was saved by a wrapper with its own; restore the shared "
                    "estimator through its owner)"
                )
    obs = None if "obs" not in state else _check_obs(state["obs"], round_check)
    return {
        "rounds_seen": seen,
        "rounds_skipped": skipped,
        "core": core_state,
        "estimator": estimator,
        "store": store,
        "obs": obs,
        "extra": tracker.check_extra_state(state),
    }


def apply_wrapper_state(checked: dict[str, Any], tracker, own, round_check) -> None:
    """Install a state :func:`check_wrapper_state` accepted (cannot fail)."""
    tracker.core.load_state_dict(checked["core"])
    tracker.restored()
    tracker.rounds_seen = checked["rounds_seen"]
    tracker.rounds_skipped = checked["rounds_skipped"]
    if own is not None:
        own.load_state(checked["estimator"], checked["store"])
    if checked["obs"] is not None:
        round_check.set_obs(checked["obs"])
    tracker.apply_extra_state(checked["extra"])


def _check_obs(obs, round_check) -> np.ndarray:
    """A copy of a stored observation, checked as a context of this environment: the
    shape, finite entries (of magnitude up to MAX_MAGNITUDE), or an index in range."""
    try:
        arr = np.array(obs, copy=True)
        x = round_check.context_of(arr)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"state['obs'] is not a context of this environment: {exc}") from None
    b = round_check.n_trials
    if round_check.context == "completion" and (
        isinstance(x, OneHotContexts) or is_index_like(x, b)
    ):
        check_index(arr, round_check.d1, round_check.d2, b, name="state['obs']")
    else:
        check_magnitude(x, "state['obs']", batched=b is not None)
    return arr
