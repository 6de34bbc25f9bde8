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

``python -m lrbandit_gym.experiments.policy_value_study --noise-std 0.1 --trials 1000``
prints the table (docs/reproduction.md, "Policy values").
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

__all__ = ["policy_value_study", "rule_value"]

_SQRT_2PI = float(np.sqrt(2.0 * np.pi))


def rule_value(params: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Exact value of ``1{<W, X> > 0}`` (arm 1, else arm 0) under N(0, 1) contexts.

    ``params`` is ``(2, d1, d2)``; ``W`` is ``(d1, d2)`` or ``(B, d1, d2)``."""
    D = params[1] - params[0]
    W = np.asarray(W, dtype=float)
    num = np.tensordot(W, D, axes=([-2, -1], [0, 1]))
    return num / (np.sqrt((W * W).sum(axis=(-2, -1))) * _SQRT_2PI)


def _chunk(env_kwargs: dict[str, Any], trials: int, n: int, seed: int) -> dict[str, np.ndarray]:
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401
    from agents import EpsilonGreedy
    from inference import GREEDY, PolicyValueInference, VectorPolicyEvaluation
    from lrbandit_gym.rounds import Round

    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=trials,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
        **env_kwargs,
    )
    base = venv.unwrapped
    M = np.asarray(base.true_params)
    d1, d2 = M.shape[1:]
    rng = np.random.default_rng(seed + 7)
    W_random = rng.standard_normal((d1, d2))
    W_anti = M[0] - M[1]

    def rule(W):
        return lambda obs: (np.tensordot(obs, W, axes=([-2, -1], [0, 1])) > 0).astype(np.int64)

    agent = EpsilonGreedy(venv, rank=base.rank, seed=seed)  # every default
    targets = {"greedy": GREEDY, "random rule": rule(W_random), "anti-optimal": rule(W_anti)}
    env = VectorPolicyEvaluation(venv, targets, estimator=agent.estimator)
    names = list(targets)
    ipw = PolicyValueInference(2, names, n_trials=trials)
    oracle = PolicyValueInference(2, names, n_trials=trials)
    greedy_truth = np.zeros(trials)
    obs, _ = env.reset(seed=seed)
    idx = np.arange(trials)
    while env.core.n_obs < n:
        decision = agent.act(obs)
        ready = agent.estimator.initialized
        if ready:
            pred = agent.estimator.predict(obs)
            pmfs = np.zeros((trials, 3, 2))
            pmfs[idx, 0, pred.argmax(axis=1)] = 1.0
            for j, W in ((1, W_random), (2, W_anti)):
                pmfs[idx, j, rule(W)(obs)] = 1.0
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
            out[f"{name}|{label}|estimate"] = ci.estimate
            out[f"{name}|{label}|se"] = ci.standard_error
        out[f"{name}|truth"] = truths[name]
    return out


def policy_value_study(
    env_kwargs: dict[str, Any],
    *,
    trials: int = 1000,
    n: int = 2000,
    chunk: int = 250,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Run the study; one row per target and estimator: coverage of the 95% interval,
    z mean and s.d., mean width (and, for the greedy target, coverage of the final greedy
    rule's value)."""
    parts = [_chunk(env_kwargs, chunk, n, seed + i) for i in range(-(-trials // chunk))]
    data = {k: np.concatenate([p[k] for p in parts])[:trials] for k in parts[0]}
    rows = []
    z95 = 1.959963984540054
    for name in ("greedy", "random rule", "anti-optimal"):
        truth = data[f"{name}|truth"]
        for label in ("ours", "IPW", "oracle DR"):
            est, se = data[f"{name}|{label}|estimate"], data[f"{name}|{label}|se"]
            z = (est - truth) / se
            row = {
                "target": name,
                "estimator": label,
                "coverage": float(np.mean(np.abs(z) < z95)),
                "z mean": float(z.mean()),
                "z s.d.": float(z.std()),
                "mean width": float(np.mean(2 * z95 * se)),
            }
            if name == "greedy":
                zf = (est - data["final greedy truth"]) / se
                row["coverage of the final rule"] = float(np.mean(np.abs(zf) < z95))
            rows.append(row)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=20)
    parser.add_argument("--rank", type=int, default=2)
    parser.add_argument("--noise-std", type=float, default=0.1)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    env = {"d1": args.d, "d2": args.d, "rank": args.rank, "noise_std": args.noise_std}
    rows = policy_value_study(env, trials=args.trials, n=args.n, seed=args.seed)
    print(f"env {env}, ε-greedy with every default, n = {args.n}, {args.trials} trials")
    print("| target | estimator | coverage | z mean | z s.d. | mean width | final rule |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        final = r.get("coverage of the final rule")
        print(
            f"| {r['target']} | {r['estimator']} | {r['coverage']:.3f} | {r['z mean']:+.2f} "
            f"| {r['z s.d.']:.2f} | {r['mean width']:.4f} | "
            + ("" if final is None else f"{final:.3f}")
            + " |"
        )
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":  # pragma: no cover
    main()
