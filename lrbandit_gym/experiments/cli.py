"""The ``lrbandit`` command line: ``demo``, ``reproduce``, ``figures``, ``bench``,
``compare``, ``validate`` and ``analyze``.

One convention for every subcommand: a bad argument is a usage error (exit status 2, the
message names the option, before anything runs); a run that fails exits with status 1 and
a message; ``validate`` exits with status 1 when its verdict is not ``VALID``.  ``--out`` is
always a folder; a file already there is never replaced without ``--overwrite``
(:mod:`lrbandit_gym.experiments.outputs`)."""

from __future__ import annotations

import argparse
import sys

from lrbandit_gym.engine import ENGINES

__all__ = ["main", "nonnegative_int", "positive_int"]


def _int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}")
        return value

    return parse


positive_int = _int_at_least(1)
positive_int.__doc__ = "argparse type: an integer >= 1 (a count of rounds, trials, jobs, a size)."
nonnegative_int = _int_at_least(0)
nonnegative_int.__doc__ = "argparse type: an integer >= 0 (a seed)."


def _demo(args: argparse.Namespace) -> int:
    """One online experiment with both inference wrappers (the README's main job)."""
    from lrbandit_gym.experiments.demo import run_demo

    def run() -> int:
        run_demo(
            rounds=args.rounds,
            seed=args.seed,
            out=args.out,
            plot=not args.no_plot,
            overwrite=args.overwrite,
        )
        return 0

    return _usage_errors(args, run)


def _row(label: str, value: float, unit: str = "", note: str = "", digits: int = 2) -> str:
    """One aligned line of a benchmark report."""
    return f"  {label:<24} {value:8.{digits}f} {unit}{'  ' + note if note else ''}".rstrip()


def _bench(args: argparse.Namespace) -> int:
    from lrbandit_gym import engine

    return engine.call(args.engine, _run_bench, args)  # None: the current engine


def _run_bench(args: argparse.Namespace) -> int:
    from lrbandit_gym import engine
    from lrbandit_gym.experiments import bench

    if args.what in ("completion", "completion-coverage"):
        return _bench_completion(args)
    num_envs = args.num_envs
    if num_envs is None:
        num_envs = 125 if args.what == "round" else 1000
    kw = {"d": 50 if args.d is None else args.d, "num_envs": num_envs, "seed": args.seed}
    if args.what == "env":
        r = bench.bench_env(**kw)
        lines = [
            f"vector env, B={r['num_envs']}, d={r['d']}:",
            _row("step", r["vector_step"] * 1e3, "ms"),
            _row("numpy draw of contexts", r["vector_draw"] * 1e3, "ms"),
            _row("ratio", r["vector_ratio"], note="(target <= 1.3)", digits=3),
            f"single env (unwrapped), d={r['d']}:",
            _row("step", r["single_step"] * 1e6, "us"),
            _row("numpy draw of a context", r["single_draw"] * 1e6, "us"),
            _row("added by step", r["single_added_us"], "us", "(target <= 15)"),
        ]
    elif args.what == "agents":
        r = bench.bench_agents(**kw)
        lines = [
            f"LowRankSGD update, d={r['d_large']}, r=3 (single trial):",
            _row("balanced r x r update", r["sgd_update"] * 1e3, "ms", digits=3),
            _row("naive full-SVD (eq. 8)", r["naive_update"] * 1e3, "ms", digits=3),
            _row("speed-up", r["sgd_speedup"], "x", "(target >= 50)", digits=1),
            f"batched epsilon-greedy round (act + update), B={r['num_envs']}, d={args.d}:",
            _row("agent", r["agent_round"] * 1e3, "ms"),
            _row("numpy draw of contexts", r["draw"] * 1e3, "ms"),
            _row("ratio", r["batched_ratio"], note="(target <= 3)", digits=3),
        ]
    elif args.what == "inference":
        r = bench.bench_inference(**kw)
        lines = [
            f"both inference wrappers, two targets, shared estimator, d={r['d']}:",
            _row("single env: wrappers", r["single_wrappers"] * 1e6, "us", digits=1),
            _row("one LowRankSGD round", r["single_sgd"] * 1e6, "us", digits=1),
            _row("ratio", r["single_ratio"], note="(target <= 3)", digits=3),
            _row(f"vector env B={r['num_envs']}: wrappers", r["vector_wrappers"] * 1e3, "ms"),
            _row("numpy draw of contexts", r["vector_draw"] * 1e3, "ms"),
            _row("ratio", r["vector_ratio"], note="(target <= 2)", digits=3),
        ]
    elif args.what == "round":
        r = bench.bench_study_round(**kw)
        lines = [
            f"one online round of the table1 study, B={r['num_envs']}, d={r['d']}, 1 thread, "
            f"engine {engine.active_engine()}:",
            _row("numpy draw of contexts", r["draw"] * 1e3, "ms"),
            _row("beyond the draw: API", r["api"] * 1e3, "ms", "(act, wrapped step, update)"),
            _row("beyond the draw: core", r["internals"] * 1e3, "ms", "(internal entry points)"),
        ]
    elif args.what == "warmstart":
        lines = _warm_start_lines(args.seed)
    else:
        raise AssertionError(args.what)
    print("\n".join(lines))
    return 0


