"""Coverage of the policy-value interval on real data: the handwritten digits.

An ε-greedy low-rank agent (:class:`agents.EpsilonGreedy`, every default but the rank) plays
the digits bandit (:func:`lrbandit_gym.digits.digits_bandit`: ten arms, 8 × 8 images, reward
1 for the image's digit) while :class:`inference.PolicyEvaluation` evaluates the target
``"greedy"``, the greedy rule of the agent's estimate.  Each trial draws its own train/test
split, agent seed and order of images.

The interval's estimand is the mean, over the rounds absorbed, of the value of each round's
greedy rule (docs/method.md §9).  Each round's rule is scored three ways, on all images of a
split:

- **exact**: its accuracy on the training images, which the bandit draws from with
  replacement, so this is the rule's exact value under the bandit; the mean over rounds is
  the interval's estimand exactly;
- **held-out**: its accuracy on the held-out images, the value on unseen images the issue asks
  for.  It is itself an estimate from ``m`` images (standard error about
  ``sqrt(v (1 − v)/m)``, near 0.02 at ``m = 539``) of the population value, from which the
  training images' value also differs by the sampling of the training set, so the interval
  alone is not meant to cover it; the table also gives the coverage of the interval widened by
  those two errors, ``sqrt(se² + v (1 − v) (1/m + 1/n_train))``;
- the **final** rule's held-out accuracy (the rule the agent ends with), reported apart.

``python -m lrbandit_gym.experiments.digits_study --trials 500`` prints the table
(docs/reproduction.md, "Real data: handwritten digits") and draws the interval of one trial
narrowing over the rounds beside the truths (docs/figures/digits_policy_value.png).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from lrbandit_gym.experiments.montecarlo import BACKENDS, chunk_map

__all__ = ["FIGURE", "digits_study", "run_trial", "summarize"]

#: Where ``main`` draws the figure by default.
FIGURE = Path("docs/figures/digits_policy_value.png")

_Z95 = 1.959963984540054


def _greedy_values(estimates: np.ndarray, x: np.ndarray, table: np.ndarray) -> float:
    """Value of the greedy rule ``argmax_a <M̂_a, X>`` (ties to the lowest arm, as the
    wrapper's ``"greedy"``) on the flattened contexts ``x`` with rewards ``table``."""
    pred = x @ estimates.reshape(len(estimates), -1).T
    return float(table[np.arange(len(x)), pred.argmax(axis=1)].mean())


def run_trial(
    seed: int, *, n: int = 1000, rank: int = 2, truth_every: int = 5, trace_every: int = 0
) -> dict[str, Any]:
    """One trial: the interval of ``"greedy"`` after ``n`` absorbed rounds and its truths.

    ``seed`` draws the split, the agent's seed and the environment's seed.  The greedy rule is
    scored on all images every ``truth_every`` absorbed rounds (rounds 1, 1 + k, …) and the
    truths are the means of those scores (1: every round, exact; the rule moves little in a
    few rounds, and scoring is most of a round's time).  With
    ``trace_every > 0`` the result also holds ``trace``: every ``trace_every`` absorbed rounds,
    the round, the interval, and the running means of the exact and held-out values with the
    current rule's held-out accuracy.
    """
    from agents import EpsilonGreedy
    from agents.warm_start import default_warm_start_rounds
    from inference import GREEDY, build_stack
    from lrbandit_gym.digits import digits_bandit

    split_seed, agent_seed, env_seed = (
        int(s) for s in np.random.SeedSequence(seed).generate_state(3)
    )
    base = digits_bandit(split_seed=split_seed)
    # the rule's length, fixed: the study's numbers do not depend on the default's extension
    warm = default_warm_start_rounds(base.d1, base.d2, rank, base.n_actions)
    agent = EpsilonGreedy(base, rank=rank, seed=agent_seed, warm_start=warm)
    env = build_stack(base, value=False, policies={"greedy": GREEDY}, estimator=agent.estimator)
    x_train = base.contexts.reshape(base.n_samples, -1)
    x_test = base.test_contexts.reshape(len(base.test_contexts), -1)
    r_train, r_test = base.expected_rewards, base.test_expected_rewards
    exact_sum = test_sum = 0.0
    scored = 0
    test_now = float("nan")
    trace: list[tuple[float, ...]] = []
    obs, _ = env.reset(seed=env_seed)
    while env.core.n_obs < n:
        decision = agent.act(obs)
        absorbed = agent.estimator.initialized  # the wrapper absorbs exactly these rounds
        if absorbed and env.core.n_obs % truth_every == 0:
            M = np.asarray(agent.estimator.estimates)
            exact_sum += _greedy_values(M, x_train, r_train)
            test_now = _greedy_values(M, x_test, r_test)
            test_sum += test_now
            scored += 1
        next_obs, reward, *_ = env.step(decision)
        agent.update(obs, decision, reward)
        obs = next_obs
        k = env.core.n_obs
        if absorbed and trace_every and (k % trace_every == 0 or k == n) and k >= 2:
            ci = env.interval("greedy")
            mean_exact, mean_test = exact_sum / scored, test_sum / scored
            trace.append((k, ci.estimate, ci.low, ci.high, mean_exact, mean_test, test_now))
    ci = env.interval("greedy")
    M = np.asarray(agent.estimator.estimates)
    out: dict[str, Any] = {
        "estimate": ci.estimate,
        "se": ci.standard_error,
        "exact": exact_sum / scored,
        "held_out": test_sum / scored,
        "final_held_out": _greedy_values(M, x_test, r_test),
        "final_exact": _greedy_values(M, x_train, r_train),
        "n_train": base.n_samples,
        "n_test": len(x_test),
    }
    if trace_every:
        out["trace"] = np.array(trace)
    return out


def _trials(args: tuple[list[int], int, int, int]) -> list[dict[str, Any]]:
    seeds, n, rank, truth_every = args
    return [run_trial(s, n=n, rank=rank, truth_every=truth_every) for s in seeds]


def digits_study(
    trials: int = 500,
    *,
    n: int = 1000,
    rank: int = 2,
    truth_every: int = 5,
    seed: int = 0,
    jobs: int = 1,
    backend: str = "local",
) -> dict[str, np.ndarray]:
    """Run ``trials`` trials (seeds spawned from ``seed``; the result does not depend on
    ``jobs`` or ``backend``, ``"local"`` processes or ``"ray"``, through the Monte Carlo
    engine's map); returns one array per field of :func:`run_trial`, one entry per trial."""
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(trials)]
    chunk = max(1, min(25, -(-trials // max(1, 4 * jobs))))
    items = [(seeds[i : i + chunk], n, rank, truth_every) for i in range(0, trials, chunk)]
    parts = chunk_map(jobs, backend)(_trials, items)
    rows = [r for part in parts for r in part]
    return {k: np.array([r[k] for r in rows], dtype=float) for k in rows[0] if k != "trace"}


def summarize(data: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """One row per truth: coverage of the 95% interval with its Wilson interval, the mean and
    s.d. of ``z = (estimate − truth)/se``, the mean width, and the mean truth."""
    from lrbandit_gym.experiments.coverage import coverage_interval

    est, se = data["estimate"], data["se"]
    v = data["held_out"]
    spread = np.sqrt(se**2 + v * (1 - v) * (1 / data["n_test"] + 1 / data["n_train"]))
    cases = [
        ("exact: training-image value, mean over rounds (the estimand)", data["exact"], se),
        ("held-out accuracy, mean over rounds", data["held_out"], se),
        ("held-out accuracy of the final rule", data["final_held_out"], se),
        ("held-out, mean over rounds, widened by the data's sampling error", v, spread),
    ]
    rows = []
    for label, truth, scale in cases:
        z = (est - truth) / scale
        covered = int(np.sum(np.abs(z) < _Z95))
        low, high = coverage_interval(covered, len(z))
        rows.append(
            {
                "truth": label,
                "coverage": covered / len(z),
                "coverage_low": low,
                "coverage_high": high,
                "z mean": float(z.mean()),
                "z s.d.": float(z.std()),
                "mean width": float(np.mean(2 * _Z95 * scale)),
                "mean truth": float(truth.mean()),
            }
        )
    return rows


def draw_figure(trace: np.ndarray, path: str | Path) -> Path:
    """The interval of one trial against the absorbed rounds, beside the truths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lrbandit_gym.experiments.outputs import write_figure

    k, est, low, high, exact, held, now = trace.T
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(k, low, high, color="C0", alpha=0.25, label="95% interval")
    ax.plot(k, est, color="C0", label="estimate of the greedy rules' mean value")
    ax.plot(k, exact, color="k", label="exact: mean training-image accuracy of the rules")
    ax.plot(k, held, color="C3", ls="--", label="mean held-out accuracy of the rules")
    ax.plot(k, now, color="C2", lw=0.8, alpha=0.7, label="held-out accuracy of the current rule")
    ax.set_xlabel("rounds absorbed (after the warm start)")
    ax.set_ylabel("value (accuracy)")
    ax.set_title("Digits: value of the ε-greedy agent's greedy rules")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    out = write_figure(fig, path, dpi=120)
    plt.close(fig)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--n", type=int, default=1000, help="rounds absorbed per trial")
    parser.add_argument("--rank", type=int, default=2)
    parser.add_argument("--truth-every", type=int, default=5, help="score the rule every k rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--backend", choices=BACKENDS, default="local")
    parser.add_argument("--figure", default=str(FIGURE), help='path, or "none"')
    args = parser.parse_args(argv)
    for name in ("trials", "n", "rank", "truth_every", "jobs"):
        if getattr(args, name) < 1:
            flag = name.replace("_", "-")
            parser.error(f"--{flag} must be >= 1; got {getattr(args, name)}")
    start = time.perf_counter()
    data = digits_study(
        args.trials,
        n=args.n,
        rank=args.rank,
        truth_every=args.truth_every,
        seed=args.seed,
        jobs=args.jobs,
        backend=args.backend,
    )
    print(
        f"digits, ε-greedy rank {args.rank} (defaults otherwise), target 'greedy', "
        f"n = {args.n} rounds absorbed, rules scored every {args.truth_every} rounds, "
        f"{args.trials} trials (seed {args.seed})"
    )
    print("| truth | coverage [95% Wilson] | z mean | z s.d. | mean width | mean truth |")
    print("|---|---|---|---|---|---|")
    for r in summarize(data):
        print(
            f"| {r['truth']} | {r['coverage']:.3f} [{r['coverage_low']:.3f}, "
            f"{r['coverage_high']:.3f}] | {r['z mean']:+.2f} | {r['z s.d.']:.2f} | "
            f"{r['mean width']:.4f} | {r['mean truth']:.4f} |"
        )
    print(
        f"mean estimate {data['estimate'].mean():.4f}; final rule: held-out accuracy "
        f"{data['final_held_out'].mean():.4f}, training-image accuracy "
        f"{data['final_exact'].mean():.4f}"
    )
    if args.figure != "none":
        every = max(1, args.n // 200)
        trace = run_trial(args.seed, n=args.n, rank=args.rank, truth_every=1, trace_every=every)[
            "trace"
        ]
        print(f"figure: {draw_figure(trace, args.figure)}")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":  # pragma: no cover
    main()
