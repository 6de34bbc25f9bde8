"""``lrbandit reproduce STUDY``: the paper's simulation studies
(:func:`~lrbandit_gym.experiments.reproduce.run.reproduce`)."""

from __future__ import annotations

import argparse

from lrbandit_gym.engine import ENGINES
from lrbandit_gym.experiments.cli.conventions import (
    EXIT_OK,
    add_output_arguments,
    nonnegative_int,
    partial_result,
    positive_int,
    usage_errors,
)
from lrbandit_gym.experiments.parallel import RunInterrupted
from lrbandit_gym.experiments.reproduce.run import STUDIES, STUDY_DEFAULTS, reproduce

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``reproduce`` to the ``lrbandit`` subcommands."""
    defaults = "; ".join(
        f"{s}: {t} trials, n = {' '.join(map(str, n))}" for s, (t, n) in STUDY_DEFAULTS.items()
    )
    rep = subparsers.add_parser(
        "reproduce",
        help="the paper's simulation studies",
        description=f"The paper's simulation studies. Defaults (the paper's): {defaults}.",
    )
    rep.add_argument("study", choices=list(STUDIES))
    rep.add_argument("--trials", type=positive_int, default=None, help="default: the paper's")
    rep.add_argument("--n", type=positive_int, nargs="+", default=None, help="default: the paper's")
    rep.add_argument("--seed", type=nonnegative_int, default=0)
    add_output_arguments(
        rep, "lrbandit-out", "{study}.csv, {study}.json, {study}.npz and the figures"
    )
    rep.add_argument("--jobs", type=positive_int, default=2)
    rep.add_argument("--backend", choices=["local", "ray"], default="local")
    rep.add_argument("--batch-size", type=positive_int, default=125, help="trials per chunk")
    rep.add_argument(
        "--no-figures", action="store_true", help="do not draw the PNG figures (plot extra)"
    )
    rep.add_argument(
        "--compare-projection",
        action="store_true",
        help="table1: also run the paper's G_t on the same trajectories (doubles inference)",
    )
    rep.add_argument(
        "--point-estimate",
        choices=["one-step", "projection"],
        default=None,
        help="how <M_a, T> is read from the debiased average: one-step (default) or the "
        "paper's rank-r projection (eq. (12)); not for value and ensemble",
    )
    rep.add_argument(
        "--ranks",
        type=positive_int,
        nargs="+",
        default=None,
        help="table2: ranks to run (default 3 5 7; r=3 is table1's setting)",
    )
    rep.add_argument(
        "--warm-start",
        type=positive_int,
        default=None,
        help="uniform rounds before inference (default 2000; ensemble 300)",
    )
    rep.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="per-round arithmetic: numba kernels (fast extra) or numpy (default auto: "
        "numba when installed); same numbers up to rounding",
    )
    rep.add_argument(
        "--uniform-from",
        type=positive_int,
        default=None,
        metavar="N0",
        help="also report time-uniform coverage: read every interval at every round from N0 "
        "to the last checkpoint, as fixed-n intervals and as confidence sequences",
    )
    rep.add_argument(
        "--tuning-n",
        type=positive_int,
        default=None,
        help="round at which the confidence sequences are tightest (default 1000)",
    )
    rep.set_defaults(func=run, parser=rep)
    return rep


def run(args: argparse.Namespace) -> int:
    """Run the study; exit status 130 when Ctrl-C stopped it (what finished is written,
    marked partial, by :func:`~lrbandit_gym.experiments.reproduce.run.reproduce`)."""

    def study() -> int:
        try:
            _reproduce_study(args)
        except RunInterrupted as exc:
            return partial_result("reproduce", exc)
        return EXIT_OK

    return usage_errors(args, study)


def _reproduce_study(args: argparse.Namespace) -> None:
    reproduce(
        args.study,
        trials=args.trials,
        n=None if args.n is None else tuple(args.n),
        seed=args.seed,
        out=args.out,
        jobs=args.jobs,
        backend=args.backend,
        batch_size=args.batch_size,
        figures=not args.no_figures,
        compare_projection=args.compare_projection,
        ranks=None if args.ranks is None else tuple(args.ranks),
        warm_start=args.warm_start,
        engine=args.engine,
        uniform_from=args.uniform_from,
        tuning_n=args.tuning_n,
        point_estimate=args.point_estimate,
        overwrite=args.overwrite,
    )
