"""``lrbandit validate``: a Monte Carlo check of the intervals' coverage in a user's setting
(:func:`~lrbandit_gym.experiments.validate.run.run_validation`), with a one-line verdict.

The setting comes from a grid setting, a TOML config file and the command line
(:mod:`~lrbandit_gym.experiments.cli.validate_config` lists the config keys).  An invalid
argument or key (a value of the wrong type included) exits with status 2 and a message
naming it, before any trial runs; so does an output that exists already (without
``--overwrite``) or a config ``out`` outside the config file's folder.  The run then exits
with status 0 only when the verdict is ``VALID`` (1 for ``UNDER-COVERS``, ``OVER-COVERS``,
``FAILED`` or ``NO RESULT``).  ``--out`` is a folder: the table goes to ``validate.csv``
in it, every trial's intervals and diagnostics to ``validate.npz``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lrbandit_gym.experiments.cli.conventions import (
    EXIT_FAILED,
    EXIT_OK,
    add_output_arguments,
    nonnegative_int,
    partial_result,
    positive_int,
)
from lrbandit_gym.experiments.cli.validate_config import setting_and_options
from lrbandit_gym.experiments.outputs import OutputError, check_outputs
from lrbandit_gym.experiments.parallel import RunInterrupted

# The module for run_validation: the run is looked up when it starts (tests replace it).
from lrbandit_gym.experiments.validate import run as validation
from lrbandit_gym.experiments.validate.grid import GRID
from lrbandit_gym.experiments.validate.setting import ESTIMATORS, POLICIES, SettingError

__all__ = ["OUTPUT_FILE", "TRIALS_FILE", "add_parser", "run"]

#: The files ``lrbandit validate`` writes into its ``--out`` folder: the coverage table, and
#: every trial's intervals and diagnostics (``ValidationResult.to_npz``).
OUTPUT_FILE = "validate.csv"
TRIALS_FILE = "validate.npz"

# Command-line option of each setting field (SettingError.field), for error messages.
_OPTIONS = {
    "env.d1": "--d1",
    "env.d2": "--d2",
    "env.rank": "--rank",
    "env.n_actions": "--arms",
    "env.context": "--context",
    "env.noise_std": "--noise-std",
    "env.noise": "--noise",
    "env.singular_values": "--singular-values",
    "env.truth_seed": "--truth-seed",
    "policy": "--policy",
    "policy_kwargs.epsilon": "--epsilon",
    "policy_kwargs.decay": "--decay",
    "policy_kwargs.temperature": "--temperature",
    "policy_kwargs.step_scale": "--step-scale",
    "policy_kwargs.step_gain": "--step-gain",
    "rank": "--estimator-rank",
    "warm_start": "--warm-start",
    "targets": "--targets",
    "value": "--no-value",
    "n": "--n",
    "estimator": "--estimator",
    "uniform_from": "--uniform-from",
    "tuning_n": "--tuning-n",
    "context_law": "--context-law",
    "projection": "--projection",
    "design_variance": "--design-variance",
    "env.context_std": "--context-std",
    "env.context_corr": "--context-corr",
    "trials": "--trials",
    "seed": "--seed",
    "batch_size": "--batch-size",
    "jobs": "--jobs",
    "confidence_level": "--level",
}


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``validate`` to the ``lrbandit`` subcommands."""
    grid = "; ".join(f"{name}: {s.description}" for name, s in GRID.items())
    val = subparsers.add_parser(
        "validate",
        help="Monte Carlo check of the intervals' coverage in your setting",
        description="Run many independent trials of a setting (environment, policy, "
        "targets, checkpoints) batched on the vector env, with the inference wrappers "
        "watching, and print the coverage of every interval with its Monte Carlo standard "
        "error, the z-scores' mean and s.d., and a one-line verdict (docs/reproduction.md, "
        f"'Validity outside the paper'). Grid settings: {grid}.",
    )
    val.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file of settings: top-level grid, trials, seed, batch_size, jobs, "
        "confidence_level, n, targets, value, rank, warm_start, estimator, out; tables [env] "
        "(the env's arguments) and [policy] (name and its keyword arguments); the command "
        "line overrides it",
    )
    val.add_argument("--grid", choices=list(GRID), help="start from a grid setting")
    _add_environment_arguments(val.add_argument_group("environment (MatrixContextBandit-v0)"))
    _add_policy_arguments(val.add_argument_group("policy"))
    _add_inference_arguments(val.add_argument_group("inference"))
    _add_run_arguments(val.add_argument_group("run"))
    val.set_defaults(func=run, parser=val)
    return val


