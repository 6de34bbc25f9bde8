"""Tests of the nuclear-norm warm start of eq. (10): agents.warm_start.fit and the modules
beside it (proximal, factored, dense, memory_pool)."""

from __future__ import annotations

import numpy as np
import pytest

from agents.estimator import LowRankSGD
from agents.warm_start import (
    WarmStartBuffer,
    nuclear_norm_fit,
)


def _low_rank(rng, d1, d2, r):
    Q_U = np.linalg.qr(rng.standard_normal((d1, r)))[0]
    Q_V = np.linalg.qr(rng.standard_normal((d2, r)))[0]
    return Q_U @ Q_V.T


def _problem(seed, n, d1=10, d2=8, r=2, K=2, sigma=0.1, lead=()):
    rng = np.random.default_rng(seed)
    truth = np.stack([_low_rank(rng, d1, d2, r) for _ in range(K)])
    X = rng.standard_normal(lead + (n, d1, d2))
    a = rng.integers(0, K, lead + (n,))
    y = np.einsum("...ij,...ij->...", truth[a], X) + sigma * rng.standard_normal(lead + (n,))
    return truth, X, a, y


def _truncate(M, r):
    u, s, vt = np.linalg.svd(M)
    return (u[..., :r] * s[..., None, :r]) @ vt[..., :r, :]


@pytest.fixture(scope="module")
def paper_problem():
    """d=50, r=3, K=2, sigma=0.1, uniform actions, the paper's 2000 rounds (contexts in
    float32, as stored by WarmStartBuffer), and their proximal fit with its diagnostics (the
    default solver with ``full_output``): one fit for the tests below."""
    truth, X, a, y = _problem(0, 2000, 50, 50, 3)
    X = X.astype(np.float32)
    return truth, X, a, y, nuclear_norm_fit(X, a, y, 2, rank=3, full_output=True)


def test_paper_setting_default_length_is_sigma_close(paper_problem):
    truth, _, _, _, fit = paper_problem
    err = np.linalg.norm(_truncate(fit.estimate, 3) - truth, axis=(1, 2))
    assert np.all(err < 0.1), err  # sigma-close, as Algorithm 1's start needs
    np.testing.assert_allclose(fit.noise_std, 0.1, rtol=0.15)
    assert fit.refit and fit.converged
    # The estimate initialises the SGD as eq. (10) prescribes.
    est = LowRankSGD(50, 50, 3)
    est.initialize(fit.estimate)
    np.testing.assert_allclose(est.estimates, _truncate(fit.estimate, 3), atol=1e-10)


def test_factored_solver_recovers_every_factor_in_the_paper_setting(paper_problem):
    """The default solver with a rank (alternating ridge regressions, as the studies' warm
    start runs it): the same accuracy as the proximal path at r = 3, where a mismatch between
    the columns of U and V (or a wrong product) would show."""
    truth, X, a, y, proximal = paper_problem
    M = nuclear_norm_fit(X, a, y, 2, rank=3)
    err = np.linalg.norm(_truncate(M, 3) - truth, axis=(1, 2))
    assert np.all(err < 0.1), err
    gap = np.linalg.norm(_truncate(M, 3) - _truncate(proximal.estimate, 3), axis=(1, 2))
    assert np.all(gap < 0.05), gap


def test_without_rank_nuclear_norm_alone_recovers():
    truth, X, a, y = _problem(1, 1200, 12, 10, 2)
    fit = nuclear_norm_fit(X, a, y, 2, full_output=True)
    assert not fit.refit
    err = np.linalg.norm(_truncate(fit.estimate, 2) - truth, axis=(1, 2))
    assert np.all(err < 0.1), err
    np.testing.assert_allclose(fit.noise_std, 0.1, rtol=0.25)
    # The nuclear-norm solution is low rank without being told the rank.
    ranks = (np.linalg.svd(fit.estimate, compute_uv=False) > 1e-8).sum(axis=1)
    assert np.all(ranks < 8), ranks


