"""The regret correction of the V* interval: the reservoir, the regret formula, the wrappers'
plumbing, the warning, and the bias it removes."""

import dataclasses
import warnings

import gymnasium as gym
import numpy as np
import pytest
from helpers import play

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy
from inference import (
    ParameterInference,
    ValueBiasWarning,
    ValueInference,
    VectorParameterInference,
    VectorValueInference,
)
from inference.cores.played_regret import WARN_RATIO, PlayedRules, correct_interval, played_regret
from inference.wrappers.value_tracker import UNCHECKED
from lrbandit_gym import Decision
from lrbandit_gym.onehot import OneHotContexts


def test_reservoir_keeps_a_uniform_sample():
    rules = PlayedRules(1, 1, 1, size=50, seed=3)
    n = 5000
    for t in range(n):
        rules.add(np.full((1, 1, 1), float(t)), np.array([t % 2]))
    X, arms = rules.contexts_and_arms()
    kept = X[0, :, 0, 0].astype(int)
    assert rules.count == 50 and len(set(kept)) == 50
    np.testing.assert_array_equal(arms[0], kept % 2)
    # Algorithm R keeps every round with probability m/n: the kept rounds' mean is n/2
    # within 4 standard errors of a uniform sample without replacement.
    se = n / np.sqrt(12 * 50)
    assert abs(kept.mean() - n / 2) < 4 * se


def test_regret_formula_and_variance():
    rng = np.random.default_rng(0)
    B, K, d1, d2, m = 3, 3, 4, 5, 20
    rules = PlayedRules(d1, d2, B, size=m)
    X = rng.standard_normal((m, B, d1, d2)).astype(np.float32)
    arms = rng.integers(K, size=(m, B))
    for t in range(m):
        rules.add(X[t], arms[t])
    ref = rng.standard_normal((B, K, d1, d2))
    regret, var = played_regret(ref, rules, n_obs=4 * m)
    for b in range(B):
        r = []
        for t in range(m):
            pred = [float(np.sum(ref[b, a] * X[t, b])) for a in range(K)]
            r.append(max(pred) - pred[arms[t, b]])
        assert regret[b] == pytest.approx(np.mean(r), rel=1e-5)
        assert var[b] == pytest.approx(np.var(r, ddof=1) / m * (1 - 1 / 4), rel=1e-4)


def test_completion_reservoir_reads_indices():
    rules = PlayedRules(3, 4, None, size=8, completion=True)
    ref = np.arange(2 * 12, dtype=float).reshape(1, 2, 3, 4)
    ref[0, 0] *= -1  # arm 1 is better everywhere
    for j, k in [(0, 1), (2, 3)]:
        rules.add(OneHotContexts(np.array([j]), np.array([k]), 3, 4), np.array([0]))
    regret, _ = played_regret(ref, rules, n_obs=2)
    expected = np.mean([ref[0, 1, 0, 1] - ref[0, 0, 0, 1], ref[0, 1, 2, 3] - ref[0, 0, 2, 3]])
    assert regret[0] == pytest.approx(expected)


def _run(stack_params, *, noise_std=0.1, seed=0, rounds=900, correction="auto"):
    env = gym.make("MatrixContextBandit-v0", d1=12, d2=10, rank=1, noise_std=noise_std)
    agent = EpsilonGreedy(env, rank=1, epsilon=0.2, warm_start=300, seed=seed)
    inner = env
    if stack_params:
        unit = np.zeros((12, 10))
        unit[1, 2] = 1.0
        inner = ParameterInference(env, {"T": unit}, estimator=agent.estimator)
    value = ValueInference(inner, estimator=agent.estimator, correction=correction)
    obs, _ = value.reset(seed=seed)
    play(value, agent, obs, rounds)
    return value


