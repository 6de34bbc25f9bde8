"""The files that ``lrbandit`` subcommands write: checked before a run, stamped with the run
that wrote them, and written atomically.

Every subcommand that writes files takes ``--out``, a folder, and ``--overwrite``:

* :func:`check_outputs` runs *before* any trial.  ``--out`` must be a folder (or not exist
  yet); the files the run may write, and any left there by an earlier run of the same
  command (:func:`existing_outputs`), are refused unless ``overwrite`` is set, so a long run
  never ends by failing to write or by silently replacing earlier results.
* Every file carries a :class:`RunStamp`: the command, its settings, its seed and the
  package's version (a ``#`` comment line on top of a CSV, an HTML comment on top of
  Markdown, a ``"run"`` entry in JSON, a ``"metadata"`` entry in ``.npz``, the PNG's
  ``Description``).  Read such a CSV with ``pandas.read_csv(path, comment="#")``.  A run
  stopped by Ctrl-C writes what finished, and its stamp says so: ``"partial": true`` and
  ``"interrupted": "interrupted: N of M trials"`` in the dictionary, and a line that
  starts ``PARTIAL RUN (interrupted: N of M trials)``.
* Every file is written to a temporary file in its own folder, then renamed over the target
  with ``os.replace``: an interrupted or failed write leaves the old file or none, never a
  truncated one.
* With ``overwrite``, files of an earlier run that this run did not write again are removed
  (:func:`remove_stale`), so no old file sits unmarked beside new ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import fnmatch
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lrbandit_gym.files import atomic_file

__all__ = [
    "ArgumentError",
    "OutputError",
    "RunStamp",
    "check_outputs",
    "current_stamp",
    "existing_outputs",
    "remove_stale",
    "stamped",
    "write_csv",
    "write_figure",
    "write_json",
    "write_npz",
    "write_text",
]


class ArgumentError(ValueError):
    """A bad argument of a run, found before it starts: ``argument`` names it (a Python
    parameter such as ``"ranks"`` or an option such as ``"--out"``), so that the command
    line reports a usage error (exit status 2) naming the option, not a traceback."""

    def __init__(self, message: str, argument: str):
        super().__init__(message)
        self.argument = argument

    @property
    def option(self) -> str:
        """The command-line option: ``"--uniform-from"`` for ``"uniform_from"``."""
        name = self.argument
        return name if name.startswith("-") else "--" + name.replace("_", "-")


class OutputError(ArgumentError):
    """An output folder or file that a run may not write (``argument``: ``"--out"``)."""

    def __init__(self, message: str, argument: str = "--out"):
        super().__init__(message, argument)


@dataclass(frozen=True)
class RunStamp:
    """What wrote a file: the command, its settings and seed, the package's version and,
    for a run stopped by Ctrl-C, ``partial``: how much of it ran
    (``"interrupted: N of M trials"``; empty for a complete run)."""

    command: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    version: str = ""
    partial: str = ""

    @classmethod
    def of(
        cls, command: str, settings: Mapping[str, Any], seed: int | None, partial: str = ""
    ) -> RunStamp:
        """The stamp of a run of ``command`` (e.g. ``"lrbandit reproduce table1"``)."""
        import lrbandit_gym

        return cls(command, dict(settings), seed, lrbandit_gym.__version__, partial)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "package": "lrbandit-gym",
            "version": self.version,
            "command": self.command,
            "seed": self.seed,
            "settings": dict(self.settings),
            "partial": bool(self.partial),
        }
        if self.partial:
            out["interrupted"] = self.partial
        return out

    def line(self) -> str:
        """One line: ``written by lrbandit-gym 0.1.0: COMMAND, seed S, settings {...}``,
        after ``PARTIAL RUN (interrupted: N of M trials); `` for a partial run."""
        settings = json.dumps(self.settings, sort_keys=True, default=_plain)
        head = f"PARTIAL RUN ({self.partial}); " if self.partial else ""
        return (
            f"{head}written by lrbandit-gym {self.version}: {self.command}, seed {self.seed}, "
            f"settings {settings}"
        )


_STAMP: contextvars.ContextVar[RunStamp | None] = contextvars.ContextVar("stamp", default=None)


@contextlib.contextmanager
def stamped(stamp: RunStamp) -> Iterator[RunStamp]:
    """Within the block, figures saved by :func:`write_figure` carry ``stamp``."""
    token = _STAMP.set(stamp)
    try:
        yield stamp
    finally:
        _STAMP.reset(token)


def current_stamp() -> RunStamp | None:
    """The stamp of the enclosing :func:`stamped` block, if any."""
    return _STAMP.get()


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)


# -- before the run -----------------------------------------------------------------------
def existing_outputs(folder: str | Path, patterns: Iterable[str]) -> list[Path]:
    """The files in ``folder`` whose names match any of the glob ``patterns``, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    patterns = list(patterns)
    return sorted(
        p for p in folder.iterdir() if any(fnmatch.fnmatchcase(p.name, g) for g in patterns)
    )


