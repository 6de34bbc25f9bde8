"""The low-rank policies' warm start outside the paper's setting (issue 15): it cannot fail
on legitimate data (arms with few or no rounds get a defined start, a failing fit leaves the
policy as it was), it is sized from the problem by default, and a buffer over the memory
limit is refused at construction or replaced by the streaming fit.  Every rejected call is
checked to leave the policy's ``state_dict()`` bit for bit as it was."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from helpers import play, rank_r, small_env

import lrbandit_gym  # noqa: F401  (registers the environment)
from agents import Decision, EpsilonGreedy, Softmax
from agents.low_rank import LowRankPolicy
from agents.warm_start import (
    COMPLETION_MAX_FACTOR,
    START_SCALE,
    WarmStartBuffer,
    default_warm_start_rounds,
    initial_estimate,
    min_warm_start_pulls,
    nuclear_norm_fit,
    recovery_rounds,
    warm_start_buffer_bytes,
)
from lrbandit_gym.input_checks import MAX_MAGNITUDE


# --------------------------------------------------------------------------- helpers
def snap(obj) -> bytes:
    """The object's state, bit for bit."""
    return pickle.dumps(obj.state_dict())


# =========================================================================== 1. warm start
def test_reproducer_one_round_warm_start_warns_and_keeps_working():
    """The issue's reproducer: one warm-start round leaves arm 0 (or 1) without pulls."""
    env = gym.make("MatrixContextBandit-v0", d1=4, d2=5, rank=2, n_actions=2)
    ag = EpsilonGreedy(env, rank=2, warm_start=1, seed=0)
    o, _ = env.reset(seed=0)
    d = ag.act(o)
    with pytest.warns(RuntimeWarning, match=r"arm 0 \(0 rounds\).*arm 1 \(1 round\)"):
        ag.update(o, d, env.step(d)[1])
    assert ag.estimator.initialized
    sv = ag.estimator.singular_values
    assert np.all(sv > 0)  # every arm has a full-rank, non-degenerate start
    play(env, ag, o, 50)
    assert np.isfinite(ag.estimates).all() and ag.online_rounds == 50


@pytest.mark.parametrize("seed", range(6))
def test_ten_arms_with_a_twenty_round_warm_start(seed):
    """K = 10, warm_start = 20 at the paper's d = 50: most seeds leave an arm unpulled."""
    from threadpoolctl import threadpool_limits

    env = gym.make("MatrixContextBandit-v0", n_actions=10, max_episode_steps=None)
    ag = EpsilonGreedy(env, warm_start=20, seed=seed)
    obs, _ = env.reset(seed=seed)
    with threadpool_limits(1):  # small solves: BLAS threads only contend on a busy machine
        with pytest.warns(RuntimeWarning, match="too few rounds"):
            obs = play(env, ag, obs, 20)
        assert ag.estimator.initialized and np.all(ag.estimator.singular_values > 0)
        play(env, ag, obs, 30)
    assert np.isfinite(ag.estimates).all()


def test_start_of_an_unpulled_arm_is_the_documented_one():
    rng = np.random.default_rng(0)
    d1, d2, r, n = 6, 5, 2, 200
    X = rng.standard_normal((n, d1, d2))
    a = np.zeros(n, dtype=int)
    y = rng.standard_normal(n)
    with pytest.warns(RuntimeWarning, match=r"arm 1 \(0 rounds\)"):
        M = initial_estimate(X, a, y, 2, rank=r, seed=3)
    # arm 0 keeps its fit exactly; arm 1 is the fixed matrix with singular values 1% of rho
    with pytest.warns(RuntimeWarning, match="arm 1"):
        fit = nuclear_norm_fit(X, a, y, 2, rank=r)
    np.testing.assert_array_equal(M[0], fit[0])
    rho = np.sqrt(np.mean(y**2))
    s = np.linalg.svd(M[1], compute_uv=False)
    np.testing.assert_allclose(s[:r], START_SCALE * rho, rtol=1e-12)
    assert s[r] < 1e-12 * s[0]
    # deterministic given the seed, different across seeds
    with pytest.warns(RuntimeWarning):
        again = initial_estimate(X, a, y, 2, rank=r, seed=3)
        other = initial_estimate(X, a, y, 2, rank=r, seed=4)
    np.testing.assert_array_equal(M, again)
    assert not np.allclose(M[1], other[1])


