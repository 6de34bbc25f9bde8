"""``lrbandit demo``: one online experiment whose intervals update while the agent plays
(:func:`~lrbandit_gym.experiments.demo.run_demo`)."""

from __future__ import annotations

import argparse

from lrbandit_gym.experiments.cli.conventions import (
    EXIT_OK,
    add_output_arguments,
    nonnegative_int,
    positive_int,
    usage_errors,
)
from lrbandit_gym.experiments.demo import DEFAULT_OUT, run_demo

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``demo`` to the ``lrbandit`` subcommands."""
    demo = subparsers.add_parser(
        "demo", help="an online experiment whose confidence intervals update as it plays"
    )
    demo.add_argument(
        "--rounds", type=positive_int, default=3000, help="online rounds after warm start"
    )
    demo.add_argument("--seed", type=nonnegative_int, default=0)
    add_output_arguments(
        demo,
        None,
        f"the figure demo_intervals.png (default {DEFAULT_OUT}, where each run replaces the "
        "figure of the run before)",
    )
    demo.add_argument("--no-plot", action="store_true", help="do not save the figure")
    demo.set_defaults(func=run, parser=demo)
    return demo


def run(args: argparse.Namespace) -> int:
    """One online experiment with both inference wrappers (the README's main job)."""

    def play() -> int:
        run_demo(
            rounds=args.rounds,
            seed=args.seed,
            out=args.out,
            plot=not args.no_plot,
            overwrite=args.overwrite,
        )
        return EXIT_OK

    return usage_errors(args, play)