def test_explicit_penalty_solves_the_convex_problem():
    """Check the optimality condition 0 in grad f(M) + lambda * subdiff ||M||_*."""
    truth, X, a, y = _problem(2, 300, 6, 5, 1)
    lam = 0.05
    M = nuclear_norm_fit(X, a, y, 2, penalty=lam, tol=1e-12, max_iter=20_000)
    for k in range(2):
        rows = a == k
        Xk = X[rows].reshape(rows.sum(), -1)
        grad = (Xk.T @ (Xk @ M[k].ravel() - y[rows]) / rows.sum()).reshape(6, 5)
        u, s, vt = np.linalg.svd(M[k])
        r = int((s > 1e-8).sum())
        U, V = u[:, :r], vt[:r].T
        # -grad = lambda (U V^T + W) with U^T W = 0, W V = 0, ||W|| <= 1
        G = -grad / lam
        np.testing.assert_allclose(U.T @ G @ V, np.eye(r), atol=1e-5)
        W = G - U @ V.T
        W_perp = (np.eye(6) - U @ U.T) @ W @ (np.eye(5) - V @ V.T)
        np.testing.assert_allclose(W, W_perp, atol=1e-5)
        assert np.linalg.norm(W, 2) <= 1 + 1e-5


def test_batched_equals_per_trial():
    truth, X, a, y = _problem(3, 250, 7, 6, 1, lead=(3,))
    kw = dict(tol=1e-10, max_iter=20_000)
    batched = nuclear_norm_fit(X, a, y, 2, rank=1, full_output=True, **kw)
    assert batched.estimate.shape == (3, 2, 7, 6)
    for b in range(3):
        single = nuclear_norm_fit(X[b], a[b], y[b], 2, rank=1, full_output=True, **kw)
        np.testing.assert_allclose(batched.penalty[b], single.penalty, rtol=1e-8)
        np.testing.assert_allclose(batched.estimate[b], single.estimate, rtol=0, atol=1e-7)


@pytest.mark.parametrize("rank", [None, 1])
def test_zero_weights_equal_dropping_rounds(rank):
    truth, X, a, y = _problem(4, 300, 7, 6, 1)
    half = 180
    w = np.ones(300)
    w[half:] = 0.0
    kw = dict(tol=1e-10, max_iter=20_000, rank=rank)
    weighted = nuclear_norm_fit(X, a, y, 2, weights=w, full_output=True, **kw)
    dropped = nuclear_norm_fit(X[:half], a[:half], y[:half], 2, full_output=True, **kw)
    np.testing.assert_allclose(weighted.penalty, dropped.penalty, rtol=1e-8)
    np.testing.assert_allclose(weighted.estimate, dropped.estimate, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(weighted.n_obs, dropped.n_obs)


def test_weights_are_honoured_and_scale_free():
    truth, X, a, y = _problem(5, 300, 7, 6, 1)
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 3.0, 300)
    base = nuclear_norm_fit(X, a, y, 2, weights=w, penalty=0.05, tol=1e-10, max_iter=20_000)
    scaled = nuclear_norm_fit(X, a, y, 2, weights=7 * w, penalty=0.05, tol=1e-10, max_iter=20_000)
    plain = nuclear_norm_fit(X, a, y, 2, penalty=0.05, tol=1e-10, max_iter=20_000)
    np.testing.assert_allclose(base, scaled, atol=1e-7)
    assert np.abs(base - plain).max() > 1e-4  # the weights do change the fit


def test_completion_context():
    rng = np.random.default_rng(6)
    d1, d2, r, n = 12, 10, 1, 1500
    truth = np.stack([np.sqrt(d1 * d2) * _low_rank(rng, d1, d2, r) for _ in range(2)])
    rows, cols = rng.integers(0, d1, n), rng.integers(0, d2, n)
    X = np.zeros((n, d1, d2))
    X[np.arange(n), rows, cols] = 1.0
    a = rng.integers(0, 2, n)
    y = truth[a, rows, cols] + 0.1 * rng.standard_normal(n)
    fit = nuclear_norm_fit(X, a, y, 2, context="completion", rank=r, full_output=True)
    rel = np.linalg.norm(_truncate(fit.estimate, r) - truth, axis=(1, 2)) / np.linalg.norm(
        truth, axis=(1, 2)
    )
    assert np.all(rel < 0.05), rel
    with pytest.raises(ValueError, match="one-hot"):
        not_one_hot = X + 0.5 * (np.arange(n) == 3)[:, None, None]
        nuclear_norm_fit(not_one_hot, a, y, 2, context="completion")


