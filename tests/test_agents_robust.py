"""The agents outside the paper's setting (issue 15): calls that either succeed or raise
before any state changes, atomic and portable save/resume, the divergence guard of
LowRankSGD and its two-phase step (the warm start's cases are in
test_warm_start_policies.py).  Every rejected call is checked to leave the object's
``state_dict()`` bit for bit as it was."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from helpers import play, rank_r, small_env

import lrbandit_gym  # noqa: F401  (registers the environment)
from agents import (
    EnsembleSampling,
    EpsilonGreedy,
    ForcedExploration,
    LinearEpsilonGreedy,
    Oracle,
    Softmax,
    UniformRandom,
)
from agents.estimator import DIVERGENCE_FACTOR, LowRankSGD, ProposedStep
from agents.state import FORMAT_VERSION, generator_state_from, load_state, save_state
from agents.warm_start import (
    WarmStartBuffer,
)
from lrbandit_gym import engine
from lrbandit_gym.input_checks import MAX_MAGNITUDE
from lrbandit_gym.rounds import Round

numba_only = pytest.mark.skipif(not engine.numba_available(), reason="needs numba (fast extra)")


# --------------------------------------------------------------------------- helpers
def snap(obj) -> bytes:
    """The object's state, bit for bit."""
    return pickle.dumps(obj.state_dict())


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = np.asarray(a[key]), np.asarray(b[key])
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), key


# =========================================================================== 1. act/update
def trained(cls, env, **kwargs):
    rng = np.random.default_rng(0)
    if cls is EnsembleSampling:
        agent = cls(env, rank=1, n_models=4, seed=1, **kwargs)
    elif cls in (EpsilonGreedy, Softmax):
        p = env.unwrapped.true_params
        agent = cls(env, rank=2, M_init=p + 0.01 * rng.standard_normal(p.shape), seed=1)
    elif cls is Oracle:
        agent = cls(env, seed=1)
    else:
        agent = cls(env, seed=1, **kwargs)
    obs, _ = env.reset(seed=0)
    obs = play(env, agent, obs, 15)
    return agent, obs


POLICIES = [EpsilonGreedy, Softmax, EnsembleSampling, LinearEpsilonGreedy, UniformRandom, Oracle]


@pytest.mark.parametrize("cls", POLICIES)
@pytest.mark.parametrize("scale", [1e9, 1e200, 1e308])
def test_huge_contexts_act_correctly_or_raise_before_any_change(cls, scale):
    env = small_env()
    agent, obs = trained(cls, env)
    x = np.random.default_rng(5).standard_normal((6, 5)) * scale
    before = snap(agent)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no silent overflow on the way
            d = agent.act(x)
    except FloatingPointError as exc:
        assert "obs" in str(exc) and "Rescale" in str(exc)
        assert snap(agent) == before
        d = agent.act(obs)
    else:
        assert np.isfinite(d.propensities).all() and abs(d.propensities.sum() - 1) < 1e-12
    before = snap(agent)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            agent.update(x, d, 1.0)
    except FloatingPointError as exc:
        assert "unchanged" in str(exc)
        assert snap(agent) == before
    else:
        state = agent.state_dict()
        for value in state.values():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                assert np.isfinite(value).all()


@pytest.mark.parametrize("cls", POLICIES)
@pytest.mark.parametrize("reward", [MAX_MAGNITUDE, -1e300])
def test_huge_reward_is_absorbed_finitely_or_refused_before_any_change(cls, reward):
    env = small_env()
    agent, obs = trained(cls, env)
    d = agent.act(obs)
    before = snap(agent)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            agent.update(obs, d, reward)
    except FloatingPointError:
        assert snap(agent) == before
    except ValueError as exc:  # beyond MAX_MAGNITUDE: its square would overflow
        assert abs(reward) > MAX_MAGNITUDE and "MAX_MAGNITUDE" in str(exc)
        assert snap(agent) == before
    else:
        for value in agent.state_dict().values():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                assert np.isfinite(value).all()


