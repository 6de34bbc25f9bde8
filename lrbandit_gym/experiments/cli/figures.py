"""``lrbandit figures NPZ``: a study's figures redrawn from the ``.npz`` that ``lrbandit
reproduce`` saved (:func:`~lrbandit_gym.experiments.reproduce.outputs.redraw_figures`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lrbandit_gym.experiments.cli.conventions import (
    EXIT_FAILED,
    EXIT_OK,
    add_output_arguments,
    usage_errors,
)
from lrbandit_gym.experiments.figures import MatplotlibMissing
from lrbandit_gym.experiments.reproduce.outputs import redraw_figures

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``figures`` to the ``lrbandit`` subcommands."""
    fig = subparsers.add_parser(
        "figures", help="redraw a study's figures from the .npz that reproduce saved"
    )
    fig.add_argument("npz", help="the {study}.npz written by lrbandit reproduce")
    add_output_arguments(fig, None, "the PNGs (default: the npz's folder)")
    fig.set_defaults(func=run, parser=fig)
    return fig


def run(args: argparse.Namespace) -> int:
    """Redraw a study's figures; exit 1 without matplotlib, saying how to install it."""
    if not Path(args.npz).is_file():
        args.parser.error(f"argument npz: no such file: {args.npz!r}")
    try:
        usage_errors(args, lambda: redraw_figures(args.npz, out=args.out, overwrite=args.overwrite))
    except MatplotlibMissing:
        print(
            "lrbandit figures: matplotlib is not installed, so no figure was drawn; install "
            'the plot extra: pip install "lrbandit-gym[plot]"',
            file=sys.stderr,
        )
        return EXIT_FAILED
    except ValueError as exc:  # not a reproduce .npz
        args.parser.error(f"argument npz: {exc}")
    return EXIT_OK