def test_empty_arm_warns_and_returns_zero():
    truth, X, a, y = _problem(7, 100, 5, 4, 1)
    a = np.zeros_like(a)
    with pytest.warns(RuntimeWarning, match="arm 1"):
        M = nuclear_norm_fit(X, a, y, 2)
    assert np.all(M[1] == 0) and np.abs(M[0]).max() > 0


def test_one_entry_point_returns_the_array_or_the_full_result():
    """full_output=True gives the proximal solver's NuclearNormFit, whose estimate is the
    array the same call returns without it; the factored solver has no diagnostics."""
    from agents.warm_start.proximal import NuclearNormFit

    truth, X, a, y = _problem(12, 300, 7, 6, 1)
    fit = nuclear_norm_fit(X, a, y, 2, rank=1, full_output=True)
    assert isinstance(fit, NuclearNormFit) and fit.refit
    np.testing.assert_array_equal(
        fit.estimate, nuclear_norm_fit(X, a, y, 2, rank=1, solver="proximal")
    )
    factored = nuclear_norm_fit(X, a, y, 2, rank=1)
    np.testing.assert_array_equal(factored, nuclear_norm_fit(X, a, y, 2, rank=1, solver="factored"))
    assert np.abs(factored - fit.estimate).max() > 0  # rank given: factored by default
    with pytest.raises(ValueError, match="full_output"):
        nuclear_norm_fit(X, a, y, 2, rank=1, solver="factored", full_output=True)
    with pytest.raises(ValueError, match="needs rank"):
        nuclear_norm_fit(X, a, y, 2, solver="factored")


@pytest.mark.parametrize(
    ("change", "text"),
    [
        (dict(X=np.ones((10, 4))), "shape"),
        (dict(actions=np.full(20, 2)), "actions must be in [0, 2), got 2 at index (0,)"),
        (dict(actions=np.zeros(20)), "float64"),
        (dict(actions=np.zeros(19, dtype=int)), "(19,)"),
        (dict(rewards=np.r_[np.zeros(5), np.nan, np.zeros(14)]), "nan at index (5,)"),
        (dict(weights=-np.ones(20)), "-1.0"),
        (dict(n_actions=0), "n_actions"),
        (dict(context="dense"), "'dense'"),
        (dict(penalty=-1.0), "penalty"),
        (dict(rank=9), "rank"),
        (dict(penalty_scale=0.0), "penalty_scale"),
    ],
)
def test_bad_input(change, text):
    rng = np.random.default_rng(8)
    args = dict(
        X=rng.standard_normal((20, 5, 4)),
        actions=rng.integers(0, 2, 20),
        rewards=rng.standard_normal(20),
        n_actions=2,
    )
    kwargs = {}
    for key, value in change.items():
        (args if key in args else kwargs)[key] = value
    with pytest.raises(ValueError) as info:
        nuclear_norm_fit(args["X"], args["actions"], args["rewards"], args["n_actions"], **kwargs)
    assert text in str(info.value)


def test_bad_batched_input_names_trial_and_round():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((2, 20, 5, 4))
    X[1, 7, 0, 0] = np.inf
    with pytest.raises(ValueError, match="trial 1"):
        nuclear_norm_fit(X, np.zeros((2, 20), dtype=int), np.zeros((2, 20)), 2)
    X[1, 7, 0, 0] = 0.0
    acts = np.zeros((2, 20), dtype=int)
    acts[1, 3] = 5
    with pytest.raises(ValueError, match=r"index \(1, 3\)"):
        nuclear_norm_fit(X, acts, np.zeros((2, 20)), 2)


