"""Coverage of the policy-value intervals (:class:`~inference.VectorPolicyEvaluation`).

An ε-greedy low-rank agent with the library's defaults plays a two-armed Gaussian-context
bandit while the wrapper evaluates three targets: the agent's greedy rule, a fixed linear
rule ``1{<W, X> > 0}`` with a random ``W``, and the *anti-optimal* rule
``1{<M_0 − M_1, X> > 0}``, as far from the logging policy as a rule can be.  For Gaussian
contexts and two arms a rule ``1{<W, X> > 0}`` has the exact value
``E<M_0, X> + <M_1 − M_0, W>/(‖W‖ √(2π))`` (``E<M_0, X> = 0``), so every trial's truth is
known: for the greedy target the mean of that value over the rules played, and, for
reference, the value of the final greedy rule.

On the same trajectories two baselines are fed by hand: plain IPW (the AIPW terms with a
zero outcome model) and DR with the *true* outcome model (the best any outcome model can
do), so the widths compare with what the estimator could have been.

The study runs on the Monte Carlo engine (:mod:`~lrbandit_gym.experiments.montecarlo`):
trials are played in chunks of ``batch_size`` at once on the vector environment, chunk
``i`` seeded by the ``i``-th child of ``SeedSequence(seed)`` (which also draws that chunk's
random ``W``) and run with one BLAS thread, so the numbers depend on ``seed`` and
``batch_size`` only, not on ``--jobs`` or ``--backend``.

``python -m lrbandit_gym.experiments.policy_value_study --noise-std 0.1 --trials 2000
--jobs 2`` prints the table (docs/reproduction.md, "Policy values"); with ``--out FOLDER``
it also writes ``policy_values.csv`` (the rows), ``policy_values.md`` (the table) and
``policy_values.npz`` (every trial's estimates, standard errors and truths), stamped with
the run (:mod:`~lrbandit_gym.experiments.outputs`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from lrbandit_gym.experiments.montecarlo import merge_trials, run_trials

__all__ = [
    "ESTIMATORS",
    "OUTPUT_FILES",
    "TARGETS",
    "PolicyValueSetting",
    "coverage_rows",
    "format_table",
    "policy_value_study",
    "rule_value",
    "run_policy_value_chunk",
    "run_policy_value_trials",
]

_SQRT_2PI = float(np.sqrt(2.0 * np.pi))
_Z95 = 1.959963984540054

#: The evaluated targets, in the order of the table.
TARGETS = ("greedy", "random rule", "anti-optimal")
#: The estimators compared on the same trajectories, in the order of the table.
ESTIMATORS = ("ours", "IPW", "oracle DR")
#: The files a run writes into ``--out``.
OUTPUT_FILES = ("policy_values.csv", "policy_values.md", "policy_values.npz")


@dataclass(frozen=True)
class PolicyValueSetting:
    """One setting of the study: the bandit (``d1 × d2`` contexts, rank, reward noise, two
    arms, the environment's default truth) and the ``rounds`` of inference per trial."""

    d1: int = 20
    d2: int = 20
    rank: int = 2
    noise_std: float = 0.1
    rounds: int = 2000

    def env_kwargs(self) -> dict[str, Any]:
        return {"d1": self.d1, "d2": self.d2, "rank": self.rank, "noise_std": self.noise_std}


def rule_value(params: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Exact value of ``1{<W, X> > 0}`` (arm 1, else arm 0) under N(0, 1) contexts.

    ``params`` is ``(2, d1, d2)``; ``W`` is ``(d1, d2)`` or ``(B, d1, d2)``."""
    D = params[1] - params[0]
    W = np.asarray(W, dtype=float)
    num = np.tensordot(W, D, axes=([-2, -1], [0, 1]))
    return num / (np.sqrt((W * W).sum(axis=(-2, -1))) * _SQRT_2PI)


def _linear_rule(W: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The rule ``1{<W, X> > 0}`` on a batch of contexts ``(B, d1, d2)``."""
    return lambda obs: (np.tensordot(obs, W, axes=([-2, -1], [0, 1])) > 0).astype(np.int64)


def run_policy_value_chunk(
    setting: PolicyValueSetting, n_trials: int, seed
) -> dict[str, np.ndarray]:
    """Play ``n_trials`` trials at once and read every target's intervals at the end.

    Returns
    -------
    dict of str to ndarray
        Per trial ``(n_trials,)``: ``"{target}:{estimator}:estimate"`` and
        ``"{target}:{estimator}:se"`` for every target of :data:`TARGETS` and estimator of
        :data:`ESTIMATORS`, ``"{target}:truth"``, and ``"final greedy truth"`` (the value of
        the final greedy rule).
    """
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the same seed gives the same numbers on one process, many, or Ray.
    with threadpool_limits(1):
        return _play_chunk(setting, n_trials, seed)


def _play_chunk(setting: PolicyValueSetting, trials: int, seed) -> dict[str, np.ndarray]:
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the env)
    from agents import EpsilonGreedy
    from inference import GREEDY, PolicyValueInference, build_stack
    from lrbandit_gym.rounds import Round

    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    env_seed, agent_seed, rule_seed = ss.spawn(3)
    n = setting.rounds
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=trials,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
        **setting.env_kwargs(),
    )
    base = venv.unwrapped
    M = np.asarray(base.true_params)
    d1, d2 = M.shape[1:]
    W_random = np.random.default_rng(rule_seed).standard_normal((d1, d2))
    W_anti = M[0] - M[1]

    agent = EpsilonGreedy(venv, rank=base.rank, seed=agent_seed)  # every default
    targets = {
        "greedy": GREEDY,
        "random rule": _linear_rule(W_random),
        "anti-optimal": _linear_rule(W_anti),
    }
    env = build_stack(venv, value=False, policies=targets, estimator=agent.estimator)
    names = list(targets)
    ipw = PolicyValueInference(2, names, n_trials=trials)
    oracle = PolicyValueInference(2, names, n_trials=trials)
    greedy_truth = np.zeros(trials)
    obs, _ = env.reset(seed=int(env_seed.generate_state(1)[0]))
    idx = np.arange(trials)
    while env.core.n_obs < n:
        decision = agent.act(obs)
        ready = agent.estimator.initialized
        if ready:
            pred = agent.estimator.predict(obs)
            pmfs = np.zeros((trials, 3, 2))
            pmfs[idx, 0, pred.argmax(axis=1)] = 1.0
            for j, W in ((1, W_random), (2, W_anti)):
                pmfs[idx, j, _linear_rule(W)(obs)] = 1.0
            D_hat = np.asarray(agent.estimator.estimates)
            greedy_truth += rule_value(M, D_hat[:, 1] - D_hat[:, 0])
        next_obs, reward, *_ = env.step(decision)
        if ready:
            a, p = decision.action, decision.propensities
            ipw.update(np.zeros((trials, 2)), Round(obs, a, reward, p), targets=pmfs)
            truth_pred = np.tensordot(obs, M, axes=([-2, -1], [1, 2]))
            oracle.update(truth_pred, Round(obs, a, reward, p), targets=pmfs)
        agent.update(obs, decision, reward)
        obs = next_obs
    D_hat = np.asarray(agent.estimator.estimates)
    truths = {
        "greedy": greedy_truth / n,
        "random rule": np.full(trials, float(rule_value(M, W_random))),
        "anti-optimal": np.full(trials, float(rule_value(M, W_anti))),
    }
    out: dict[str, np.ndarray] = {"final greedy truth": rule_value(M, D_hat[:, 1] - D_hat[:, 0])}
    for name in names:
        for label, core in (("ours", env.core), ("IPW", ipw), ("oracle DR", oracle)):
            ci = core.interval(name)
            out[f"{name}:{label}:estimate"] = np.asarray(ci.estimate, dtype=float)
            out[f"{name}:{label}:se"] = np.asarray(ci.standard_error, dtype=float)
        out[f"{name}:truth"] = truths[name]
    return out


