"""Tests for the exploration-only baseline (Appendix B.1, Table 3)."""

from __future__ import annotations

import numpy as np
import pytest

from inference.cores.exploration_only import ExplorationOnlyInference
from inference.cores.linear_form import LinearFormInference
from inference.results import InsufficientDataWarning


def _projector(F):
    return F @ np.linalg.pinv(F.T @ F) @ F.T


def reference(history, targets, K):
    """Direct computation with weight 1{explored, a_t = i} K / epsilon_t (tangent G)."""
    names = list(targets)
    n = len(history)
    U0, V0 = history[0][0], history[0][1]
    d1, d2 = U0.shape[1], V0.shape[1]
    M_unbs = np.zeros((K, d1, d2))
    sigma2 = np.zeros(K)
    S2 = np.zeros((K, len(names)))
    for U, V, X, a, y, explored, eps in history:
        for i in range(K):
            M = U[i] @ V[i].T
            w = float(explored and a == i) * K / eps
            res = y - np.sum(M * X)
            M_unbs[i] += M + w * res * X
            sigma2[i] += w * res**2
            IU, IV = np.eye(d1) - _projector(U[i]), np.eye(d2) - _projector(V[i])
            for k, name in enumerate(names):
                G = targets[name] - IU @ targets[name] @ IV
                S2[i, k] += w**2 * np.sum(G * X) ** 2
    return M_unbs / n, sigma2 / n, S2 / n


def make_history(rng, n, K, d1, d2, r, B=None):
    shape = () if B is None else (B,)
    U = rng.standard_normal(shape + (K, d1, r))
    V = rng.standard_normal(shape + (K, d2, r))
    hist = []
    for t in range(1, n + 1):
        eps = 0.5 * t**-0.2
        explored = rng.random(shape) < eps
        greedy = rng.integers(0, K, size=shape)
        a = np.where(explored, rng.integers(0, K, size=shape), greedy)
        X = rng.standard_normal(shape + (d1, d2))
        y = rng.standard_normal(shape)
        if B is None:
            a, explored, y = int(a), bool(explored), float(y)
        hist.append((U.copy(), V.copy(), X, a, y, explored, eps))
        idx = (a,) if B is None else (np.arange(B), a)
        U[idx] += 0.2 * rng.standard_normal(U[idx].shape)
        V[idx] += 0.2 * rng.standard_normal(V[idx].shape)
    return hist


def _targets(d1, d2):
    e = np.zeros((d1, d2))
    e[0, 0] = 1.0
    f = np.zeros((d1, d2))
    f[1, 2], f[2, 1] = 1.0, 2.0
    return {"e11": e, "f": f}


