"""``lrbandit analyze LOG``: the intervals of :func:`inference.analyze` on a saved log.

Targets and policies are given on the command line as ``NAME=SPEC``:

- ``--target NAME=entry:J,K`` (the entry ``(J, K)`` of every ``M_a``), ``NAME=eye`` (the
  trace of the top square block, ``T = I``), ``NAME=FILE.npy`` (a ``(d1, d2)`` array) or
  ``NAME=FILE.npz:KEY``;
- ``--policy NAME=greedy`` (the greedy rule of the estimate), ``NAME=arm:A`` (always arm
  ``A``), ``NAME=uniform`` (every arm with probability ``1/K``) or ``NAME=MODULE:FUNCTION``
  (a function of yours from the context to an action or a pmf, as
  :class:`~inference.PolicyEvaluation` takes it; the module is imported with the current
  folder first on the path).

Usage errors (exit 2) name the argument: a malformed spec, a log file that is missing or
does not follow the format (the message names the column and the row), a ``--rank`` above
``min(d1, d2)``, a target of the wrong shape, all zero or with entries above
``MAX_MAGNITUDE``, ``V*`` or policies asked of a log without ``pmf``, a ``MODULE:FUNCTION``
policy that cannot be imported or is not callable.  A round the wrappers
refuse during the replay exits 1, naming its row.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from inference import analyze
from inference.cores.checks import check_targets
from inference.results import interval_rows
from inference.sequences import DEFAULT_TUNING_N
from lrbandit_gym.context_law import LAW_NAMES
from lrbandit_gym.experiments.cli.conventions import (
    EXIT_FAILED,
    EXIT_OK,
    add_output_arguments,
    positive_int,
)
from lrbandit_gym.experiments.outputs import (
    OutputError,
    RunStamp,
    check_outputs,
    remove_stale,
    write_csv,
    write_text,
)
from lrbandit_gym.files import read_npz
from lrbandit_gym.logs import LogFormatError, load_log

__all__ = ["OUTPUT_FILES", "add_parser", "parse_policy", "parse_target", "run"]

#: The files ``--out`` receives.
OUTPUT_FILES = ("analyze.csv", "analyze.md")

_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"

#: ``MODULE:FUNCTION`` of ``--policy``: a dotted module name, a colon, a function's name.
_FUNCTION = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"

#: What ``--policy NAME=SPEC`` takes, for the messages.
POLICY_SPECS = "greedy, uniform, arm:A or MODULE:FUNCTION"


def _split(text: str, option: str) -> tuple[str, str]:
    match = re.fullmatch(rf"({_NAME})=(.+)", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{option} takes NAME=SPEC (a name of letters, digits, _ . -); got {text!r}"
        )
    return match.group(1), match.group(2)


def parse_target(text: str) -> tuple[str, str]:
    """argparse type of ``--target``: ``(name, spec)``, the spec's syntax checked."""
    name, spec = _split(text, "--target")
    ok = (
        spec == "eye"
        or re.fullmatch(r"entry:\d+,\d+", spec)
        or spec.endswith(".npy")
        or re.fullmatch(r".+\.npz:.+", spec)
    )
    if not ok:
        raise argparse.ArgumentTypeError(
            f"--target {name}= takes entry:J,K, eye, FILE.npy or FILE.npz:KEY; got {spec!r}"
        )
    return name, spec


def parse_policy(text: str) -> tuple[str, str]:
    """argparse type of ``--policy``: ``(name, spec)`` with spec ``greedy``, ``uniform``,
    ``arm:A`` or ``MODULE:FUNCTION`` (its syntax only; it is imported later)."""
    name, spec = _split(text, "--policy")
    ok = (
        spec in ("greedy", "uniform")
        or re.fullmatch(r"arm:\d+", spec)
        or re.fullmatch(_FUNCTION, spec)
    )
    if not ok:
        raise argparse.ArgumentTypeError(f"--policy {name}= takes {POLICY_SPECS}; got {spec!r}")
    return name, spec