def test_own_reference_equals_the_parameter_wrappers():
    """Without a ParameterInference below, the value wrapper runs its own reference core:
    on the same trajectory it gives the same regret and corrected interval to rounding."""
    shared = _run(True, correction="regret")
    own = _run(False, correction="regret")
    assert shared.tracker.regret_check.own is None and own.tracker.regret_check.own is not None
    np.testing.assert_allclose(shared.played_regret(), own.played_regret(), rtol=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ValueBiasWarning)
        a, b = shared.interval(), own.interval()
    assert a.estimate == pytest.approx(b.estimate, rel=1e-9)
    assert a.standard_error == pytest.approx(b.standard_error, rel=1e-9)
    none = _run(True, correction="none")
    ci, paper = none.interval(), none.core.interval()
    assert ci.method == paper.method + UNCHECKED  # the paper's estimate, saying so
    assert ci == dataclasses.replace(paper, method=ci.method)
    assert none.played_regret() is None
    assert a.estimate > none.interval().estimate  # the regret is >= 0


def _bounded(paper, regret, variance):
    """The default interval's ends and p-value from the paper's read-out and ``R̂_n``:
    eq. (IM) of inference.cores.bounded_interval, computed here from its definition."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    est, se = paper.estimate, paper.standard_error
    total = np.sqrt(se**2 + variance)
    spread = regret / max(se, total)
    c = brentq(lambda c: norm.cdf(c + spread) - norm.cdf(-c) - 0.95, 1.0, 2.5, xtol=1e-14)
    return c, est - c * se, est + regret + c * total


def test_default_is_bias_aware_and_silent_where_the_regret_is_small():
    """By default the estimate is the paper's and the interval covers V* anywhere between it
    and the estimate corrected by R̂_n (Imbens and Manski's critical value, between the one-
    and the two-sided normal quantile), also where R̂_n is too small to warn about."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValueBiasWarning)
        checked = _run(True)  # correction="auto": the check
        assert checked.correction == "check"
        regret, variance = checked.played_regret()
        ci, paper = checked.interval(), checked.core.interval()
    assert 0 < regret[0] < paper.standard_error  # small here: no warning
    c, low, high = _bounded(paper, regret[0], variance[0])
    assert 1.6448536 < c < 1.959964
    assert ci.estimate == paper.estimate
    assert ci.low == pytest.approx(low, rel=1e-9) and ci.low > paper.low
    assert ci.high == pytest.approx(high, rel=1e-9) and ci.high > paper.high
    # The p-value of H0: V* = 0 matches the interval: 0 lies c0 standard errors below V_hat.
    from scipy.stats import norm

    c0 = paper.estimate / paper.standard_error
    total = np.sqrt(paper.standard_error**2 + variance[0])
    spread = regret[0] / total
    assert ci.p_value == pytest.approx(norm.cdf(-c0 - spread) + norm.cdf(-c0), rel=1e-9)
    assert "bias-aware" in ci.method and "Imbens-Manski" in ci.method


def test_no_warning_where_the_interval_allows_for_the_regret():
    """Where R̂_n is many standard errors (σ = 3), the default interval and
    correction="regret"'s allow for it: no ValueBiasWarning (the interval covers), and the
    ``method`` says how large the regret is."""
    for correction in ("auto", "regret"):
        noisy = _run(True, noise_std=3.0, correction=correction)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ValueBiasWarning)
            ci = noisy.interval()
            cs = noisy.interval(kind="sequence", tuning_n=500)
            one_sided = noisy.test_greater(0.0)
        paper = noisy.core.interval()
        regret, variance = noisy.played_regret()
        ratio = regret[0] / np.sqrt(paper.standard_error**2 + variance[0])
        assert ratio > 2 * WARN_RATIO  # large: today's code warned here
        # Bias-aware: V* between the paper's estimate and the corrected one.
        _, low, high = _bounded(paper, regret[0], variance[0])
        assert ci.low == pytest.approx(low, rel=1e-9)
        assert ci.high == pytest.approx(high, rel=1e-9)
        shifted = paper.estimate + regret[0]
        expected = shifted if correction == "regret" else paper.estimate
        assert ci.estimate == pytest.approx(expected, rel=1e-12)
        if correction == "auto":
            assert f"estimated regret {ratio:.2f} standard errors" in ci.method
        # The confidence sequence runs from the paper's lower end to the corrected upper end.
        assert cs.low == noisy.core.interval(kind="sequence", tuning_n=500).low
        # The one-sided test keeps the paper's lower bound: V_hat is biased low, not high.
        assert one_sided.low == noisy.core.test_greater(0.0).low


