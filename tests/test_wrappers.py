"""Inference wrappers: propensities, stacking, estimator sharing, vector twins, save/resume."""

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy, LowRankSGD
from inference import (
    InsufficientDataWarning,
    LinearFormInference,
    ParameterInference,
    ValueBiasWarning,
    ValueInference,
    VectorParameterInference,
    VectorValueInference,
)
from lrbandit_gym import Decision
from lrbandit_gym.experiments.studies import paper_targets

D1, D2, R = 8, 7, 2


def make_env(**kwargs):
    return gym.make(
        "MatrixContextBandit-v0", d1=D1, d2=D2, rank=R, max_episode_steps=None, **kwargs
    )


def truth_init(env, scale=0.05, seed=0):
    rng = np.random.default_rng(seed)
    p = env.unwrapped.true_params
    return p + scale * rng.standard_normal(p.shape) / np.sqrt(p[0].size)


def play(env, agent, obs, n):
    info = {}
    for _ in range(n):
        d = agent.act(obs)
        nxt, r, _, _, info = env.step(d)
        agent.update(obs, d, r)
        obs = nxt
    return obs, info


def play_and_feed(wrapped, agent, core, obs):
    """One round through the wrapper, feeding ``core`` the same round by hand."""
    d = agent.act(obs)
    u, v = (np.array(f) for f in agent.estimator.factors)
    nxt, r, _, _, info = wrapped.step(d)
    core.update(u, v, obs, d.action, r, d.propensities)
    agent.update(obs, d, r)
    return nxt, info


def test_shared_estimator_reproduces_the_core_fed_by_hand():
    env = make_env()
    agent = EpsilonGreedy(env, rank=R, M_init=truth_init(env), seed=0)
    targets = paper_targets(D1, D2)
    wrapped = ParameterInference(env, targets, estimator=agent.estimator)
    core = LinearFormInference(D1, D2, R, 2, targets)
    obs, _ = wrapped.reset(seed=3)
    for _ in range(200):
        obs, info = play_and_feed(wrapped, agent, core, obs)
    for arm in range(2):
        a, b = wrapped.interval(arm, "T2"), core.interval(arm, "T2")
        # The wrapper uses the estimator's balanced form for the bases: equal up to rounding.
        assert a.estimate == pytest.approx(b.estimate, rel=1e-12)
        assert a.standard_error == pytest.approx(b.standard_error, rel=1e-12)
    assert info["parameter_inference"]["n_obs"] == 200
    assert set(info["parameter_inference"]["standard_error"]) == {"T1", "T2"}


def test_rounds_fed_to_the_core_directly_do_not_confuse_the_change_tracking():
    """The wrapper tells its core which arms moved from the estimator's versions; a round
    fed to the core by hand (other factors) must make it compare factors instead."""
    env = make_env()
    agent = EpsilonGreedy(env, rank=R, M_init=truth_init(env), seed=0)
    targets = paper_targets(D1, D2)
    wrapped = ParameterInference(env, targets, estimator=agent.estimator)
    core = LinearFormInference(D1, D2, R, 2, targets)
    rng = np.random.default_rng(5)
    obs, _ = wrapped.reset(seed=3)
    for t in range(120):
        if t == 60:  # a foreign round with other factors, fed to both cores
            u = rng.standard_normal((2, D1, R))
            v = rng.standard_normal((2, D2, R))
            x, p = rng.standard_normal((D1, D2)), np.array([0.5, 0.5])
            wrapped.core.update(u, v, x, 1, 0.3, p)
            core.update(u, v, x, 1, 0.3, p)
        obs, _ = play_and_feed(wrapped, agent, core, obs)
    for arm in range(2):
        np.testing.assert_allclose(
            wrapped.core.debiased_mean(arm), core.debiased_mean(arm), rtol=1e-12, atol=1e-14
        )


def test_wrappers_stack_and_pass_the_decision_inward():
    env = make_env()
    agent = EpsilonGreedy(env, rank=R, M_init=truth_init(env), seed=1)
    stacked = ValueInference(
        ParameterInference(env, paper_targets(D1, D2), estimator=agent.estimator)
    )
    assert stacked.estimator is agent.estimator and stacked.env.estimator is agent.estimator
    obs, _ = stacked.reset(seed=0)
    obs, info = play(stacked, agent, obs, 300)
    assert info["parameter_inference"]["n_obs"] == 300
    assert info["value_inference"]["n_obs"] == 300
    ci = stacked.interval()
    assert ci.low < stacked.unwrapped.optimal_value < ci.high
    assert "V*" in stacked.summary()
    table = stacked.env.summary()
    assert "<M_1 - M_0, T2>" in table and "p-value" in table