def _warm_start_lines(seed: int) -> list[str]:
    """The report of ``lrbandit bench warmstart`` (bench_warm_start.bench_warm_start)."""
    import statistics

    from lrbandit_gym.experiments.bench_warm_start import bench_warm_start

    r = bench_warm_start(seed=seed)
    big = r["large"]

    def errs(values: list[float]) -> str:
        return " / ".join(f"{v:.3f}" for v in values)

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
        f"  ||M_init - M||_F (arm 0 / 1)  {errs(big['init_error'])}",
        f"  after {big['online']} online rounds   {errs(big['final_error'])}"
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
                f"||M_init - M||_F {errs(m['init_error'])}",
                digits=1,
            )
        )
    lines.append("paper's setting (d=50, 2000 rounds), ||M_init - M||_F per seed (arm 0 / 1):")
    for fit, runs in r["paper"].items():
        med = statistics.median(e for run in runs for e in run["init_error"])
        per_seed = ", ".join(errs(x["init_error"]) for x in runs)
        lines.append(f"  {fit:<10} median {med:.3f}: {per_seed}")
    return lines


def _bench_completion(args: argparse.Namespace) -> int:
    """``lrbandit bench completion`` (speed and warm-start memory at d = 1000) and
    ``lrbandit bench completion-coverage`` (coverage on the vector env, d = 100)."""
    from lrbandit_gym import engine
    from lrbandit_gym.experiments import bench_completion as bc
    from lrbandit_gym.experiments.studies import format_coverage

    if args.what == "completion":
        d = 1000 if args.d is None else args.d
        r = bc.bench_completion(d=d, warm_start=args.warm_start, seed=args.seed)
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
    else:
        d = 100 if args.d is None else args.d
        r = bc.completion_coverage(trials=args.trials, d=d, seed=args.seed)
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
    print("\n".join(lines))
    return 0


def _usage_errors(args: argparse.Namespace, run):
    """``run()``, with a bad argument found before the run starts (an
    :class:`~.outputs.ArgumentError`) reported as the subcommand's usage error (exit 2)."""
    from lrbandit_gym.experiments.outputs import ArgumentError

    try:
        return run()
    except ArgumentError as exc:
        args.parser.error(f"argument {exc.option}: {exc}")


def _reproduce(args: argparse.Namespace) -> int:
    from lrbandit_gym.experiments.reproduce import reproduce

    return _usage_errors(args, lambda: _run_reproduce(args, reproduce))


def _run_reproduce(args: argparse.Namespace, reproduce) -> int:
    """Run the study; exit status 130 when Ctrl-C stopped it (what finished is written,
    marked partial, by :func:`~.reproduce.reproduce`)."""
    from lrbandit_gym.experiments.parallel import RunInterrupted

    try:
        _reproduce_study(args, reproduce)
    except RunInterrupted as exc:
        print(f"reproduce: {exc.line} (partial result): exit status 130", file=sys.stderr)
        return 130
    return 0


def _reproduce_study(args: argparse.Namespace, reproduce) -> None:
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


def _figures(args: argparse.Namespace) -> int:
    """Redraw a study's figures; exit 1 without matplotlib, saying how to install it."""
    from pathlib import Path

    from lrbandit_gym.experiments.figures import MatplotlibMissing
    from lrbandit_gym.experiments.reproduce import redraw_figures

    if not Path(args.npz).is_file():
        args.parser.error(f"argument npz: no such file: {args.npz!r}")
    try:
        _usage_errors(
            args, lambda: redraw_figures(args.npz, out=args.out, overwrite=args.overwrite)
        )
    except MatplotlibMissing:
        print(
            "lrbandit figures: matplotlib is not installed, so no figure was drawn; install "
            'the plot extra: pip install "lrbandit-gym[plot]"',
            file=sys.stderr,
        )
        return 1
    except ValueError as exc:  # not a reproduce .npz
        args.parser.error(f"argument npz: {exc}")
    return 0


#: Command-line option of each argument of compare() and of its env_config.
_COMPARE_OPTIONS = {
    "env_config": "--d/--rank/--arms",
    "env_config.d1": "--d",
    "env_config.d2": "--d",
    "env_config.rank": "--rank",
    "env_config.n_actions": "--arms",
    "agents": "--agents",
}


def _compare(args: argparse.Namespace) -> int:
    """Agents side by side on the same trials (regret, estimation, inference)."""
    from lrbandit_gym.experiments.outputs import ArgumentError

    try:
        return _run_compare(args)
    except ArgumentError as exc:
        option = _COMPARE_OPTIONS.get(exc.argument, exc.option)
        args.parser.error(f"argument {option}: {exc}")


