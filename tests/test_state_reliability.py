"""Issue 26, items 1, 5 and 6: atomic, validated wrapper state; absurd values refused before
they poison a running sum; an all-zero target refused at construction.

Each test fails on the code before the fix: a bad state was partly assigned or accepted, a
value of 1e300 or 1e200 turned every later interval into NaN, and an all-zero target gave
NaN forever.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym
from agents import EpsilonGreedy, UniformRandom
from agents.estimator import LowRankSGD
from agents.state import load_state, save_state, sub_state
from inference import (
    LinearFormInference,
    OptimalValueInference,
    ParameterInference,
    ValueInference,
)
from lrbandit_gym import Decision
from lrbandit_gym.input_checks import MAX_MAGNITUDE

D1, D2, RANK, K = 4, 3, 1, 2
WARM = 30
P = np.array([0.5, 0.5])


def _target():
    T = np.zeros((D1, D2))
    T[0, 0] = 1.0
    return {"T": T}


def _wrapper(cls, rounds, *, env=None):
    """A wrapper with its own estimator after ``rounds`` uniform rounds (warm start: 30)."""
    env = env or lrbandit_gym.MatrixContextBanditEnv(
        d1=D1, d2=D2, rank=RANK, n_actions=K, truth_seed=0
    )
    if cls is ParameterInference:
        w = cls(env, _target(), rank=RANK, warm_start=WARM)
    else:
        w = cls(env, rank=RANK, warm_start=WARM)
    agent = UniformRandom(env, seed=rounds)
    obs, _ = w.reset(seed=rounds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(rounds):
            obs, *_ = w.step(agent.act(obs))
    return w


def _copy(value):
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _assert_same(a, b, where="state"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    else:
        assert type(a) is type(b) and a == b, where


_PARTS = ("core", "estimator", "buffer")


def _set(path, value):
    """A mutation of a flat state: the entry ``".".join(path)`` set to ``value`` (or to
    ``value(old)``); a whole part (``path == (part,)``) replaced by the part ``value``
    (a dict, its entries under ``"<part>.<key>"``; None: left out) or set to it, which a
    flat state refuses."""

    def apply(state):
        key = ".".join(path)
        if len(path) == 1 and key in _PARTS and (value is None or isinstance(value, dict)):
            state = {k: v for k, v in state.items() if not k.startswith(key + ".")}
            state.update({f"{key}.{k}": v for k, v in (value or {}).items()})
            return state
        state[key] = value(state[key]) if callable(value) else value
        return state

    return apply


def _nan(arr):
    arr = arr.copy()
    arr.flat[0] = np.nan
    return arr


BAD_FIELDS = [
    # (id, mutation, message naming the field, phases where it applies)
    ("estimator-nan", _set(("estimator", "U"), _nan), r"state\['estimator'\].*'U'", "ab"),
    (
        "estimator-initialized-no",
        _set(("estimator", "initialized"), "no"),
        r"state\['estimator'\].*initialized",
        "ab",
    ),
    ("junk-buffer", _set(("buffer",), {"junk": 1}), r"state\['buffer'\]", "ab"),
    (
        "buffer-a-string",
        _set(("buffer",), "junk"),
        r"state\['buffer'\] is set: a state",
        "ab",
    ),
    ("rounds_seen-negative", _set(("rounds_seen",), -5), r"state\['rounds_seen'\]", "ab"),
    ("rounds_seen-fraction", _set(("rounds_seen",), 2.7), r"state\['rounds_seen'\]", "ab"),
    ("rounds_seen-string", _set(("rounds_seen",), "3"), r"state\['rounds_seen'\]", "ab"),
    ("rounds_seen-bool", _set(("rounds_seen",), True), r"state\['rounds_seen'\]", "ab"),
    ("rounds_skipped-negative", _set(("rounds_skipped",), -1), r"state\['rounds_skipped'\]", "ab"),
    (
        "rounds_skipped-too-many",
        _set(("rounds_skipped",), 10**6),
        r"state\['rounds_skipped'\]",
        "ab",
    ),
    ("obs-nan", _set(("obs",), _nan), r"state\['obs'\].*finite", "ab"),
    ("obs-absurd", _set(("obs",), lambda o: o * 1e200), r"state\['obs'\].*MAX_MAGNITUDE", "ab"),
    ("obs-shape", _set(("obs",), np.zeros(3)), r"state\['obs'\]", "ab"),
    ("obs-text", _set(("obs",), "abc"), r"state\['obs'\]", "ab"),
    ("core-n-negative", _set(("core", "n"), -1), r"state\['core'\].*'n'", "ab"),
    (
        "core-pulls-negative",
        _set(("core", "pulls"), lambda p: p - 10**6),
        r"state\['core'\].*'pulls'",
        "ab",
    ),
    ("core-nested", _set(("core",), [1, 2]), r"state\['core'\] is set: a state is flat", "ab"),
    ("core-missing", _set(("core",), None), r"no 'core.<key>' entries", "ab"),
    (
        "missing-rounds_seen",
        lambda s: {k: v for k, v in s.items() if k != "rounds_seen"},
        r"missing keys \['rounds_seen'\]",
        "ab",
    ),
    # a warm-start buffer beside an initialised estimator, and no buffer beside an
    # uninitialised one
    (
        "buffer-after-warm-start",
        lambda s: _set(("buffer",), _wrapper_state_in_warm_start())(s),
        r"state\['buffer'\]",
        "b",
    ),
    ("no-buffer-in-warm-start", _set(("buffer",), None), r"no 'buffer.<key>' entries", "a"),
]


_CACHE: dict = {}


def _wrapper_state_in_warm_start():
    if "warm" not in _CACHE:
        _CACHE["warm"] = sub_state(_wrapper(ParameterInference, 12).state_dict(), "buffer")
    return _copy(_CACHE["warm"])


@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
@pytest.mark.parametrize(
    "phase, mutate, match",
    [(phase, *b[1:3]) for b in BAD_FIELDS for phase in b[3]],
    ids=[
        f"{b[0]}-{'in' if phase == 'a' else 'after'}-warm-start"
        for b in BAD_FIELDS
        for phase in b[3]
    ],
)
def test_a_bad_wrapper_state_is_refused_naming_the_field_and_changes_nothing(
    cls, phase, mutate, match
):
    rounds = 12 if phase == "a" else 45
    target = _wrapper(cls, rounds)
    # The bad state comes from another run (other rounds, other data), so that any part
    # assigned before the failure shows in the target's state.
    source = _wrapper(cls, rounds + 3).state_dict()
    bad = mutate(_copy(source))
    before = _copy(target.state_dict())
    with pytest.raises(ValueError, match=match):
        target.load_state_dict(bad)
    _assert_same(before, target.state_dict())
    target.load_state_dict(source)  # the good state still loads whole
    _assert_same(source, target.state_dict())


@pytest.mark.parametrize("cls", [ParameterInference])
def test_a_core_state_with_initialized_no_is_refused(cls):
    target = _wrapper(cls, 45)
    bad = _copy(_wrapper(cls, 48).state_dict())
    bad["core.initialized"] = "no"
    before = _copy(target.state_dict())
    with pytest.raises(ValueError, match=r"state\['core'\].*'initialized'\] must be a bool"):
        target.load_state_dict(bad)
    _assert_same(before, target.state_dict())


def test_a_wrapper_that_shares_its_estimator_refuses_an_own_estimators_state():
    env = lrbandit_gym.MatrixContextBanditEnv(d1=D1, d2=D2, rank=RANK, n_actions=K, truth_seed=0)
    agent = EpsilonGreedy(env, rank=RANK, warm_start=WARM, seed=0)
    shared = ParameterInference(env, _target(), estimator=agent.estimator)
    own_state = _wrapper(ParameterInference, 45).state_dict()
    before = _copy(shared.state_dict())
    with pytest.raises(ValueError, match=r"state\['estimator'\] must be absent.*shares"):
        shared.load_state_dict(own_state)
    _assert_same(before, shared.state_dict())


@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
def test_a_restored_wrapper_continues_bit_identically(cls):
    a = _wrapper(cls, 45)
    b = _wrapper(cls, 20)
    b.load_state_dict(_copy(a.state_dict()))
    agent_a, agent_b = UniformRandom(a, seed=7), UniformRandom(b, seed=7)
    base_a, base_b = a.unwrapped, b.unwrapped  # b's bandit where a's is
    base_b.np_random.bit_generator.state = base_a.np_random.bit_generator.state
    base_b._context, base_b._expected = base_a._context, base_a._expected
    oa = ob = a.state_dict()["obs"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(10):
            oa, *_ = a.step(agent_a.act(oa))
            ob, *_ = b.step(agent_b.act(ob))
    _assert_same(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("rounds", [12, 45], ids=["in-warm-start", "after-warm-start"])
@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
def test_a_wrapper_state_saves_flat_with_agents_save_state_and_loads_back(cls, rounds, tmp_path):
    """One persistence scheme: a wrapper's state is flat, as the agents' are, saves with
    agents.state.save_state (np.savez, no pickling) and loads back as load_state gives it."""
    a = _wrapper(cls, rounds)
    state = a.state_dict()
    assert "core.n" in state and not any(isinstance(v, dict) for v in state.values())
    assert ("regret.rules.rng.state" in state) == (cls is ValueInference)
    save_state(tmp_path / "wrapper.npz", state)
    flat = load_state(tmp_path / "wrapper.npz")
    assert flat.keys() == state.keys()
    b = _wrapper(cls, 5)
    b.load_state_dict(flat)
    _assert_same(a.state_dict(), b.state_dict())


# ---------------------------------------------------------------- item 5: absurd values
def _core(rounds=20):
    rng = np.random.default_rng(0)
    core = LinearFormInference(D1, D2, RANK, K, _target())
    for t in range(rounds):
        core.update(
            rng.standard_normal((K, D1, RANK)),
            rng.standard_normal((K, D2, RANK)),
            rng.standard_normal((D1, D2)),
            t % 2,
            float(rng.normal()),
            P,
        )
    return core


def _round(scale_u=1.0, scale_v=1.0, scale_x=1.0, reward=1.0):
    rng = np.random.default_rng(1)
    return (
        rng.standard_normal((K, D1, RANK)) * scale_u,
        rng.standard_normal((K, D2, RANK)) * scale_v,
        rng.standard_normal((D1, D2)) * scale_x,
        0,
        reward,
        P,
    )


@pytest.mark.parametrize(
    "args, match",
    [
        (_round(reward=1e300), r"reward must have magnitude <= MAX_MAGNITUDE.*1e\+300"),
        (_round(reward=-1e160), r"reward must have magnitude.*-1e\+160"),
        (_round(scale_x=1e200), r"X must have entries of magnitude"),
        (_round(scale_u=1e200), r"U must have entries of magnitude"),
        (_round(scale_v=1e200), r"V must have entries of magnitude"),
    ],
    ids=["reward-1e300", "reward-1e160", "context-1e200", "U-1e200", "V-1e200"],
)
def test_the_linear_form_core_refuses_absurd_values_and_stays_usable(args, match):
    core = _core()
    before = _copy(core.state_dict())
    with pytest.raises(ValueError, match=match):
        core.update(*args)
    _assert_same(before, core.state_dict())
    core.update(*_round())
    ci = core.interval(0, "T")
    assert np.isfinite([ci.estimate, ci.low, ci.high]).all()


def test_the_value_core_refuses_an_absurd_reward_and_prediction():
    rng = np.random.default_rng(0)
    core = OptimalValueInference(K)
    for t in range(20):
        core.update(rng.standard_normal(K), t % 2, float(rng.normal()), P)
    before = _copy(core.state_dict())
    with pytest.raises(ValueError, match=r"reward must have magnitude.*1e\+300"):
        core.update(np.zeros(K), 0, 1e300, P)
    with pytest.raises(ValueError, match=r"predictions must have entries of magnitude"):
        core.update(np.array([1e200, 0.0]), 0, 1.0, P)
    _assert_same(before, core.state_dict())
    assert np.isfinite(core.interval().estimate)


def test_the_estimator_refuses_an_absurd_reward_with_a_value_error():
    rng = np.random.default_rng(0)
    est = LowRankSGD(D1, D2, RANK, K)
    est.initialize(rng.standard_normal((K, D1, D2)))
    before = est.state_dict()
    with pytest.raises(ValueError, match=r"reward must have magnitude.*1e\+300"):
        est.update(rng.standard_normal((D1, D2)), 0, 1e300, P)
    _assert_same(before, est.state_dict())


def test_an_agent_in_its_warm_start_refuses_an_absurd_reward():
    env = lrbandit_gym.MatrixContextBanditEnv(d1=D1, d2=D2, rank=RANK, n_actions=K, truth_seed=0)
    agent = EpsilonGreedy(env, rank=RANK, warm_start=WARM, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        decision = agent.act(obs)
        nxt, reward, *_ = env.step(decision)
        agent.update(obs, decision, reward)
        obs = nxt
    decision = agent.act(obs)
    before = agent.state_dict()
    with pytest.raises(ValueError, match=r"reward must have magnitude.*1e\+300"):
        agent.update(obs, decision, 1e300)
    _assert_same(before, agent.state_dict())


def _patched_env(reward_scale=1.0, obs_scale=1.0):
    env = lrbandit_gym.MatrixContextBanditEnv(d1=D1, d2=D2, rank=RANK, n_actions=K, truth_seed=0)
    step = env.step
    scales = {"reward": 1.0, "obs": 1.0}

    def scaled_step(action):
        obs, reward, terminated, truncated, info = step(action)
        return obs * scales["obs"], reward * scales["reward"], terminated, truncated, info

    env.step = scaled_step
    return env, scales


@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
@pytest.mark.parametrize("rounds", [12, 45], ids=["in-warm-start", "after-warm-start"])
def test_a_wrapper_refuses_an_absurd_reward_and_no_core_changes(cls, rounds):
    # The reward is known only after the environment stepped: the round is refused, with a
    # note naming it, every part of the inference is as it was, and the wrapper goes on
    # from the context the environment returned.
    env, scales = _patched_env()
    w = _wrapper(cls, rounds, env=env)
    obs = w.state_dict()["obs"]
    before = _copy(w.state_dict())
    scales["reward"] = 1e300
    with pytest.raises(ValueError, match=r"reward must have .*magnitude <= MAX_MAGNITUDE") as err:
        w.step(UniformRandom(w, seed=0).act(obs))
    assert any(f"round {rounds + 1}" in note for note in err.value.__notes__)
    after = w.state_dict()
    assert not np.array_equal(after.pop("obs"), before.pop("obs"))  # the env stepped
    _assert_same(before, after)
    obs = w.state_dict()["obs"]
    scales["reward"] = 1.0
    agent = UniformRandom(w, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(40):
            obs, *_ = w.step(agent.act(obs))
    ci = w.interval(0, "T") if cls is ParameterInference else w.interval()
    assert np.isfinite([ci.estimate, ci.low, ci.high]).all()


@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
def test_a_wrapper_refuses_an_absurd_context_before_anything_changes(cls):
    env, scales = _patched_env()
    w = _wrapper(cls, 44, env=env)
    decision = Decision(0, P)  # an agent would refuse the context itself
    scales["obs"] = 1e200
    w.step(decision)  # the huge context is returned...
    before = _copy(w.state_dict())
    with pytest.raises(ValueError, match=r"context the environment returned.*MAX_MAGNITUDE"):
        w.step(decision)  # ...and refused before the round it would enter
    _assert_same(before, w.state_dict())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"singular_values": 1e200}, r"singular_values=1e\+200"),
        ({"singular_values": [1e155]}, r"singular_values=\[1e\+155\]"),
        ({"params": np.ones((K, D1, D2)) * 1e200, "rank": 1}, r"params with largest entry"),
        ({"noise_std": 1e200}, r"noise_std must be at most MAX_MAGNITUDE"),
    ],
    ids=["sv-1e200", "sv-1e155", "params-1e200", "noise-1e200"],
)
def test_the_env_refuses_a_truth_whose_v_star_or_norm_is_not_finite(kwargs, match):
    kwargs = {"d1": D1, "d2": D2, "rank": RANK, **kwargs}
    with pytest.raises(ValueError, match=match):
        gym.make("MatrixContextBandit-v0", **kwargs)


def test_the_env_still_takes_a_large_but_absorbable_truth():
    env = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=RANK, singular_values=1e100)
    assert np.isfinite(env.unwrapped.optimal_value)


@pytest.mark.parametrize("scale", [1e160, -1e200])
def test_a_target_with_absurd_entries_is_refused_naming_it(scale):
    T = np.eye(D1, D2) * scale
    with pytest.raises(ValueError, match=r"targets\['big'\] must have entries of magnitude"):
        LinearFormInference(D1, D2, RANK, K, {"big": T})
    env = lrbandit_gym.MatrixContextBanditEnv(d1=D1, d2=D2, rank=RANK, n_actions=K)
    with pytest.raises(ValueError, match=r"targets\['big'\]"):
        ParameterInference(env, {"ok": np.eye(D1, D2), "big": T})


def test_max_magnitude_leaves_room_for_squares():
    assert np.isfinite(np.float64(MAX_MAGNITUDE) ** 2 * 1e7)


# ---------------------------------------------------------------- item 6: all-zero target
def test_an_all_zero_target_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"targets\['Z'\] is all zero"):
        LinearFormInference(D1, D2, RANK, K, {"Z": np.zeros((D1, D2))})
    env = lrbandit_gym.MatrixContextBanditEnv(d1=D1, d2=D2, rank=RANK, n_actions=K)
    with pytest.raises(ValueError, match=r"targets\['Z'\] is all zero"):
        ParameterInference(env, {"T": np.eye(D1, D2), "Z": np.zeros((D1, D2))})
    with pytest.raises(ValueError, match=r"targets\['Z'\] is all zero"):
        ParameterInference(env, {"Z": -0.0 * np.ones((D1, D2))})


# ------------------------------------- item 5: products of values each admissible alone
def test_factors_whose_estimate_overflows_are_refused_by_the_core():
    core = _core()
    before = _copy(core.state_dict())
    with pytest.raises(ValueError, match=r"estimate U\[0\] V\[0\]ᵀ may have entries"):
        core.update(*_round(scale_u=1e100, scale_v=1e100))  # each 1e100, the estimate 1e200
    _assert_same(before, core.state_dict())


def test_a_round_whose_squares_overflow_is_refused_by_the_core():
    # Factors of 1e70 (estimate 1e140) and a context of 1e100 are each admissible; the
    # prediction <U Vᵀ, X> ~ 1e240 is not: its square is infinite.
    core = _core()
    before = _copy(core.state_dict())
    with pytest.raises(ValueError, match=r"the round cannot be absorbed.*nothing was changed"):
        core.update(*_round(scale_u=1e70, scale_v=1e70, scale_x=1e100))
    _assert_same(before, core.state_dict())
    core.update(*_round())
    ci = core.interval(0, "T")
    assert np.isfinite([ci.estimate, ci.low, ci.high]).all()


@pytest.mark.parametrize("name", ["numpy", "numba"])
@pytest.mark.parametrize("context", ["gaussian", "completion"])
def test_the_feed_refuses_an_overflowing_round_before_writing_on_either_engine(name, context):
    # An estimate of 1e60 and a context of 1e100 (gaussian), or an estimate entry of 1e155
    # at the revealed entry (completion), are each admissible; the prediction's square is
    # not.  Before the fix the round entered the sums and every interval was NaN after it.
    from inference.wrappers.shared_estimator import SharedEstimate
    from lrbandit_gym import engine
    from lrbandit_gym.rounds import Round

    if name == "numba" and not engine.numba_available():
        pytest.skip("needs numba (fast extra)")
    rng = np.random.default_rng(0)
    B = 3
    M = rng.standard_normal((B, K, D1, D2))
    if context == "gaussian":
        M *= 1e60
    else:
        M[:, :, 0, 0] = 1e155  # rank 1 keeps it: every other entry of the estimate is tiny
    props = np.full((B, K), 0.5)
    actions = np.zeros(B, dtype=np.int64)
    with engine.use(name), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est = LowRankSGD(D1, D2, RANK, K, n_trials=B, context=context)
        est.initialize(M)
        core = LinearFormInference(D1, D2, RANK, K, _target(), n_trials=B, context=context)
        feed = SharedEstimate(est, core)

        def absorb(X, rewards):
            Xb, fp = est.check_context(X)
            feed.absorb(feed.snapshot(Xb, actions, fp), Round(Xb, actions, rewards, props, fp))

        for t in range(5):  # the estimate is held; only the core learns
            if context == "completion":
                X = np.array([[1 + t % (D1 - 1), 1 + t % (D2 - 1)]] * B)
            else:
                X = rng.standard_normal((B, D1, D2))
            absorb(X, rng.standard_normal(B))
        before = _copy(core.state_dict())
        if context == "completion":
            X = np.array([[1, 1], [1, 2], [0, 0]])
        else:
            X = rng.standard_normal((B, D1, D2))
            X[2] *= 1e100
        with pytest.raises(ValueError, match=r"cannot be absorbed \(trial 2\)"):
            absorb(X, np.zeros(B))
        _assert_same(before, core.state_dict())
        absorb(X[:2].repeat([2, 1], axis=0), np.zeros(B))  # the sums still take rounds
        assert np.isfinite(core.S2).all() and np.isfinite(core.sigma2).all()


def test_a_wrapper_refuses_an_overflowing_round_and_no_core_changes():
    # The agent's estimate is of order 1e60 and the contexts of 1e100: each admissible, the
    # prediction's square is not.  The round is refused while it is staged, after the
    # bandit stepped: the inference is as it was.
    env, scales = _patched_env()
    M = 1e60 * np.random.default_rng(0).standard_normal((K, D1, D2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        agent = EpsilonGreedy(env, rank=RANK, M_init=M, seed=0)
    w = ParameterInference(env, _target(), estimator=agent.estimator)
    w.reset(seed=0)
    decision = Decision(0, P)
    for _ in range(3):
        w.step(decision)
    scales["obs"] = 1e100
    w.step(decision)  # returns the 1e100 context
    before = _copy(w.state_dict())
    with pytest.raises(ValueError, match=r"the round cannot be absorbed"):
        w.step(decision)
    after = w.state_dict()
    after.pop("obs"), before.pop("obs")
    _assert_same(before, after)


def test_a_wrapper_whose_core_has_no_validate_state_dict_still_restores():
    from inference import PolicyEvaluation

    def run(rounds):
        env = lrbandit_gym.MatrixContextBanditEnv(
            d1=D1, d2=D2, rank=RANK, n_actions=K, truth_seed=0
        )
        w = PolicyEvaluation(env, {"zero": lambda obs: 0}, rank=RANK, warm_start=WARM)
        agent = UniformRandom(env, seed=rounds)
        obs, _ = w.reset(seed=rounds)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(rounds):
                obs, *_ = w.step(agent.act(obs))
        return w

    source, target = run(45), run(20)
    target.load_state_dict(_copy(source.state_dict()))
    _assert_same(source.state_dict(), target.state_dict())


@pytest.mark.parametrize("kind", ["buffer-float64", "streaming"])
@pytest.mark.parametrize("entry", [1e200, -1e160])
def test_a_warm_start_refuses_a_context_whose_square_overflows(kind, entry):
    # Stored (or summed into the moments), a 1e200 context made every later fit fail.
    from agents.warm_start.dense import WarmStartBuffer
    from agents.warm_start.streaming import StreamingWarmStart

    rng = np.random.default_rng(0)
    if kind == "streaming":
        warm = StreamingWarmStart(D1, D2, K, 40, RANK)
    else:
        warm = WarmStartBuffer(D1, D2, K, 40, dtype=np.float64)
    for t in range(5):
        warm.add(rng.standard_normal((D1, D2)), t % 2, float(rng.normal()))
    before = _copy(warm.state_dict())
    X = rng.standard_normal((D1, D2))
    X[1, 2] = entry
    with pytest.raises(ValueError, match=r"must have entries of magnitude <= MAX_MAGNITUDE"):
        warm.add(X, 0, 0.5)
    _assert_same(before, warm.state_dict())


# ------------------------------------------------------------- issue 34, item 10
def _replay_log(big_row: int):
    """A valid log whose context at ``big_row`` holds 1e39 (admitted: at most 1e150)."""
    n = 4
    context = np.ones((n, 2, 2))
    context[big_row, 0, 0] = 1e39
    return {
        "context": context,
        "action": np.zeros(n, np.int64),
        "reward": np.zeros(n),
        "propensity": np.full(n, 0.5),
        "pmf": np.full((n, 2), 0.5),
        "d1": np.asarray(2),
        "d2": np.asarray(2),
        "n_actions": np.asarray(2),
        "context_law": np.asarray("gaussian"),
        "format_version": np.asarray(1),
    }


def test_float32_recorder_refuses_a_context_it_cannot_hold_before_recording():
    from lrbandit_gym import Decision
    from lrbandit_gym.logs import LogReplayEnv, RecordRounds

    rec = RecordRounds(LogReplayEnv(_replay_log(2)), dtype=np.float32)
    rec.reset()
    decision = Decision(0, np.array([0.5, 0.5]))
    rec.step(decision)
    with pytest.raises(ValueError, match=r"float32.*1e\+39.*dtype=np.float64") as err:
        rec.step(decision)  # returns the context of row 2
    assert "reset() is needed" in err.value.__notes__[0]
    assert rec.n_rounds == 1 and rec.env.unwrapped.row == 2  # the env stepped, unrecorded
    assert np.isfinite(rec.to_log()["context"]).all()
    with pytest.raises(RuntimeError, match="reset"):
        rec.step(decision)  # no context to pair the next round with
    with pytest.raises(ValueError, match="float32"):
        RecordRounds(LogReplayEnv(_replay_log(0)), dtype=np.float32).reset()


def test_a_weight_state_with_nan_in_one_array_only_is_refused():
    from inference.cores.weight_share import WeightShare

    share = WeightShare(1, 2)
    share.add(np.array([[1.0, 2.0]]))
    state = share.state_dict()
    state["weight_sum"] = np.full((1, 2), np.nan)
    with pytest.raises(ValueError, match="weight_sum.*only"):
        share.check_state(state)
    both = {"weight_sum": np.full((1, 2), np.nan), "weight_max": np.full((1, 2), np.nan)}
    share.check_state(both)  # unknown in both: accepted, the check stays silent


@pytest.mark.parametrize("action", [1.7, True, np.float64(0.0), np.bool_(False)])
def test_the_replay_refuses_an_action_that_is_not_an_integer(action):
    from lrbandit_gym.logs import LogReplayEnv

    env = LogReplayEnv(_replay_log(0))
    env.reset()
    with pytest.raises(ValueError, match="integer arm"):
        env.step(action)
    assert env.row == 0
    env.step(0)
    assert env.row == 1
