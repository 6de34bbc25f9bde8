"""The ``lrbandit`` command line: ``demo``, ``reproduce``, ``figures``, ``bench``,
``compare``, ``validate`` and ``analyze``, one module each.

Every subcommand module has ``add_parser(subparsers)``, which adds its arguments and sets
its ``run(args) -> int`` as the handler, and takes its argument types, ``--out`` and
``--overwrite``, exit statuses and Ctrl-C handling from
:mod:`~lrbandit_gym.experiments.cli.conventions`.  One convention for every subcommand: a
bad argument is a usage error (exit status 2, the message names the option, before
anything runs); a run that fails exits with status 1 and a message; ``validate`` exits with
status 1 when its verdict is not ``VALID``.  ``--out`` is always a folder; a file already
there is never replaced without ``--overwrite``
(:mod:`lrbandit_gym.experiments.outputs`)."""

from __future__ import annotations

import argparse

from lrbandit_gym.experiments.cli import (
    analyze,
    bench,
    compare,
    demo,
    figures,
    reproduce,
    validate,
)
from lrbandit_gym.experiments.cli.conventions import (
    interrupted,
    nonnegative_int,
    positive_int,
)
from lrbandit_gym.experiments.parallel import require_ray

__all__ = ["build_parser", "main", "nonnegative_int", "positive_int"]

#: The subcommands, in the order ``lrbandit --help`` lists them.
SUBCOMMANDS = (demo, reproduce, figures, bench, compare, validate, analyze)


def build_parser() -> argparse.ArgumentParser:
    """The ``lrbandit`` parser: one subparser per subcommand, each with its handler."""
    parser = argparse.ArgumentParser(
        prog="lrbandit", description="Matrix-context bandits and online inference."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for subcommand in SUBCOMMANDS:
        subcommand.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand and return its exit status; Ctrl-C that no subcommand turned into a
    partial result (nothing had finished, or a second Ctrl-C) exits 130, the convention for
    SIGINT, with one line instead of a traceback."""
    args = build_parser().parse_args(argv)
    if getattr(args, "backend", None) == "ray":  # before anything runs or is written
        try:
            require_ray()
        except ImportError as exc:
            args.parser.error(f"argument --backend: {exc}")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        return interrupted(args.command, exc)
