"""Fast tests for plausible slips that the rest of the fast suite would let through (issue 34,
"Tests that would notice"): each fails with one of the seeded mutants of
``tools/mutants.py`` and passes without it (docs/testing.md)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from helpers import EditStep, nan_reward

import lrbandit_gym  # noqa: F401
from inference import (
    LinearFormInference,
    PolicyValueInference,
    SmallPropensityWarning,
    analyze,
)
from inference.cores.played_regret import PlayedRules
from inference.cores.weight_share import SHARE_LIMIT
from lrbandit_gym import Decision
from lrbandit_gym.experiments.montecarlo import plan_chunks
from lrbandit_gym.logs import LogFormatError, RecordRounds, validate_log


# ------------------------------------------------------------------ Monte Carlo chunks
def test_every_chunk_of_a_run_has_its_own_seed():
    chunks = plan_chunks("setting", 10, 3, seed=5)
    assert [c.n_trials for c in chunks] == [3, 3, 3, 1]
    streams = {tuple(c.seed.generate_state(4)) for c in chunks}
    assert len(streams) == len(chunks)  # equal seeds would repeat the trials of a chunk
    again = plan_chunks("setting", 10, 3, seed=5)
    assert [tuple(c.seed.generate_state(4)) for c in again] == [
        tuple(c.seed.generate_state(4)) for c in chunks
    ]


# ------------------------------------------------------------------ logs and analyze
K3_PMFS = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.2, 0.7]])


def _three_arm_log(rare_round: int | None, rounds: int = 250, seed: int = 0):
    """A recorded run of three arms, each round's pmf one of three non-uniform ones; at
    ``rare_round`` arm 2 has propensity 1e-4 and arm 0 is played."""
    base = gym.make("MatrixContextBandit-v0", d1=3, d2=3, rank=1, n_actions=3, noise_std=0.5)
    rec = RecordRounds(base)
    rng = np.random.default_rng(seed)
    rec.reset(seed=seed)
    for t in range(rounds):
        if t == rare_round:
            rec.step(Decision(0, np.array([0.5, 0.4999, 1e-4])))
            continue
        pmf = K3_PMFS[t % 3]
        rec.step(Decision(int(rng.choice(3, p=pmf)), pmf))
    return {k: np.array(v) for k, v in rec.to_log().items()}


def _arm2(obs):
    return 2


@pytest.mark.filterwarnings("ignore::agents.warm_start.check.WarmStartWarning")
def test_analyze_reads_the_whole_pmf_of_a_log_that_has_it():
    """Arm 2 has propensity 1e-4 on one round where arm 0 is played: the policy that plays
    arm 2 has one round holding most of its variance (Lindeberg's check warns), which only
    the logged pmf shows; the pmf spread from the chosen arm's propensity hides it."""
    kwargs = {"rank": 1, "warm_start": 60, "value": False, "policies": {"arm 2": _arm2}}
    log = _three_arm_log(rare_round=200)
    assert log["pmf"][200, 2] == 1e-4 and log["action"][200] == 0
    with pytest.warns(SmallPropensityWarning, match="value of 'arm 2'"):
        analyze(log, **kwargs)
    with warnings.catch_warnings():  # the same log without the rare round: no warning
        warnings.simplefilter("error", SmallPropensityWarning)
        analyze(_three_arm_log(rare_round=None), **kwargs)


def test_validate_log_refuses_a_pmf_a_thousandth_off():
    log = _three_arm_log(rare_round=None, rounds=20)
    validate_log(log)
    bad = dict(log, pmf=log["pmf"].copy())
    a = int(bad["action"][4])
    bad["pmf"][4, (a + 1) % 3] += 1e-3  # the chosen arm's entry still equals 'propensity'
    with pytest.raises(LogFormatError, match="must sum to 1"):
        validate_log(bad)


def test_after_a_refused_round_the_recorder_pairs_the_next_round_with_the_new_context():
    seen = []

    def softmax(obs):
        seen.append(np.array(obs, copy=True))
        z = np.exp([obs.sum(), -obs.sum()])
        return z / z.sum()

    base = gym.make("MatrixContextBandit-v0", d1=3, d2=3, rank=1)
    rec = RecordRounds(EditStep(base, 3, nan_reward), propensity_fn=softmax)
    obs, _ = rec.reset(seed=0)
    obs, *_ = rec.step(0)
    obs, *_ = rec.step(1)
    before = len(seen)
    returned = []
    base.unwrapped.step = lambda action, step=base.unwrapped.step: (
        returned.append(step(action)) or returned[-1]
    )
    with pytest.raises(ValueError, match="must be finite|cannot record a reward") as err:
        rec.step(0)  # the environment steps, its reward is refused
    assert "not recorded" in err.value.__notes__[0]
    assert rec.n_rounds == 2 and len(seen) == before + 1
    new = returned[-1][0]
    rec.step(0)  # the next round is the context the refused step returned
    np.testing.assert_array_equal(seen[-1], new)
    log = rec.to_log()
    np.testing.assert_array_equal(log["context"][2], new)
    np.testing.assert_allclose(log["pmf"][2], softmax(new))


# ------------------------------------------------------------------ warm start
def test_the_step_cap_reads_the_extended_warm_start():
    from agents import EpsilonGreedy

    env = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=8,
        vectorization_mode="vector_entry_point",
        d1=6,
        d2=5,
        rank=1,
        noise_std=1.0,
    )
    agent = EpsilonGreedy(env, rank=1, seed=0)
    default = agent.warm_start_rounds
    obs, _ = env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        while agent.in_warm_start:
            d = agent.act(obs)
            nxt, r, *_ = env.step(d)
            agent.update(obs, d, r)
            obs = nxt
    assert agent.warm_start_rounds > default  # the noisy problem extends it
    assert agent.estimator.state_dict()["prior_rounds"] == agent.warm_start_rounds


