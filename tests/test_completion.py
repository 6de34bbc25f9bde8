"""The sparse path of completion contexts: index observations, and the agents, the SGD step,
the warm start and the inference cores reading ``e_j e_kᵀ`` by its index.

Every check compares the sparse path with an independent dense computation on the same
completion stream (or the index form with the matrix form of the same seed): equal to
~1e-10, or bit for bit where the arithmetic is the same.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import lrbandit_gym  # noqa: F401  (registers the env)
from agents import EpsilonGreedy, LowRankSGD
from agents.warm_start import (
    CompletionWarmStartBuffer,
    completion_buffer_bytes,
    initial_estimate,
    nuclear_norm_fit,
)
from inference import LinearFormInference, ParameterInference, ValueInference
from lrbandit_gym import MatrixContextBanditEnv, engine
from lrbandit_gym.onehot import OneHotContexts, check_index, one_hot_contexts

D1, D2, R = 9, 7, 2
ENGINES = ["numpy"] + (["numba"] if engine.numba_available() else [])


def completion_env(observation="index", **kw):
    return gym.make(
        "MatrixContextBandit-v0",
        d1=D1,
        d2=D2,
        rank=R,
        context="completion",
        observation=observation,
        max_episode_steps=None,
        **kw,
    )


def one_hot(j, k, d1=D1, d2=D2):
    X = np.zeros((d1, d2))
    X[j, k] = 1.0
    return X


# ----------------------------------------------------------------------------- the env
def test_index_observation_is_the_matrix_observation_of_the_same_seed():
    idx_env, mat_env = completion_env("index"), completion_env("matrix")
    assert idx_env.observation_space == gym.spaces.MultiDiscrete([D1, D2])
    check_env(idx_env.unwrapped, skip_render_check=True)
    o1, _ = idx_env.reset(seed=3)
    o2, _ = mat_env.reset(seed=3)
    for t in range(200):
        assert o1.dtype == np.int64 and o1.shape == (2,)
        assert idx_env.observation_space.contains(o1)
        np.testing.assert_array_equal(o2, one_hot(*o1))
        a = t % 2
        o1, r1, *_, i1 = idx_env.step(a)
        o2, r2, *_, i2 = mat_env.step(a)
        assert r1 == r2 and i1["regret"] == i2["regret"]
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=5,
        vectorization_mode="vector_entry_point",
        d1=D1,
        d2=D2,
        rank=R,
        context="completion",
        observation="index",
    )
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (5, 2) and obs.dtype == np.int64
    assert ((obs >= 0) & (obs < [D1, D2])).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"observation": "index"}, "needs context='completion'"),
        ({"observation": "index", "context": "completion", "flatten": True}, "flatten=True"),
        ({"observation": "indices", "context": "completion"}, "observation must be one of"),
    ],
)
def test_index_observation_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MatrixContextBanditEnv(d1=D1, d2=D2, rank=R, **kwargs)


# ----------------------------------------------------------------------------- the index form
def test_check_index_refuses_bad_indices_naming_argument_and_value():
    assert check_index(np.array([8, 6]), D1, D2).index.tolist() == [[8, 6]]
    with pytest.raises(ValueError, match=r"X must be a completion index .* got \[9, 0\]"):
        check_index(np.array([9, 0]), D1, D2)
    with pytest.raises(ValueError, match=r"got \[0, -1\] \(trial 1\)"):
        check_index(np.array([[0, 0], [0, -1]]), D1, D2, n_trials=2)
    with pytest.raises(ValueError, match="integer completion index.*float64"):
        check_index(np.array([1.0, 2.0]), D1, D2)
    with pytest.raises(ValueError, match=r"shape \(2,\).*got shape \(3,\)"):
        check_index(np.array([1, 2, 3]), D1, D2)


def test_one_hot_contexts_detects_exactly_one_entry_equal_to_one():
    X = np.stack([one_hot(2, 3), one_hot(8, 0)])
    ctx = one_hot_contexts(X)
    assert ctx.index.tolist() == [[2, 3], [8, 0]]
    np.testing.assert_array_equal(ctx.dense(), X)
    assert one_hot_contexts(2 * X) is None
    Y = X.copy()
    Y[1, 0, 0] = 1.0
    assert one_hot_contexts(Y) is None
    assert one_hot_contexts(np.zeros((1, D1, D2))) is None


# ----------------------------------------------------------------------------- the SGD step
@pytest.mark.parametrize("eng", ENGINES)
def test_sparse_step_equals_the_dense_step(eng):
    """A completion estimator fed indices equals one that multiplies by the one-hot
    matrices (a Gaussian-context estimator with the same ``η c``: the dense path)."""
    rng = np.random.default_rng(1)
    c = D1 * D2
    M = rng.standard_normal((2, D1, R)) @ rng.standard_normal((2, R, D2)) / 3
    with engine.use(eng):
        sparse = LowRankSGD(D1, D2, R, context="completion", step_scale=0.02 / c)
        dense = LowRankSGD(D1, D2, R, context="gaussian", step_scale=0.02)
        sparse.initialize(M)
        dense.initialize(M)
        for _ in range(400):
            j, k = int(rng.integers(D1)), int(rng.integers(D2))
            a, y, p = int(rng.integers(2)), float(rng.normal()), np.array([0.3, 0.7])
            np.testing.assert_allclose(
                sparse.predict(np.array([j, k])), dense.predict(one_hot(j, k)), rtol=1e-12
            )
            res = sparse.update(np.array([j, k]), a, y, p)
            assert res == pytest.approx(dense.update(one_hot(j, k), a, y, p), rel=1e-10)
            assert sparse.step_support[0, a].tolist() == [j, k]
    np.testing.assert_allclose(sparse.estimates, dense.estimates, rtol=0, atol=1e-10)


def test_a_rejected_index_changes_nothing():
    est = LowRankSGD(D1, D2, R, context="completion", step_scale=1e-3)
    est.initialize(np.random.default_rng(0).standard_normal((2, D1, D2)))
    before = est.state_dict()
    for bad in (np.array([D1, 0]), np.array([0.0, 1.0]), np.array([[0, 1]])):
        with pytest.raises(ValueError, match="X must (be|have)"):
            est.update(bad, 0, 0.5, np.array([0.5, 0.5]))
    after = est.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


# ----------------------------------------------------------------------------- the warm start
def _completion_rounds(rng, n, d1=D1, d2=D2):
    M = np.stack([rng.standard_normal((d1, R)) @ rng.standard_normal((R, d2)) for _ in range(2)])
    ctx = OneHotContexts.from_flat(rng.integers(0, d1 * d2, n), d1, d2)
    a = rng.integers(0, 2, n)
    y = M[a, ctx.rows, ctx.cols] + 0.1 * rng.standard_normal(n)
    return M, ctx, a, y, rng.uniform(1, 3, n)


def test_warm_start_from_indices_equals_the_dense_fit():
    rng = np.random.default_rng(2)
    M, ctx, a, y, w = _completion_rounds(rng, 800)
    kw = dict(weights=w, context="completion", rank=R)
    np.testing.assert_allclose(
        nuclear_norm_fit(ctx, a, y, 2, **kw),
        nuclear_norm_fit(ctx.dense(), a, y, 2, **kw),
        rtol=0,
        atol=1e-10,
    )
    short = np.zeros(800, dtype=int)
    short[:4] = 1  # arm 1 too short: the weak-arm rule, from indices too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sparse = initial_estimate(ctx, short, y, 2, rank=R, context="completion")
        dense = initial_estimate(ctx.dense(), short, y, 2, rank=R, context="completion")
    np.testing.assert_allclose(sparse, dense, rtol=0, atol=1e-10)


def test_completion_buffer_stores_32_bytes_a_round_and_round_trips():
    buf = CompletionWarmStartBuffer(1000, 1000, 2, length=50_000)
    assert buf.nbytes == completion_buffer_bytes(50_000) == 50_000 * 32
    rng = np.random.default_rng(3)
    _, ctx, a, y, w = _completion_rounds(rng, 60)
    small = CompletionWarmStartBuffer(D1, D2, 2, length=100, n_trials=None)
    for t in range(60):
        X = ctx.index[t] if t % 2 else ctx.dense()[t]  # both forms
        small.add(X, int(a[t]), float(y[t]), float(w[t]))
    X, acts, rew, wts = small.data()
    np.testing.assert_array_equal(X.flat, ctx.flat)
    np.testing.assert_array_equal(acts, a)
    copy = CompletionWarmStartBuffer(D1, D2, 2, length=100)
    copy.load_state_dict(small.state_dict())
    assert all(np.array_equal(u, v) for u, v in zip(copy.data()[1:], small.data()[1:], strict=True))
    with pytest.raises(ValueError, match="one-hot contexts"):
        small.add(2 * one_hot(0, 0), 0, 1.0)
    with pytest.raises(ValueError, match=r"got \[0, 7\]"):
        small.add(np.array([0, 7]), 0, 1.0)
    assert small.n == 60


# ----------------------------------------------------------------------------- the inference
def _reference(history, targets, c, r):
    """Algorithms 2-3 by brute force with dense matrices (docs/method.md §4)."""
    K = history[0][0].shape[0]
    n = len(history)
    M_unbs = np.zeros((K, D1, D2))
    sigma2 = np.zeros(K)
    S2 = np.zeros((K, len(targets)))
    for U, V, X, a, y, p in history:
        for i in range(K):
            M = U[i] @ V[i].T
            M_unbs[i] += M
            if i != a:
                continue
            res = y - np.sum(M * X)
            M_unbs[i] += c / p[i] * res * X
            sigma2[i] += res**2 / p[i]
            PU = U[i] @ np.linalg.pinv(U[i])
            PV = V[i] @ np.linalg.pinv(V[i])
            for k, T in enumerate(targets.values()):
                G = T - (np.eye(D1) - PU) @ T @ (np.eye(D2) - PV)
                S2[i, k] += c**2 / p[i] ** 2 * np.sum(G * X) ** 2
    return M_unbs / n, sigma2 / n, S2 / n


def _targets():
    e = np.zeros((D1, D2))
    e[0, 0] = 1.0
    return {"e11": e, "dense": np.arange(D1 * D2).reshape(D1, D2) / (D1 * D2)}


def _watched_run(observation, eng, rounds=900, warm=300, design_variance="auto"):
    env = completion_env(observation)
    agent = EpsilonGreedy(env, rank=R, warm_start=warm, seed=1, step_scale=0.05 / (D1 * D2))
    params = ParameterInference(
        env, _targets(), estimator=agent.estimator, design_variance=design_variance
    )
    wrapped = ValueInference(params, estimator=agent.estimator)
    history = []
    with engine.use(eng), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        obs, _ = wrapped.reset(seed=4)
        for _ in range(rounds):
            decision = agent.act(obs)
            if not agent.in_warm_start:
                U, V = agent.estimator.factors
                X = one_hot(*obs) if observation == "index" else obs
                history.append((U, V, X, decision.action, None, decision.propensities))
            nxt, reward, *_ = wrapped.step(decision)
            if history and history[-1][4] is None:
                history[-1] = (*history[-1][:4], reward, history[-1][5])
            agent.update(obs, decision, reward)
            obs = nxt
    return params, wrapped, history


@pytest.mark.parametrize("eng", ENGINES)
def test_wrappers_on_indices_equal_the_dense_formulas(eng):
    """ParameterInference fed index observations (O((d1 + d2) r) rounds, the held estimates
    replaced in place) equals Algorithms 2-3 computed with the dense matrices (eq. (14)'s
    design variance), and the same run on matrix observations gives the same numbers, with
    eq. (14) and with every round's design terms."""
    params, wrapped, history = _watched_run("index", eng, design_variance="pulled")
    core = params.core
    assert core.n_obs == len(history) == 600
    M_unbs, sigma2, S2 = _reference(history, _targets(), D1 * D2, R)
    for i in range(2):
        np.testing.assert_allclose(core.debiased_mean(i), M_unbs[i], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(core.sigma2, sigma2, rtol=1e-10)
    np.testing.assert_allclose(core.S2, S2, rtol=1e-8, atol=1e-10 * S2.max())
    for dv in ("pulled", "all-rounds"):
        if dv == "all-rounds":
            params, wrapped, _ = _watched_run("index", eng, design_variance=dv)
        dense_params, dense_value, _ = _watched_run("matrix", eng, design_variance=dv)
        for i in range(2):
            for name in _targets():
                a, b = params.interval(i, name), dense_params.interval(i, name)
                assert a.estimate == pytest.approx(b.estimate, rel=1e-10, abs=1e-12)
                assert a.standard_error == pytest.approx(b.standard_error, rel=1e-10)
        value = wrapped.interval().estimate
        assert value == pytest.approx(dense_value.interval().estimate, rel=1e-10)


def test_core_update_takes_an_index_and_a_one_hot_matrix_alike():
    rng = np.random.default_rng(5)
    a_core = LinearFormInference(D1, D2, R, 2, _targets(), context="completion")
    b_core = LinearFormInference(D1, D2, R, 2, _targets(), context="completion")
    U, V = rng.standard_normal((2, D1, R)), rng.standard_normal((2, D2, R))
    for _ in range(50):
        j, k = int(rng.integers(D1)), int(rng.integers(D2))
        a, y, p = int(rng.integers(2)), float(rng.normal()), np.array([0.4, 0.6])
        a_core.update(U, V, np.array([j, k]), a, y, p)
        b_core.update(U, V, one_hot(j, k), a, y, p)
        U[a] += 0.01 * rng.standard_normal((D1, R))
    for i in range(2):
        np.testing.assert_allclose(a_core.debiased_mean(i), b_core.debiased_mean(i), atol=1e-12)
    state = a_core.state_dict()
    with pytest.raises(ValueError, match=r"got \[0, 9\]"):
        a_core.update(U, V, np.array([0, 9]), 0, 0.0, np.array([0.5, 0.5]))
    assert all(
        np.array_equal(v, a_core.state_dict()[k])
        for k, v in state.items()
        if k != "targets" and isinstance(v, np.ndarray)
    )


# ----------------------------------------------------------------------------- lrbandit bench
def test_bench_completion_and_coverage_smoke(capsys):
    from lrbandit_gym.experiments.bench.completion import bench_completion, completion_coverage

    out = bench_completion(d=20, warm_start=400, number=10, d_ref=10)
    assert set(out["rounds_per_s"]) == {"index", "matrix_small", "gaussian_small"}
    assert out["buffer_bytes"] == 400 * 32 < out["peak_traced_bytes"] < 50 * 2**20
    assert out["dense_buffer_bytes"] > 400 * 20 * 20 * 4
    cov = completion_coverage(
        trials=5, d=12, rank=2, checkpoints=(50, 100), warm_start=400, batch_size=3
    )
    assert len(cov["rows"]) == 2 * 5 and all(row["trials"] == 5 for row in cov["rows"])
    assert all(0.0 <= row["coverage"] <= 1.0 for row in cov["rows"])


@pytest.mark.skipif(len(ENGINES) < 2, reason="needs numba for the second engine")
def test_vector_wrappers_on_indices_agree_across_engines():
    """A batch of trials replaces its held estimates in one gather and scatter (numpy) or in
    a compiled loop (numba): the same sums."""
    from inference import VectorParameterInference

    out = {}
    for eng in ENGINES:
        venv = gym.make_vec(
            "MatrixContextBandit-v0",
            num_envs=6,
            vectorization_mode="vector_entry_point",
            d1=D1,
            d2=D2,
            rank=R,
            context="completion",
            observation="index",
        )
        agent = EpsilonGreedy(venv, rank=R, warm_start=300, seed=2, step_scale=0.05 / (D1 * D2))
        params = VectorParameterInference(venv, _targets(), estimator=agent.estimator)
        with engine.use(eng), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            obs, _ = params.reset(seed=7)
            for _ in range(500):
                decision = agent.act(obs)
                nxt, reward, *_ = params.step(decision)
                agent.update(obs, decision, reward)
                obs = nxt
        out[eng] = np.stack([params.core.debiased_mean(i) for i in range(2)])
    np.testing.assert_allclose(out["numpy"], out["numba"], rtol=1e-9, atol=1e-10)