def test_the_paper_interval_without_the_allowance_warns_where_the_regret_is_large():
    """The paper's interval read without the allowance (``aware=False``: what
    correction="none" keeps) warns once where R̂_n exceeds half a standard error, in a few
    lines naming the size and the knob, and stays the paper's; silent where R̂_n is small."""
    quiet = _run(True, noise_std=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValueBiasWarning)
        paper = quiet.core.interval()
        regret, variance = quiet.played_regret()
        correct_interval(paper, regret, variance, aware=False, **_FIXED)
    noisy = _run(True, noise_std=3.0)
    paper = noisy.core.interval()
    regret, variance = noisy.played_regret()
    with pytest.warns(ValueBiasWarning, match="may not cover") as raised:
        out = correct_interval(paper, regret, variance, aware=False, **_FIXED)
    assert len(raised) == 1
    message = str(raised[0].message)
    ratio = regret[0] / np.sqrt(paper.standard_error**2 + variance[0])
    assert f"{ratio:.2f} standard errors" in message and "correction='auto'" in message
    assert len(message) < 300
    assert (out.low, out.high, out.estimate) == (paper.low, paper.high, paper.estimate)
    assert "without the allowance" in out.method
    with pytest.raises(ValueError, match="shift"):
        correct_interval(paper, regret, variance, aware=False, **{**_FIXED, "shift": True})


_FIXED = {"shift": False, "kind": "fixed", "tuning_n": 1000, "level": 0.95, "batched": False}


