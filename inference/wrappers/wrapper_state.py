"""Saving and restoring an inference wrapper: :func:`wrapper_state` and :func:`check_wrapper_state`.

A wrapper's state nests the states of its parts beside its round counters: the core
(``"core"``), the wrapper's own estimator and warm-start buffer (``"estimator"``,
``"buffer"``; None when it shares an agent's estimator, or once the warm start is over), the
last observation (``"obs"``) and the tracker's additions (the ``V*`` tracker's
``"regret"``), under ``"format_version"`` :data:`STATE_VERSION`.
:func:`agents.state.save_state` stores it flat (``"core.n"``, ...); :func:`nested` takes a
flat one back.  Every part is validated before anything is assigned, so a state that fails
changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.state import check_part, read_int, sub_state
from lrbandit_gym.input_checks import check_magnitude
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like

__all__ = ["STATE_VERSION", "apply_wrapper_state", "check_wrapper_state", "nested", "wrapper_state"]

#: The version of the wrapper state's layout (its ``"format_version"`` entry).
STATE_VERSION = 1

_KEYS = ("format_version", "rounds_seen", "rounds_skipped", "estimator", "buffer", "obs", "core")


def wrapper_state(tracker, own, obs) -> dict[str, Any]:
    """The state of a wrapper holding ``tracker`` (and ``own``, its own estimator, or
    None) at observation ``obs``."""
    estimator, buffer = (None, None) if own is None else own.state_dict()
    return {
        "format_version": STATE_VERSION,
        "rounds_seen": tracker.rounds_seen,
        "rounds_skipped": tracker.rounds_skipped,
        "estimator": estimator,
        "buffer": buffer,
        "obs": None if obs is None else np.array(obs, copy=True),
        "core": tracker.core.state_dict(),
        **tracker.extra_state(),
    }


def nested(state: Any, extra: tuple[str, ...]) -> Any:
    """``state`` in the nested layout of :func:`wrapper_state`, whichever layout it came in
    (:func:`agents.state.load_state` gives the flat one, parts left out for None);
    ``extra``: the tracker's own parts."""
    if not isinstance(state, Mapping) or "core" in state:
        return state
    out = {key: value for key, value in state.items() if "." not in key}
    out.setdefault("obs", None)
    for part in ("estimator", "buffer", "core", *extra):
        out[part] = sub_state(state, part)
    return out


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
    check_part(validate, state["core"], "core")
    store = None
    if own is not None:
        store = own.check_state(state["estimator"], state["buffer"], seen)
    else:
        for key in ("estimator", "buffer"):
            if state[key] is not None:
                raise ValueError(
                    f"state[{key!r}] must be None: this wrapper shares its estimator "
                    "(the state was saved by a wrapper with its own; restore the shared "
                    "estimator through its owner)"
                )
    obs = None if state["obs"] is None else _check_obs(state["obs"], round_check)
    return {
        "rounds_seen": seen,
        "rounds_skipped": skipped,
        "store": store,
        "obs": obs,
        "extra": tracker.check_extra_state(state),
    }


def apply_wrapper_state(checked: dict[str, Any], state, tracker, own, round_check) -> None:
    """Install a state :func:`check_wrapper_state` accepted (cannot fail)."""
    tracker.core.load_state_dict(state["core"])
    tracker.restored()
    tracker.rounds_seen = checked["rounds_seen"]
    tracker.rounds_skipped = checked["rounds_skipped"]
    if own is not None:
        own.load_state(state["estimator"], checked["store"])
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