def test_outer_wrapper_without_estimator_shares_the_inner_one():
    env = make_env()
    inner = ParameterInference(env, paper_targets(D1, D2), rank=R, warm_start=60)
    outer = ValueInference(inner)
    assert outer.estimator is inner.estimator and not outer.owns_estimator


def test_own_estimator_warm_starts_on_observed_rounds_then_infers():
    env = make_env()
    agent = EpsilonGreedy(env, rank=R, M_init=truth_init(env), seed=2)
    wrapped = ParameterInference(env, paper_targets(D1, D2), rank=R, warm_start=150)
    obs, _ = wrapped.reset(seed=0)
    obs, _ = play(wrapped, agent, obs, 100)
    with pytest.warns(InsufficientDataWarning, match="50 more round"):
        ci = wrapped.interval(0, "T1")
    assert np.isnan(ci.low) and np.isnan(ci.high)
    obs, info = play(wrapped, agent, obs, 400)
    assert wrapped.estimator is not agent.estimator and wrapped.estimator.initialized
    assert info["parameter_inference"]["n_obs"] == 350
    ci = wrapped.interval(1, "T1")
    assert np.isfinite(ci.width) and ci.width > 0


def test_bare_action_needs_propensities_and_propensity_fn_supplies_them():
    env = make_env()
    wrapped = ParameterInference(env, paper_targets(D1, D2), rank=R, warm_start=60)
    wrapped.reset(seed=0)
    with pytest.raises(ValueError, match="propensity_fn"):
        wrapped.step(1)
    assert wrapped.rounds_seen == 0
    uniform = ParameterInference(
        env,
        paper_targets(D1, D2),
        rank=R,
        warm_start=60,
        propensity_fn=lambda obs: np.array([0.5, 0.5]),
    )
    uniform.reset(seed=0)
    for t in range(5):
        uniform.step(t % 2)
    assert uniform.rounds_seen == 5


@pytest.mark.parametrize(
    "bad,match",
    [
        (Decision(1, np.array([1.0, 0.0])), "propensities"),
        (Decision(0, np.array([0.7, 0.7])), "propensities"),
        (Decision(0, np.array([np.nan, 1.0])), "propensities"),
        (Decision(2, np.array([0.5, 0.5])), "action"),
    ],
)
def test_bad_decisions_raise_before_anything_changes(bad, match):
    env = make_env()
    agent = EpsilonGreedy(env, rank=R, M_init=truth_init(env), seed=0)
    wrapped = ParameterInference(env, paper_targets(D1, D2), estimator=agent.estimator)
    obs, _ = wrapped.reset(seed=0)
    obs, _ = play(wrapped, agent, obs, 20)
    before = pickle.dumps(wrapped.state_dict())
    env_state = pickle.dumps(env.unwrapped.np_random.bit_generator.state)
    with pytest.raises(ValueError, match=match):
        wrapped.step(bad)
    assert pickle.dumps(wrapped.state_dict()) == before
    assert pickle.dumps(env.unwrapped.np_random.bit_generator.state) == env_state


def test_bad_targets_and_confidence_levels():
    env = make_env()
    with pytest.raises(ValueError, match="shape"):
        ParameterInference(env, {"T": np.ones((3, 3))}, rank=R)
    with pytest.raises(ValueError):
        ParameterInference(env, {"T": np.full((D1, D2), np.nan)}, rank=R)
    wrapped = ParameterInference(env, {"T": np.eye(D1, D2)}, rank=R)
    with pytest.raises(ValueError, match="confidence_level"):
        wrapped.interval(0, "T", confidence_level=1.2)
    with pytest.raises(ValueError):
        wrapped.interval(0, "nope")
    with pytest.raises(ValueError):
        wrapped.interval(5, "T")
    with pytest.raises(ValueError, match="point_estimate.*'svd'"):
        ParameterInference(env, {"T": np.eye(D1, D2)}, rank=R, point_estimate="svd")


