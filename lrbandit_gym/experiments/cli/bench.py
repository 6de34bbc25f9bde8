"""``lrbandit bench WHAT``: the speed benchmarks, each printed as an aligned report beside
its target (:mod:`~lrbandit_gym.experiments.bench.run`,
:mod:`~lrbandit_gym.experiments.bench.warm_start`,
:mod:`~lrbandit_gym.experiments.bench.completion`)."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from lrbandit_gym import engine
from lrbandit_gym.engine import ENGINES
from lrbandit_gym.experiments.bench.completion import bench_completion, completion_coverage
from lrbandit_gym.experiments.bench.laws import bench_laws
from lrbandit_gym.experiments.bench.run import (
    bench_agents,
    bench_env,
    bench_inference,
    bench_study_round,
)
from lrbandit_gym.experiments.bench.warm_start import bench_warm_start
from lrbandit_gym.experiments.cli.conventions import EXIT_OK, nonnegative_int, positive_int
from lrbandit_gym.experiments.coverage import format_coverage

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` to the ``lrbandit`` subcommands."""
    bench = subparsers.add_parser("bench", help="speed benchmarks")
    bench.add_argument(
        "what",
        choices=list(_REPORTS),
        help="warmstart: memory and accuracy of the warm start at fixed sizes (d = 500, "
        "100 and 50; --d and --num-envs do not apply; several minutes); completion: rounds "
        "per second at d = 1000 with index observations and the memory of a 50,000-round "
        "warm start; completion-coverage: coverage of the intervals at d = 100; laws: the "
        "parameter wrapper's step under the identity, a Kronecker and an estimated law",
    )
    bench.add_argument(
        "--d",
        type=positive_int,
        default=None,
        help="d1 = d2 (default 50; completion: 1000; completion-coverage: 100)",
    )
    bench.add_argument(
        "--warm-start",
        type=nonnegative_int,
        default=50_000,
        help="completion: rounds of the warm start whose memory is traced (0: skip it)",
    )
    bench.add_argument(
        "--trials", type=positive_int, default=500, help="completion-coverage: trials"
    )
    bench.add_argument(
        "--num-envs",
        type=positive_int,
        default=None,
        help="batch size (default 1000; 125 for round)",
    )
    bench.add_argument("--seed", type=nonnegative_int, default=0)
    bench.add_argument("--engine", choices=ENGINES, default=None, help="default auto")
    bench.set_defaults(func=run, parser=bench)
    return bench


def run(args: argparse.Namespace) -> int:
    """Run the benchmark ``args.what`` with ``--engine`` (None: the current engine) and
    print its report."""
    return engine.call(args.engine, _print_report, args)


def _print_report(args: argparse.Namespace) -> int:
    print("\n".join(_REPORTS[args.what](args)))
    return EXIT_OK


def _row(label: str, value: float, unit: str = "", note: str = "", digits: int = 2) -> str:
    """One aligned line of a benchmark report."""
    return f"  {label:<24} {value:8.{digits}f} {unit}{'  ' + note if note else ''}".rstrip()


def _sizes(args: argparse.Namespace) -> dict[str, int]:
    """``d``, ``num_envs`` and ``seed`` of the env, agents, inference and round benchmarks."""
    num_envs = args.num_envs
    if num_envs is None:
        num_envs = 125 if args.what == "round" else 1000
    return {"d": 50 if args.d is None else args.d, "num_envs": num_envs, "seed": args.seed}


def _env_report(args: argparse.Namespace) -> list[str]:
    r = bench_env(**_sizes(args))
    return [
        f"vector env, B={r['num_envs']}, d={r['d']}:",
        _row("step", r["vector_step"] * 1e3, "ms"),
        _row("numpy draw of contexts", r["vector_draw"] * 1e3, "ms"),
        _row("ratio", r["vector_ratio"], note="(target <= 1.3)", digits=3),
        f"single env (unwrapped), d={r['d']}:",
        _row("step", r["single_step"] * 1e6, "us"),
        _row("numpy draw of a context", r["single_draw"] * 1e6, "us"),
        _row("added by step", r["single_added_us"], "us", "(target <= 15)"),
    ]