def test_the_readme_stack_under_defaults_is_silent_where_its_intervals_cover():
    """The README's path (ValueInference over ParameterInference, sharing an ε-greedy
    agent's estimator, every default): where R̂_n is above half a standard error, the
    default interval allows for it and covers V*; no ValueBiasWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = _run(True, noise_std=1.0)
        ci = value.interval()
    assert not [w for w in caught if issubclass(w.category, ValueBiasWarning)]
    paper = value.core.interval()
    regret, variance = value.played_regret()
    assert regret[0] / np.sqrt(paper.standard_error**2 + variance[0]) > WARN_RATIO
    assert ci.low <= value.unwrapped.optimal_value <= ci.high


def test_correction_refuses_what_it_cannot_do():
    env = gym.make("MatrixContextBandit-v0", d1=6, d2=6, rank=1)
    with pytest.raises(ValueError, match="correction must be one of"):
        ValueInference(env, rank=1, correction="yes")
    with pytest.raises(ValueError, match="known propensities"):
        ValueInference(env, rank=1, propensities="estimated", correction="regret")
    auto = ValueInference(env, rank=1, propensities="estimated")
    assert auto.correction == "none"
    assert ValueInference(env, rank=1).correction == "check"


def test_correction_removes_the_regret_bias():
    """Five arms, ε = 0.3, uniform noise (σ = 0.3), the agent's defaults but a short
    warm start: the paper's V_hat sits below V* by the greedy rules' regret (z mean about
    −1.1 at 2000 rounds), the estimate corrected by ``correction="regret"`` does not.  300
    trials; the z means' Monte Carlo s.e. is 0.06.  The warm start is 300 rounds, below the
    sizing rule's 500 and without the extension to the signal (which quadruples it here and
    leaves little regret to correct); 2000 rounds make the one-step reference precise
    enough for ``R̂`` (at 500 rounds of warm start and 1000 of inference the correction
    overshoots, z mean +0.4: docs/method.md §10)."""
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=300,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
        d1=12,
        d2=12,
        rank=1,
        n_actions=5,
        noise="uniform",
        noise_std=0.3,
    )
    agent = EpsilonGreedy(venv, rank=1, epsilon=0.3, warm_start=300, seed=1)
    # The parameter wrapper only gives V*'s reference its one-step estimate, which the
    # design variance does not touch: eq. (14)'s pulled-arm terms spare every arm's.
    params = VectorParameterInference(
        venv, {"T": np.eye(12)}, estimator=agent.estimator, design_variance="pulled"
    )
    value = VectorValueInference(params, estimator=agent.estimator, correction="regret")
    obs, _ = value.reset(seed=2)
    while value.core.n_obs < 2000:
        decision = agent.act(obs)
        nxt, reward, *_ = value.step(decision)
        agent.update(obs, decision, reward)
        obs = nxt
    truth = venv.unwrapped.optimal_value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ValueBiasWarning)
        fixed = value.interval()
    paper = value.core.interval()
    z_fixed = (fixed.estimate - truth) / fixed.standard_error
    z_paper = (paper.estimate - truth) / paper.standard_error
    assert z_paper.mean() < -0.3
    assert abs(z_fixed.mean()) < 0.2
    assert 0.93 <= np.mean(np.abs(z_fixed) < 1.96) <= 0.98


def test_no_correction_where_propensities_vanish():
    """Weights above 1/MIN_REFERENCE_PROPENSITY make the one-step reference meaningless:
    the trial keeps the paper's estimate, and the method says so."""
    env = gym.make("MatrixContextBandit-v0", d1=6, d2=6, rank=1)
    pmf = np.array([0.003, 0.997])
    value = ValueInference(env, rank=1, warm_start=200, propensity_fn=lambda obs: pmf)
    value.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(600):
        value.step(int(rng.random() < pmf[1]))
    regret, _ = value.played_regret()
    assert np.isnan(regret).all()
    ci, paper = value.interval(), value.core.interval()
    assert (ci.estimate, ci.low, ci.high) == (paper.estimate, paper.low, paper.high)
    assert "not checked in this run" in ci.method


def test_value_wrapper_refuses_absurd_predictions_before_any_change():
    """An estimate of 1e60 on contexts of 1e100 would predict 1e160: refused before the
    inner step, and the wrapper still reads the same interval."""
    value = _run(True, rounds=400)
    est = value.estimator
    ci = value.core.interval()
    before = value.state_dict()
    obs = np.full((12, 10), 1e100)
    value.host.round_check.set_obs(obs)  # a context the env would never return: for the check
    state = est.state_dict()
    big = dict(state, U=state["U"] * 1e30, V=state["V"] * 1e30)
    est.load_state_dict(big)
    with pytest.raises(ValueError, match="predictions must have entries of magnitude"):
        value.step(Decision(0, np.array([0.5, 0.5])))
    assert value.core.interval() == ci
    assert value.core.state_dict()["n"] == before["core.n"]


def test_the_papers_interval_says_in_its_result_that_it_may_not_cover():
    """correction="none" warns nowhere (no limit on R̂/s.e. separates the paper's misses from
    its covers, docs/reproduction.md), so its interval and test say it in ``method``."""
    import gymnasium as gym

    from agents import EpsilonGreedy, play
    from inference import ValueInference

    results = {}
    for correction in ("none", "auto"):
        env = gym.make("MatrixContextBandit-v0", d1=6, d2=5, rank=1)
        agent = EpsilonGreedy(env, rank=1, epsilon=0.2, warm_start=100, seed=0)
        env = ValueInference(env, estimator=agent.estimator, correction=correction)
        play(env, agent, 300, seed=0)
        results[correction] = (env.interval(), env.test_greater(0.0))
    for ci in results["none"]:
        assert "correction='none'" in ci.method and "may not cover" in ci.method
    for ci in results["auto"]:
        assert "may not cover" not in ci.method
