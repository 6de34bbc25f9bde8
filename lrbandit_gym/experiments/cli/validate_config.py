"""The setting ``lrbandit validate`` checks: its TOML config file, and how grid, file and
command line combine.

A setting comes from, in increasing precedence: the defaults of
:class:`~lrbandit_gym.experiments.validate.setting.ValidationSetting`, a grid setting
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
    warm_start = 600            # default: agents.warm_start.default_warm_start_rounds
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

An unknown key or a value of the wrong type is refused by :func:`load_config`, naming it;
a config ``out`` outside the config file's folder by :func:`config_out`.  The setting's own
checks judge the values when the run starts.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrbandit_gym.experiments.validate.grid import GRID
from lrbandit_gym.experiments.validate.setting import ValidationSetting

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10: the tomli backport, when installed
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ImportError:
        tomllib = None

__all__ = ["CONFIG_KEYS", "RUN_DEFAULTS", "config_out", "load_config", "setting_and_options"]

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
    "context_law",
    "projection",
    "design_variance",
    "out",
    "env",
    "policy",
)

#: Options of the run itself (keyword arguments of ``run_validation``) and their defaults.
RUN_DEFAULTS = {"trials": 200, "seed": 0, "batch_size": None, "jobs": 1, "confidence_level": 0.95}

#: Setting fields a config file's top level may give (besides ``n``).
_FIELD_KEYS = (
    "rank",
    "warm_start",
    "targets",
    "value",
    "estimator",
    "uniform_from",
    "tuning_n",
    "context_law",
    "projection",
    "design_variance",
)

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
    "context_law": ((str,), "a string"),
    "projection": ((str,), "a string"),
    "design_variance": ((str,), "a string"),
    "out": ((str,), "a string (a folder)"),
}
#: The largest integer a TOML file can hold (TOML integers are 64-bit).
_TOML_INT_MAX = 2**63 - 1

# Config path of each setting field, for error messages about values from the file.
_CONFIG_PATHS = {"policy": "policy.name", "confidence_level": "confidence_level"}


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


def load_config(path: str) -> dict[str, Any]:
    """Read and check a config file's keys (not their values).

    Raises
    ------
    ValueError
        For an unreadable file, invalid TOML, an unknown key, or a value of the wrong type
        (``n = 40``, ``grid = [1]``, ``out = 5``, an integer beyond 64 bits).
    """
    if tomllib is None:  # pragma: no cover - Python 3.10 without tomli
        raise ValueError("reading a TOML config needs Python >= 3.11 or tomli")
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


@dataclass
class _Choices:
    """The parts of a setting and of its run as grid, config file and command line choose
    them, and where each setting field came from (``source``: field -> ``"FILE: key"``,
    for the messages about values from the config file)."""

    env: dict[str, Any]
    policy: Any
    policy_kwargs: dict[str, Any]
    fields: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=lambda: dict(RUN_DEFAULTS))
    out: str | None = None
    source: dict[str, str] = field(default_factory=dict)


def setting_and_options(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """The setting, the run options (:data:`RUN_DEFAULTS`'s keys) and the output folder
    from grid, config file and command line, and where each setting field came from.

    A config file that cannot be read, a grid not in the grid or a config ``out`` outside
    the config file's folder is the subcommand's usage error (exit 2)."""
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
    choices = _Choices(
        env=dict(setting.env), policy=setting.policy, policy_kwargs=dict(setting.policy_kwargs)
    )
    _apply_config(choices, config, args.config, base_dir, parser)
    _apply_command_line(choices, args)  # the command line wins
    setting = setting.replace(
        env=choices.env,
        policy=choices.policy,
        policy_kwargs=choices.policy_kwargs,
        **choices.fields,
    )
    return setting, choices.run, choices.out, choices.source


def _apply_config(
    choices: _Choices,
    config: dict[str, Any],
    config_path: str | None,
    base_dir: Path,
    parser: argparse.ArgumentParser,
) -> None:
    """Take the config file's values, noting where each came from."""

    def from_config(key, value):
        path = _CONFIG_PATHS.get(key, key.replace("policy_kwargs.", "policy."))
        choices.source[key] = f"{config_path}: {path}"
        return value

    for key, value in config.get("env", {}).items():
        choices.env[key] = from_config(f"env.{key}", value)
    if "policy" in config:
        table = dict(config["policy"])
        name = table.pop("name")
        if name is not None and name != choices.policy:
            choices.policy, choices.policy_kwargs = from_config("policy", name), {}
        for key, value in table.items():
            choices.policy_kwargs[key] = from_config(f"policy_kwargs.{key}", value)
    for key in _FIELD_KEYS:
        if key in config:
            choices.fields[key] = from_config(key, config[key])
    if "n" in config:
        n = config["n"]
        choices.fields["n"] = from_config("n", tuple(n) if isinstance(n, list) else n)
    targets = choices.fields.get("targets")
    if isinstance(targets, str) and targets.endswith(".npz"):
        choices.fields["targets"] = str(base_dir / targets)
    for key in choices.run:
        if key in config:
            choices.run[key] = from_config(key, config[key])
    if "out" in config:
        try:
            choices.out = config_out(config_path, config["out"])
        except ValueError as exc:
            parser.error(f"argument --config ({config_path}: out): {exc}")


def _one_or_tuple(values: list | None):
    """A repeatable option's values: None, the one value, or a tuple of them."""
    if values is None:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _apply_command_line(choices: _Choices, args: argparse.Namespace) -> None:
    """Take the command line's values over the grid's and the config file's."""
    cli_env = {
        "d1": args.d1,
        "d2": args.d2,
        "rank": args.rank,
        "n_actions": args.arms,
        "context": args.context,
        "noise_std": _one_or_tuple(args.noise_std),
        "noise": args.noise,
        "singular_values": _one_or_tuple(args.singular_values),
        "truth_seed": args.truth_seed,
        "context_std": args.context_std,
        "context_corr": _one_or_tuple(args.context_corr),
    }
    for key, value in cli_env.items():
        if value is not None:
            choices.env[key] = value
            choices.source.pop(f"env.{key}", None)
    if args.policy is not None and args.policy != choices.policy:
        choices.policy, choices.policy_kwargs = args.policy, {}
        choices.source.pop("policy", None)
    for key in ("epsilon", "decay", "temperature", "step_scale", "step_gain"):
        value = getattr(args, key)
        if value is not None:
            choices.policy_kwargs[key] = value
            choices.source.pop(f"policy_kwargs.{key}", None)
    for key, value in (
        ("rank", args.estimator_rank),
        ("warm_start", args.warm_start),
        ("targets", args.targets),
        ("n", None if args.n is None else tuple(args.n)),
        ("estimator", args.estimator),
        ("uniform_from", args.uniform_from),
        ("tuning_n", args.tuning_n),
        ("context_law", args.context_law),
        ("projection", args.projection),
        ("design_variance", args.design_variance),
    ):
        if value is not None:
            choices.fields[key] = value
            choices.source.pop(key, None)
    if args.no_value:
        choices.fields["value"] = False
        choices.source.pop("value", None)
    for key, value in (
        ("trials", args.trials),
        ("seed", args.seed),
        ("batch_size", args.batch_size),
        ("jobs", args.jobs),
        ("confidence_level", args.level),
    ):
        if value is not None:
            choices.run[key] = value
            choices.source.pop(key, None)
    if args.out is not None:
        choices.out = args.out
