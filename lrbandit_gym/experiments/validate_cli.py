"""The ``lrbandit validate`` subcommand: its arguments, its config file and its output.

A setting comes from, in increasing precedence: the defaults of
:class:`~lrbandit_gym.experiments.validate.ValidationSetting`, a grid setting
(``--grid NAME``, or ``grid = "NAME"`` in the config file), a TOML config file
(``--config FILE``), and the command-line arguments.  Config keys (all optional)::

    grid = "unequal"            # start from a grid setting
    trials = 200
    seed = 0
    batch_size = 100
    jobs = 2
    confidence_level = 0.95
    n = [500, 1500]             # checkpoints (rounds of inference)
    targets = "paper"           # "entry", "random", "random:SEED" or a .npz path
                                # (relative to the config file)
    value = true                # also check V*
    rank = 2                    # rank of the estimates (default: env.rank)
    warm_start = 600            # default: agents.default_warm_start_rounds
    estimator = "auto"          # "shared" or "own"
    uniform_from = 250          # time-uniform coverage from this round on (default: off)
    tuning_n = 1000             # round at which the confidence sequences are tightest
    out = "results"             # folder for validate.csv, inside the config file's folder

    [env]                       # MatrixContextBandit-v0 arguments
    d1 = 30
    d2 = 12
    rank = 2
    n_actions = 2
    context = "gaussian"        # or "completion"
    noise_std = [0.1, 0.3]      # one value, or one per arm
    noise = "gaussian"          # "uniform", "rademacher", "laplace", "student_t"
    singular_values = 1.0
    truth_seed = 0

    [policy]
    name = "epsilon-greedy"     # "softmax", "uniform", "linear-epsilon-greedy"
    epsilon = 0.1               # any other key is a keyword argument of the policy

An invalid argument or key (a value of the wrong type included) exits with status 2 and a
message naming it, before any trial runs; so does an output that exists already (without
``--overwrite``) or a config ``out`` outside the config file's folder.  The run then exits
with status 0 only when the verdict is ``VALID`` (1 for ``UNDER-COVERS``, ``OVER-COVERS``,
``FAILED`` or ``NO RESULT``).  ``--out`` is a folder: the table goes to ``validate.csv``
in it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_KEYS", "add_validate_parser", "load_config", "run_validate_command"]

#: Top-level keys of the config file.
CONFIG_KEYS = (
    "grid",
    "trials",
    "seed",
    "batch_size",
    "jobs",
    "confidence_level",
    "n",
    "targets",
    "value",
    "rank",
    "warm_start",
    "estimator",
    "uniform_from",
    "tuning_n",
    "out",
    "env",
    "policy",
)

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
    "rank": "--estimator-rank",
    "warm_start": "--warm-start",
    "targets": "--targets",
    "value": "--no-value",
    "n": "--n",
    "estimator": "--estimator",
    "uniform_from": "--uniform-from",
    "tuning_n": "--tuning-n",
    "trials": "--trials",
    "seed": "--seed",
    "batch_size": "--batch-size",
    "jobs": "--jobs",
    "confidence_level": "--level",
}

#: The file ``lrbandit validate`` writes into its ``--out`` folder.
OUTPUT_FILE = "validate.csv"

#: TOML keys with a fixed type: (Python types, what to say).  The setting's own checks
#: judge the values; these keep a wrong type from reaching them as a traceback.
_INT = ((int,), "an integer")
_CONFIG_TYPES = {
    "grid": ((str,), "a string (a grid setting's name)"),
    "trials": _INT,
    "seed": _INT,
    "batch_size": _INT,
    "jobs": _INT,
    "rank": _INT,
    "warm_start": _INT,
    "uniform_from": _INT,
    "tuning_n": _INT,
    "confidence_level": ((int, float), "a number"),
    "n": ((list,), "a list of integers, e.g. n = [500, 1500]"),
    "targets": ((str,), "a string"),
    "value": ((bool,), "true or false"),
    "estimator": ((str,), "a string"),
    "out": ((str,), "a string (a folder)"),
}
#: The largest integer a TOML file can hold (TOML integers are 64-bit).
_TOML_INT_MAX = 2**63 - 1


def _check_config_types(data: dict[str, Any]) -> None:
    """Refuse a config value of the wrong type, naming its key (``ValueError``)."""
    for key, (types, what) in _CONFIG_TYPES.items():
        if key not in data:
            continue
        value = data[key]
        items = value if key == "n" and isinstance(value, list) else [value]
        wrong = isinstance(value, bool) and bool not in types or not isinstance(value, types)
        if key == "n" and not wrong:
            wrong = not value or any(isinstance(v, bool) or not isinstance(v, int) for v in items)
        if wrong:
            raise ValueError(f"{key} must be {what}; got {value!r}")
        for v in items:
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) > _TOML_INT_MAX:
                raise ValueError(f"{key} is out of range (a 64-bit integer); got {v!r}")
    for table in ("env", "policy"):
        for key, value in data.get(table, {}).items():
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, int) and not isinstance(v, bool) and abs(v) > _TOML_INT_MAX:
                    raise ValueError(f"{table}.{key} is out of range (a 64-bit integer); got {v!r}")
    name = data.get("policy", {}).get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"policy.name must be a string; got {name!r}")


def config_out(config_path: str, out: str) -> str:
    """The folder a config file's ``out`` names, resolved against the config file's folder.

    Raises
    ------
    ValueError
        For an absolute path or one that leads outside the config file's folder (``../x``):
        a config file, perhaps shared, must not choose where on the machine a run writes.
    """
    base = Path(config_path).parent
    if Path(out).is_absolute():
        raise ValueError(
            f"out must be a folder relative to the config file's folder; got the absolute "
            f"path {out!r} (give --out on the command line to write elsewhere)"
        )
    target = (base / out).resolve()
    if not target.is_relative_to(base.resolve()):
        raise ValueError(
            f"out must stay inside the config file's folder {str(base)!r}; {out!r} leads "
            "outside it (give --out on the command line to write elsewhere)"
        )
    return str(base / out)


# Config path of each setting field, for error messages about values from the file.
_CONFIG_PATHS = {"policy": "policy.name", "confidence_level": "confidence_level"}


def add_validate_parser(sub) -> argparse.ArgumentParser:
    """Add ``validate`` to the ``lrbandit`` subcommands."""
    from lrbandit_gym.experiments.cli import nonnegative_int, positive_int
    from lrbandit_gym.experiments.validate import ESTIMATORS, GRID, POLICIES

    grid = "; ".join(f"{name}: {s.description}" for name, s in GRID.items())
    val = sub.add_parser(
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
    env = val.add_argument_group("environment (MatrixContextBandit-v0)")
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
    pol = val.add_argument_group("policy")
    pol.add_argument("--policy", choices=list(POLICIES))
    pol.add_argument("--epsilon", type=float, help="epsilon-greedy: exploration probability")
    pol.add_argument("--decay", type=float, help="epsilon-greedy: eps_t = epsilon t^-decay")
    pol.add_argument("--temperature", type=float, help="softmax: temperature tau")
    pol.add_argument("--step-scale", type=float, help="low-rank SGD: c_eta of Algorithm 1")
    inf = val.add_argument_group("inference")
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
        "--tuning-n",
        type=positive_int,
        help="round at which the confidence sequences are tightest (default 1000)",
    )
    run = val.add_argument_group("run")
    run.add_argument("--trials", type=positive_int, help="default 200")
    run.add_argument("--seed", type=nonnegative_int, help="default 0")
    run.add_argument("--batch-size", type=positive_int, help="trials per chunk (default 100)")
    run.add_argument("--jobs", type=positive_int, help="worker processes (default 1)")
    run.add_argument("--level", type=float, help="confidence level (default 0.95)")
    from lrbandit_gym.experiments.cli import add_output_arguments

    add_output_arguments(run, None, f"{OUTPUT_FILE}, the coverage table (default: no file)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    return val


def load_config(path: str) -> dict[str, Any]:
    """Read and check a config file's keys (not their values).

    Raises
    ------
    ValueError
        For an unreadable file, invalid TOML, an unknown key, or a value of the wrong type
        (``n = 40``, ``grid = [1]``, ``out = 5``, an integer beyond 64 bits).
    """
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError as exc:
            raise ValueError("reading a TOML config needs Python >= 3.11 or tomli") from exc
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"invalid TOML: {exc}") from None
    unknown = [k for k in data if k not in CONFIG_KEYS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; keys: {', '.join(CONFIG_KEYS)}")
    for table in ("env", "policy"):
        if table in data and not isinstance(data[table], dict):
            raise ValueError(f"{table!r} must be a table ([{table}])")
    _check_config_types(data)
    if "policy" in data and "name" not in data["policy"]:
        data["policy"] = {"name": None, **data["policy"]}
    return data


def _setting_and_options(args, parser):
    """The setting and run options from grid, config and command line, and where each
    setting field came from."""
    from lrbandit_gym.experiments.validate import GRID, ValidationSetting

    source: dict[str, str] = {}
    config: dict[str, Any] = {}
    base_dir = Path(".")
    if args.config:
        try:
            config = load_config(args.config)
        except ValueError as exc:
            parser.error(f"argument --config: {args.config}: {exc}")
        base_dir = Path(args.config).parent
    grid = args.grid or config.get("grid")
    if grid is not None and grid not in GRID:
        parser.error(f"argument --config: {args.config}: grid must be one of {list(GRID)}")
    setting = GRID[grid] if grid else ValidationSetting()
    env = dict(setting.env)
    policy = setting.policy
    policy_kwargs = dict(setting.policy_kwargs)
    fields: dict[str, Any] = {}
    run = {"trials": 200, "seed": 0, "batch_size": None, "jobs": 1, "confidence_level": 0.95}
    out = None

    def from_config(key, value):
        path = _CONFIG_PATHS.get(key, key.replace("policy_kwargs.", "policy."))
        source[key] = f"{args.config}: {path}"
        return value

    for key, value in config.get("env", {}).items():
        env[key] = from_config(f"env.{key}", value)
    if "policy" in config:
        table = dict(config["policy"])
        name = table.pop("name")
        if name is not None and name != policy:
            policy, policy_kwargs = from_config("policy", name), {}
        for key, value in table.items():
            policy_kwargs[key] = from_config(f"policy_kwargs.{key}", value)
    for key in ("rank", "warm_start", "targets", "value", "estimator", "uniform_from", "tuning_n"):
        if key in config:
            fields[key] = from_config(key, config[key])
    if "n" in config:
        n = config["n"]
        fields["n"] = from_config("n", tuple(n) if isinstance(n, list) else n)
    if isinstance(fields.get("targets"), str) and fields["targets"].endswith(".npz"):
        fields["targets"] = str(base_dir / fields["targets"])
    for key in run:
        if key in config:
            run[key] = from_config(key, config[key])
    if "out" in config:
        try:
            out = config_out(args.config, config["out"])
        except ValueError as exc:
            parser.error(f"argument --config ({args.config}: out): {exc}")
    # The command line wins.
    cli_env = {
        "d1": args.d1,
        "d2": args.d2,
        "rank": args.rank,
        "n_actions": args.arms,
        "context": args.context,
        "noise_std": None
        if args.noise_std is None
        else (args.noise_std[0] if len(args.noise_std) == 1 else tuple(args.noise_std)),
        "noise": args.noise,
        "singular_values": None
        if args.singular_values is None
        else (
            args.singular_values[0]
            if len(args.singular_values) == 1
            else tuple(args.singular_values)
        ),
        "truth_seed": args.truth_seed,
    }
    for key, value in cli_env.items():
        if value is not None:
            env[key] = value
            source.pop(f"env.{key}", None)
    if args.policy is not None and args.policy != policy:
        policy, policy_kwargs = args.policy, {}
        source.pop("policy", None)
    for key in ("epsilon", "decay", "temperature", "step_scale"):
        value = getattr(args, key)
        if value is not None:
            policy_kwargs[key] = value
            source.pop(f"policy_kwargs.{key}", None)
    for key, value in (
        ("rank", args.estimator_rank),
        ("warm_start", args.warm_start),
        ("targets", args.targets),
        ("n", None if args.n is None else tuple(args.n)),
        ("estimator", args.estimator),
        ("uniform_from", args.uniform_from),
        ("tuning_n", args.tuning_n),
    ):
        if value is not None:
            fields[key] = value
            source.pop(key, None)
    if args.no_value:
        fields["value"] = False
        source.pop("value", None)
    for key, value in (
        ("trials", args.trials),
        ("seed", args.seed),
        ("batch_size", args.batch_size),
        ("jobs", args.jobs),
        ("confidence_level", args.level),
    ):
        if value is not None:
            run[key] = value
            source.pop(key, None)
    if args.out is not None:
        out = args.out
    setting = setting.replace(env=env, policy=policy, policy_kwargs=policy_kwargs, **fields)
    return setting, run, out, source


def run_validate_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``lrbandit validate``: check ``--out``, run, print the report (verdict last), write
    ``validate.csv`` into ``--out``; exit status 0 only for the verdict ``VALID``.  Ctrl-C
    stops the workers at once; the chunks that finished are reported and written, marked
    partial, with exit status 130."""
    from lrbandit_gym.experiments.outputs import OutputError, check_outputs
    from lrbandit_gym.experiments.parallel import RunInterrupted
    from lrbandit_gym.experiments.validate import SettingError, run_validation

    setting, run, out, source = _setting_and_options(args, parser)
    if out is not None:
        option = "--out" if args.out is not None else f"--config ({args.config}: out)"
        if Path(out).suffix.lower() == ".csv" and not Path(out).is_dir():
            parser.error(
                f"argument {option}: --out is a folder (the table goes to {OUTPUT_FILE} in "
                f"it); got {out!r}, which looks like a file name"
            )
        try:
            check_outputs(out, [OUTPUT_FILE], args.overwrite, argument="--out")
        except OutputError as exc:
            parser.error(f"argument {option}: {exc}")
    print(f"validate: {setting.describe()}", file=sys.stderr)
    print(
        f"validate: {run['trials']} trials, seed {run['seed']}, {run['jobs']} job(s)",
        file=sys.stderr,
    )
    stopped = None
    try:
        result = run_validation(setting, progress=not args.no_progress, **run)
    except RunInterrupted as exc:
        stopped, result = exc, exc.result
    except SettingError as exc:
        option = _OPTIONS.get(exc.field)
        where = source.get(exc.field)
        if where is not None:
            name = f"--config ({where})"
        elif option is not None:
            name = option
        else:
            name = f"--config ({exc.field})" if args.config else exc.field
        parser.error(f"argument {name}: {exc}")
    print(result.report())
    print(f"validate: {result.seconds:.0f} s", file=sys.stderr)
    if out is not None:
        path = Path(out) / OUTPUT_FILE
        try:
            result.to_csv(path)
        except OSError as exc:
            print(f"validate: cannot write {path}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {path}", file=sys.stderr)
    if stopped is not None:
        print(f"validate: {stopped.line} (partial result): exit status 130", file=sys.stderr)
        return 130
    if result.status != "VALID":
        print(f"validate: verdict {result.status}: exit status 1", file=sys.stderr)
        return 1
    return 0
