"""``lrbandit compare``: agents side by side on the same trials, with regret, estimation
error and the intervals on each agent's own trajectory
(:func:`~lrbandit_gym.experiments.compare.run.compare`)."""

from __future__ import annotations

import argparse
import sys

from lrbandit_gym.experiments.cli.conventions import (
    EXIT_OK,
    add_output_arguments,
    nonnegative_int,
    partial_result,
    positive_int,
)

# The module, not its functions: the run is looked up when it starts (tests replace it).
from lrbandit_gym.experiments.compare import run as comparison
from lrbandit_gym.experiments.compare.report import OUTPUT_FILES
from lrbandit_gym.experiments.outputs import ArgumentError, check_outputs
from lrbandit_gym.experiments.parallel import RunInterrupted

__all__ = ["add_parser", "run"]

#: Command-line option of each argument of compare() and of its env_config.
_COMPARE_OPTIONS = {
    "env_config": "--d/--rank/--arms",
    "env_config.d1": "--d",
    "env_config.d2": "--d",
    "env_config.rank": "--rank",
    "env_config.n_actions": "--arms",
    "agents": "--agents",
}


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``compare`` to the ``lrbandit`` subcommands."""
    cmp = subparsers.add_parser(
        "compare",
        help="agents side by side on the same trials: regret, estimation, inference",
        description="Run agents on the same trials (same contexts and noise for every agent) "
        "and report cumulative regret, estimation error, time per round, and the coverage "
        "and width of the intervals computed on each agent's own trajectory: <M_a, T>, V*, "
        "and V(arm 0), V(uniform), the values of two fixed target policies (n/a, with the "
        "reason, where the agent's propensities cannot support them). Default "
        "line-up: eps-greedy, softmax, ensemble (low-rank), linear (full-rank eps-greedy), "
        "ppo and dqn (sb3 extra), uniform, oracle.",
    )
    cmp.add_argument("--agents", nargs="+", default=None, help="names from the line-up")
    cmp.add_argument("--trials", type=positive_int, default=200, help="trials per agent")
    cmp.add_argument(
        "--sb3-trials",
        type=positive_int,
        default=20,
        help="trials for stable-baselines3 agents (one network per trial): the first ones",
    )
    cmp.add_argument("--rounds", type=positive_int, default=2000)
    cmp.add_argument("--d", type=positive_int, default=20, help="d1 = d2")
    cmp.add_argument("--rank", type=positive_int, default=2)
    cmp.add_argument("--arms", type=positive_int, default=2)
    cmp.add_argument(
        "--warm-start",
        type=positive_int,
        default=400,
        help="uniform rounds before the low-rank agents' fit and before the wrappers' own",
    )
    cmp.add_argument("--seed", type=nonnegative_int, default=0)
    cmp.add_argument("--jobs", type=positive_int, default=2)
    cmp.add_argument("--backend", choices=["local", "ray"], default="local")
    cmp.add_argument("--batch-size", type=positive_int, default=25, help="trials per batched chunk")
    add_output_arguments(cmp, "lrbandit-out", "compare.{csv,json,md,npz} and the figures")
    cmp.add_argument("--no-figures", action="store_true", help="do not draw the PNG figures")
    cmp.set_defaults(func=run, parser=cmp)
    return cmp


def run(args: argparse.Namespace) -> int:
    """Agents side by side on the same trials (regret, estimation, inference)."""
    try:
        return _run_compare(args)
    except ArgumentError as exc:
        option = _COMPARE_OPTIONS.get(exc.argument, exc.option)
        args.parser.error(f"argument {option}: {exc}")


def _agent_names(args: argparse.Namespace, lineup: dict) -> list[str]:
    """The agents to run: ``--agents`` or the default line-up, less the stable-baselines3
    agents when the sb3 extra is missing (a usage error when ``--agents`` names them)."""
    names = list(args.agents) if args.agents else list(comparison.DEFAULT_AGENTS)
    unknown = [n for n in names if n not in lineup]
    if unknown:
        args.parser.error(
            f"argument --agents: unknown agent(s) {unknown}; choose from {list(lineup)}"
        )
    if not comparison.sb3_available():
        dropped = [n for n in names if lineup[n].kind == "sb3"]
        if dropped and args.agents:
            args.parser.error(
                f'argument --agents: {dropped} need the sb3 extra: pip install "lrbandit-gym[sb3]"'
            )
        if dropped:
            print(f"{', '.join(dropped)} skipped: the sb3 extra is not installed", file=sys.stderr)
        names = [n for n in names if n not in dropped]
    return names


def _run_compare(args: argparse.Namespace) -> int:
    lineup = comparison.default_lineup(
        rank=args.rank, warm_start=args.warm_start, rounds=args.rounds, sb3_trials=args.sb3_trials
    )
    names = _agent_names(args, lineup)
    env_config = {"d1": args.d, "d2": args.d, "rank": args.rank, "n_actions": args.arms}
    check_outputs(args.out, OUTPUT_FILES, args.overwrite)  # before any trial
    print(
        f"compare: d = {args.d}, r = {args.rank}, K = {args.arms}, {args.rounds} rounds, "
        f"{args.trials} trials ({args.sb3_trials} for stable-baselines3 agents), seed "
        f"{args.seed}, {args.jobs} job(s), backend {args.backend}",
        file=sys.stderr,
    )
    stopped = None
    try:
        result = comparison.compare(
            env_config,
            {n: lineup[n] for n in names},
            trials=args.trials,
            rounds=args.rounds,
            seed=args.seed,
            warm_start=args.warm_start,
            jobs=args.jobs,
            backend=args.backend,
            batch_size=args.batch_size,
        )
    except RunInterrupted as exc:  # Ctrl-C: keep the units that finished, marked partial
        stopped, result = exc, exc.result
    paths = result.save(
        args.out, figures=not args.no_figures, stream=sys.stderr, overwrite=args.overwrite
    )
    print(result.to_markdown())
    written = [paths["csv"], paths["inference_csv"], paths["regret_csv"], paths["markdown"]]
    written += [paths["json"], paths["npz"], *paths["figures"]]
    print(f"wrote {', '.join(written)}", file=sys.stderr)
    if stopped is not None:
        return partial_result("compare", stopped)
    return EXIT_OK
