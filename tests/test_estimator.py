"""Tests of agents.estimator.LowRankSGD's arithmetic (Algorithm 1, eq. (8), Lemma 2.1,
Algorithm 4); its interface (per-round API, refusals, saved state) is in test_estimator_api.py."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import states_equal

from agents.estimator import LowRankSGD
from lrbandit_gym.experiments.bench.estimator import bench_estimator, naive_sgd_step


def _low_rank(rng, d1, d2, r, scale=1.0):
    Q_U = np.linalg.qr(rng.standard_normal((d1, r)))[0]
    Q_V = np.linalg.qr(rng.standard_normal((d2, r)))[0]
    return scale * Q_U @ Q_V.T


def _context(rng, d1, d2, context):
    if context == "gaussian":
        return rng.standard_normal((d1, d2))
    X = np.zeros((d1, d2))
    X[rng.integers(d1), rng.integers(d2)] = 1.0
    return X


def _pmf(rng, K):
    p = rng.uniform(0.2, 1.0, K)
    return p / p.sum()


# --------------------------------------------------------------------------- eq. (8)
@pytest.mark.parametrize(
    ("context", "propensities", "K"),
    [
        ("gaussian", "known", 2),
        ("completion", "known", 2),
        ("gaussian", "unknown", 2),
        ("gaussian", "known", 3),
        ("completion", "unknown", 3),
    ],
)
def test_steps_match_naive_renormalised_update(context, propensities, K):
    """Each step equals eq. (8) computed with a full SVD of U V^T (Lemma 2.1)."""
    rng = np.random.default_rng(1)
    d1, d2, r = 9, 7, 3  # non-square: catches X vs X^T mix-ups
    # step_offset=1 and a fast decay make eta depend on t (or on s_a for Algorithm 4).
    step_scale = 0.05 if context == "gaussian" else 0.05 / (d1 * d2)
    est = LowRankSGD(
        d1,
        d2,
        r,
        K,
        context=context,
        propensities=propensities,
        step_scale=step_scale,
        step_offset=1,
        step_decay=0.6,
    )
    truth = np.stack([_low_rank(rng, d1, d2, r) for _ in range(K)])
    M_init = truth + 0.3 * rng.standard_normal(truth.shape)
    est.initialize(M_init)
    c = 1.0 if context == "gaussian" else float(d1 * d2)
    assert est.c == c

    # Reference: eq. (10) then eq. (8) with a full SVD renormalisation every round.
    ref = np.empty_like(M_init)
    for a in range(K):
        W_U, s, W_Vt = np.linalg.svd(M_init[a])
        ref[a] = (W_U[:, :r] * s[:r]) @ W_Vt[:r]
    np.testing.assert_allclose(est.estimates, ref, rtol=0, atol=1e-12)
    counts = np.zeros(K, dtype=int)
    for t in range(1, 31):
        X = _context(rng, d1, d2, context)
        p = _pmf(rng, K)
        a = int(rng.integers(K))
        y = float(np.sum(truth[a] * X) + 0.1 * rng.standard_normal())
        counts[a] += 1
        if propensities == "known":
            step = est.step_size(t) * c / p[a]
        else:
            step = est.step_size(counts[a]) * c
        U, V = naive_sgd_step(ref[a], X, y, step, r)
        expected_res = y - np.sum(ref[a] * X)
        ref[a] = U @ V.T
        res = est.update(X, a, y, p)
        assert res == pytest.approx(expected_res, rel=1e-10, abs=1e-12)
        scale = np.abs(ref).max()
        assert np.abs(est.estimates - ref).max() <= 1e-10 * scale
    assert est.t == 30
    np.testing.assert_array_equal(est.counts, counts)


def test_step_size_formula():
    est = LowRankSGD(4, 4, 1, step_scale=0.1, step_offset=300, step_decay=0.99)
    assert est.step_size(1) == pytest.approx(0.1 * 300**-0.99)
    assert est.step_size(300) == est.step_size(1)
    assert est.step_size(1000) == pytest.approx(0.1 * 1000**-0.99)
    np.testing.assert_allclose(est.step_size([1, 1000]), [est.step_size(1), est.step_size(1000)])


def test_unknown_propensities_ignore_weight_and_use_arm_count():
    """Algorithm 4: propensities do not change the step; eta uses s_a, not t."""
    rng = np.random.default_rng(2)
    d, r = 6, 2
    M_init = np.stack([_low_rank(rng, d, d, r) for _ in range(2)])
    kw = dict(propensities="unknown", step_offset=1, step_decay=0.9, step_scale=0.05)
    a_est, b_est = LowRankSGD(d, d, r, **kw), LowRankSGD(d, d, r, **kw)
    a_est.initialize(M_init)
    b_est.initialize(M_init)
    for _ in range(5):
        X = rng.standard_normal((d, d))
        a_est.update(X, 0, 1.0, np.array([0.9, 0.1]))
        b_est.update(X, 0, 1.0)  # propensities may be omitted
    assert states_equal(a_est.state_dict(), b_est.state_dict())
    # Arm 1 was never pulled: its first update uses s_1 = 1, i.e. the largest step.
    X = rng.standard_normal((d, d))
    before = a_est.estimates[1]
    a_est.update(X, 1, 1.0)
    U, V = naive_sgd_step(before, X, 1.0, a_est.step_size(1), r)
    np.testing.assert_allclose(a_est.estimates[1], U @ V.T, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- invariants
def test_factors_stay_balanced():
    rng = np.random.default_rng(3)
    d1, d2, r, K = 12, 8, 3, 3
    truth = np.stack([_low_rank(rng, d1, d2, r) for _ in range(K)])
    est = LowRankSGD(d1, d2, r, K, step_offset=10)
    est.initialize(truth + 0.2 * rng.standard_normal((K, d1, d2)))
    for _ in range(200):
        X = rng.standard_normal((d1, d2))
        a = int(rng.integers(K))
        est.update(X, a, np.sum(truth[a] * X) + 0.1 * rng.standard_normal(), np.full(K, 1 / K))
    U, V = est.factors
    assert U.shape == (K, d1, r) and V.shape == (K, d2, r)
    for a in range(K):
        G_U, G_V = U[a].T @ U[a], V[a].T @ V[a]
        D = np.diag(G_U)
        tol = 1e-10 * D.max()
        np.testing.assert_allclose(G_U, np.diag(D), atol=tol)
        np.testing.assert_allclose(G_V, np.diag(D), atol=tol)
        assert np.all(np.diff(D) <= tol)  # decreasing
        np.testing.assert_allclose(est.singular_values[a], D, rtol=1e-10)
        np.testing.assert_allclose(
            est.singular_values[a],
            np.linalg.svd(est.estimates[a], compute_uv=False)[:r],
            rtol=1e-10,
        )


def test_balance_routes_agree_and_rank_deficient_pairs_take_the_robust_one(awkward_factor_pairs):
    """The Cholesky route of balance and the eigendecomposition route give the same
    balanced pairs; rank-deficient or tiny factors go the robust way, chosen per pair so a
    batch equals its pairs one by one bit for bit."""
    from agents.estimator.balancing import balance, balance_eig

    N, r = 40, 3
    U, V = awkward_factor_pairs(N)
    Ub, Vb, sv = balance(U, V)
    gram = np.stack([U.transpose(0, 2, 1) @ U, V.transpose(0, 2, 1) @ V])
    Ue, Ve, se = balance_eig(U, V, gram)
    np.testing.assert_allclose(sv, se, rtol=1e-9, atol=1e-12 * se.max())
    prod = U @ V.transpose(0, 2, 1)
    for Ux, Vx in ((Ub, Vb), (Ue, Ve)):
        scale = np.abs(prod).max()
        np.testing.assert_allclose(Ux @ Vx.transpose(0, 2, 1), prod, atol=1e-12 * scale)
    ok = sv[:, -1] > 1e-6 * sv[:, 0]
    assert not ok[0] and not ok[1] and ok[2:].all()  # the rank-deficient pairs, found
    G_U, G_V = Ub.transpose(0, 2, 1) @ Ub, Vb.transpose(0, 2, 1) @ Vb
    diag = sv[:, :, None] * np.eye(r)
    np.testing.assert_allclose(G_U[ok], diag[ok], atol=1e-10 * sv.max())
    np.testing.assert_allclose(G_V[ok], diag[ok], atol=1e-10 * sv.max())
    assert np.all(np.diff(sv, axis=1) <= 0)
    for i in (0, 1, 2, 3):
        u1, v1, s1 = balance(U[i : i + 1], V[i : i + 1])
        np.testing.assert_array_equal(u1[0], Ub[i])
        np.testing.assert_array_equal(v1[0], Vb[i])
        np.testing.assert_array_equal(s1[0], sv[i])


def test_subspaces_and_predict():
    rng = np.random.default_rng(4)
    d1, d2, r, K = 10, 6, 2, 3
    est = LowRankSGD(d1, d2, r, K)
    est.initialize(rng.standard_normal((K, d1, d2)))
    for _ in range(20):
        est.update(rng.standard_normal((d1, d2)), int(rng.integers(K)), 0.3, np.full(K, 1 / K))
    Q_U, Q_V = est.subspaces()
    M = est.estimates
    for a in range(K):
        np.testing.assert_allclose(Q_U[a].T @ Q_U[a], np.eye(r), atol=1e-10)
        np.testing.assert_allclose(Q_V[a].T @ Q_V[a], np.eye(r), atol=1e-10)
        # The bases span the estimate's column and row spaces.
        np.testing.assert_allclose(Q_U[a] @ Q_U[a].T @ M[a], M[a], atol=1e-10)
        np.testing.assert_allclose(M[a] @ Q_V[a] @ Q_V[a].T, M[a], atol=1e-10)
    X = rng.standard_normal((d1, d2))
    np.testing.assert_allclose(est.predict(X), np.einsum("kij,ij->k", M, X), rtol=1e-12)


def test_initialize_eq10_and_rank_deficient_warning():
    rng = np.random.default_rng(5)
    d1, d2, r = 8, 6, 2
    M = rng.standard_normal((2, d1, d2))
    est = LowRankSGD(d1, d2, r)
    assert not est.initialized
    est.initialize(M)
    assert est.initialized and est.t == 0
    for a in range(2):
        W_U, s, W_Vt = np.linalg.svd(M[a])
        np.testing.assert_allclose(est.estimates[a], (W_U[:, :r] * s[:r]) @ W_Vt[:r], atol=1e-12)
    with pytest.warns(RuntimeWarning, match="fewer than rank"):
        est.initialize(np.zeros((2, d1, d2)))


def test_use_before_initialize_raises():
    est = LowRankSGD(4, 3, 1)
    X = np.ones((4, 3))
    with pytest.raises(RuntimeError, match="initialize"):
        est.update(X, 0, 1.0, np.array([0.5, 0.5]))
    with pytest.raises(RuntimeError, match="warm start"):
        est.predict(X)


# --------------------------------------------------------------------------- batching
@pytest.mark.parametrize("propensities", ["known", "unknown"])
@pytest.mark.parametrize("step", ["absolute", "capped"])
def test_batched_equals_separate_unbatched(propensities, step):
    """Also with the scale-free step capped after a warm start (prior_rounds), whose
    unbatched path computes in scalars."""
    rng = np.random.default_rng(6)
    B, d1, d2, r, K = 5, 8, 6, 2, 3
    truth = np.stack([[_low_rank(rng, d1, d2, r) for _ in range(K)] for _ in range(B)])
    M_init = truth + 0.3 * rng.standard_normal((B, K, d1, d2))
    kw = dict(propensities=propensities)
    if step == "absolute":
        kw.update(step_scale=0.01, step_offset=2, step_decay=0.7)
    prior = 500 if step == "capped" else 0
    batched = LowRankSGD(d1, d2, r, K, n_trials=B, **kw)
    batched.initialize(M_init, prior_rounds=prior)
    singles = [LowRankSGD(d1, d2, r, K, **kw) for _ in range(B)]
    for b, est in enumerate(singles):
        est.initialize(M_init[b], prior_rounds=prior)
    for _ in range(40):
        X = rng.standard_normal((B, d1, d2))
        a = rng.integers(0, K, B)  # different arms in different trials
        y = np.einsum("bij,bij->b", truth[np.arange(B), a], X) + 0.1 * rng.standard_normal(B)
        p = 0.5 / K + 0.5 * rng.dirichlet(np.ones(K), B)
        res = batched.update(X, a, y, p)
        for b, est in enumerate(singles):
            assert est.update(X[b], int(a[b]), float(y[b]), p[b]) == res[b]
    X = rng.standard_normal((B, d1, d2))
    pred = batched.predict(X)
    U, V = batched.factors
    for b, est in enumerate(singles):
        Ub, Vb = est.factors
        assert np.array_equal(U[b], Ub) and np.array_equal(V[b], Vb)
        assert np.array_equal(batched.counts[b], est.counts)
        np.testing.assert_allclose(pred[b], est.predict(X[b]), rtol=1e-13)
    assert batched.estimates.shape == (B, K, d1, d2)
    assert batched.subspaces()[0].shape == (B, K, d1, r)


def test_batched_initialize_broadcasts_one_init():
    rng = np.random.default_rng(7)
    M = rng.standard_normal((2, 5, 4))
    est = LowRankSGD(5, 4, 2, n_trials=3)
    est.initialize(M)
    E = est.estimates
    assert E.shape == (3, 2, 5, 4)
    assert np.array_equal(E[0], E[2])


# --------------------------------------------------------------------------- long runs
def _paper_run(n_rounds, seed=0):
    """Unbatched epsilon-greedy run in the paper's setting from a sigma-close start."""
    rng = np.random.default_rng(seed)
    d, r, K, sigma = 50, 3, 2, 0.1
    truth = np.stack([_low_rank(rng, d, d, r) for _ in range(K)])
    est = LowRankSGD(d, d, r, K)
    noise = rng.standard_normal(truth.shape)
    est.initialize(truth + 0.5 * sigma * noise / np.linalg.norm(noise, axis=(1, 2))[:, None, None])
    chunk = 1000
    for _ in range(n_rounds // chunk):
        X = rng.standard_normal((chunk, d, d))
        means = np.einsum("kij,nij->nk", truth, X)
        coins = rng.random(chunk)
        noise = sigma * rng.standard_normal(chunk)
        for i in range(chunk):
            greedy = int(np.argmax(est.predict(X[i])))
            p = np.full(K, 0.05)
            p[greedy] = 0.95
            a = greedy if coins[i] < 0.95 else 1 - greedy
            est.update(X[i], a, means[i, a] + noise[i], p)
    err = np.linalg.norm(est.estimates - truth, axis=(1, 2))
    return est, err


def test_stable_and_accurate_over_5k_rounds():
    est, err = _paper_run(5_000)
    U, V = est.factors
    assert np.isfinite(U).all() and np.isfinite(V).all()
    assert np.all(err < 0.1), err


@pytest.mark.slow
@pytest.mark.soak
def test_no_overflow_over_1e5_rounds():
    est, err = _paper_run(100_000, seed=1)
    U, V = est.factors
    assert np.isfinite(U).all() and np.isfinite(V).all()
    assert np.all(err < 0.1), err


def test_bench_estimator_smoke():
    out = bench_estimator(d=40, rank=2, n_rounds=30, n_naive_rounds=5)
    assert set(out) >= {"lowrank_s_per_round", "naive_s_per_round", "speedup", "max_rel_diff"}
    assert out["max_rel_diff"] < 1e-10  # both implementations computed the same estimates
    assert out["speedup"] == out["naive_s_per_round"] / out["lowrank_s_per_round"]