def _agents_report(args: argparse.Namespace) -> list[str]:
    r = bench_agents(**_sizes(args))
    return [
        f"LowRankSGD update, d={r['d_large']}, r=3 (single trial):",
        _row("balanced r x r update", r["sgd_update"] * 1e3, "ms", digits=3),
        _row("naive full-SVD (eq. 8)", r["naive_update"] * 1e3, "ms", digits=3),
        _row("speed-up", r["sgd_speedup"], "x", "(target >= 50)", digits=1),
        f"batched epsilon-greedy round (act + update), B={r['num_envs']}, d={args.d}:",
        _row("agent", r["agent_round"] * 1e3, "ms"),
        _row("numpy draw of contexts", r["draw"] * 1e3, "ms"),
        _row("ratio", r["batched_ratio"], note="(target <= 3)", digits=3),
    ]


def _inference_report(args: argparse.Namespace) -> list[str]:
    r = bench_inference(**_sizes(args))
    return [
        f"both inference wrappers, two targets, shared estimator, d={r['d']}:",
        _row("single env: wrappers", r["single_wrappers"] * 1e6, "us", digits=1),
        _row("one LowRankSGD round", r["single_sgd"] * 1e6, "us", digits=1),
        _row("ratio", r["single_ratio"], note="(target <= 3)", digits=3),
        _row(f"vector env B={r['num_envs']}: wrappers", r["vector_wrappers"] * 1e3, "ms"),
        _row("numpy draw of contexts", r["vector_draw"] * 1e3, "ms"),
        _row("ratio", r["vector_ratio"], note="(target <= 2)", digits=3),
    ]


def _round_report(args: argparse.Namespace) -> list[str]:
    r = bench_study_round(**_sizes(args))
    return [
        f"one online round of the table1 study, B={r['num_envs']}, d={r['d']}, 1 thread, "
        f"engine {engine.active_engine()}:",
        _row("numpy draw of contexts", r["draw"] * 1e3, "ms"),
        _row("beyond the draw: API", r["api"] * 1e3, "ms", "(act, wrapped step, update)"),
        _row("beyond the draw: core", r["internals"] * 1e3, "ms", "(internal entry points)"),
    ]


def _errors(values: list[float]) -> str:
    """Per-arm errors ``"0.123 / 0.456"``."""
    return " / ".join(f"{v:.3f}" for v in values)


def _warm_start_report(args: argparse.Namespace) -> list[str]:
    """The report of ``lrbandit bench warmstart``."""
    r = bench_warm_start(seed=args.seed)
    big = r["large"]
    lines = [
        f"Gaussian d={big['d']}, r=3, K=2, epsilon-greedy with the defaults "
        f"(warm-start fit: {big['fit']}):",
        _row(
            f"peak memory, {big['warm_start']} rounds",
            big["peak_bytes"] / 2**20,
            "MiB",
            "(target <= 1024)",
            digits=1,
        ),
        f"  ||M_init - M||_F (arm 0 / 1)  {_errors(big['init_error'])}",
        f"  after {big['online']} online rounds   {_errors(big['final_error'])}"
        + ("  DIVERGED" if big["diverged"] else "  (no divergence)"),
        _row("time", big["seconds"], "s", digits=0),
        f"streaming warm start against its length, d={r['memory'][0]['d']}:",
    ]
    for m in r["memory"]:
        lines.append(
            _row(
                f"{m['warm_start']} rounds: peak",
                m["peak_bytes"] / 2**20,
                "MiB",
                f"||M_init - M||_F {_errors(m['init_error'])}",
                digits=1,
            )
        )
    lines.append("paper's setting (d=50, 2000 rounds), ||M_init - M||_F per seed (arm 0 / 1):")
    for fit, runs in r["paper"].items():
        med = statistics.median(e for run in runs for e in run["init_error"])
        per_seed = ", ".join(_errors(x["init_error"]) for x in runs)
        lines.append(f"  {fit:<10} median {med:.3f}: {per_seed}")
    return lines


