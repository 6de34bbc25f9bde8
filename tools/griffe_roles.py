"""Griffe extension for the documentation site: docstrings as ``help()`` shows them.

Griffe reads the source without importing it, which misses two things ``help()`` shows:

- a class whose docstring is assembled at import (``__doc__ = "..." + _DOC_PARAMETERS``,
  shared by a wrapper and its vector twin) has no docstring in the source: the extension
  takes it from the imported class;
- the docstrings are numpy style and cite code with Sphinx roles
  (``:class:`~agents.LowRankSGD```, ``:meth:`interval```), which Markdown would print with
  their colons: the extension rewrites each role as inline code before the docstring is
  parsed (a leading ``~`` keeps the last component, as in Sphinx).

mkdocstrings loads it (``extensions`` in ``mkdocs.yml``); the source files are not changed.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import griffe

#: A Sphinx cross-reference role: ``:kind:`target``` or ``:kind:`~dotted.target```.
ROLE = re.compile(r":(?:py:)?(?:attr|class|data|exc|func|meth|mod|obj):`(~?)([^`]+)`")


def code_for_roles(text: str) -> str:
    """``text`` with every Sphinx role replaced by inline code of its target."""

    def code(match: re.Match) -> str:
        target = match.group(2).strip()
        if match.group(1):
            target = target.rsplit(".", 1)[-1]
        return f"`{target}`"

    return ROLE.sub(code, text)


def runtime_docstring(cls: griffe.Class) -> str | None:
    """The docstring of the imported class, or None when it has none or cannot be imported."""
    try:
        value: Any = importlib.import_module(cls.module.path)
        for name in cls.path[len(cls.module.path) + 1 :].split("."):
            value = getattr(value, name)
    except Exception:
        return None
    doc = getattr(value, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else None


class DocstringsAsHelp(griffe.Extension):
    """Fill in assembled class docstrings, and rewrite Sphinx roles as inline code, in every
    docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = code_for_roles(obj.docstring.value)

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        # After the class body is visited: only then is its ``__doc__`` assignment known.
        if cls.docstring is None and "__doc__" in cls.members:
            doc = runtime_docstring(cls)
            if doc is not None:
                cls.docstring = griffe.Docstring(code_for_roles(doc), parent=cls)