def test_point_estimate_reaches_the_core_and_its_estimate():
    env = make_env()
    agent = EpsilonGreedy(env, rank=R, M_init=truth_init(env), seed=1)
    targets = {"T": np.eye(D1, D2)}
    wrapped = ParameterInference(
        env, targets, estimator=agent.estimator, point_estimate="projection"
    )
    assert wrapped.core.point_estimate == "projection"
    obs, _ = wrapped.reset(seed=3)
    play(wrapped, agent, obs, 40)
    est = wrapped.interval(0, "T").estimate
    assert est == pytest.approx(float(np.sum(wrapped.core.projected(0) * targets["T"])))
    assert "projection point estimate" in wrapped.interval(0, "T").method


def test_single_wrapper_refuses_a_vector_env_and_vice_versa():
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=3,
        d1=D1,
        d2=D2,
        rank=R,
        vectorization_mode="vector_entry_point",
    )
    with pytest.raises(ValueError, match="VectorParameterInference"):
        ParameterInference(venv, paper_targets(D1, D2))
    with pytest.raises(ValueError, match="vector env"):
        VectorParameterInference(make_env(), paper_targets(D1, D2))


def test_vector_twins_equal_single_wrappers_fed_the_same_data():
    b = 3
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=b,
        d1=D1,
        d2=D2,
        rank=R,
        vectorization_mode="vector_entry_point",
        max_episode_steps=None,
    )
    init = truth_init(venv)
    agent = EpsilonGreedy(venv, rank=R, M_init=init, seed=4)
    wrapped = VectorValueInference(
        VectorParameterInference(venv, paper_targets(D1, D2), estimator=agent.estimator),
    )
    singles = [LinearFormInference(D1, D2, R, 2, paper_targets(D1, D2)) for _ in range(b)]
    ests = [LowRankSGD(D1, D2, R) for _ in range(b)]
    for e in ests:
        e.initialize(init)
    obs, _ = wrapped.reset(seed=0)
    for _ in range(100):
        d = agent.act(obs)
        nxt, r, _, _, _ = wrapped.step(d)
        for i in range(b):
            u, v = ests[i].factors
            singles[i].update(u, v, obs[i], int(d.action[i]), float(r[i]), d.propensities[i])
            ests[i].update(obs[i], int(d.action[i]), float(r[i]), d.propensities[i])
        agent.update(obs, d, r)
        obs = nxt
    ci = wrapped.env.interval(1, "T1")
    assert ci.estimate.shape == (b,)
    for i in range(b):
        np.testing.assert_allclose(ci.estimate[i], singles[i].interval(1, "T1").estimate, rtol=1e-9)
    assert wrapped.interval().estimate.shape == (b,)


def test_save_and_resume_give_bit_identical_intervals():
    def build():
        env = make_env()
        agent = EpsilonGreedy(env, rank=R, warm_start=80, seed=6)
        wrapped = ValueInference(
            ParameterInference(env, paper_targets(D1, D2), rank=R, warm_start=70)
        )
        return env, agent, wrapped

    env_a, agent_a, wa = build()
    obs_a, _ = wa.reset(seed=1)
    obs_a, _ = play(wa, agent_a, obs_a, 200)
    state = pickle.loads(
        pickle.dumps(
            {
                "agent": agent_a.state_dict(),
                "inner": wa.env.state_dict(),
                "outer": wa.state_dict(),
                "env": env_a.unwrapped.np_random.bit_generator.state,
                "expected": env_a.unwrapped._expected,
                "context": env_a.unwrapped._context,
            }
        )
    )
    obs_a, _ = play(wa, agent_a, obs_a, 150)

    env_b, agent_b, wb = build()
    wb.reset(seed=99)
    agent_b.load_state_dict(state["agent"])
    wb.env.load_state_dict(state["inner"])
    wb.load_state_dict(state["outer"])
    base = env_b.unwrapped
    base.np_random.bit_generator.state = state["env"]
    base._expected, base._context = state["expected"], state["context"]
    obs_b = wb.host.round_check.obs
    play(wb, agent_b, obs_b, 150)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # The short warm starts leave a large regret of the greedy rules: warned, not tested.
        warnings.simplefilter("ignore", ValueBiasWarning)
        for arm in range(2):
            assert wa.env.interval(arm, "T2").estimate == wb.env.interval(arm, "T2").estimate
            assert (
                wa.env.interval(arm, "T2").standard_error
                == wb.env.interval(arm, "T2").standard_error
            )
        assert wa.interval().estimate == wb.interval().estimate


