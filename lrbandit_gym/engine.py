"""Which implementation runs the per-round arithmetic of the estimator and the inference.

Two engines compute the same quantities, round by round:

* ``"numpy"``: stacked numpy operations over the trial axis (the reference);
* ``"numba"``: compiled kernels (the ``fast`` extra, ``pip install lrbandit-gym[fast]``) that
  run one trial's small ``r x r`` algebra — the balancing of Lemma 2.1, the tangent-space
  terms of ``S^2``, the debiasing sums — in one loop instead of dozens of numpy calls.

They agree to rounding (about ``1e-12`` relative per round; the factor bases may differ by
the sign of a column, which changes nothing that is reported).  The default, ``"auto"``,
is numba when it can be imported and numpy otherwise; :func:`active_engine` says which one
runs, and ``lrbandit reproduce`` records it.  ``LRBANDIT_ENGINE`` in the environment sets
the initial choice.

>>> from lrbandit_gym import engine
>>> with engine.use("numpy"):
...     engine.active_engine()
'numpy'
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = [
    "ENGINES",
    "active_engine",
    "call",
    "get_engine",
    "numba_available",
    "set_engine",
    "use",
]

ENGINES = ("auto", "numpy", "numba")
T = TypeVar("T")


_numba_ok: bool | None = None  # cached result of numba_available()


def numba_available() -> bool:
    """Whether numba can be imported (the ``fast`` extra is installed and works).

    A numba that is installed but fails to import (say, built for another numpy) counts as
    unavailable, with a warning that says why.
    """
    global _numba_ok
    if _numba_ok is None:
        if importlib.util.find_spec("numba") is None:
            _numba_ok = False
        else:
            try:
                import numba  # noqa: F401
            except Exception as exc:  # ImportError, or an incompatible numpy
                warnings.warn(
                    f"numba is installed but cannot be imported ({exc}); the numpy engine "
                    "runs instead",
                    RuntimeWarning,
                    stacklevel=2,
                )
                _numba_ok = False
            else:
                _numba_ok = True
    return _numba_ok


def _check(name: str) -> str:
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}; got {name!r}")
    if name == "numba" and not numba_available():
        raise ImportError(
            "engine='numba' needs numba: pip install 'lrbandit-gym[fast]' (or use engine='numpy')"
        )
    return name


_choice = _check(os.environ.get("LRBANDIT_ENGINE", "auto") or "auto")
_compiled = None  # resolved lazily: None until the first call of compiled()


def set_engine(name: str) -> str:
    """Choose the engine for every estimator and inference object; returns the previous
    choice.  Raises ``ValueError`` for an unknown name and ``ImportError`` for ``"numba"``
    without numba installed."""
    global _choice, _compiled
    previous = _choice
    _choice = _check(name)
    _compiled = None
    return previous


def get_engine() -> str:
    """The configured choice: ``"auto"``, ``"numpy"`` or ``"numba"``."""
    return _choice


def compiled() -> bool:
    """Whether the numba kernels run (the per-round hot paths call this)."""
    global _compiled
    if _compiled is None:
        _compiled = _choice == "numba" or (_choice == "auto" and numba_available())
    return _compiled


def active_engine() -> str:
    """The engine that runs: ``"numba"`` or ``"numpy"``."""
    return "numba" if compiled() else "numpy"


@contextlib.contextmanager
def use(name: str | None) -> Iterator[None]:
    """Run a block with ``name`` as the engine (None: the current choice), then restore the
    previous choice."""
    previous = set_engine(get_engine() if name is None else name)
    try:
        yield
    finally:
        set_engine(previous)


def call(name: str | None, fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` with ``name`` as the engine (None: the current choice): how study
    chunks run in worker processes (Ray's too) with the engine of the process that scheduled
    them, and ``lrbandit bench --engine``."""
    with use(name):
        return fn(*args)