def test_softmax_on_a_1e308_context_raises_instead_of_nan_propensities():
    M = np.ones((2, 6, 5)) + np.eye(6, 5)  # rank 2, every prediction at 1e308 overflows
    agent = Softmax(small_env(), rank=2, M_init=M, seed=0)
    before = snap(agent)
    x = np.full((6, 5), 1e308)
    with pytest.raises(FloatingPointError, match="not finite"):
        agent.action_probs(x)
    with pytest.raises(FloatingPointError, match="not finite"):
        agent.act(x)
    assert snap(agent) == before


def test_linear_peer_refuses_a_1e200_context_and_theta_stays_finite():
    env = small_env()
    agent, obs = trained(LinearEpsilonGreedy, env)
    d = agent.act(obs)
    before = snap(agent)
    with pytest.raises(FloatingPointError, match=r"1e\+200"):
        agent.update(np.full((6, 5), 1e200), d, 1.0)
    assert snap(agent) == before
    assert np.isfinite(agent.estimates).all()


@pytest.mark.parametrize(
    ("scale", "reward", "match"),
    [(1e9, 1.0, "singular"), (1.0, MAX_MAGNITUDE, "overflow"), (1e200, 1.0, "overflow")],
)
def test_ensemble_refuses_a_round_it_cannot_absorb_generator_included(scale, reward, match):
    pol = EnsembleSampling(d1=4, d2=3, n_models=5, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.standard_normal((4, 3))
        d = pol.act(x)
        pol.update(x, d, float(rng.standard_normal()))
    x = rng.standard_normal((4, 3)) * scale
    d = pol.act(np.ones((4, 3)))
    before = snap(pol)
    with pytest.raises(FloatingPointError, match=match):
        pol.update(x, d, reward)
    assert snap(pol) == before  # S, Y, counts, factors and the generator
    x = rng.standard_normal((4, 3))
    pol.update(x, pol.act(x), 0.3)  # and it keeps working
    assert np.isfinite(pol.estimates).all()


def test_batched_ensemble_round_is_all_or_nothing():
    pol = EnsembleSampling(d1=4, d2=3, n_models=5, n_trials=4, seed=0)
    pol.block_trials = 1  # a failure in a later block must undo nothing: nothing was stored
    rng = np.random.default_rng(1)
    for _ in range(10):
        x = rng.standard_normal((4, 4, 3))
        pol.update(x, pol.act(x), rng.standard_normal(4))
    x = rng.standard_normal((4, 4, 3))
    d = pol.act(x)
    before = snap(pol)
    rewards = np.array([0.1, 0.2, 0.3, MAX_MAGNITUDE])  # the last trial's block fails
    with pytest.raises(FloatingPointError, match="trial 3"):
        pol.update(x, d, rewards)
    assert snap(pol) == before


@numba_only
def test_ensemble_engines_agree_bit_for_bit():
    out = {}
    for name in ("numpy", "numba"):
        with engine.use(name):
            pol = EnsembleSampling(d1=5, d2=4, n_models=4, n_trials=3, n_actions=3, seed=2)
            rng = np.random.default_rng(2)
            for _ in range(25):
                x = rng.standard_normal((3, 5, 4))
                pol.update(x, pol.act(x), rng.standard_normal(3))
            out[name] = pol.state_dict()
    assert_same_state(out["numpy"], out["numba"])


def test_online_divergence_is_refused_and_the_policy_keeps_its_state():
    env = small_env()
    p = env.unwrapped.true_params
    agent = EpsilonGreedy(env, rank=2, M_init=p, step_scale=1e3, seed=0)
    obs, _ = env.reset(seed=0)
    d = agent.act(obs)
    before = snap(agent)
    with pytest.raises(FloatingPointError, match="step_scale"):
        agent.update(obs, d, 1e6)
    assert snap(agent) == before


# =========================================================================== 2. save/load
def policy_makers():
    return {
        "epsilon_greedy": lambda env: EpsilonGreedy(env, rank=2, warm_start=40, seed=5),
        "softmax": lambda env: Softmax(env, rank=2, warm_start=40, seed=5),
        "forced": lambda env: ForcedExploration(
            EpsilonGreedy(env, rank=2, warm_start=40, seed=5), p0=0.2
        ),
        "ensemble": lambda env: EnsembleSampling(env, rank=1, n_models=4, seed=5),
        "linear": lambda env: LinearEpsilonGreedy(env, seed=5),
        "uniform": lambda env: UniformRandom(env, seed=5),
        "oracle": lambda env: Oracle(env, seed=5),
    }


@pytest.mark.parametrize("name", sorted(policy_makers()))
@pytest.mark.parametrize("split", [20, 70])  # inside and after the warm start
def test_state_round_trips_through_npz_without_pickle(name, split, tmp_path):
    make = policy_makers()[name]
    env_a, env_b = small_env(), small_env()
    a, b = make(env_a), make(env_b)
    obs_a, _ = env_a.reset(seed=1)
    obs_b, _ = env_b.reset(seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs_a = play(env_a, a, obs_a, split)
        obs_b = play(env_b, b, obs_b, split)
    path = tmp_path / "state.npz"
    np.savez(path, **b.state_dict())
    state = dict(np.load(path, allow_pickle=False))
    env_c = pickle.loads(pickle.dumps(env_b))
    c = make(env_c)
    c.load_state_dict(state)
    assert_same_state(c.state_dict(), b.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        play(env_a, a, obs_a, 30)
        play(env_c, c, obs_b, 30)
    assert_same_state(a.state_dict(), c.state_dict())
    # the helpers do the same
    save_state(tmp_path / "again.npz", c.state_dict())
    assert_same_state(load_state(tmp_path / "again.npz"), c.state_dict())


def _nested(state: dict, parts=("estimator", "buffer", "policy")) -> dict:
    """``state`` with its parts nested as dicts and the generator as its state dict: a
    layout the agents do not read (theirs is flat)."""
    out, nested = {}, {}
    for key, value in state.items():
        head, _, rest = key.partition(".")
        if head in parts and rest:
            nested.setdefault(head, {})[rest] = value
        elif key not in ("rng.bit_generator", "rng.state"):
            out[key] = value
    if "rng.state" in state:
        out["rng"] = generator_state_from(state)
    for head, sub in nested.items():
        out[head] = _nested(sub, parts)
    return out


def _played(name):
    make = policy_makers()[name]
    env = small_env()
    a = make(env)
    obs, _ = env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        play(env, a, obs, 25)
    return make, a


@pytest.mark.parametrize("name", sorted(policy_makers()))
def test_a_state_with_nested_parts_is_refused(name):
    make, a = _played(name)
    b = make(small_env())
    before = b.state_dict()
    with pytest.raises(ValueError, match="nested part"):
        b.load_state_dict(_nested(a.state_dict()))
    assert_same_state(b.state_dict(), before)


@pytest.mark.parametrize("name", sorted(policy_makers()))
def test_a_state_without_its_format_version_or_with_another_is_refused(name):
    make, a = _played(name)
    state = a.state_dict()
    assert state["format_version"] == FORMAT_VERSION
    b = make(small_env())
    missing = {k: v for k, v in state.items() if k != "format_version"}
    with pytest.raises(ValueError, match="has no 'format_version'"):
        b.load_state_dict(missing)
    with pytest.raises(ValueError, match=r"\['format_version'\] = 2: .* format 1 only"):
        b.load_state_dict({**state, "format_version": np.array(2)})
    for part in ("estimator", "policy.estimator"):  # a part's own version is checked too
        if f"{part}.format_version" in state:
            with pytest.raises(ValueError, match="format_version"):
                b.load_state_dict({**state, f"{part}.format_version": 2})
    b.load_state_dict({**state, "format_version": np.array(FORMAT_VERSION)})  # as np.load
    assert_same_state(b.state_dict(), state)


def _corrupt_cases():
    """(policy name, key, replacement, message) for load_state_dict to refuse."""
    return [
        ("epsilon_greedy", "buffer.X", lambda v: v[:, :-1], "'X'"),
        ("epsilon_greedy", "buffer.n", lambda v: v + 1, "buffer must hold|'n'|shape"),
        ("epsilon_greedy", "t", lambda v: -1, "'t'"),
        ("epsilon_greedy", "rng.state", lambda v: v[:3], "rng"),
        ("epsilon_greedy", "warm_start_rounds", lambda v: 7, "warm_start=7"),
        ("forced", "pulls", lambda v: v[:, :1], "'pulls'"),
        ("forced", "pulls", lambda v: v + 1, "add up"),
        ("forced", "policy.buffer.X", lambda v: v[:, :-1], "'X'"),
        ("ensemble", "noise_std", lambda v: v * 2, "noise_std"),
        ("ensemble", "S", lambda v: np.full_like(v, np.nan), "'S'"),
        ("ensemble", "counts", lambda v: v - 100, "counts"),
        ("linear", "inv", lambda v: v[..., :1], "'inv'"),
        ("linear", "theta", lambda v: np.full_like(v, np.inf), "'theta'"),
        ("uniform", "t", lambda v: -3, "'t'"),
    ]


@pytest.mark.parametrize(("name", "key", "change", "match"), _corrupt_cases())
def test_load_state_dict_is_atomic(name, key, change, match):
    make = policy_makers()[name]
    env = small_env()
    a = make(env)
    obs, _ = env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        play(env, a, obs, 20)  # inside the warm start of the low-rank policies
    good = a.state_dict()
    env_b = small_env()
    b = make(env_b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        play(env_b, b, env_b.reset(seed=3)[0], 5)
    before = snap(b)
    bad = dict(good)
    bad[key] = change(np.asarray(good[key]))
    with pytest.raises(ValueError, match=match):
        b.load_state_dict(bad)
    assert snap(b) == before
    b.load_state_dict(good)  # the good state still loads
    assert_same_state(b.state_dict(), good)


def test_low_rank_policy_state_must_be_consistent():
    env = small_env()
    a = EpsilonGreedy(env, rank=2, warm_start=10, seed=0)
    obs, _ = env.reset(seed=0)
    with pytest.warns(RuntimeWarning, match="too few rounds"):
        play(env, a, obs, 15)
    state = a.state_dict()
    b = EpsilonGreedy(small_env(), rank=2, warm_start=10, seed=1)
    before = snap(b)
    with pytest.raises(ValueError, match="inconsistent"):
        b.load_state_dict(dict(state, t=16))
    with pytest.raises(ValueError, match="warm_start=10"):
        EpsilonGreedy(small_env(), rank=2, warm_start=12).load_state_dict(state)
    assert snap(b) == before


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("t", -1, "'t'"),
        ("singular_values", "negative", ">= 0"),
        ("singular_values", "increasing", "decreasing"),
        ("initialized", False, "initialized"),
        ("counts", "off", "add up"),
        ("max_singular_value", np.array([-1.0]), "max_singular_value"),
    ],
)
def test_estimator_load_state_dict_rejects_invalid_values_atomically(key, value, match):
    est = LowRankSGD(5, 4, 2)
    est.initialize(np.random.default_rng(0).standard_normal((2, 5, 4)))
    X = np.random.default_rng(1).standard_normal((5, 4))
    est.update(X, 1, 0.5, np.array([0.5, 0.5]))
    good = est.state_dict()
    bad = dict(good)
    if value == "negative":
        bad[key] = -good[key]
    elif value == "increasing":
        bad[key] = good[key][..., ::-1].copy()
    elif value == "off":
        bad[key] = good[key] + 1
    else:
        bad[key] = value
    before = snap(est)
    with pytest.raises(ValueError, match=match):
        est.load_state_dict(bad)
    assert snap(est) == before


def test_estimator_state_through_npz_and_no_state_without_a_key(tmp_path):
    est = LowRankSGD(5, 4, 2, n_trials=2)
    est.initialize(3 * np.random.default_rng(0).standard_normal((2, 2, 5, 4)))
    np.savez(tmp_path / "e.npz", **est.state_dict())
    state = dict(np.load(tmp_path / "e.npz", allow_pickle=False))
    clone = LowRankSGD.from_state_dict(state)
    assert_same_state(clone.state_dict(), est.state_dict())
    for key in est.state_dict():
        short = {k: v for k, v in state.items() if k != key}
        with pytest.raises(ValueError, match=key):
            LowRankSGD.from_state_dict(short)
        with pytest.raises(ValueError, match=key):
            clone.load_state_dict(short)
    assert_same_state(clone.state_dict(), est.state_dict())


def test_warm_start_buffer_load_state_dict_is_atomic(tmp_path):
    rng = np.random.default_rng(0)
    buf = WarmStartBuffer(4, 3, 2, 10)
    for t in range(6):
        buf.add(rng.standard_normal((4, 3)), t % 2, 0.1 * t)
    np.savez(tmp_path / "b.npz", **buf.state_dict())
    state = dict(np.load(tmp_path / "b.npz", allow_pickle=False))
    other = WarmStartBuffer(4, 3, 2, 10)
    other.add(np.ones((4, 3)), 1, 1.0)
    before = snap(other)
    for key, value in [("actions", state["actions"] + 5), ("n", np.array(11))]:
        with pytest.raises(ValueError):
            other.load_state_dict(dict(state, **{key: value}))
        assert snap(other) == before
    other.load_state_dict(state)
    assert_same_state(other.state_dict(), buf.state_dict())


# =========================================================================== 3. the guard
def test_divergence_guard_default_bound_and_message():
    est = LowRankSGD(5, 3, 1, 4, step_scale=0.5)
    assert est.max_singular_value == np.inf  # none before initialisation
    rng = np.random.default_rng(0)
    truth = np.stack([rank_r(rng, 5, 3, 1, 10.0) for _ in range(4)])
    est.initialize(truth)
    assert est.max_singular_value == pytest.approx(DIVERGENCE_FACTOR * 10.0)
    # Importance weights of 40 (propensity 0.025) with singular values 10 at five times the
    # paper's step size: the iteration grows geometrically (to 1e18 within a step); the
    # guard stops it before anything of that size, or non-finite, is stored.
    p = np.full(4, 0.025)
    p[0] = 1 - 3 * 0.025
    with np.errstate(all="ignore"), pytest.raises(FloatingPointError) as exc:
        for _ in range(1000):
            a = int(rng.integers(1, 4))
            x = rng.standard_normal((5, 3))
            before = snap(est)
            est.update(x, a, float(np.sum(truth[a] * x) + rng.standard_normal()), p)
            assert np.isfinite(est.singular_values).all()
            assert est.singular_values.max() <= est.max_singular_value
    msg = str(exc.value)
    for knob in ("step_scale", "warm start", "max_singular_value", "unchanged"):
        assert knob in msg
    assert snap(est) == before


def test_explicit_bound_and_paper_scale_runs_are_far_below_it():
    est = LowRankSGD(6, 5, 2, max_singular_value=3.0)
    rng = np.random.default_rng(0)
    est.initialize(np.stack([rank_r(rng, 6, 5, 2) for _ in range(2)]))
    assert est.max_singular_value == 3.0
    before = snap(est)
    with pytest.raises(FloatingPointError, match=r"max_singular_value = 3 \(given\)"):
        est.update(np.ones((6, 5)), 0, 1e5, np.array([0.5, 0.5]))
    assert snap(est) == before
    with pytest.raises(ValueError, match="max_singular_value"):
        LowRankSGD(6, 5, 2, max_singular_value=-1.0)


# =========================================================================== 4. two phases
def _stream(seed, n, d1=7, d2=5, K=3, B=None):
    g = np.random.default_rng(seed)
    lead = () if B is None else (B,)
    for _ in range(n):
        x = g.standard_normal((*lead, d1, d2))
        a = g.integers(0, K, lead) if lead else int(g.integers(K))
        y = g.standard_normal(lead) if lead else float(g.standard_normal())
        p = g.dirichlet(np.ones(K), lead) * 0.7 + 0.3 / K if lead else np.full(K, 1 / K)
        yield x, a, y, p


@pytest.mark.parametrize("name", ["numpy", pytest.param("numba", marks=numba_only)])
@pytest.mark.parametrize("B", [None, 4])
def test_propose_then_commit_is_the_step_bit_for_bit(name, B):
    M0 = np.random.default_rng(9).standard_normal((3, 7, 5))
    with engine.use(name):
        one, two = (LowRankSGD(7, 5, 2, 3, n_trials=B, step_scale=0.05) for _ in range(2))
        one.initialize(M0)
        two.initialize(M0)
        for x, a, y, p in _stream(0, 40, B=B):
            r1 = one.update(x, a, y, p)
            Xb, fp = two.check_context(x)
            acts = np.atleast_1d(np.asarray(a, dtype=np.int64))
            props = np.asarray(p, dtype=float).reshape(-1, 3)
            before = snap(two)
            version = two.version
            proposal = two.propose_step(Round(Xb, acts, np.atleast_1d(y).astype(float), props, fp))
            assert isinstance(proposal, ProposedStep)
            assert snap(two) == before and two.version == version  # proposing changes nothing
            r2 = two.commit_step(proposal)
            np.testing.assert_array_equal(np.atleast_1d(r1), r2)
            assert two.version == version + 1
    assert_same_state(one.state_dict(), two.state_dict())


def test_commit_refuses_stale_or_foreign_proposals():
    est = LowRankSGD(5, 4, 2)
    M0 = np.random.default_rng(0).standard_normal((2, 5, 4))
    est.initialize(M0)
    Xb, fp = est.check_context(np.ones((5, 4)))
    round_ = Round(Xb, np.array([0]), np.array([0.3]), np.full((1, 2), 0.5), fp)
    stale = est.propose_step(round_)
    est.commit_step(est.propose_step(round_))  # another step happened
    before = snap(est)
    with pytest.raises(ValueError, match="version"):
        est.commit_step(stale)
    assert snap(est) == before
    fresh = est.propose_step(round_)
    est.load_state_dict(est.state_dict())  # a reload changes the version too
    with pytest.raises(ValueError, match="version"):
        est.commit_step(fresh)
    fresh = est.propose_step(round_)
    est.initialize(M0)
    with pytest.raises(ValueError, match="version"):
        est.commit_step(fresh)
    other = LowRankSGD(5, 4, 2)
    other.initialize(M0)
    with pytest.raises(ValueError, match="this estimator"):
        other.commit_step(est.propose_step(round_))
    with pytest.raises(ValueError, match="ProposedStep"):
        est.commit_step("step")


def test_propose_runs_the_divergence_checks():
    est = LowRankSGD(5, 4, 2, step_scale=1e300, step_offset=1)
    est.initialize(np.random.default_rng(0).standard_normal((2, 5, 4)))
    before = snap(est)
    Xb, fp = est.check_context(np.full((5, 4), 1e10))
    with np.errstate(all="ignore"), pytest.raises(FloatingPointError, match="step_scale"):
        est.propose_step(Round(Xb, np.array([0]), np.array([1e300]), np.full((1, 2), 0.5), fp))
    assert snap(est) == before