def _stacked(n_rounds=40):
    env = make_env()
    agent = EpsilonGreedy(env, rank=R, M_init=truth_init(env), seed=0)
    targets = {"T1": np.eye(D1, D2), "corner": np.pad(np.ones((1, 1)), ((0, D1 - 1), (0, D2 - 1)))}
    params = ParameterInference(env, targets, estimator=agent.estimator)
    stack = gym.wrappers.RecordEpisodeStatistics(ValueInference(params))
    obs, _ = stack.reset(seed=1)
    play(stack, agent, obs, n_rounds)
    return stack, params


def test_stacked_wrappers_are_reached_by_name_through_gymnasium():
    stack, params = _stacked()
    found = stack.get_wrapper_attr("parameter_inference")
    assert found is params
    value = stack.get_wrapper_attr("value_inference")
    assert isinstance(value, ValueInference)
    ci = found.interval(1, "T1")
    assert ci == params.interval(1, "T1")
    assert np.isfinite(value.interval().estimate)


def test_value_test_greater_takes_a_confidence_level():
    stack, _ = _stacked()
    value = stack.get_wrapper_attr("value_inference")
    t90 = value.test_greater(0.0, confidence_level=0.90)
    t99 = value.test_greater(0.0, confidence_level=0.99)
    assert t90.p_value == t99.p_value  # the test does not depend on the level
    assert t99.low < t90.low  # the one-sided bound does
    core = value.core.test_greater(0.0, confidence_level=0.90)  # the paper's V_hat
    shift = value.interval(0.9).estimate - value.core.interval(0.9).estimate  # the correction
    assert t90.estimate - core.estimate == pytest.approx(shift, rel=1e-12) and shift >= 0
    assert t90.standard_error >= core.standard_error
    with pytest.raises(ValueError, match="confidence_level"):
        value.test_greater(0.0, confidence_level=1.5)


def test_to_frame_covers_every_wrapper_of_the_stack():
    pd = pytest.importorskip("pandas")
    stack, params = _stacked()
    value = stack.get_wrapper_attr("value_inference")
    frame = value.to_frame(confidence_level=0.9)
    assert isinstance(frame, pd.DataFrame)
    labels = [label for label, _ in params.results(0.9)]
    assert list(frame["quantity"]) == ["V*", *labels]
    row = frame.set_index("quantity").loc["<M_1, T1>"]
    ci = params.interval(1, "T1", confidence_level=0.9)
    assert row["low"] == ci.low and row["high"] == ci.high and row["trial"] == 0
    # the inner wrapper's frame holds only its own rows
    assert list(params.to_frame(0.9)["quantity"]) == labels


def test_stacked_wrappers_join_one_host_that_checks_each_round_once():
    """A preset wrapped in another adds its tracker to the innermost, which checks each
    round once for both; a propensity_fn given to either serves the stack."""
    env = make_env()
    uniform = np.full(2, 0.5)
    inner = ParameterInference(env, {"T": np.eye(D1, D2)}, rank=R, warm_start=5)
    outer = ValueInference(inner, propensity_fn=lambda obs: uniform)
    assert outer.host is inner and inner.host is inner
    assert outer.estimator is inner.estimator and not outer.owns_estimator
    outer.reset(seed=0)
    outer.step(0)  # the outer wrapper's propensity_fn resolves the bare action for both
    assert inner.rounds_seen == 1 and outer.rounds_seen == 1
    inner.step(Decision(1, uniform))  # stepping the host feeds the joined tracker too
    assert inner.rounds_seen == 2 and outer.rounds_seen == 2
    # A bad decision is refused before the environment steps: nothing changes anywhere.
    generator = env.unwrapped.np_random.bit_generator.state
    with pytest.raises(ValueError, match="sum to 1"):
        outer.step(Decision(1, np.array([0.9, 0.9])))
    assert inner.rounds_seen == 2 and outer.rounds_seen == 2
    assert env.unwrapped.np_random.bit_generator.state == generator
    # Two different propensity functions for one stack are refused at construction.
    with pytest.raises(ValueError, match="different propensity_fn"):
        ValueInference(outer, propensity_fn=lambda obs: uniform)
