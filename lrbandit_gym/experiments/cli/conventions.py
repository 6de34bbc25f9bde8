"""What every ``lrbandit`` subcommand shares: its argument types, ``--out``/``--overwrite``,
its exit statuses and its handling of Ctrl-C.

* A bad argument is a usage error (exit status 2, from :meth:`argparse.ArgumentParser.error`,
  the message naming the option) before anything runs: the integer types below, and
  :func:`usage_errors` for the checks a run makes itself (an
  :class:`~lrbandit_gym.experiments.outputs.ArgumentError`).
* ``--out`` is always a folder; a file already there is never replaced without
  ``--overwrite`` (:mod:`lrbandit_gym.experiments.outputs`).
* Ctrl-C that a run turns into a partial result (a
  :class:`~lrbandit_gym.experiments.parallel.RunInterrupted`) exits with status 130 after
  writing what finished (:func:`partial_result`); Ctrl-C anywhere else exits 130 with one
  line (:func:`interrupted`).  A worker process that dies stops a run the same way, with
  exit status 1 and a line that says a worker died.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from lrbandit_gym.experiments.outputs import ArgumentError
from lrbandit_gym.experiments.parallel import RunInterrupted, WorkerDied

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "add_output_arguments",
    "interrupted",
    "nonnegative_int",
    "partial_result",
    "positive_int",
    "usage_errors",
]

#: The run finished (``validate``: with the verdict ``VALID``).
EXIT_OK = 0
#: The run failed, with a message (``validate``: any verdict but ``VALID``).
EXIT_FAILED = 1
#: A bad argument: argparse's status for a usage error.
EXIT_USAGE = 2
#: Ctrl-C: the shell's status for SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def _int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}")
        return value

    return parse


positive_int = _int_at_least(1)
positive_int.__doc__ = "argparse type: an integer >= 1 (a count of rounds, trials, jobs, a size)."
nonnegative_int = _int_at_least(0)
nonnegative_int.__doc__ = "argparse type: an integer >= 0 (a seed)."


def add_output_arguments(sub: argparse.ArgumentParser, default: str | None, what: str) -> None:
    """``--out FOLDER`` and ``--overwrite``: one meaning for every subcommand."""
    sub.add_argument(
        "--out",
        metavar="FOLDER",
        default=default,
        help=f"folder for {what} (created if missing)"
        + (f"; default {default}" if default else ""),
    )
    sub.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the files an earlier run left in the folder (without it they are "
        "refused before anything runs)",
    )


def usage_errors(args: argparse.Namespace, run: Callable[[], int]) -> int:
    """``run()``, with a bad argument found before the run starts (an
    :class:`~lrbandit_gym.experiments.outputs.ArgumentError`) reported as the subcommand's
    usage error (exit 2)."""
    try:
        return run()
    except ArgumentError as exc:
        args.parser.error(f"argument {exc.option}: {exc}")


def partial_result(command: str, stopped: RunInterrupted) -> int:
    """Say that Ctrl-C (or a worker that died, ``stopped.reason``) stopped ``command``
    after it wrote what finished; the exit status (1 when a worker died)."""
    if stopped.reason is not None:
        print(
            f"{command}: {stopped.reason}; {stopped.line} (partial result): exit status 1",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"{command}: {stopped.line} (partial result): exit status 130", file=sys.stderr)
    return EXIT_INTERRUPTED


def interrupted(command: str, stopped: BaseException | None = None) -> int:
    """Say that Ctrl-C (or a worker that died, a :class:`~.parallel.WorkerDied` as
    ``stopped``) stopped ``lrbandit command`` with nothing to keep; the exit status (1 when
    a worker died)."""
    if isinstance(stopped, WorkerDied):
        print(f"lrbandit {command}: {stopped}; no further output written", file=sys.stderr)
        return EXIT_FAILED
    print(f"lrbandit {command}: interrupted; no further output written", file=sys.stderr)
    return EXIT_INTERRUPTED