def test_online_equals_direct_computation():
    rng = np.random.default_rng(0)
    K, d1, d2, r = 2, 5, 4, 2
    targets = _targets(d1, d2)
    hist = make_history(rng, 40, K, d1, d2, r)
    inf = ExplorationOnlyInference(d1, d2, r, K, targets)
    for row in hist:
        inf.update(*row)
    M_unbs, sigma2, S2 = reference(hist, targets, K)
    for i in range(K):
        np.testing.assert_allclose(inf.debiased_mean(i), M_unbs[i], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(inf.sigma2, sigma2, rtol=1e-10)
    np.testing.assert_allclose(inf.S2, S2, rtol=1e-8)
    assert inf.n_pulls.sum() == sum(row[5] for row in hist)


def test_batched_equals_unbatched_and_scalar_epsilon():
    rng = np.random.default_rng(1)
    B, K, d1, d2, r = 3, 3, 5, 4, 1
    targets = _targets(d1, d2)
    hist = make_history(rng, 20, K, d1, d2, r, B=B)
    batched = ExplorationOnlyInference(d1, d2, r, K, targets, n_trials=B)
    singles = [ExplorationOnlyInference(d1, d2, r, K, targets) for _ in range(B)]
    for U, V, X, a, y, explored, eps in hist:
        batched.update(U, V, X, a, y, explored, eps)  # scalar epsilon for every trial
        for b, single in enumerate(singles):
            single.update(U[b], V[b], X[b], int(a[b]), float(y[b]), bool(explored[b]), eps)
    for b, single in enumerate(singles):
        np.testing.assert_allclose(batched.sigma2[b], single.sigma2, rtol=1e-12)
        np.testing.assert_allclose(batched.S2[b], single.S2, rtol=1e-10)
        np.testing.assert_allclose(
            batched.debiased_mean(0)[b], single.debiased_mean(0), rtol=1e-12, atol=1e-14
        )


def test_all_exploration_equals_main_method_with_uniform_propensities():
    """epsilon = 1 and every round explored is the main method with pi = 1/K."""
    rng = np.random.default_rng(2)
    K, d1, d2, r = 3, 5, 4, 2
    targets = _targets(d1, d2)
    hist = make_history(rng, 15, K, d1, d2, r)
    expl = ExplorationOnlyInference(d1, d2, r, K, targets, projection="paper")
    main = LinearFormInference(d1, d2, r, K, targets, projection="paper", design_variance="pulled")
    for U, V, X, a, y, _, _ in hist:
        expl.update(U, V, X, a, y, True, 1.0)
        main.update(U, V, X, a, y, np.full(K, 1.0 / K))
    np.testing.assert_allclose(expl.sigma2, main.sigma2, rtol=1e-12)
    np.testing.assert_allclose(expl.S2, main.S2, rtol=1e-12)
    a, b = expl.interval(1, "f"), main.interval(1, "f")
    assert (a.low, a.high) == pytest.approx((b.low, b.high), rel=1e-10)
    assert "exploration-only" in a.method


def test_table3_efficiency_loss():
    """epsilon-greedy (epsilon = 0.1, K = 2): both estimators are unbiased and calibrated;
    the exploration-only interval is ~sqrt(20 / 10.5) ~ 1.38 times longer (Table 3: 1.3-1.4)."""
    rng = np.random.default_rng(3)
    B, K, d, r, n, sigma = 200, 2, 20, 2, 400, 0.1
    M = np.stack(
        [
            np.linalg.qr(rng.standard_normal((d, r)))[0]
            @ np.linalg.qr(rng.standard_normal((d, r)))[0].T
            for _ in range(K)
        ]
    )
    # a fixed estimate close to the truth (rank r, factor form)
    U = np.empty((K, d, r))
    V = np.empty((K, d, r))
    for a in range(K):
        u, s, vt = np.linalg.svd(M[a] + 0.003 * rng.standard_normal((d, d)))
        U[a], V[a] = u[:, :r] * np.sqrt(s[:r]), vt[:r].T * np.sqrt(s[:r])
    Mhat = U @ V.swapaxes(1, 2)
    T = np.zeros((d, d))
    T[0, 0] = 1.0
    main = LinearFormInference(d, d, r, K, {"T": T}, n_trials=B)
    expl = ExplorationOnlyInference(d, d, r, K, {"T": T}, n_trials=B)
    Ub, Vb = np.broadcast_to(U, (B, *U.shape)), np.broadcast_to(V, (B, *V.shape))
    trials = np.arange(B)
    lin = np.concatenate([M.reshape(K, -1), Mhat.reshape(K, -1)]).T
    eps = 0.1
    for _ in range(n):
        X = rng.standard_normal((B, d, d))
        proj = np.concatenate([X.reshape(B, -1)[i : i + 20] @ lin for i in range(0, B, 20)])
        greedy = np.argmax(proj[:, K:], axis=1)
        explored = rng.random(B) < eps
        a = np.where(explored, rng.integers(0, K, B), greedy)
        p = np.full((B, K), eps / K)
        p[trials, greedy] += 1 - eps
        y = proj[trials, a] + sigma * rng.standard_normal(B)
        main.update(Ub, Vb, X, a, y, p)
        expl.update(Ub, Vb, X, a, y, explored, eps)
    truth = M[1, 0, 0]
    ours, base = main.interval(1, "T"), expl.interval(1, "T")
    ratio = np.median(base.width) / np.median(ours.width)
    assert 1.2 < ratio < 1.6, ratio
    for ci in (ours, base):
        z = (ci.estimate - truth) / ci.standard_error
        assert abs(z.mean()) < 0.3 and 0.65 < z.var() < 1.5, (z.mean(), z.var())
    mse_ratio = np.mean((base.estimate - truth) ** 2) / np.mean((ours.estimate - truth) ** 2)
    assert 1.3 < mse_ratio < 3.0, mse_ratio


def test_no_exploration_pull_warns():
    rng = np.random.default_rng(4)
    inf = ExplorationOnlyInference(5, 4, 1, 2, _targets(5, 4))
    for U, V, X, a, y, _, eps in make_history(rng, 5, 2, 5, 4, 1):
        inf.update(U, V, X, a, y, False, eps)
    with pytest.warns(InsufficientDataWarning, match="at least 1 more exploration pull of arm 0"):
        ci = inf.interval(0, "e11")
    assert np.isnan(ci.low)


@pytest.mark.parametrize(
    ("arg", "value", "match"),
    [
        ("explored", "yes", "explored"),
        ("explored", 2, "explored"),
        ("explored", np.array([True]), "explored"),
        ("epsilon", 0.0, "epsilon"),
        ("epsilon", 1.5, "epsilon"),
        ("epsilon", float("nan"), "epsilon"),
        ("reward", float("nan"), "reward"),
        ("action", 5, "action"),
    ],
)
def test_bad_update_raises_and_leaves_state_unchanged(arg, value, match):
    rng = np.random.default_rng(5)
    inf = ExplorationOnlyInference(5, 4, 1, 2, _targets(5, 4))
    hist = make_history(rng, 4, 2, 5, 4, 1)
    for row in hist[:3]:
        inf.update(*row)
    before = inf.state_dict()
    U, V, X, a, y, explored, eps = hist[3]
    kw = dict(U=U, V=V, X=X, action=a, reward=y, explored=explored, epsilon=eps)
    kw[arg] = value
    with pytest.raises(ValueError, match=match):
        inf.update(**kw)
    after = inf.state_dict()
    for key, val in before.items():
        if isinstance(val, np.ndarray):
            assert val.tobytes() == after[key].tobytes(), key
        else:
            assert val == after[key], key


def test_state_dict_is_not_interchangeable_with_main_method():
    t = _targets(5, 4)
    state = ExplorationOnlyInference(5, 4, 1, 2, t).state_dict()
    with pytest.raises(ValueError, match="kind"):
        LinearFormInference(5, 4, 1, 2, t).load_state_dict(state)