def _target_matrix(name: str, spec: str, d1: int, d2: int) -> np.ndarray:
    """The ``(d1, d2)`` matrix of a target spec; ValueError naming the target."""
    if spec == "eye":
        return np.eye(d1, d2)
    if spec.startswith("entry:"):
        j, k = (int(v) for v in spec[len("entry:") :].split(","))
        if not (j < d1 and k < d2):
            raise ValueError(f"target {name!r}: entry ({j}, {k}) is outside ({d1}, {d2})")
        t = np.zeros((d1, d2))
        t[j, k] = 1.0
        return t
    file, _, key = spec.partition(".npz:")
    try:
        if key:
            data = read_npz(file + ".npz")
            if key not in data:
                raise ValueError(f"no array {key!r} in {file}.npz (it has {sorted(data)})")
            arr = data[key]
        elif zipfile.is_zipfile(spec):
            raise ValueError(
                f"{spec!r} is an npz archive, not a .npy array: give {name}=FILE.npz:KEY"
            )
        else:
            arr = np.load(spec, allow_pickle=False)
    except OSError as exc:
        raise ValueError(f"target {name!r}: cannot read {spec!r}: {exc}") from None
    except ValueError as exc:
        if "allow_pickle" in str(exc):  # numpy's words for a file that is not a .npy
            exc = ValueError(f"{spec!r} is not a .npy array")
        raise ValueError(f"target {name!r}: {exc}") from None
    if arr.shape != (d1, d2) or arr.dtype.kind not in "iuf" or not np.isfinite(arr).all():
        raise ValueError(
            f"target {name!r} must be a finite real ({d1}, {d2}) array; got shape "
            f"{arr.shape}, dtype {arr.dtype}"
        )
    return arr.astype(float)


def _policy(name: str, spec: str, n_actions: int) -> Any:
    """The target policy of a ``--policy`` spec; ValueError naming the policy."""
    if spec == "greedy":
        return "greedy"
    if spec == "uniform":
        pmf = np.full(n_actions, 1.0 / n_actions)
        return lambda obs: pmf
    if spec.startswith("arm:"):
        arm = int(spec[len("arm:") :])
        if arm >= n_actions:
            raise ValueError(f"policy {name!r}: arm {arm} is outside [0, {n_actions})")
        return lambda obs: arm
    return _imported_function(name, spec)