# ------------------------------------------------------------------ V* reservoir
def test_the_reservoir_keeps_each_round_with_equal_chance():
    """Size 1, four rounds: each is kept with probability 1/4.  Over 400 seeds the count
    for round 0 is 100 with standard deviation 8.7; the band is four of them."""
    kept = np.zeros(4, dtype=int)
    for seed in range(400):
        rules = PlayedRules(1, 1, None, size=1, seed=seed)
        for t in range(4):
            rules.add(np.full((1, 1, 1), float(t)), np.zeros(1, dtype=int))
        contexts, _ = rules.contexts_and_arms()
        kept[int(contexts[0, 0, 0, 0])] += 1
    assert np.all(np.abs(kept - 100) < 35), kept


def test_the_batched_reservoir_keeps_the_smallest_propensity():
    rules = PlayedRules(1, 1, 2, size=4)
    x, arms = np.zeros((2, 1, 1)), np.zeros(2, dtype=int)
    rules.add(x, arms, np.array([[0.1, 0.3, 0.6], [0.5, 0.25, 0.25]]))
    rules.add(x, arms, np.array([[0.4, 0.4, 0.2], [0.2, 0.7, 0.1]]))
    np.testing.assert_array_equal(rules.min_propensity, [0.1, 0.1])
    single = PlayedRules(1, 1, None, size=4)
    single.add(np.zeros((1, 1, 1)), np.zeros(1, dtype=int), np.array([[0.3, 0.05, 0.65]]))
    np.testing.assert_array_equal(single.min_propensity, [0.05])


# ------------------------------------------------------------------ Lindeberg's check
def test_policy_value_factor_is_the_sum_of_squared_target_over_logging():
    rng = np.random.default_rng(3)
    target = np.array([[0.5, 0.3, 0.2]])  # stochastic: pi(a|X)^2 differs from pi(a|X)
    pv = PolicyValueInference(3, ["soft"])
    factors = []
    for t in range(30):
        pmf = K3_PMFS[t % 3]
        a = int(rng.choice(3, p=pmf))
        pv.update(np.zeros(3), a, rng.standard_normal(), pmf, target)
        factors.append((target[0] ** 2 / pmf).sum())
    state = pv.state_dict()
    np.testing.assert_allclose(state["weight_sum"].ravel(), [sum(factors)], rtol=1e-12)
    np.testing.assert_allclose(state["weight_max"].ravel(), [max(factors)], rtol=1e-12)


def test_a_policy_difference_checks_both_policies_whichever_comes_first():
    rng = np.random.default_rng(2)
    pv = PolicyValueInference(2, ["arm 0", "arm 1"])
    targets = np.array([[1.0, 0.0], [0.0, 1.0]])
    for t in range(300):
        p = np.array([1 - 1e-6, 1e-6]) if t == 7 else np.array([0.5, 0.5])
        a = 0 if t == 7 else int(rng.integers(2))
        pv.update(np.zeros(2), a, rng.standard_normal(), p, targets)
    for first, second in (("arm 0", "arm 1"), ("arm 1", "arm 0")):
        with pytest.warns(SmallPropensityWarning, match="Lindeberg"):
            pv.difference(first, second)


def test_an_arm_difference_warns_on_the_larger_share_not_the_mean():
    """Arm 1's share is about 0.4 (one round of propensity 1/400 among 299 of 1/2), arm
    0's about 0.003: the difference warns, as arm 1's interval does; the mean of the two
    (0.2, below SHARE_LIMIT) would not."""
    T = np.zeros((4, 3))
    T[0, 0] = 1.0
    core = LinearFormInference(4, 3, 1, 2, {"T": T})
    rng = np.random.default_rng(0)
    U, V = rng.standard_normal((2, 4, 1)), rng.standard_normal((2, 3, 1))
    rare = 1 / 400
    for t in range(300):
        X = rng.standard_normal((4, 3))
        if t == 150:
            core.update(U, V, X, 0, 0.1, np.array([1 - rare, rare]))
        else:
            a = int(rng.integers(2))
            core.update(U, V, X, a, rng.standard_normal(), np.array([0.5, 0.5]))
    shares = core.round_shares().ravel()
    assert 0.35 < shares[1] < 0.45 and shares[0] < 0.01 and shares.mean() < SHARE_LIMIT
    with pytest.warns(SmallPropensityWarning, match="too uneven") as record:
        core.difference(0, 1, "T")
    assert any("weights 1/pi_t too uneven" in str(w.message) for w in record)