def run_policy_value_trials(
    setting: PolicyValueSetting,
    n_trials: int,
    *,
    seed: int = 0,
    batch_size: int = 250,
    map_fn: Callable | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, np.ndarray]:
    """Every trial's read-outs (:func:`run_policy_value_chunk`), ``n_trials`` in chunks of
    ``batch_size`` on the engine (:func:`~.montecarlo.run_trials`), concatenated in chunk
    order: ``map_fn`` (say, :func:`~.montecarlo.progress_map`) may run the chunks anywhere
    and the result is the same.

    Raises
    ------
    RunInterrupted
        On Ctrl-C after a chunk finished: ``result`` merges the chunks that finished
        (:class:`~.parallel.RunInterrupted`); before, the ``KeyboardInterrupt`` itself.
    """
    return run_trials(
        run_policy_value_chunk,
        setting,
        n_trials,
        seed,
        batch_size,
        merge_trials,
        map_fn=map_fn,
        progress=progress,
    )


def coverage_rows(data: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """One row per target and estimator: coverage of the 95% interval, z mean and s.d.,
    mean width (and, for the greedy target, coverage of the final greedy rule's value)."""
    rows = []
    for name in TARGETS:
        truth = data[f"{name}:truth"]
        for label in ESTIMATORS:
            est, se = data[f"{name}:{label}:estimate"], data[f"{name}:{label}:se"]
            z = (est - truth) / se
            row = {
                "target": name,
                "estimator": label,
                "coverage": float(np.mean(np.abs(z) < _Z95)),
                "z mean": float(z.mean()),
                "z s.d.": float(z.std()),
                "mean width": float(np.mean(2 * _Z95 * se)),
            }
            if name == "greedy":
                zf = (est - data["final greedy truth"]) / se
                row["coverage of the final rule"] = float(np.mean(np.abs(zf) < _Z95))
            rows.append(row)
    return rows


def policy_value_study(
    setting: PolicyValueSetting,
    *,
    trials: int = 1000,
    seed: int = 0,
    batch_size: int = 250,
    map_fn: Callable | None = None,
) -> list[dict[str, Any]]:
    """Run the study (:func:`run_policy_value_trials`) and return its
    :func:`coverage_rows`."""
    data = run_policy_value_trials(setting, trials, seed=seed, batch_size=batch_size, map_fn=map_fn)
    return coverage_rows(data)


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as the Markdown table of docs/reproduction.md."""
    lines = [
        "| target | estimator | coverage | z mean | z s.d. | mean width | final rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        final = r.get("coverage of the final rule")
        lines.append(
            f"| {r['target']} | {r['estimator']} | {r['coverage']:.3f} | {r['z mean']:+.2f} "
            f"| {r['z s.d.']:.2f} | {r['mean width']:.4f} | "
            + ("" if final is None else f"{final:.3f}")
            + " |"
        )
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    from lrbandit_gym.experiments.cli.conventions import (
        add_output_arguments,
        nonnegative_int,
        positive_int,
    )

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=positive_int, default=20)
    parser.add_argument("--rank", type=positive_int, default=2)
    parser.add_argument("--noise-std", type=float, default=0.1)
    parser.add_argument("--trials", type=positive_int, default=1000)
    parser.add_argument("--n", type=positive_int, default=2000, help="rounds of inference")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--jobs", type=positive_int, default=1)
    parser.add_argument("--backend", choices=["local", "ray"], default="local")
    parser.add_argument("--batch-size", type=positive_int, default=250, help="trials per chunk")
    add_output_arguments(parser, None, ", ".join(OUTPUT_FILES))
    return parser


def main(argv=None) -> int:
    from lrbandit_gym.experiments.montecarlo import progress_map
    from lrbandit_gym.experiments.outputs import (
        OutputError,
        RunStamp,
        check_outputs,
        remove_stale,
        write_csv,
        write_npz,
        write_text,
    )
    from lrbandit_gym.experiments.parallel import RunInterrupted

    parser = _parser()
    args = parser.parse_args(argv)
    earlier = []
    if args.out is not None:
        try:
            earlier = check_outputs(args.out, OUTPUT_FILES, args.overwrite)  # before any trial
        except OutputError as exc:
            parser.error(f"argument {exc.option}: {exc}")
    setting = PolicyValueSetting(args.d, args.d, args.rank, args.noise_std, args.n)
    start = time.perf_counter()
    stopped = None
    try:
        data = run_policy_value_trials(
            setting,
            args.trials,
            seed=args.seed,
            batch_size=args.batch_size,
            map_fn=progress_map(args.jobs, args.backend, sys.stderr),
        )
    except RunInterrupted as exc:  # Ctrl-C: keep the chunks that finished, marked partial
        stopped, data = exc, exc.result
    trials = len(data["final greedy truth"])
    rows = coverage_rows(data)
    head = (
        f"env {setting.env_kwargs()}, ε-greedy with every default, n = {setting.rounds}, "
        f"{trials} trials, seed {args.seed}, batch size {args.batch_size}"
    )
    table = format_table(rows)
    print(head)
    print(table, end="")
    print(f"({time.perf_counter() - start:.0f} s, {args.jobs} job(s))")
    if args.out is not None:
        from pathlib import Path

        settings = {**asdict(setting), "trials": args.trials, "batch_size": args.batch_size}
        stamp = RunStamp.of(
            "python -m lrbandit_gym.experiments.policy_value_study",
            settings,
            args.seed,
            "" if stopped is None else stopped.line,
        )
        out = Path(args.out)
        written = [
            write_csv(out / "policy_values.csv", rows, stamp, fieldnames=list(rows[0])),
            write_text(out / "policy_values.md", head + "\n\n" + table, stamp),
            write_npz(out / "policy_values.npz", data, stamp),
        ]
        remove_stale(earlier, written, sys.stderr)
        print(f"wrote {', '.join(written)}", file=sys.stderr)
    if stopped is not None:
        print(f"policy_value_study: {stopped.line} (partial result)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