def _add_environment_arguments(env) -> None:
    env.add_argument("--d1", type=positive_int)
    env.add_argument("--d2", type=positive_int)
    env.add_argument("--rank", type=positive_int, help="rank of the truth")
    env.add_argument("--arms", type=positive_int, help="number of arms K")
    env.add_argument("--context", choices=["gaussian", "completion"])
    env.add_argument(
        "--noise-std", type=float, nargs="+", metavar="SIGMA", help="one value, or one per arm"
    )
    env.add_argument(
        "--noise", choices=["gaussian", "uniform", "rademacher", "laplace", "student_t"]
    )
    env.add_argument("--singular-values", type=float, nargs="+", metavar="S")
    env.add_argument("--truth-seed", type=nonnegative_int)
    env.add_argument("--context-std", type=float, help="Gaussian contexts: the entries' s.d.")
    env.add_argument(
        "--context-corr",
        type=float,
        nargs="+",
        metavar="RHO",
        help="Gaussian contexts: AR(1) correlation of rows and columns (one, or row column)",
    )


def _add_policy_arguments(pol) -> None:
    pol.add_argument("--policy", choices=list(POLICIES))
    pol.add_argument("--epsilon", type=float, help="epsilon-greedy: exploration probability")
    pol.add_argument("--decay", type=float, help="epsilon-greedy: eps_t = epsilon t^-decay")
    pol.add_argument("--temperature", type=float, help="softmax: temperature tau")
    pol.add_argument("--step-scale", type=float, help="low-rank SGD: c_eta of Algorithm 1")
    pol.add_argument(
        "--step-gain", type=float, help="low-rank SGD: gain of the scale-free step (method.md §3)"
    )


def _add_inference_arguments(inf) -> None:
    inf.add_argument(
        "--targets",
        help="paper (T1, T2), entry (e11), random, random:SEED, or a .npz of named matrices",
    )
    inf.add_argument("--no-value", action="store_true", help="do not check the interval for V*")
    inf.add_argument("--n", type=positive_int, nargs="+", help="checkpoints: rounds of inference")
    inf.add_argument("--estimator-rank", type=positive_int, help="rank of the estimates")
    inf.add_argument(
        "--warm-start", type=positive_int, help="warm-start rounds (default: problem-sized)"
    )
    inf.add_argument(
        "--estimator",
        choices=list(ESTIMATORS),
        help="shared: the policy's estimator (paper); own: the wrappers' own",
    )
    inf.add_argument(
        "--uniform-from",
        type=positive_int,
        metavar="N0",
        help="also check time-uniform coverage: every interval read at every round from N0 "
        "to the last checkpoint, as fixed-n intervals and as confidence sequences",
    )
    inf.add_argument(
        "--context-law",
        choices=["gaussian", "completion", "estimated", "estimated-kronecker", "estimated-full"],
        help="the law the parameter intervals divide by (default: the environment's)",
    )
    inf.add_argument(
        "--projection",
        choices=["auto", "tangent", "paper", "none"],
        help="the parameter intervals' read-out (default auto: none, the debiased mean "
        "without the low-rank step, where the contexts barely vary along some directions, "
        "else tangent; docs/method.md §12)",
    )
    inf.add_argument(
        "--design-variance",
        choices=["auto", "pulled", "all-rounds"],
        help="the design part of the parameter intervals' standard error (default auto: on "
        "dense contexts every round's context and the arm's propensity in it where that is "
        "at least 0.01, eq. (14)'s pulled rounds below, on completion contexts eq. (14); "
        "pulled: eq. (14) alone; all-rounds: every round's term; docs/method.md §13)",
    )
    inf.add_argument(
        "--tuning-n",
        type=positive_int,
        help="round at which the confidence sequences are tightest (default 1000)",
    )