def _completion_report(args: argparse.Namespace) -> list[str]:
    """``lrbandit bench completion``: speed, and the warm start's memory, at d = 1000."""
    d = 1000 if args.d is None else args.d
    r = bench_completion(d=d, warm_start=args.warm_start, seed=args.seed)
    rps = r["rounds_per_s"]
    small = f"{r['d_ref']}x{r['d_ref']}"
    lines = [
        f"single env, epsilon-greedy agent and both inference wrappers, r={r['rank']}, "
        f"K={r['n_actions']}, engine {engine.active_engine()}:",
        _row(f"completion {d}x{d}, index", rps["index"], "rounds/s", digits=0),
        _row(f"completion {small}, matrix", rps["matrix_small"], "rounds/s", digits=0),
        _row(f"gaussian {small} (dense)", rps["gaussian_small"], "rounds/s", digits=0),
        _row(
            "index / gaussian",
            rps["index"] / rps["gaussian_small"],
            note="(target >= 1)",
            digits=3,
        ),
    ]
    if args.warm_start:
        lines += [
            f"warm start of {r['warm_start']} rounds at {d}x{d} (index, both wrappers):",
            _row("buffer", r["buffer_bytes"] / 2**20, "MiB"),
            _row("peak of rounds and fit", r["peak_traced_bytes"] / 2**20, "MiB"),
            _row(
                "warm start in all",
                (r["buffer_bytes"] + r["peak_traced_bytes"]) / 2**20,
                "MiB",
                "(target < 100 MB)",
            ),
            _row("a dense buffer would need", r["dense_buffer_bytes"] / 2**30, "GiB", digits=1),
            _row("warm start, all rounds", r["warm_start_seconds"], "s", digits=1),
            _row("of which the fit", r["fit_seconds"], "s", digits=1),
            "  ‖M_init − M‖_F / ‖M‖_F per arm: "
            + ", ".join(f"{e:.3f}" for e in r["relative_error"]),
        ]
    return lines


def _completion_coverage_report(args: argparse.Namespace) -> list[str]:
    """``lrbandit bench completion-coverage``: coverage on the vector env at d = 100."""
    d = 100 if args.d is None else args.d
    r = completion_coverage(trials=args.trials, d=d, seed=args.seed)
    lines = [
        f"95% intervals, completion {d}x{d}, r={r['rank']}, K=2, {r['trials']} trials "
        f"(vector env, index observations), warm start {r['warm_start']}, "
        f"c_eta = {r['step_scale']:.3g}, {r['seconds']:.0f} s:",
        f"  {'n':>6} {'quantity':<12} {'coverage [95% MC]':>19} {'length':>8} {'mean z':>7}",
    ]
    for row in r["rows"]:
        lines.append(
            f"  {row['n']:>6} {row['quantity']:<12} {format_coverage(row):>19} "
            f"{row['mean_length']:8.4f} {row['mean_z']:7.3f}"
        )
    return lines


#: The report of each benchmark, in the order ``--help`` lists them.
def _laws_report(args: argparse.Namespace) -> list[str]:
    r = bench_laws(d=50 if args.d is None else args.d, seed=args.seed)
    return [
        f"parameter wrapper per step (two targets, shared estimator), d={r['d']}:",
        _row("identity law", r["identity"] * 1e6, "us", digits=1),
        _row("Kronecker law (known)", r["kronecker"] * 1e6, "us", digits=1),
        _row("ratio", r["kronecker_ratio"], note="(target <= 1.5)", digits=3),
        _row("Kronecker law (estimated)", r["estimated"] * 1e6, "us", digits=1),
        _row("ratio", r["estimated_ratio"], digits=3),
        _row("estimated law's memory", r["estimated_bytes"] / 1e3, "kB", digits=1),
    ]


_REPORTS: dict[str, Callable[[argparse.Namespace], list[str]]] = {
    "env": _env_report,
    "agents": _agents_report,
    "inference": _inference_report,
    "round": _round_report,
    "warmstart": _warm_start_report,
    "completion": _completion_report,
    "completion-coverage": _completion_coverage_report,
    "laws": _laws_report,
}
