"""``lrbandit demo``: one online experiment with intervals that update while the agent plays."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from agents import EpsilonGreedy
from inference import build_stack
from lrbandit_gym.experiments.outputs import RunStamp, check_outputs, stamped, write_figure
from lrbandit_gym.experiments.studies import paper_targets
from lrbandit_gym.input_checks import check_positive_int

__all__ = ["run_demo"]


#: The figure ``lrbandit demo`` writes into its folder.
DEMO_FIGURE = "demo_intervals.png"

#: The folder of the figure when no ``out`` is given: each run replaces the figure there.
DEFAULT_OUT = "lrbandit-out"


def run_demo(
    rounds: int = 3000,
    seed: int = 0,
    out: str | Path | None = None,
    plot: bool = True,
    stream=None,
    overwrite: bool = False,
) -> dict:
    """A warm-started ε-greedy low-rank agent on the default environment, watched by both
    inference wrappers sharing its estimator (the paper's procedure).

    Prints a live progress line with the current intervals, then a table of every arm, T1 and
    T2, their difference and the optimal value, each with the truth and whether it is
    covered; saves a figure of the intervals narrowing around the truth when matplotlib is
    installed (the ``plot`` extra) into the folder ``out``, as ``demo_intervals.png``.  In a
    folder given as ``out``, a figure already there is refused before the run unless
    ``overwrite`` (:class:`~.outputs.OutputError`); without ``out`` the figure goes to
    :data:`DEFAULT_OUT`, where it replaces the previous run's, so that the demo runs again
    with its defaults.  Returns the final intervals.
    """
    rounds = check_positive_int(rounds, "rounds")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if out is None:  # the default folder holds the latest run's figure
        out, overwrite = DEFAULT_OUT, True
    if plot:
        check_outputs(out, [DEMO_FIGURE], overwrite)
    stream = sys.stdout if stream is None else stream
    start = time.perf_counter()
    env = gym.make("MatrixContextBandit-v0", max_episode_steps=None)
    base = env.unwrapped
    targets = paper_targets(base.d1, base.d2)
    agent = EpsilonGreedy(env, rank=base.rank, epsilon=0.1, seed=seed)
    watched = build_stack(env, targets, estimator=agent.estimator)
    print(
        f"MatrixContextBandit-v0: d1={base.d1}, d2={base.d2}, rank={base.rank}, "
        f"K={base.n_actions}, sigma={base.noise_std[0]}; epsilon-greedy (0.1) low-rank SGD "
        f"agent, warm start {agent.warm_start_rounds} uniform rounds, then {rounds} "
        f"online rounds watched by ParameterInference and ValueInference",
        file=stream,
    )
    truth = {name: base.linear_form(t) for name, t in targets.items()}
    history = _play(agent, watched, base, rounds, seed, stream)
    print(file=stream)
    truths = []
    for name in targets:
        truths += [truth[name][0], truth[name][1], truth[name][1] - truth[name][0]]
    truths.append(base.optimal_value)
    rows = _print_table(watched, truths, stream)
    print(
        f"{sum(r['covered'] for r in rows)} of {len(rows)} intervals cover the truth "
        f"(each is a 95% interval); {time.perf_counter() - start:.1f} s",
        file=stream,
    )
    if plot:
        with stamped(RunStamp.of("lrbandit demo", {"rounds": rounds}, seed)):
            _plot(history, truth["T1"][1], base.optimal_value, Path(out), stream)
    return {"rows": rows, "history": history}


def _play(agent, watched, base, rounds: int, seed: int, stream) -> list[tuple]:
    """The warm start, then ``rounds`` online rounds; every 100 rounds the intervals of
    ``<M_1, T1>`` and ``V*`` are kept (and printed: every 1000 rounds, or live on a
    terminal).  Returns the kept ``(round, low, high, V* low, V* high)``."""
    params = watched.env
    history = []
    obs, _ = watched.reset(seed=seed)
    online = 0
    while online < rounds:
        decision = agent.act(obs)
        nxt, reward, _, _, info = watched.step(decision)
        warm = agent.in_warm_start
        agent.update(obs, decision, reward)
        obs = nxt
        if warm:
            if agent.estimator.initialized:
                err = np.linalg.norm(agent.estimates - base.true_params, axis=(1, 2))
                print(
                    f"warm start fitted: ||M_init,a - M_a||_F = {np.round(err, 3).tolist()}",
                    file=stream,
                )
            continue
        online += 1
        if online % 100 == 0 or online == rounds:
            ci = params.interval(1, "T1")
            vi = watched.interval()
            history.append((online, ci.low, ci.high, vi.low, vi.high))
            if stream.isatty() or online % 1000 == 0 or online == rounds:
                end = "\r" if stream.isatty() and online < rounds else "\n"
                print(
                    f"round {online:5d}: <M_1,T1> in [{ci.low:+.4f}, {ci.high:+.4f}]  "
                    f"V* in [{vi.low:.3f}, {vi.high:.3f}]",
                    end=end,
                    file=stream,
                )
    return history


def _print_table(watched, truths: list[float], stream) -> list[dict]:
    """The table of every final interval beside its truth and whether it covers it; its
    rows."""
    results = watched.env.results() + [("V*", watched.interval())]
    head = f"{'quantity':<18}{'truth':>10}{'estimate':>10}{'95% low':>10}{'95% high':>10}  covered"
    print(head, file=stream)
    print("-" * len(head), file=stream)
    rows = []
    for (label, ci), value in zip(results, truths, strict=True):
        covered = bool(ci.contains(value))
        rows.append({"quantity": label, "truth": value, "interval": ci, "covered": covered})
        print(
            f"{label:<18}{value:>10.4f}{ci.estimate:>10.4f}{ci.low:>10.4f}{ci.high:>10.4f}"
            f"  {'yes' if covered else 'NO'}",
            file=stream,
        )
    return rows


def _plot(history, t1_truth, v_truth, out: Path, stream) -> None:
    try:  # matplotlib only here: the plot extra is optional
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "figure not saved: matplotlib is not installed (pip install 'lrbandit-gym[plot]')",
            file=stream,
        )
        return
    out.mkdir(parents=True, exist_ok=True)
    h = np.array(history, dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (lo, hi), value, title in (
        (axes[0], (1, 2), t1_truth, "<M_1, T1>"),
        (axes[1], (3, 4), v_truth, "optimal value V*"),
    ):
        ax.fill_between(h[:, 0], h[:, lo], h[:, hi], alpha=0.3, label="95% interval")
        # The Wald intervals are symmetric: their midpoint is the point estimate.
        ax.plot(h[:, 0], (h[:, lo] + h[:, hi]) / 2, lw=1, label="estimate")
        ax.axhline(value, color="k", lw=1, label="truth")
        ax.set_xlabel("online round n")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    path = write_figure(fig, out / DEMO_FIGURE, dpi=120)
    plt.close(fig)
    print(f"figure: {path}", file=stream)