def check_outputs(
    folder: str | Path, patterns: Iterable[str], overwrite: bool, argument: str = "--out"
) -> list[Path]:
    """Check, before a run, that it may write into ``folder``; return the files there that
    match ``patterns`` (what an earlier run left, replaced or removed after this run).

    Raises
    ------
    OutputError
        If ``folder`` is a file or lies under one, or holds matching files and
        ``overwrite`` is false (the
        message lists them and says to pass ``--overwrite`` or choose another folder).
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(
            f"{str(folder)!r} is a file; {argument} is a folder, where the run writes its files",
            argument,
        )
    for parent in folder.absolute().parents:  # the nearest one that exists must be a folder
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(
                    f"{str(folder)!r} is under {str(parent)!r}, which is a file; {argument} "
                    "is a folder, where the run writes its files",
                    argument,
                )
            break
    found = existing_outputs(folder, patterns)
    if found and not overwrite:
        names = ", ".join(p.name for p in found)
        raise OutputError(
            f"{str(folder)!r} already holds files of an earlier run ({names}); pass "
            f"--overwrite to replace them, or choose another {argument}",
            argument,
        )
    return found


def remove_stale(found: Iterable[Path], written: Iterable[str | Path], stream=None) -> list[Path]:
    """Remove the files ``found`` before the run that the run did not write again (an
    earlier run's, e.g. a ``table1_uniform.csv`` beside a new ``table1.csv``); return them."""
    kept = {Path(p).resolve() for p in written}
    removed = []
    for path in found:
        if path.resolve() not in kept and path.is_file():
            path.unlink()
            removed.append(path)
    if removed and stream is not None:
        names = ", ".join(p.name for p in removed)
        print(f"removed files of an earlier run that this run does not write: {names}", file=stream)
    return removed


# -- atomic writes ------------------------------------------------------------------------
@contextlib.contextmanager
def _atomic(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """A file object for ``path`` that becomes ``path`` only when the block completes: a
    temporary file in the same folder with the umask's permissions, renamed with
    ``os.replace``; removed on failure (:func:`~lrbandit_gym.files.atomic_file`)."""
    with atomic_file(path, mode) as fh:
        yield fh


def write_text(path: str | Path, text: str, stamp: RunStamp | None = None) -> str:
    """Write ``text`` atomically; with ``stamp``, below an HTML comment line naming the run
    (for Markdown)."""
    with _atomic(path) as fh:
        if stamp is not None:
            fh.write(f"<!-- {stamp.line()} -->\n")
        fh.write(text)
    return str(path)


def write_csv(
    path: str | Path,
    rows: Sequence[Mapping[str, Any]],
    stamp: RunStamp | None,
    fieldnames: Sequence[str] | None = None,
) -> str:
    """Write ``rows`` as CSV atomically, below a ``# written by ...`` line (``stamp``)."""
    buf = io.StringIO()
    if stamp is not None:
        buf.write(f"# {stamp.line()}\n")
    names = list(fieldnames) if fieldnames is not None else list(rows[0]) if rows else []
    writer = csv.DictWriter(buf, fieldnames=names, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    with _atomic(path) as fh:
        fh.write(buf.getvalue())
    return str(path)


def write_json(path: str | Path, data: Mapping[str, Any], stamp: RunStamp | None) -> str:
    """Write ``data`` as JSON atomically, with the stamp under ``"run"``."""
    payload = dict(data)
    if stamp is not None:
        payload["run"] = stamp.to_dict()
    text = json.dumps(payload, indent=2, default=_plain)
    with _atomic(path) as fh:
        fh.write(text)
    return str(path)


def write_npz(path: str | Path, arrays: Mapping[str, Any], stamp: RunStamp | None) -> str:
    """``np.savez_compressed`` atomically, with the stamp as JSON text under ``"metadata"``
    (read it with ``json.loads(str(np.load(path)["metadata"]))``)."""
    arrays = dict(arrays)
    if stamp is not None:
        arrays["metadata"] = np.array(json.dumps(stamp.to_dict(), default=_plain))
    with _atomic(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return str(path)


def write_figure(fig, path: str | Path, **kwargs) -> Path:
    """``fig.savefig(path)`` atomically, as PNG, with the enclosing :func:`stamped` block's
    stamp as the PNG's ``Description``."""
    stamp = current_stamp()
    if stamp is not None:
        kwargs["metadata"] = {**kwargs.get("metadata", {}), "Description": stamp.line()}
    with _atomic(path, "wb") as fh:
        fig.savefig(fh, format="png", **kwargs)
    return Path(path)
