"""Checks that the top-level packages shipped with lrbandit-gym are ours.

The distribution installs three top-level packages: ``lrbandit_gym``, ``agents`` and
``inference``.  Other distributions use the names ``agents`` (openai-agents, TensorFlow's
2018 ``agents``) and ``inference`` (Roboflow's), and installing one of them next to this
package overwrites or shadows ours without a warning.  The packages that import ``agents``
or ``inference`` check what they got with :func:`check_companion` and fail with an error
that says what happened and how to fix it, instead of a puzzling ``ModuleNotFoundError``
deep inside an import.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

__all__ = ["check_companion", "companion_error"]

_HOME = Path(__file__).resolve().parent.parent


def companion_error(name: str, detail: str) -> ImportError:
    """The error for a top-level package ``name`` that is not lrbandit-gym's."""
    return ImportError(
        f"the top-level package {name!r} is not the one lrbandit-gym ships ({detail}). "
        f"Another distribution installs a package of the same name (for example "
        f"{'openai-agents' if name == 'agents' else 'Roboflow inference'}) and has overwritten "
        f"or shadowed ours. Fix: install lrbandit-gym in its own virtual environment, or "
        f"uninstall the other distribution and reinstall lrbandit-gym "
        f"(pip install --force-reinstall lrbandit-gym)."
    )


def check_companion(module: ModuleType, name: str, attribute: str) -> None:
    """Raise :func:`companion_error` unless ``module`` is lrbandit-gym's package ``name``:
    it must define ``attribute`` and sit beside :mod:`lrbandit_gym` (same installation)."""
    file = getattr(module, "__file__", None)
    if not hasattr(module, attribute):
        raise companion_error(name, f"it has no {attribute!r}; found {file}")
    if file is None or Path(file).resolve().parent.parent != _HOME:
        raise companion_error(name, f"found {file}, expected it under {_HOME} beside lrbandit_gym")
