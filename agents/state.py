"""One persistence scheme for the agents and the inference objects: states as dicts,
validated in full before anything is assigned.

Every ``load_state_dict`` of :mod:`agents` and :mod:`inference` checks the whole state
first, on copies (``validate_state_dict`` where an object offers it, :func:`check_part`
naming the part that fails), and only then assigns what it checked, so a state that fails
raises :class:`ValueError` naming the key and changes nothing.  The helpers here are those
checks: :func:`check_config` (the configuration agrees), :func:`copy_arrays` (finite arrays
of the right shape and dtype), :func:`read_int` and its kin (scalars, also as the 0-d arrays
``np.load`` gives back), :func:`generator_state_from` (a generator's state).

Every ``state_dict()`` of :mod:`agents` and of the inference wrappers is *flat*: its keys
are strings, its values numpy arrays, Python scalars or strings, never ``None``, nested
dicts or Python objects.  So a state round-trips through ``np.savez(path, **state)`` and
``dict(np.load(path, allow_pickle=False))`` (and through :func:`save_state` /
:func:`load_state`, which do exactly that); scalars then come back as 0-d arrays, which
every ``load_state_dict`` accepts.

Key scheme
----------
* A component's own state is stored under its plain keys (``"t"``, ``"U"``, ...).
* The state of a part is stored under ``"<part>.<key>"``: ``"estimator.U"`` for the
  :class:`~agents.estimator.LowRankSGD` of a low-rank policy, ``"buffer.X"`` for its
  warm-start buffer (absent once the warm start is over), ``"policy.<key>"`` for the policy
  that :class:`~agents.forced_exploration.ForcedExploration` wraps (so
  ``"policy.estimator.U"``).  :func:`sub_state` reads a part back.
* The generator state is ``"rng.bit_generator"`` (its name, ``"PCG64"``) and
  ``"rng.state"``, a ``uint64`` array of six words: the 128-bit PCG64 ``state`` and
  ``inc`` as (high, low) word pairs, then ``has_uint32`` and ``uinteger``
  (:func:`generator_state` and :func:`generator_state_from`).  A 128-bit integer does not
  fit any numpy integer type, so the plain ``bit_generator.state`` dict cannot be saved
  without pickling.

* ``"format_version"`` (:data:`FORMAT_VERSION`) is stored by every ``state_dict()`` of
  :mod:`agents`, on its own level (``"estimator.format_version"`` for a policy's
  estimator); ``load_state_dict`` refuses a state without it or with another version
  (:func:`check_format_version`), so a layout change is a clear error, never a silent
  misreading.  No release has shipped, so no earlier layout is read.

The inference wrappers' ``state_dict()`` is flat too, its parts under ``"core.<key>"``,
``"estimator.<key>"``, ``"buffer.<key>"``, ``"regret.<key>"``, beside their own
``"format_version"`` (:func:`flat_state` builds such a state from its parts' states);
:func:`sub_state` reads a part back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from lrbandit_gym.files import read_npz

__all__ = [
    "FORMAT_VERSION",
    "check_config",
    "check_count",
    "check_format_version",
    "check_part",
    "copy_arrays",
    "flat_part",
    "flat_state",
    "generator_state",
    "generator_state_from",
    "load_state",
    "plain",
    "read_bool",
    "read_float",
    "read_int",
    "read_str",
    "same_value",
    "save_state",
    "sub_state",
]

_MASK64 = (1 << 64) - 1
_BIT_GENERATOR = "PCG64"

#: The layout of the agents' states: stored under ``"format_version"`` by every
#: ``state_dict()`` of :mod:`agents`, and the only one ``load_state_dict`` reads.
FORMAT_VERSION = 1


def check_format_version(state: Mapping[str, Any], name: str = "state") -> None:
    """Raise unless ``state["format_version"]`` is :data:`FORMAT_VERSION`.

    Raises
    ------
    ValueError
        If the key is missing or holds another version, naming both.
    """
    if "format_version" not in state:
        raise ValueError(
            f"{name} has no 'format_version': it is not a state_dict() of this version of "
            f"lrbandit-gym (state format {FORMAT_VERSION}); save it again from the object"
        )
    found = plain(state["format_version"])
    if isinstance(found, bool) or found != FORMAT_VERSION:
        raise ValueError(
            f"{name}['format_version'] = {found!r}: this version of lrbandit-gym reads state "
            f"format {FORMAT_VERSION} only; save it again from the object"
        )


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """A generator's state as ``{"rng.bit_generator": str, "rng.state": uint64 array}``.

    Parameters
    ----------
    rng : numpy.random.Generator
        A generator on a PCG64 bit generator (what ``np.random.default_rng`` makes).

    Returns
    -------
    dict
        The two keys of the module's key scheme.
    """
    st = rng.bit_generator.state
    if st.get("bit_generator") != _BIT_GENERATOR:
        raise ValueError(
            f"only PCG64 generators are saved, got bit generator {st.get('bit_generator')!r}"
        )
    inner = st["state"]
    words = [
        inner["state"] >> 64,
        inner["state"] & _MASK64,
        inner["inc"] >> 64,
        inner["inc"] & _MASK64,
        st["has_uint32"],
        st["uinteger"],
    ]
    return {
        "rng.bit_generator": _BIT_GENERATOR,
        "rng.state": np.array(words, dtype=np.uint64),
    }


def generator_state_from(state: Mapping[str, Any]) -> dict[str, Any]:
    """The ``bit_generator.state`` dict stored in ``state`` (``"rng.bit_generator"``,
    ``"rng.state"``), checked on a probe generator.

    Raises
    ------
    ValueError
        If the keys are missing or do not hold a valid PCG64 state.
    """
    missing = [k for k in ("rng.bit_generator", "rng.state") if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    name = read_str(state["rng.bit_generator"], "state['rng.bit_generator']")
    words = np.asarray(state["rng.state"])
    if name != _BIT_GENERATOR or words.shape != (6,) or words.dtype != np.uint64:
        raise ValueError(
            "state['rng.bit_generator'] must be 'PCG64' and state['rng.state'] a uint64 "
            f"array of shape (6,), got {name!r} and a {words.dtype} array of shape "
            f"{words.shape}"
        )
    w = [int(v) for v in words.tolist()]
    out = {
        "bit_generator": name,
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4],
        "uinteger": w[5],
    }
    probe = np.random.default_rng(0)
    try:
        probe.bit_generator.state = out
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise ValueError(f"state['rng'] is not a valid PCG64 generator state: {exc}") from None
    return probe.bit_generator.state


def sub_state(state: Mapping[str, Any], part: str) -> dict[str, Any] | None:
    """The state of ``part`` inside the flat ``state``: its keys ``"<part>.<key>"`` with
    the prefix stripped, or None when there are none."""
    prefix = part + "."
    found = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    return found or None


def flat_part(state: Mapping[str, Any], part: str) -> dict[str, Any] | None:
    """The state of ``part`` inside the flat ``state`` of an agent or an inference wrapper
    (its ``"<part>.<key>"`` keys, the prefix stripped), or None when it has none.

    Raises
    ------
    ValueError
        If ``state[part]`` is set (a nested part, or anything else): states are flat.
    """
    if part in state:
        raise ValueError(
            f"state[{part!r}] is set: a state is flat, with no nested part; the part's "
            f"entries are under '{part}.<key>' keys (agents.state)"
        )
    return sub_state(state, part)


def plain(value: Any) -> Any:
    """A 0-d array (what ``np.load`` gives for a saved scalar) as its Python value."""
    if isinstance(value, np.ndarray) and value.shape == ():
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def read_int(value: Any, name: str, minimum: int | None = 0) -> int:
    """An integer state entry (Python, numpy or 0-d array), at least ``minimum``."""
    v = plain(value)
    if isinstance(v, bool) or not isinstance(v, int) or (minimum is not None and v < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{name} must be an integer{bound}, got {value!r}")
    return v


def read_float(value: Any, name: str) -> float:
    """A real state entry (Python, numpy or 0-d array)."""
    v = plain(value)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(v)


def read_bool(value: Any, name: str) -> bool:
    """A boolean state entry (Python, numpy or 0-d array)."""
    v = plain(value)
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return v


def read_str(value: Any, name: str) -> str:
    """A string state entry (Python str or 0-d unicode array)."""
    v = plain(value)
    if not isinstance(v, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return v


def same_value(a: Any, b: Any) -> bool:
    """Whether two configuration entries are equal, whatever mix of Python scalars, lists,
    numpy scalars and (0-d) arrays holds them."""
    try:
        x, y = np.asarray(a), np.asarray(b)
    except (TypeError, ValueError):  # pragma: no cover - ragged input
        return False
    if x.shape != y.shape:
        return False
    if (x.dtype.kind in "US") != (y.dtype.kind in "US"):
        return False
    return bool(np.array_equal(x, y))


def flat_state(parts: Mapping[str, Any]) -> dict[str, Any]:
    """The flat state of a composite object from its parts' states: the keys of a part
    ``parts[name]`` become ``"<name>.<key>"`` (at any depth), and a part that is None
    (absent) is left out; an entry that is not a dict stays under its key."""
    out: dict[str, Any] = {}
    for key, value in parts.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in flat_state(value).items()})
        else:
            out[key] = value
    return out


def save_state(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """``np.savez(path, **state)``: any ``state_dict()`` of the agents or of the inference
    wrappers (all flat).

    Raises
    ------
    ValueError
        If a value would need pickling (a nested dict, an object array, or a Python object
        that is not a scalar, string or array).
    """
    flat = dict(state)
    for key, value in flat.items():
        if np.asarray(value).dtype == object:
            raise ValueError(
                f"state[{key!r}] is a {type(value).__name__}, which np.savez cannot store "
                "without pickling (see agents.state)"
            )
    np.savez(path, **flat)


def load_state(path: str | os.PathLike) -> dict[str, Any]:
    """The arrays of a state saved by :func:`save_state`, read with no pickling
    (:func:`~lrbandit_gym.files.read_npz`: a file that is not an npz archive, or a corrupt
    one, is a ``ValueError`` that says so)."""
    return read_npz(path)


def check_config(state: Mapping[str, Any], mine: Mapping[str, Any], keys: Iterable[str]) -> None:
    """Raise unless ``state`` has every key of ``mine`` and agrees on the ``keys``."""
    missing = [k for k in mine if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    for key in keys:
        theirs = list(state[key]) if isinstance(mine[key], list) else state[key]
        if theirs != mine[key]:
            raise ValueError(
                f"state[{key!r}] = {state[key]!r} does not match this object's "
                f"{key} = {mine[key]!r}"
            )


def copy_arrays(
    state: Mapping[str, Any], mine: Mapping[str, Any], keys: Iterable[str]
) -> dict[str, np.ndarray]:
    """Copies of ``state[key]``, each finite with the shape and dtype of ``mine[key]``."""
    new = {}
    for key in keys:
        arr = np.asarray(state[key])
        if arr.shape != mine[key].shape or arr.dtype != mine[key].dtype:
            raise ValueError(
                f"state[{key!r}] must be a {mine[key].dtype} array of shape "
                f"{mine[key].shape}, got {arr.dtype} array of shape {arr.shape}"
            )
        if not np.isfinite(arr).all():
            raise ValueError(f"state[{key!r}] must be finite")
        new[key] = arr.copy()
    return new


def check_count(value: Any, key: str) -> int:
    """``state[key]`` as a non-negative ``int`` (Python, numpy or 0-d array)."""
    v = plain(value)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"state[{key!r}] must be a non-negative integer, got {value!r}")
    return v


def check_part(validate: Callable[[Mapping[str, Any]], Any], part: Any, key: str) -> Any:
    """``validate(part)`` for the part ``state[key]`` of a composite state, its errors
    naming ``state[key]``.

    Raises
    ------
    ValueError
        If ``part`` is not a dict or ``validate`` refuses it.
    """
    if not isinstance(part, Mapping):
        raise ValueError(f"state[{key!r}] must be a dict, got {type(part).__name__}")
    try:
        return validate(part)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"state[{key!r}] is invalid: {exc}") from None
