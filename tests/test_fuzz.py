"""Property-based fuzz of the whole stack: random valid configurations of environment ×
agent × inference wrappers × loop (single env, native vector env, Gymnasium's own wrappers
around the stack), a few hundred steps each, with bad calls thrown in along the way.

Properties, for every configuration:

* no exception other than a documented ``ValueError`` for a bad call, or one of two
  documented ends of a run: the divergence guard's ``FloatingPointError`` (it names
  ``step_scale``) and the value wrapper's refusal of a policy that never plays the arm its
  estimate favours (a ``ValueError`` naming ``MIN_PROPENSITY``), each raised before any
  state changes;
* a rejected call leaves every object's state exactly as it was;
* an interval that comes out non-finite comes with a warning that says why.

Hypothesis runs derandomized (a fixed sequence of examples), so the test is reproducible.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import lrbandit_gym  # noqa: E402, F401
from agents import (  # noqa: E402
    EnsembleSampling,
    EpsilonGreedy,
    ForcedExploration,
    LinearEpsilonGreedy,
    Oracle,
    Softmax,
    UniformRandom,
)
from inference import (  # noqa: E402
    ParameterInference,
    ValueInference,
    VectorParameterInference,
    VectorValueInference,
)
from lrbandit_gym import Decision  # noqa: E402

N_TRIALS = 3
LOW_RANK = ("epsilon_greedy", "softmax", "forced_exploration")


@st.composite
def configurations(draw):
    d1 = draw(st.integers(2, 6))
    d2 = draw(st.integers(2, 6))
    rank = draw(st.integers(1, min(d1, d2, 3)))
    return {
        "env": {
            "d1": d1,
            "d2": d2,
            "rank": rank,
            "n_actions": draw(st.integers(2, 5)),
            "context": draw(st.sampled_from(["gaussian", "completion"])),
            "noise": draw(st.sampled_from(["gaussian", "uniform", "student_t", "rademacher"])),
            "noise_std": draw(st.sampled_from([0.01, 0.1, 1.0])),
            "singular_values": draw(st.sampled_from([0.5, 1.0, 5.0])),
            "truth_seed": draw(st.integers(0, 3)),
        },
        "agent": draw(
            st.sampled_from(
                [*LOW_RANK, "ensemble", "linear", "uniform", "oracle"],
            )
        ),
        "warm_start": draw(st.integers(1, 60)),
        "loop": draw(st.sampled_from(["single", "vector", "gym_wrappers"])),
        "wrappers": draw(st.sampled_from(["none", "parameter", "value", "both"])),
        "share": draw(st.booleans()),
        "steps": draw(st.integers(80, 300)),
        "seed": draw(st.integers(0, 2**16)),
        "bad_every": draw(st.integers(15, 60)),
    }


def make_agent(name, env, rank, warm_start, seed):
    if name == "epsilon_greedy":
        return EpsilonGreedy(env, rank=rank, warm_start=warm_start, seed=seed)
    if name == "softmax":
        return Softmax(env, rank=rank, warm_start=warm_start, seed=seed)
    if name == "forced_exploration":
        return ForcedExploration(EpsilonGreedy(env, rank=rank, warm_start=warm_start, seed=seed))
    if name == "ensemble":
        return EnsembleSampling(env, rank=rank, n_models=4, seed=seed)
    if name == "linear":
        return LinearEpsilonGreedy(env, seed=seed)
    if name == "uniform":
        return UniformRandom(env, seed=seed)
    return Oracle(env, seed=seed)


def snapshot(obj):
    """A deep copy of ``obj.state_dict()`` (arrays copied) for exact comparison."""
    return _copy(obj.state_dict())


def _copy(value):
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def assert_same(a, b, where="state"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and a.dtype == b.dtype, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
    else:
        assert a == b or (a != a and b != b), where


def build(cfg):
    kw = dict(cfg["env"])
    vector = cfg["loop"] == "vector"
    if vector:
        env = gym.make_vec(
            "MatrixContextBandit-v0",
            num_envs=N_TRIALS,
            vectorization_mode="vector_entry_point",
            **kw,
        )
    elif cfg["loop"] == "gym_wrappers":
        env = gym.make("MatrixContextBandit-v0", max_episode_steps=50, **kw)
    else:
        env = gym.make("MatrixContextBandit-v0", **kw)
    rank = kw["rank"]
    agent = make_agent(cfg["agent"], env, rank, cfg["warm_start"], cfg["seed"])
    shared = cfg["share"] and cfg["agent"] in LOW_RANK
    estimator = agent.estimator if shared else None
    eye = np.eye(kw["d1"], kw["d2"])
    targets = {"anti": eye[:, ::-1].copy(), "trace": eye}
    P = VectorParameterInference if vector else ParameterInference
    V = VectorValueInference if vector else ValueInference
    layers = []
    stack = env
    if cfg["wrappers"] in ("parameter", "both"):
        stack = P(stack, targets, rank=rank, estimator=estimator, warm_start=cfg["warm_start"])
        layers.append(stack)
    if cfg["wrappers"] in ("value", "both"):
        stack = V(stack, rank=rank, estimator=estimator, warm_start=cfg["warm_start"])
        layers.append(stack)
    if cfg["loop"] == "gym_wrappers":
        stack = gym.wrappers.RecordEpisodeStatistics(stack)
    return stack, agent, layers, vector


def bad_calls(obs, decision, reward, n_actions, vector):
    """Calls that must each raise ValueError: (what, function of (stack, agent))."""
    nan_obs = np.array(obs, dtype=float)
    nan_obs.flat[0] = np.nan
    props = np.array(decision.propensities, dtype=float)
    chosen = np.atleast_1d(decision.action)
    zero = np.zeros((len(chosen), n_actions))  # all mass on another arm than the chosen one
    zero[np.arange(len(chosen)), (chosen + 1) % n_actions] = 1.0
    if vector:
        bad_action = np.full(N_TRIALS, n_actions)
    else:
        zero = zero[0]
        bad_action = n_actions
    bad_reward = np.full(N_TRIALS, np.nan) if vector else float("nan")
    return [
        ("agent nan reward", lambda s, a: a.update(obs, decision, bad_reward)),
        ("agent nan context", lambda s, a: a.update(nan_obs, decision, reward)),
        ("step bad action", lambda s, a: s.step(Decision(bad_action, props))),
        ("step bad pmf", lambda s, a: s.step(Decision(decision.action, props * 2.0))),
        ("step zero propensity", lambda s, a: s.step(Decision(decision.action, zero))),
    ]


def run(cfg):
    stack, agent, layers, vector = build(cfg)
    n_actions = cfg["env"]["n_actions"]
    obs, _ = stack.reset(seed=cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    steps = 0
    for t in range(cfg["steps"]):
        decision = agent.act(obs)
        if t % cfg["bad_every"] == cfg["bad_every"] - 1:
            # a bad call, then the state of every object must be as it was
            before = [snapshot(agent)] + [snapshot(w) for w in layers]
            reward = np.zeros(N_TRIALS) if vector else 0.0
            calls = bad_calls(obs, decision, reward, n_actions, vector)
            what, call = calls[int(rng.integers(len(calls)))]
            if what.startswith("step") and not layers:
                pass  # the bare env's own checks are tested in test_env.py
            else:
                with pytest.raises(ValueError):
                    call(stack, agent)
                after = [snapshot(agent)] + [snapshot(w) for w in layers]
                assert_same(before, after, what)
        before = [snapshot(w) for w in layers]
        try:
            nxt, reward, terminated, truncated, _ = stack.step(decision)
        except ValueError as exc:
            # Documented: the value estimator needs the arm its estimate favours to be
            # played with a positive probability; a policy that never plays it ends the
            # run, with every wrapper as it was.
            assert "a_hat" in str(exc) and "MIN_PROPENSITY" in str(exc), exc
            assert_same(before, [snapshot(w) for w in layers], "refused step")
            return steps
        except FloatingPointError as exc:  # the divergence guard: documented, ends the run
            assert "step_scale" in str(exc), exc
            return steps
        try:
            agent.update(obs, decision, reward)
        except FloatingPointError as exc:
            assert "step_scale" in str(exc), exc
            return steps
        steps += 1
        obs = nxt
        if not vector and (terminated or truncated):
            obs, _ = stack.reset()
    for layer in layers:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = layer.results()
        values = np.concatenate(
            [np.atleast_1d(np.asarray(ci.estimate, dtype=float)) for _, ci in results]
            + [np.atleast_1d(np.asarray(ci.low, dtype=float)) for _, ci in results]
        )
        if not np.isfinite(values).all():
            assert caught, f"a non-finite interval without a warning: {results}"
    return steps


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cfg=configurations())
def test_fuzz_env_agent_wrappers_loop(cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warnings are checked where they matter, above
        run(cfg)