def _add_run_arguments(run_group) -> None:
    run_group.add_argument("--trials", type=positive_int, help="default 200")
    run_group.add_argument("--seed", type=nonnegative_int, help="default 0")
    run_group.add_argument("--batch-size", type=positive_int, help="trials per chunk (default 100)")
    run_group.add_argument("--jobs", type=positive_int, help="worker processes (default 1)")
    run_group.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the chunks run: local processes or Ray (the ray extra); the numbers are "
        "the same (default local)",
    )
    run_group.add_argument("--level", type=float, help="confidence level (default 0.95)")
    add_output_arguments(run_group, None, f"{OUTPUT_FILE}, the coverage table (default: no file)")
    run_group.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """``lrbandit validate``: check ``--out``, run, print the report (verdict last), write
    ``validate.csv`` and ``validate.npz`` into ``--out``; exit status 0 only for the verdict
    ``VALID``.  Ctrl-C stops the workers at once; the chunks that finished are reported and
    written, marked partial, with exit status 130."""
    parser = args.parser
    setting, options, out, source = setting_and_options(args, parser)
    if out is not None:
        _check_out(args, out)
    print(f"validate: {setting.describe()}", file=sys.stderr)
    print(
        f"validate: {options['trials']} trials, seed {options['seed']}, {options['jobs']} job(s)",
        file=sys.stderr,
    )
    stopped = None
    try:
        result = validation.run_validation(
            setting, progress=not args.no_progress, backend=args.backend, **options
        )
    except RunInterrupted as exc:
        stopped, result = exc, exc.result
    except SettingError as exc:
        parser.error(f"argument {_setting_option(args, exc, source)}: {exc}")
    print(result.report())
    print(f"validate: {result.seconds:.0f} s", file=sys.stderr)
    if out is not None:
        path = Path(out) / OUTPUT_FILE
        trials_path = Path(out) / TRIALS_FILE
        try:
            result.to_csv(path)
            result.to_npz(trials_path)
        except OSError as exc:
            print(f"validate: cannot write {path.parent}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(f"wrote {path} and {trials_path}", file=sys.stderr)
    if stopped is not None:
        return partial_result("validate", stopped)
    if result.status != "VALID":
        print(f"validate: verdict {result.status}: exit status 1", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _check_out(args: argparse.Namespace, out: str) -> None:
    """Refuse, as a usage error, an ``--out`` that looks like a file name or already holds
    ``validate.csv`` or ``validate.npz`` (without ``--overwrite``), before any trial runs."""
    option = "--out" if args.out is not None else f"--config ({args.config}: out)"
    if Path(out).suffix.lower() == ".csv" and not Path(out).is_dir():
        args.parser.error(
            f"argument {option}: --out is a folder (the table goes to {OUTPUT_FILE} in "
            f"it); got {out!r}, which looks like a file name"
        )
    try:
        check_outputs(out, [OUTPUT_FILE, TRIALS_FILE], args.overwrite, argument="--out")
    except OutputError as exc:
        args.parser.error(f"argument {option}: {exc}")


def _setting_option(args: argparse.Namespace, exc: SettingError, source: dict[str, str]) -> str:
    """The argument a refused setting field came from: the config file's key, or the
    command-line option."""
    option = _OPTIONS.get(exc.field)
    where = source.get(exc.field)
    if where is not None:
        return f"--config ({where})"
    if option is not None:
        return option
    return f"--config ({exc.field})" if args.config else exc.field