# --------------------------------------------------------------------------- buffer
def test_buffer_matches_direct_fit_and_float32_is_harmless():
    truth, X, a, y = _problem(10, 400, 8, 6, 1)
    w = np.where(a == 0, 2.0, 1.0)
    buf32 = WarmStartBuffer(8, 6, 2, length=400)
    buf64 = WarmStartBuffer(8, 6, 2, length=400, dtype=np.float64)
    for i in range(400):
        assert not buf32.full
        buf32.add(X[i], int(a[i]), float(y[i]), weight=w[i])
        buf64.add(X[i], int(a[i]), float(y[i]), weight=w[i])
    assert buf32.full and buf32.n == 400
    with pytest.raises(RuntimeError, match="full"):
        buf32.add(X[0], 0, 0.0)
    direct = nuclear_norm_fit(X, a, y, 2, weights=w, rank=1)
    np.testing.assert_array_equal(buf64.fit(rank=1), direct)
    np.testing.assert_allclose(buf32.fit(rank=1), direct, atol=1e-4)
    assert buf32._X.dtype == np.float32


def test_buffer_batched_and_validation():
    truth, X, a, y = _problem(11, 120, 6, 5, 1, lead=(2,))
    buf = WarmStartBuffer(6, 5, 2, length=150, n_trials=2)
    for i in range(120):
        buf.add(X[:, i], a[:, i], y[:, i])
    before = buf.state_dict()
    bad_X = X[:, 0].copy()
    bad_X[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="trial 1"):
        buf.add(bad_X, a[:, 0], y[:, 0])
    with pytest.raises(ValueError, match="action"):
        buf.add(X[:, 0], np.array([0, 2]), y[:, 0])
    with pytest.raises(ValueError, match="weight"):
        buf.add(X[:, 0], a[:, 0], y[:, 0], weight=-1.0)
    after = buf.state_dict()
    assert after["n"] == before["n"] == 120
    assert all(np.array_equal(after[k], before[k]) for k in ("X", "actions", "rewards"))
    M = buf.fit(rank=1, tol=1e-10, max_iter=20_000)
    assert M.shape == (2, 2, 6, 5)
    direct = nuclear_norm_fit(X.astype(np.float32), a, y, 2, rank=1, tol=1e-10, max_iter=20_000)
    np.testing.assert_allclose(M, direct, atol=1e-10)
    clone = WarmStartBuffer(6, 5, 2, length=150, n_trials=2)
    clone.load_state_dict(buf.state_dict())
    np.testing.assert_array_equal(clone.fit(rank=1, tol=1e-10, max_iter=20_000), M)
    full = buf.fit(rank=1, tol=1e-10, max_iter=20_000, full_output=True)
    np.testing.assert_array_equal(
        full.estimate, buf.fit(rank=1, solver="proximal", tol=1e-10, max_iter=20_000)
    )
    assert full.n_obs.shape == (2, 2)
    buf.clear()
    assert buf.n == 0 and not buf.full
    with pytest.raises(RuntimeError, match="empty"):
        buf.fit()


def test_released_storage_is_reused_only_when_asked():
    """reuse_buffer_memory(True) hands a released buffer's storage to the next buffer of the
    same shape (the study workers' setting); by default release frees it."""
    from agents.warm_start import memory_pool, reuse_buffer_memory

    assert reuse_buffer_memory is memory_pool.reuse_buffer_memory

    assert reuse_buffer_memory(False) is False  # the default is off
    first = WarmStartBuffer(4, 3, 2, length=5, n_trials=2)
    storage = first._X
    first.release()
    assert WarmStartBuffer(4, 3, 2, length=5, n_trials=2)._X is not storage
    with pytest.raises(RuntimeError, match="full"):
        first.add(np.ones((2, 4, 3)), np.zeros(2, dtype=int), np.zeros(2))
    try:
        assert reuse_buffer_memory(True) is False
        first = WarmStartBuffer(4, 3, 2, length=5, n_trials=2)
        storage = first._X
        first.release()
        assert WarmStartBuffer(4, 3, 2, length=6, n_trials=2)._X is not storage  # shape
        second = WarmStartBuffer(4, 3, 2, length=5, n_trials=2)
        assert second._X is storage and second.n == 0
    finally:
        assert reuse_buffer_memory(False) is True