def test_well_posed_data_keep_the_fit_exactly_and_do_not_warn():
    rng = np.random.default_rng(1)
    d1, d2, r = 6, 5, 2
    n = 2 * (min_warm_start_pulls(d1, d2, r) + 30)
    truth = np.stack([rank_r(rng, d1, d2, r) for _ in range(2)])
    X = rng.standard_normal((n, d1, d2)).astype(np.float32)
    a = np.repeat([0, 1], n // 2)
    y = np.einsum("nij,nij->n", truth[a], X) + 0.1 * rng.standard_normal(n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M = initial_estimate(X, a, y, 2, rank=r)
    np.testing.assert_array_equal(M, nuclear_norm_fit(X, a, y, 2, rank=r))


def test_factored_solver_no_longer_fails_on_an_empty_arm():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((50, 5, 4))
    a = np.zeros(50, dtype=int)
    with pytest.warns(RuntimeWarning, match="arm 1"):
        M = nuclear_norm_fit(X, a, rng.standard_normal(50), 2, rank=2)  # was LinAlgError
    assert np.all(M[1] == 0) and np.isfinite(M).all()
    # all-zero rewards: a zero penalty, formerly a singular system
    M = nuclear_norm_fit(X, np.arange(50) % 2, np.zeros(50), 2, rank=2)
    assert np.all(M == 0)


def test_batched_warm_start_with_a_trial_that_misses_an_arm():
    B, d1, d2, r = 3, 6, 5, 2
    ag = EpsilonGreedy(d1=d1, d2=d2, n_trials=B, rank=r, warm_start=60, seed=0)
    rng = np.random.default_rng(0)
    uniform = np.full((B, 2), 0.5)
    with pytest.warns(RuntimeWarning, match=r"trial 1 arm 1 \(0 rounds\)"):
        for t in range(60):
            x = rng.standard_normal((B, d1, d2))
            actions = np.array([t % 2, 0, (t + 1) % 2])  # trial 1 never pulls arm 1
            ag.update(x, Decision(actions, uniform), rng.standard_normal(B))
    assert ag.estimator.initialized and np.all(ag.estimator.singular_values[:, :, :r] > 0)
    x = rng.standard_normal((B, d1, d2))
    d = ag.act(x)
    ag.update(x, d, rng.standard_normal(B))
    assert np.isfinite(ag.estimates).all()


def test_zero_propensity_logging_policy_feeds_a_buffer_that_still_fits():
    """A logging policy that never plays arm 1 (propensity 0), weighted 1/pi."""
    rng = np.random.default_rng(3)
    buf = WarmStartBuffer(6, 5, 2, 40)
    for _ in range(40):
        buf.add(rng.standard_normal((6, 5)), 0, float(rng.standard_normal()), 1.0)
    with pytest.warns(RuntimeWarning, match="arm 1"):
        M = buf.initial_estimate(rank=2)
    assert np.isfinite(M).all() and np.linalg.matrix_rank(M[1]) == 2
    # zero weights count as no pulls
    buf2 = WarmStartBuffer(6, 5, 2, 40)
    for t in range(40):
        buf2.add(rng.standard_normal((6, 5)), t % 2, float(rng.standard_normal()), t % 2 == 0)
    assert buf2.pulls.tolist() == [20, 0]
    with pytest.warns(RuntimeWarning, match=r"arm 1 \(0 rounds\)"):
        assert np.isfinite(buf2.initial_estimate(rank=2)).all()


def test_a_failing_fit_changes_nothing_and_the_next_round_completes_it():
    env = small_env()
    ag = EpsilonGreedy(env, rank=2, warm_start=30, seed=0)
    obs, _ = env.reset(seed=0)
    obs = play(env, ag, obs, 29)
    before = snap(ag)
    d = ag.act(obs)
    after_act = snap(ag)
    with np.errstate(all="ignore"), pytest.raises(FloatingPointError, match="M_init=") as exc:
        ag.update(obs, d, MAX_MAGNITUDE)  # the largest reward accepted: the fit fails on it
    assert "was not absorbed" in str(exc.value) and "29 earlier rounds" in str(exc.value)
    assert snap(ag) == after_act and after_act != before
    assert ag.in_warm_start and ag.t == 29
    nxt, r, *_ = env.step(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ag.update(obs, d, r)
    assert not ag.in_warm_start and ag.t == 30


def test_a_fit_failing_for_any_other_reason_changes_nothing(monkeypatch):
    import agents.warm_start.fit as ws

    env = small_env()
    ag = EpsilonGreedy(env, rank=2, warm_start=20, seed=0)
    obs, _ = env.reset(seed=0)
    obs = play(env, ag, obs, 19)
    d = ag.act(obs)
    before = snap(ag)

    def broken(*args, **kwargs):
        raise np.linalg.LinAlgError("Singular matrix")

    monkeypatch.setattr(ws, "factored_nuclear_norm_fit", broken)
    with pytest.raises(FloatingPointError, match="singular system.*M_init="):
        ag.update(obs, d, 0.5)
    assert snap(ag) == before
    monkeypatch.undo()
    with pytest.warns(RuntimeWarning, match="too few rounds"):  # 20 rounds for 18 unknowns
        ag.update(obs, d, 0.5)
    assert not ag.in_warm_start


def test_contexts_beyond_float32_are_refused_by_the_buffer():
    ag = EpsilonGreedy(small_env(), rank=2, warm_start=10, seed=0)
    before = snap(ag)
    x = np.ones((6, 5))
    x[2, 3] = 1e39  # finite in float64, inf in the buffer's float32
    with pytest.raises(ValueError, match="float32"):
        ag.update(x, Decision(0, np.array([0.5, 0.5])), 0.0)
    assert snap(ag) == before


# =========================================================================== 2. sizes
@pytest.mark.parametrize(
    ("args", "rounds"),
    [
        ((50, 50, 3, 2), 2100),
        ((50, 50, 5, 2), 3400),
        ((50, 50, 7, 2), 4600),
        ((20, 20, 2, 2), 600),
        ((6, 5, 2, 2), 200),
        ((50, 50, 3, 2, "completion"), 75200),  # 8 x 9400: c dof = 1.46e6 is capped
        ((20, 20, 2, 2, "completion"), 16000),  # 8 x 2000
        ((10, 10, 1, 2, "completion"), 3200),  # 8 x 400 below c dof = 3800
        ((6, 5, 2, 2, "completion"), 1100),  # c dof = 1080, between 400 and 8 x 400
        ((2, 2, 1, 2, "completion"), 100),  # c dof = 24 below the recovery rule's 100
        ((2, 2, 1, 2), 100),
    ],
)
def test_default_warm_start_rule(args, rounds):
    assert default_warm_start_rounds(*args) == rounds


@pytest.mark.parametrize(
    ("args", "rounds"),
    [
        ((50, 50, 3, 2), 2100),
        ((50, 50, 3, 2, "completion"), 9400),
        ((10, 10, 1, 2, "completion"), 400),
    ],
)
def test_recovery_rule_is_the_gaussian_default_and_the_completion_base(args, rounds):
    assert recovery_rounds(*args) == rounds
    if len(args) == 4:
        assert default_warm_start_rounds(*args) == rounds
    else:  # completion: c dof, capped at COMPLETION_MAX_FACTOR times the recovery rule
        d1, d2, r, k, _ = args
        c_dof = d1 * d2 * k * r * (d1 + d2 - r)
        expected = min(c_dof, COMPLETION_MAX_FACTOR * rounds)
        assert default_warm_start_rounds(*args) == 100 * -(-expected // 100)


def test_default_warm_start_rule_validates():
    with pytest.raises(ValueError, match="rank"):
        default_warm_start_rounds(5, 4, 5, 2)
    with pytest.raises(ValueError, match="context"):
        default_warm_start_rounds(5, 4, 2, 2, context="sparse")


@pytest.mark.parametrize("cls", [EpsilonGreedy, Softmax, LowRankPolicy])
def test_policies_default_to_the_rule_and_keep_an_explicit_number(cls):
    env = small_env(n_actions=3)
    assert cls(env, rank=2).warm_start_rounds == default_warm_start_rounds(6, 5, 2, 3)
    assert cls(env, rank=2, warm_start=2000).warm_start_rounds == 2000
    comp = small_env(context="completion")
    assert cls(comp, rank=2).warm_start_rounds == default_warm_start_rounds(
        6, 5, 2, 2, "completion"
    )


def test_warm_start_buffer_over_the_memory_limit_is_refused_at_construction():
    need = warm_start_buffer_bytes(50, 50, 2100, 200)
    assert need > 2**31
    with pytest.raises(ValueError, match=r"2100 rounds.*warm_start=.*M_init=") as exc:
        EpsilonGreedy(d1=50, d2=50, n_trials=200, rank=3, warm_start=2100, warm_start_fit="buffer")
    assert str(need) in str(exc.value)
    with pytest.raises(ValueError, match="max_memory_bytes"):
        Softmax(
            small_env(), rank=2, warm_start=100, max_memory_bytes=10_000, warm_start_fit="buffer"
        )
    # by default (Gaussian contexts) a buffer that does not fit gives way to the streaming
    # fit, whose memory does not grow with the length (agents.warm_start.streaming)
    # (never silently: the fit is the less accurate one)
    with pytest.warns(UserWarning, match="using the streaming fit"):
        agent = Softmax(small_env(), rank=2, warm_start=100, max_memory_bytes=10_000)
    assert agent.warm_start_fit == "streaming"
    with (
        pytest.warns(UserWarning, match="using the streaming fit"),
        pytest.raises(ValueError, match="streaming warm start needs .* max_memory_bytes"),
    ):
        Softmax(small_env(), rank=2, warm_start=100, max_memory_bytes=100)
    # an initial estimate needs no buffer
    M = np.zeros((200, 2, 50, 50))
    with pytest.warns(RuntimeWarning, match="fewer than rank"):
        EpsilonGreedy(d1=50, d2=50, n_trials=200, rank=3, M_init=M)