def _imported_function(name: str, spec: str) -> Any:
    """The function ``MODULE:FUNCTION``, its module imported with the current folder first
    on ``sys.path`` (as ``python -m`` has it); ValueError naming the policy when the module
    cannot be imported or the attribute is missing or not callable."""
    module_name, _, attribute = spec.partition(":")
    here = os.getcwd()
    sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any failure of the user's module is a bad --policy
        raise ValueError(
            f"policy {name!r}: cannot import module {module_name!r} ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        sys.path.remove(here)
    function = getattr(module, attribute, None)
    if function is None:
        raise ValueError(f"policy {name!r}: module {module_name!r} has no {attribute!r}")
    if not callable(function):
        raise ValueError(
            f"policy {name!r}: {spec} is a {type(function).__name__}, not a function of the context"
        )
    return function


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``analyze`` to the ``lrbandit`` subcommands."""
    p = subparsers.add_parser(
        "analyze",
        help="intervals from a saved log of bandit feedback (docs/logs.md)",
        description="Replay a log (.npz or .parquet, docs/logs.md) through the inference "
        "wrappers and print every interval they give: <M_a, T> and arm differences per "
        "--target, V* (needs the log's pmf), and the values of --policy targets.",
    )
    p.add_argument("log", help="the log file (.npz, or .parquet with pyarrow)")
    p.add_argument(
        "--target",
        type=parse_target,
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="a linear form T: entry:J,K, eye, FILE.npy or FILE.npz:KEY (repeatable)",
    )
    p.add_argument(
        "--policy",
        type=parse_policy,
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help=f"a target policy to evaluate: {POLICY_SPECS} (a function of yours from the "
        "context to an action or a pmf; repeatable; needs the pmf)",
    )
    p.add_argument("--rank", type=positive_int, required=True, help="rank of the model")
    p.add_argument(
        "--warm-start",
        type=positive_int,
        default=None,
        help="rounds of the estimator's warm start (default: sized from the problem)",
    )
    p.add_argument("--no-value", action="store_true", help="do not estimate V*")
    p.add_argument(
        "--context-law",
        choices=list(LAW_NAMES),
        default=None,
        help="the contexts' law the parameter intervals divide by (default: the log's); "
        "'estimated' estimates it from the contexts (any dense law: images, correlated or "
        "scaled features); docs/method.md §1",
    )
    p.add_argument(
        "--projection",
        choices=["auto", "tangent", "paper", "none"],
        default="auto",
        help="the parameter intervals' read-out: none is the debiased mean without the "
        "low-rank step, valid for every target the contexts vary along (images); auto "
        "(default) takes it where the contexts' second moment is ill-conditioned, else "
        "tangent; docs/method.md §12",
    )
    p.add_argument(
        "--design-variance",
        choices=["auto", "pulled", "all-rounds"],
        default="auto",
        help="the design part of the parameter intervals' standard error: auto (default: "
        "on dense contexts every round's context and the arm's propensity in it where that "
        "is at least 0.01, eq. (14)'s pulled rounds below; pulled on completion contexts "
        "and on a log without the pmf column), pulled (eq. (14)) or all-rounds (needs the "
        "pmf column); docs/method.md §13",
    )
    p.add_argument(
        "--kind",
        choices=["fixed", "sequence"],
        default="fixed",
        help="fixed-n intervals or anytime-valid confidence sequences",
    )
    p.add_argument(
        "--tuning-n",
        type=positive_int,
        default=None,
        help="round at which the confidence sequences are tightest (default 1000)",
    )
    p.add_argument(
        "--confidence-level",
        type=float,
        default=0.95,
        help="nominal coverage, in (0, 1); default 0.95",
    )
    add_output_arguments(p, None, "analyze.csv and analyze.md (default: print only)")
    p.set_defaults(func=run, parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``lrbandit analyze``; usage errors exit 2 naming the argument."""
    _check_arguments(args)
    found = _check_out(args)
    log = _read_log(args)
    d1, d2, K = int(log["d1"]), int(log["d2"]), int(log["n_actions"])
    targets, policies = _targets_and_policies(args, log)
    tuning_n = DEFAULT_TUNING_N if args.tuning_n is None else args.tuning_n
    try:
        result = analyze(
            log,
            targets or None,
            rank=args.rank,
            warm_start=args.warm_start,
            value=not args.no_value,
            policies=policies or None,
            confidence_level=args.confidence_level,
            kind=args.kind,
            tuning_n=tuning_n,
            context_law=args.context_law,
            projection=args.projection,
            design_variance=args.design_variance,
        )
    except LogFormatError as exc:
        args.parser.error(f"argument log: {exc}")
    except ValueError as exc:
        if "the warm start takes" in str(exc):
            args.parser.error(f"argument --warm-start: {exc}")
        if str(exc).startswith("context_law"):
            args.parser.error(f"argument --context-law: {exc}")
        if str(exc).startswith("design_variance"):
            args.parser.error(f"argument --design-variance: {exc}")
        print(f"lrbandit analyze: {exc}", file=sys.stderr)
        return EXIT_FAILED
    law = args.context_law or str(log["context_law"])
    print(f"{args.log}: {d1} x {d2} contexts (context law {law}), {K} arms")
    print(result.summary())
    if args.out is not None:
        _write_outputs(args, result, tuning_n, found)
    return EXIT_OK


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse a confidence level outside (0, 1), a name given twice, or nothing to
    estimate (usage errors)."""
    parser = args.parser
    if not 0 < args.confidence_level < 1:
        parser.error(f"argument --confidence-level: must be in (0, 1); got {args.confidence_level}")
    for option, pairs in (("--target", args.target), ("--policy", args.policy)):
        names = [n for n, _ in pairs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            parser.error(f"argument {option}: name(s) {dup} given twice")
    if not args.target and args.no_value and not args.policy:
        parser.error(
            "argument --target: nothing to estimate: give --target, --policy or drop --no-value"
        )


def _check_out(args: argparse.Namespace) -> list:
    """The files of an earlier run in ``--out`` (refused, as a usage error, without
    ``--overwrite``); none without ``--out``."""
    if args.out is None:
        return []
    try:
        return check_outputs(args.out, OUTPUT_FILES, args.overwrite)
    except OutputError as exc:
        args.parser.error(f"argument {exc.option}: {exc}")


def _read_log(args: argparse.Namespace) -> dict[str, Any]:
    """The log, checked against the format; a usage error names what is wrong with it."""
    if not Path(args.log).is_file():
        args.parser.error(f"argument log: no such file: {args.log!r}")
    try:
        return load_log(args.log)
    except (LogFormatError, ValueError, OSError) as exc:
        args.parser.error(f"argument log: {exc}")
    except ImportError as exc:
        args.parser.error(f"argument log: {exc}")


def _targets_and_policies(args: argparse.Namespace, log: dict[str, Any]) -> tuple[dict, dict]:
    """The target matrices and policies of ``--target`` and ``--policy`` for this log;
    ``--rank`` at most ``min(d1, d2)``, targets as the wrappers take them, V* and policies
    need the log's ``pmf`` (usage errors)."""
    parser = args.parser
    d1, d2, K = int(log["d1"]), int(log["d2"]), int(log["n_actions"])
    has_pmf = "pmf" in log
    if args.rank > min(d1, d2):
        parser.error(
            f"argument --rank: must be at most min(d1, d2) = {min(d1, d2)} of the log "
            f"({d1} x {d2} contexts); got {args.rank}"
        )
    try:
        targets = {n: _target_matrix(n, s, d1, d2) for n, s in args.target}
        if targets:
            check_targets(targets, d1, d2)  # finite, not too large, not all zero
    except ValueError as exc:
        parser.error(f"argument --target: {exc}")
    try:
        policies = {n: _policy(n, s, K) for n, s in args.policy}
    except ValueError as exc:
        parser.error(f"argument --policy: {exc}")
    if not has_pmf and not args.no_value:
        parser.error(
            "argument --no-value: the log has no 'pmf' column, and V* reads the logging "
            "policy's propensity at the estimated optimal arm; pass --no-value (the "
            "parameter intervals need only 'propensity')"
        )
    if not has_pmf and policies:
        parser.error(
            "argument --policy: the log has no 'pmf' column, and a policy's value needs "
            "every arm's logging propensity (to check the logging policy could play the "
            "target's arms)"
        )
    return targets, policies


def _write_outputs(args: argparse.Namespace, result, tuning_n: int, found: list) -> None:
    """``analyze.csv`` and ``analyze.md`` into ``--out``, stamped with the run's settings;
    the files of an earlier run that were not written again are removed."""
    settings = {
        "log": str(args.log),
        "targets": dict(args.target),
        "policies": dict(args.policy),
        "rank": args.rank,
        "warm_start": args.warm_start,
        "value": not args.no_value,
        "kind": args.kind,
        "tuning_n": tuning_n,
        "confidence_level": args.confidence_level,
    }
    stamp = RunStamp.of("lrbandit analyze", settings, None)
    out = Path(args.out)
    rows = _records(result)
    written = [
        write_csv(out / "analyze.csv", rows, stamp),
        write_text(out / "analyze.md", "```\n" + result.summary() + "\n```\n", stamp),
    ]
    remove_stale(found, written, stream=sys.stderr)
    print(f"wrote {', '.join(written)}", file=sys.stderr)


def _records(result) -> list[dict[str, Any]]:
    """The rows of ``result.to_frame()``, without needing pandas."""
    return [
        {"quantity": label, **interval_rows(ci)[0], "n_obs": ci.n_obs, "method": ci.method}
        for label, ci in result.results
    ]
