"""The ``lrbandit`` command line: ``demo``, ``reproduce``, ``figures``, ``bench`` and
``compare``."""

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

    run_demo(rounds=args.rounds, seed=args.seed, out=args.out, plot=not args.no_plot)
    return 0


def _row(label: str, value: float, unit: str = "", note: str = "", digits: int = 2) -> str:
    """One aligned line of a benchmark report."""
    return f"  {label:<24} {value:8.{digits}f} {unit}{'  ' + note if note else ''}".rstrip()


def _bench(args: argparse.Namespace) -> int:
    from lrbandit_gym import engine

    return engine.call(args.engine, _run_bench, args)  # None: the current engine


def _run_bench(args: argparse.Namespace) -> int:
    from lrbandit_gym import engine
    from lrbandit_gym.experiments import bench

    num_envs = args.num_envs
    if num_envs is None:
        num_envs = 125 if args.what == "round" else 1000
    kw = {"d": args.d, "num_envs": num_envs, "seed": args.seed}
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
    else:
        raise AssertionError(args.what)
    print("\n".join(lines))
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from lrbandit_gym.experiments.reproduce import reproduce

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
    )
    return 0


def _figures(args: argparse.Namespace) -> int:
    from lrbandit_gym.experiments.reproduce import redraw_figures

    redraw_figures(args.npz, out=args.out)
    return 0


def _compare(args: argparse.Namespace) -> int:
    """Agents side by side on the same trials (regret, estimation, inference)."""
    from lrbandit_gym.experiments.compare import (
        DEFAULT_AGENTS,
        compare,
        default_lineup,
        sb3_available,
    )

    lineup = default_lineup(
        rank=args.rank, warm_start=args.warm_start, rounds=args.rounds, sb3_trials=args.sb3_trials
    )
    names = list(args.agents) if args.agents else list(DEFAULT_AGENTS)
    unknown = [n for n in names if n not in lineup]
    if unknown:
        raise SystemExit(
            f"lrbandit compare: unknown agent(s) {unknown}; choose from {list(lineup)}"
        )
    if not sb3_available():
        dropped = [n for n in names if lineup[n].kind == "sb3"]
        if dropped and args.agents:
            raise SystemExit(
                f"lrbandit compare: {dropped} need the sb3 extra: pip install 'lrbandit-gym[sb3]'"
            )
        if dropped:
            print(f"{', '.join(dropped)} skipped: the sb3 extra is not installed", file=sys.stderr)
        names = [n for n in names if n not in dropped]
    env_config = {"d1": args.d, "d2": args.d, "rank": args.rank, "n_actions": args.arms}
    print(
        f"compare: d = {args.d}, r = {args.rank}, K = {args.arms}, {args.rounds} rounds, "
        f"{args.trials} trials ({args.sb3_trials} for stable-baselines3 agents), seed "
        f"{args.seed}, {args.jobs} job(s), backend {args.backend}",
        file=sys.stderr,
    )
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
    paths = result.save(args.out, figures=not args.no_figures, stream=sys.stderr)
    print(result.to_markdown())
    written = [paths["csv"], paths["inference_csv"], paths["regret_csv"], paths["markdown"]]
    written += [paths["json"], paths["npz"], *paths["figures"]]
    print(f"wrote {', '.join(written)}", file=sys.stderr)
    return 0


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
    demo.add_argument("--out", default="lrbandit-out", help="folder for the figure")
    demo.add_argument("--no-plot", action="store_true", help="do not save the figure")
    demo.set_defaults(func=_demo)

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
    rep.add_argument("--out", default="lrbandit-out")
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
    rep.set_defaults(func=_reproduce)

    fig = sub.add_parser(
        "figures", help="redraw a study's figures from the .npz that reproduce saved"
    )
    fig.add_argument("npz", help="the {study}.npz written by lrbandit reproduce")
    fig.add_argument("--out", default=None, help="folder for the PNGs (default: the npz's)")
    fig.set_defaults(func=_figures)

    bench = sub.add_parser("bench", help="speed benchmarks")
    bench.add_argument("what", choices=["env", "agents", "inference", "round"])
    bench.add_argument("--d", type=positive_int, default=50)
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
    cmp.add_argument("--trials", type=int, default=200, help="trials per agent")
    cmp.add_argument(
        "--sb3-trials",
        type=int,
        default=20,
        help="trials for stable-baselines3 agents (one network per trial): the first ones",
    )
    cmp.add_argument("--rounds", type=int, default=2000)
    cmp.add_argument("--d", type=int, default=20, help="d1 = d2")
    cmp.add_argument("--rank", type=int, default=2)
    cmp.add_argument("--arms", type=int, default=2)
    cmp.add_argument(
        "--warm-start",
        type=int,
        default=400,
        help="uniform rounds before the low-rank agents' fit and before the wrappers' own",
    )
    cmp.add_argument("--seed", type=int, default=0)
    cmp.add_argument("--jobs", type=int, default=2)
    cmp.add_argument("--backend", choices=["local", "ray"], default="local")
    cmp.add_argument("--batch-size", type=int, default=25, help="trials per batched chunk")
    cmp.add_argument("--out", default="lrbandit-out")
    cmp.add_argument("--no-figures", action="store_true", help="do not draw the PNG figures")
    cmp.set_defaults(func=_compare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
