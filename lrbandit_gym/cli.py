"""The ``lrbandit`` command line: ``demo`` and ``bench``."""

from __future__ import annotations

import argparse
import sys

import numpy as np

__all__ = ["main"]


def _demo_random(args: argparse.Namespace) -> int:
    """A short run of the environment with a uniformly random policy."""
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401

    env = gym.make("MatrixContextBandit-v0", max_episode_steps=args.rounds)
    base = env.unwrapped
    rng = np.random.default_rng(args.seed)
    obs, _ = env.reset(seed=args.seed)
    rewards, regrets, pulls = [], [], np.zeros(base.n_actions, dtype=int)
    truncated = False
    while not truncated:
        action = int(rng.integers(base.n_actions))
        obs, reward, _, truncated, info = env.step(action)
        rewards.append(reward)
        regrets.append(info["regret"])
        pulls[action] += 1
    print(
        f"MatrixContextBandit-v0: d1={base.d1}, d2={base.d2}, rank={base.rank}, "
        f"K={base.n_actions}, context={base.context}, noise_std={base.noise_std.tolist()}"
    )
    print(f"uniformly random policy, {len(rewards)} rounds, seed {args.seed}")
    print(f"  pulls per arm          {pulls.tolist()}")
    print(f"  mean reward            {np.mean(rewards):+.4f}")
    print(f"  optimal value V*       {base.optimal_value:+.4f}  (exact)")
    print(f"  cumulative regret      {np.sum(regrets):.2f}")
    t1 = np.zeros((base.d1, base.d2))
    t1[0, 0] = 1.0
    print(f"  truth <M_a, e1e1ᵀ>     {np.round(base.linear_form(t1), 4).tolist()}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from lrbandit_gym import bench

    if args.what == "env":
        r = bench.bench_env(d=args.d, num_envs=args.num_envs, seed=args.seed)
        print(f"vector env, B={r['num_envs']}, d={r['d']}:")
        print(f"  step                     {r['vector_step'] * 1e3:8.2f} ms")
        print(f"  numpy draw of contexts   {r['vector_draw'] * 1e3:8.2f} ms")
        print(f"  ratio                    {r['vector_ratio']:8.3f}   (target <= 1.3)")
        print(f"single env (unwrapped), d={r['d']}:")
        print(f"  step                     {r['single_step'] * 1e6:8.2f} us")
        print(f"  numpy draw of a context  {r['single_draw'] * 1e6:8.2f} us")
        print(f"  added by step            {r['single_added_us']:8.2f} us (target <= 15)")
        return 0
    if args.what == "agents":
        r = bench.bench_agents(d=args.d, num_envs=args.num_envs, seed=args.seed)
        print(f"LowRankSGD update, d={r['d_large']}, r=3 (single trial):")
        print(f"  balanced r x r update    {r['sgd_update'] * 1e3:8.3f} ms")
        print(f"  naive full-SVD (eq. 8)   {r['naive_update'] * 1e3:8.3f} ms")
        print(f"  speed-up                 {r['sgd_speedup']:8.1f} x  (target >= 50)")
        print(f"batched epsilon-greedy round (act + update), B={r['num_envs']}, d={args.d}:")
        print(f"  agent                    {r['agent_round'] * 1e3:8.2f} ms")
        print(f"  numpy draw of contexts   {r['draw'] * 1e3:8.2f} ms")
        print(f"  ratio                    {r['batched_ratio']:8.3f}   (target <= 3)")
        return 0
    if args.what == "inference":
        r = bench.bench_inference(d=args.d, num_envs=args.num_envs, seed=args.seed)
        print(f"both inference wrappers, two targets, shared estimator, d={r['d']}:")
        print(f"  single env: wrappers     {r['single_wrappers'] * 1e6:8.1f} us")
        print(f"  one LowRankSGD round     {r['single_sgd'] * 1e6:8.1f} us")
        print(f"  ratio                    {r['single_ratio']:8.3f}   (target <= 3)")
        print(f"  vector env B={r['num_envs']}: wrappers {r['vector_wrappers'] * 1e3:8.2f} ms")
        print(f"  numpy draw of contexts   {r['vector_draw'] * 1e3:8.2f} ms")
        print(f"  ratio                    {r['vector_ratio']:8.3f}   (target <= 2)")
        return 0
    raise AssertionError(args.what)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lrbandit", description="Matrix-context bandits and online inference."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="a short run of MatrixContextBandit-v0 with a report")
    demo.add_argument("--rounds", type=int, default=1000)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo_random)

    bench = sub.add_parser("bench", help="speed benchmarks")
    bench.add_argument("what", choices=["env", "agents", "inference"])
    bench.add_argument("--d", type=int, default=50)
    bench.add_argument("--num-envs", type=int, default=1000)
    bench.add_argument("--seed", type=int, default=0)
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
