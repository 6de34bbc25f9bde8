"""``analyze``'s policy-value interval beside Open Bandit Pipeline's estimators, on one log.

    pip install obp==0.4.1      # not a dependency of lrbandit-gym
    python tools/obp_side_by_side.py

Five logs of 3000 rounds (d = 3 x 4, rank 1, three arms, a random logging pmf with every
arm at least 1/30); the target policy always plays arm 0.  ``analyze`` runs its own
estimator; its final estimate goes to OBP as the reward model (``to_obp(estimates=)``),
so OBP's direct method and doubly robust estimator use a model of this bandit's form.
Prints a Markdown table (docs/logs.md).
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
from obp.ope import (
    DirectMethod,
    DoublyRobust,
    InverseProbabilityWeighting,
    OffPolicyEvaluation,
)

import lrbandit_gym  # noqa: F401
from inference import analyze
from lrbandit_gym.logs import make_log, to_obp

K, D1, D2 = 3, 3, 4


def random_pmf_log(n: int, seed: int) -> dict:
    """A log of ``n`` rounds of MatrixContextBandit-v0 under a random logging pmf."""
    env = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1, n_actions=K)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    x, a, y, pmfs, expected = [], [], [], [], []
    for _ in range(n):
        pmf = rng.dirichlet(np.ones(K)) * 0.9 + 0.1 / K
        arm = int(rng.choice(K, p=pmf))
        x.append(np.array(obs))
        obs, reward, _, _, info = env.step(arm)
        a.append(arm)
        y.append(reward)
        pmfs.append(pmf)
        expected.append(info["expected_rewards"])
    log = make_log(
        contexts=np.array(x),
        actions=np.array(a),
        rewards=np.array(y),
        pmf=np.array(pmfs),
        context_law="gaussian",
    )
    return log, np.array(expected)


def main() -> None:
    print("| log | truth | analyze V(arm 0) [95% interval] | OBP DR | OBP DM | OBP IPW |")
    print("|---|---|---|---|---|---|")
    for seed in range(5):
        log, expected = random_pmf_log(3000, seed)
        n = len(log["action"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = analyze(log, rank=1, value=False, policies={"arm 0": lambda obs: 0})
        ci = res["V(arm 0)"]
        feedback = to_obp(log, estimates=res.wrappers["policies"].estimator.estimates)
        target = np.zeros((n, K, 1))
        target[:, 0, 0] = 1.0
        ope = OffPolicyEvaluation(
            bandit_feedback=feedback,
            ope_estimators=[InverseProbabilityWeighting(), DirectMethod(), DoublyRobust()],
        )
        v = ope.estimate_policy_values(
            action_dist=target,
            estimated_rewards_by_reg_model=feedback["estimated_rewards_by_reg_model"],
        )
        est, low, high = (float(np.ravel(z)[0]) for z in (ci.estimate, ci.low, ci.high))
        print(
            f"| {seed} | {expected[:, 0].mean():.4f} | {est:.4f} [{low:.4f}, {high:.4f}] | "
            f"{v['dr']:.4f} | {v['dm']:.4f} | {v['ipw']:.4f} |"
        )


if __name__ == "__main__":
    main()