def _run_compare(args: argparse.Namespace) -> int:
    from lrbandit_gym.experiments.compare import (
        DEFAULT_AGENTS,
        compare,
        default_lineup,
        sb3_available,
    )
    from lrbandit_gym.experiments.compare_report import OUTPUT_FILES
    from lrbandit_gym.experiments.outputs import check_outputs
    from lrbandit_gym.experiments.parallel import RunInterrupted

    lineup = default_lineup(
        rank=args.rank, warm_start=args.warm_start, rounds=args.rounds, sb3_trials=args.sb3_trials
    )
    names = list(args.agents) if args.agents else list(DEFAULT_AGENTS)
    unknown = [n for n in names if n not in lineup]
    if unknown:
        args.parser.error(
            f"argument --agents: unknown agent(s) {unknown}; choose from {list(lineup)}"
        )
    if not sb3_available():
        dropped = [n for n in names if lineup[n].kind == "sb3"]
        if dropped and args.agents:
            args.parser.error(
                f'argument --agents: {dropped} need the sb3 extra: pip install "lrbandit-gym[sb3]"'
            )
        if dropped:
            print(f"{', '.join(dropped)} skipped: the sb3 extra is not installed", file=sys.stderr)
        names = [n for n in names if n not in dropped]
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
        result = compare(
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
        print(f"compare: {stopped.line} (partial result): exit status 130", file=sys.stderr)
        return 130
    return 0


def _validate(args: argparse.Namespace) -> int:
    """A Monte Carlo coverage check of the intervals in a user's setting."""
    from lrbandit_gym.experiments.validate_cli import run_validate_command

    return run_validate_command(args, args.parser)


def _analyze(args: argparse.Namespace) -> int:
    """Intervals from a saved log (:func:`inference.analyze`)."""
    from lrbandit_gym.experiments.analyze_cli import run_analyze

    return run_analyze(args, args.parser)


def add_output_arguments(sub: argparse.ArgumentParser, default: str | None, what: str) -> None:
    """``--out FOLDER`` and ``--overwrite``: one meaning for every subcommand."""
    sub.add_argument(
        "--out",
        metavar="FOLDER",
        default=default,
        help=f"folder for {what} (created if missing)"
        + (f"; default {default}" if default else ""),
    )
    sub.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the files an earlier run left in the folder (without it they are "
        "refused before anything runs)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lrbandit", description="Matrix-context bandits and online inference."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="an online experiment whose confidence intervals update as it plays"
    )
    demo.add_argument(
        "--rounds", type=positive_int, default=3000, help="online rounds after warm start"
    )
    demo.add_argument("--seed", type=nonnegative_int, default=0)
    add_output_arguments(demo, "lrbandit-out", "the figure demo_intervals.png")
    demo.add_argument("--no-plot", action="store_true", help="do not save the figure")
    demo.set_defaults(func=_demo, parser=demo)

    from lrbandit_gym.experiments.reproduce import STUDIES, STUDY_DEFAULTS

    defaults = "; ".join(
        f"{s}: {t} trials, n = {' '.join(map(str, n))}" for s, (t, n) in STUDY_DEFAULTS.items()
    )
    rep = sub.add_parser(
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
    rep.set_defaults(func=_reproduce, parser=rep)

    fig = sub.add_parser(
        "figures", help="redraw a study's figures from the .npz that reproduce saved"
    )
    fig.add_argument("npz", help="the {study}.npz written by lrbandit reproduce")
    add_output_arguments(fig, None, "the PNGs (default: the npz's folder)")
    fig.set_defaults(func=_figures, parser=fig)

    bench = sub.add_parser("bench", help="speed benchmarks")
    bench.add_argument(
        "what",
        choices=[
            "env",
            "agents",
            "inference",
            "round",
            "warmstart",
            "completion",
            "completion-coverage",
        ],
        help="warmstart: memory and accuracy of the warm start at fixed sizes (d = 500, "
        "100 and 50; --d and --num-envs do not apply; several minutes); completion: rounds "
        "per second at d = 1000 with index observations and the memory of a 50,000-round "
        "warm start; completion-coverage: coverage of the intervals at d = 100",
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
    bench.set_defaults(func=_bench)

    cmp = sub.add_parser(
        "compare",
        help="agents side by side on the same trials: regret, estimation, inference",
        description="Run agents on the same trials (same contexts and noise for every agent) "
        "and report cumulative regret, estimation error, time per round, and the coverage "
        "and width of the intervals computed on each agent's own trajectory. Default "
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
    cmp.set_defaults(func=_compare, parser=cmp)

    from lrbandit_gym.experiments.validate_cli import add_validate_parser

    val = add_validate_parser(sub)
    val.set_defaults(func=_validate, parser=val)

    from lrbandit_gym.experiments.analyze_cli import add_analyze_parser

    ana = add_analyze_parser(sub)
    ana.set_defaults(func=_analyze, parser=ana)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand and return its exit status; Ctrl-C that no subcommand turned into a
    partial result (nothing had finished, or a second Ctrl-C) exits 130, the convention for
    SIGINT, with one line instead of a traceback."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"lrbandit {args.command}: interrupted; no further output written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
