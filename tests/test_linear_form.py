"""Tests for :class:`inference.linear_form.LinearFormInference` (Section 3, docs/method.md §4).

* online == batch: the running sums equal a direct numpy computation that forms every
  ``M_hat_{i,t-1}`` and every d x d projector at every round;
* batched == B unbatched objects;
* a statistical check in the paper's setting (d = 50, r = 3, sigma = 0.1, T1, T2) with a
  fixed, predictable estimate and epsilon-greedy propensities, with negative controls;
* warnings on insufficient data and every kind of bad input.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.special import ndtri

from inference.linear_form import LinearFormInference
from inference.linear_form_round import PulledEstimate
from inference.results import InsufficientDataWarning, IntervalEstimate
from lrbandit_gym.rounds import Round

# ----------------------------------------------------------------------------- reference


def _projector(F: np.ndarray) -> np.ndarray:
    """``F (F^T F)^+ F^T``, the orthogonal projector onto ``col(F)`` (d x d, the slow way)."""
    return F @ np.linalg.pinv(F.T @ F) @ F.T


def reference(history, targets, *, c=1.0, projection="tangent"):
    """Direct computation of M^unbs, sigma^2, S^2 from the stored history.

    ``history`` is a list of ``(U, V, X, a, y, p)`` for one bandit; every estimate, residual
    and projector is formed from scratch at every round for every arm.
    """
    U0 = history[0][0]
    K, d1, _ = U0.shape
    d2 = history[0][1].shape[1]
    names = list(targets)
    n = len(history)
    M_unbs = np.zeros((K, d1, d2))
    sigma2 = np.zeros(K)
    S2 = np.zeros((K, len(names)))
    for U, V, X, a, y, p in history:
        for i in range(K):
            M = U[i] @ V[i].T
            res = y - np.sum(M * X)
            ind = float(a == i)
            M_unbs[i] += M + c * ind / p[i] * res * X
            sigma2[i] += ind / p[i] * res**2
            PU, PV = _projector(U[i]), _projector(V[i])
            IU, IV = np.eye(d1) - PU, np.eye(d2) - PV
            for k, name in enumerate(names):
                T = targets[name]
                if projection == "paper":
                    G = IU @ T @ PV + PU @ T @ IV
                else:
                    G = T - IU @ T @ IV
                S2[i, k] += ind / p[i] ** 2 * c**2 * np.sum(G * X) ** 2
    return M_unbs / n, sigma2 / n, S2 / n


def truncate(M: np.ndarray, r: int) -> np.ndarray:
    u, s, vt = np.linalg.svd(M)
    return (u[:, :r] * s[:r]) @ vt[:r]


def one_step_reference(M_unbs: np.ndarray, U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``M̂ + P_T̂(M^unbs − M̂)`` with dense projectors ``P_U = U U⁺`` (the naive form)."""
    M_hat = U @ V.T
    P_U, P_V = U @ np.linalg.pinv(U), V @ np.linalg.pinv(V)
    E = M_unbs - M_hat
    return M_hat + P_U @ E + E @ P_V - P_U @ E @ P_V


def make_history(rng, n, K, d1, d2, r, *, completion=False, B=None):
    """A stream whose factors change like an SGD agent's (the previous pulled arm moves),
    with an all-zero start for arm 1, a rank-deficient spell, and one round where a
    non-pulled arm also changes (to exercise the change detection)."""
    shape = () if B is None else (B,)
    U = rng.standard_normal(shape + (K, d1, r))
    V = rng.standard_normal(shape + (K, d2, r))
    U[..., 1, :, :] = 0.0
    V[..., 1, :, :] = 0.0
    hist = []
    prev = None
    for t in range(n):
        if prev is not None:  # the previous round's pulled arm moves
            idx = (np.arange(B), prev) if B is not None else (prev,)
            U[idx] += 0.3 * rng.standard_normal(U[idx].shape)
            V[idx] += 0.3 * rng.standard_normal(V[idx].shape)
        if t == 5:  # a non-pulled arm moves too, and one arm turns rank-deficient
            U[..., 0, :, :] += 0.1
            V[..., 2, :, -1] = 0.0
        if completion:
            X = np.zeros(shape + (d1, d2))
            j = rng.integers(0, d1, size=shape)
            k = rng.integers(0, d2, size=shape)
            if B is None:
                X[j, k] = 1.0
            else:
                X[np.arange(B), j, k] = 1.0
        else:
            X = rng.standard_normal(shape + (d1, d2))
        p = rng.dirichlet(np.ones(K), size=shape if B is not None else None) * 0.8 + 0.2 / K
        if B is None:
            a = int(rng.choice(K, p=p))
        else:
            a = np.minimum((rng.random(B)[:, None] > np.cumsum(p, axis=1)).sum(axis=1), K - 1)
        y = rng.standard_normal(shape) if B is not None else float(rng.standard_normal())
        hist.append((U.copy(), V.copy(), X, a, y, p))
        prev = a
    return hist


def _targets(rng, d1, d2):
    e = np.zeros((d1, d2))
    e[0, 0] = 1.0
    contrast = np.zeros((d1, d2))
    contrast[0, 1], contrast[2, 0] = 1.0, -1.0
    return {"e11": e, "dense": rng.standard_normal((d1, d2)), "contrast": contrast}


# ----------------------------------------------------------------------------- online == batch


@pytest.mark.parametrize("projection", ["tangent", "paper"])
@pytest.mark.parametrize("context", ["gaussian", "completion"])
@pytest.mark.parametrize("dense_target", [True, False])
def test_online_equals_direct_computation(projection, context, dense_target):
    rng = np.random.default_rng(1)
    K, d1, d2, r, n = 3, 6, 5, 2, 40
    targets = _targets(rng, d1, d2)
    if not dense_target:
        del targets["dense"]
    hist = make_history(rng, n, K, d1, d2, r, completion=context == "completion")
    inf = LinearFormInference(d1, d2, r, K, targets, context=context, projection=projection)
    for U, V, X, a, y, p in hist:
        inf.update(U, V, X, a, y, p)
    c = d1 * d2 if context == "completion" else 1.0
    M_unbs, sigma2, S2 = reference(hist, targets, c=c, projection=projection)
    assert inf.n_obs == n
    for i in range(K):
        np.testing.assert_allclose(inf.debiased_mean(i), M_unbs[i], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(inf.projected(i), truncate(M_unbs[i], r), atol=1e-9)
    np.testing.assert_allclose(inf.sigma2, sigma2, rtol=1e-10)
    np.testing.assert_allclose(inf.S2, S2, rtol=1e-8, atol=1e-10 * S2.max())


@pytest.mark.parametrize("point_estimate", ["one-step", "projection"])
def test_interval_and_difference_formulas(point_estimate):
    rng = np.random.default_rng(2)
    K, d1, d2, r, n = 2, 6, 5, 2, 30
    targets = _targets(rng, d1, d2)
    hist = make_history(rng, n, 3, d1, d2, r)
    hist = [
        (U[:2], V[:2], X, min(a, 1), y, np.array([p[0], 1 - p[0]])) for U, V, X, a, y, p in hist
    ]
    inf = LinearFormInference(d1, d2, r, K, targets, point_estimate=point_estimate)
    for row in hist:
        inf.update(*row)
    M_unbs, sigma2, S2 = reference(hist, targets)
    U_last, V_last = hist[-1][0], hist[-1][1]
    if point_estimate == "one-step":  # around the estimates of the last round absorbed
        point = [one_step_reference(M_unbs[i], U_last[i], V_last[i]) for i in range(K)]
        assert np.linalg.matrix_rank(U_last[1] @ V_last[1].T) == r  # a rank-r reference
        np.testing.assert_allclose(inf.one_step(1), point[1], rtol=1e-9, atol=1e-12)
    else:
        point = [truncate(M_unbs[i], r) for i in range(K)]
    z = ndtri(0.5 + 0.9 / 2)
    for k, name in enumerate(targets):
        m = [np.sum(point[i] * targets[name]) for i in range(K)]
        se = [np.sqrt(sigma2[i] * S2[i, k] / n) for i in range(K)]
        ci = inf.interval(1, name, confidence_level=0.9)
        assert isinstance(ci, IntervalEstimate)
        assert ci.estimate == pytest.approx(m[1], rel=1e-9)
        assert ci.standard_error == pytest.approx(se[1], rel=1e-8)
        assert (ci.low, ci.high) == pytest.approx((m[1] - z * se[1], m[1] + z * se[1]), rel=1e-8)
        assert ci.n_obs == n and ci.confidence_level == 0.9
        diff = inf.difference(1, 0, name, confidence_level=0.9)
        se_d = np.sqrt((sigma2[0] * S2[0, k] + sigma2[1] * S2[1, k]) / n)
        assert diff.estimate == pytest.approx(m[1] - m[0], rel=1e-9)
        assert diff.standard_error == pytest.approx(se_d, rel=1e-8)
        assert diff.width == pytest.approx(2 * z * se_d, rel=1e-8)


def test_one_step_from_a_rank_deficient_estimate_is_the_projection():
    """An estimate of rank below r spans no rank-r tangent space: the one-step estimate is
    then M^proj (the one-step around M^proj itself), per trial."""
    rng = np.random.default_rng(5)
    B, K, d1, d2, r = 3, 2, 6, 5, 2
    targets = _targets(rng, d1, d2)
    inf = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    for _ in range(12):
        U, V = rng.standard_normal((B, K, d1, r)), rng.standard_normal((B, K, d2, r))
        U[1, 0, :, 1] = 0.0  # trial 1, arm 0: a rank-one estimate
        inf.update(
            U,
            V,
            rng.standard_normal((B, d1, d2)),
            rng.integers(0, K, B),
            rng.standard_normal(B),
            np.full((B, K), 1 / K),
        )
    step, proj = inf.one_step(0), inf.projected(0)
    np.testing.assert_array_equal(step[1], proj[1])
    assert not np.allclose(step[0], proj[0])
    full = [one_step_reference(inf.debiased_mean(0)[b], U[b, 0], V[b, 0]) for b in (0, 2)]
    np.testing.assert_allclose(step[[0, 2]], full, rtol=1e-9, atol=1e-12)
    est = inf.interval(0, "dense").estimate
    np.testing.assert_allclose(est, np.einsum("bij,ij->b", step, targets["dense"]), rtol=1e-12)


def test_batched_equals_unbatched():
    rng = np.random.default_rng(3)
    B, K, d1, d2, r, n = 4, 3, 6, 5, 2, 25
    targets = _targets(rng, d1, d2)
    hist = make_history(rng, n, K, d1, d2, r, B=B)
    batched = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    singles = [LinearFormInference(d1, d2, r, K, targets) for _ in range(B)]
    for U, V, X, a, y, p in hist:
        batched.update(U, V, X, a, y, p)
        for b, single in enumerate(singles):
            single.update(U[b], V[b], X[b], int(a[b]), float(y[b]), p[b])
    for b, single in enumerate(singles):
        for i in range(K):
            np.testing.assert_allclose(
                batched.debiased_mean(i)[b], single.debiased_mean(i), rtol=1e-12, atol=1e-12
            )
        np.testing.assert_allclose(batched.sigma2[b], single.sigma2, rtol=1e-12)
        np.testing.assert_allclose(batched.S2[b], single.S2, rtol=1e-9, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsufficientDataWarning)
        ci = batched.interval(0, "dense")
        assert ci.estimate.shape == (B,) and ci.n_obs.shape == (B,)
        for b, single in enumerate(singles):
            one = single.interval(0, "dense")
            np.testing.assert_allclose(
                [ci.estimate[b], ci.low[b], ci.high[b]],
                [one.estimate, one.low, one.high],
                rtol=1e-8,
                equal_nan=True,
            )


def test_state_dict_round_trip_continues_identically():
    rng = np.random.default_rng(4)
    K, d1, d2, r = 3, 6, 5, 2
    targets = _targets(rng, d1, d2)
    hist = make_history(rng, 30, K, d1, d2, r)
    full = LinearFormInference(d1, d2, r, K, targets, projection="paper")
    part = LinearFormInference(d1, d2, r, K, targets, projection="paper")
    for row in hist[:12]:
        full.update(*row)
        part.update(*row)
    resumed = LinearFormInference(d1, d2, r, K, targets, projection="paper")
    resumed.load_state_dict(part.state_dict())
    for row in hist[12:]:
        full.update(*row)
        resumed.update(*row)
    for key, value in full.state_dict().items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, resumed.state_dict()[key])
    other = LinearFormInference(d1, d2, r, K, targets, projection="tangent")
    with pytest.raises(ValueError, match="projection"):
        other.load_state_dict(full.state_dict())


def test_factor_changes_are_queued_per_changed_arm_and_flushed_in_blocks(monkeypatch):
    """With SGD-like factors only the previous pulled arm is queued (one factor pair per trial
    per round, not K), and the queue reaches the d1 x d2 accumulators in one GEMM every
    RING rounds instead of a product per round."""
    from inference.debiased_sum import RING, DebiasedSum

    rng = np.random.default_rng(5)
    B, K, d1, d2, r, n = 3, 4, 6, 5, 2, 40
    targets = _targets(rng, d1, d2)
    hist = make_history(rng, n, K, d1, d2, r, B=B)
    queued = []
    real = DebiasedSum.flush

    def spy(self):
        queued.append(int(np.count_nonzero(self.ring_U.any(axis=(2, 4)))))
        real(self)

    monkeypatch.setattr(DebiasedSum, "flush", spy)
    inf = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    for row in hist:
        inf.update(*row)
    # Factors change in every round after the first: two full queues in 40 rounds.
    assert len(queued) == (n - 1) // RING == 2
    # At most one pair per trial per round, plus the two extra arms moved in round 5.
    assert all(q <= B * RING + 2 * B for q in queued)
    assert queued[1] <= B * RING
    # The rest is still queued, and read out (see above).
    assert 0 < inf.state_dict()["ring_n"] < RING


def _balanced(rng, shape, d, r):
    """Factors with orthogonal columns and ``FᵀF = diag(s)``, as LowRankSGD stores them."""
    Q = np.linalg.qr(rng.standard_normal(shape + (d, r)))[0]
    return Q, rng.uniform(0.5, 2.0, shape + (r,))


def _balanced_stream(rng, n, B, K, d1, d2, r):
    """Rounds of balanced factors in which the previous round's pulled arm moves."""
    trials = np.arange(B)
    QU, s = _balanced(rng, (B, K), d1, r)
    QV, _ = _balanced(rng, (B, K), d2, r)
    U, V = QU * np.sqrt(s)[..., None, :], QV * np.sqrt(s)[..., None, :]
    rows, prev = [], None
    for _ in range(n):
        if prev is not None:
            qu, s_new = _balanced(rng, (B,), d1, r)
            qv, _ = _balanced(rng, (B,), d2, r)
            U[trials, prev] = qu * np.sqrt(s_new)[:, None, :]
            V[trials, prev] = qv * np.sqrt(s_new)[:, None, :]
            s[trials, prev] = s_new
        X = rng.standard_normal((B, d1, d2))
        p = rng.dirichlet(np.ones(K), size=B) * 0.8 + 0.2 / K
        a = rng.integers(0, K, B)
        rows.append((U.copy(), V.copy(), s.copy(), X, a, rng.standard_normal(B), p))
        prev = a
    return rows


@pytest.mark.parametrize("engine_name", ["numpy", "numba"])
def test_proposed_parts_equal_update(engine_name):
    """The wrappers' seam: changed_arms, then propose and commit a checked Round from the
    parts of balanced factors (the estimator's products) gives what update() gives, and
    position tracks the rounds absorbed."""
    from lrbandit_gym import engine

    if engine_name == "numba" and not engine.numba_available():
        pytest.skip("needs numba (fast extra)")
    rng = np.random.default_rng(8)
    B, K, d1, d2, r = 3, 3, 6, 5, 2
    targets = _targets(rng, d1, d2)
    full = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    parts = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    trials = np.arange(B)
    assert parts.position == (0, parts.position[1])
    with engine.use(engine_name):
        for t, (U, V, s, X, a, y, p) in enumerate(_balanced_stream(rng, 40, B, K, d1, d2, r)):
            full.update(U, V, X, a, y, p)
            mask = parts.changed_arms(U, V)
            assert mask.all() if t == 0 else (mask.sum(axis=1) <= 1).all()
            bi, ki = np.nonzero(mask)
            Ua, Va = U[trials, a], V[trials, a]
            products = (X @ Va, X.swapaxes(1, 2) @ Ua, s[trials, a])
            changes = (bi, ki, U[bi, ki], V[bi, ki])
            estimate = PulledEstimate(changes, Ua, Va, products, balanced=True)
            parts.commit(parts.propose(Round(X, a, y, p), estimate))
            assert parts.position[0] == t + 1
    tol = 1e-12 if engine_name == "numpy" else 1e-10
    for key, value in full.state_dict().items():
        if isinstance(value, np.ndarray) and value.dtype == float:
            np.testing.assert_allclose(parts.state_dict()[key], value, rtol=tol, atol=tol)
    for i in range(K):
        np.testing.assert_allclose(parts.debiased_mean(i), full.debiased_mean(i), rtol=tol)


def test_a_checked_round_and_its_two_phases_equal_update():
    rng = np.random.default_rng(9)
    B, K, d1, d2, r = 2, 3, 6, 5, 2
    targets = _targets(rng, d1, d2)
    hist = make_history(rng, 20, K, d1, d2, r, B=B)
    full = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    whole = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    phased = LinearFormInference(d1, d2, r, K, targets, n_trials=B)
    for U, V, X, a, y, p in hist:
        full.update(U, V, X, a, y, p)
        round_ = phased.check_round(X, a, y, p)
        whole.update(U, V, round_)
        phased.commit(phased.propose(round_, phased.estimate_parts(U, V, round_.actions)))
    for seam in (whole, phased):
        for key, value in full.state_dict().items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, seam.state_dict()[key])
        assert full.interval(1, "dense") == seam.interval(1, "dense")
    with pytest.raises(TypeError, match="takes no action"):
        whole.update(U, V, round_, a)
    with pytest.raises(ValueError, match="propensities"):
        whole.update(U, V, round_._replace(propensities=None))


def test_a_round_proposed_before_a_change_is_refused():
    rng = np.random.default_rng(10)
    inf = LinearFormInference(4, 3, 1, 2, {"T": np.eye(4, 3)})
    U, V = rng.standard_normal((2, 4, 1)), rng.standard_normal((2, 3, 1))
    round_ = inf.check_round(rng.standard_normal((4, 3)), 0, 0.5, np.array([0.5, 0.5]))
    terms = inf.propose(round_, inf.estimate_parts(U[None], V[None], round_.actions))
    inf.update(U, V, round_)
    with pytest.raises(RuntimeError, match="propose it again"):
        inf.commit(terms)


def test_position_changes_with_rounds_and_restored_state():
    rng = np.random.default_rng(10)
    K, d1, d2, r = 3, 6, 5, 2
    targets = _targets(rng, d1, d2)
    hist = make_history(rng, 4, K, d1, d2, r)
    inf = LinearFormInference(d1, d2, r, K, targets)
    start = inf.position
    inf.update(*hist[0])
    assert inf.position == (start[0] + 1, start[1])
    state = inf.state_dict()
    inf.update(*hist[1])
    inf.load_state_dict(state)
    assert inf.n_obs == 1 and inf.position != (1, start[1])  # same n, another stream


def test_interval_is_sigma_times_S_over_root_n():
    rng = np.random.default_rng(11)
    K, d1, d2, r = 3, 6, 5, 2
    targets = _targets(rng, d1, d2)
    inf = LinearFormInference(d1, d2, r, K, targets)
    for row in make_history(rng, 30, K, d1, d2, r):
        inf.update(*row)
    n = inf.n_obs
    for k, name in enumerate(targets):
        ci = inf.interval(2, name)
        se = np.sqrt(inf.sigma2[2]) * np.sqrt(inf.S2[2, k]) / np.sqrt(n)
        assert ci.standard_error == se
        diff = inf.difference(2, 0, name)
        var = inf.sigma2[[2, 0]] * inf.S2[[2, 0], k]
        assert diff.standard_error == pytest.approx(np.sqrt(var.sum() / n), rel=1e-15)


# ----------------------------------------------------------------------------- statistics
D, R, SIGMA, B_TRIALS, N_ROUNDS = 50, 3, 0.1, 300, 300


def _rowwise(A: np.ndarray, B: np.ndarray, chunk: int = 20) -> np.ndarray:
    """``A @ B`` in row blocks: small GEMMs stay single-threaded, so the product does not
    compete for cores with other processes."""
    return np.concatenate([A[i : i + chunk] @ B for i in range(0, A.shape[0], chunk)])


def _orth(rng, d, r):
    return np.linalg.qr(rng.standard_normal((d, r)))[0]


def _fixed_estimate_study(d, r, b_trials, n_rounds, seed, names=("near", "far")):
    """B independent bandits of size d x d, rank r, with two fixed, predictable estimates
    (an inference object for each of ``names``).

    The epsilon-greedy policy (pi = 0.95 for the greedy arm under the "near" estimate) acts
    on the near estimate; two inference objects are fed the same data with the near
    estimate (||M_hat - M||_F ~ 0.03, the regime of the theory) and with a "far" estimate
    (||M_hat - M||_F ~ 0.4, entry (1,1) off by ~0.1) whose bias only the debiasing removes.
    Any predictable estimate keeps <M^unbs, T> unbiased, whatever the policy used.
    """
    rng = np.random.default_rng(seed)
    K = 2
    Ut = np.stack([_orth(rng, d, r) for _ in range(K)])
    Vt = np.stack([_orth(rng, d, r) for _ in range(K)])
    M = Ut @ Vt.swapaxes(1, 2)

    def estimate(beta, noise):
        Uh, Vh = Ut.copy(), Vt.copy()
        for a in range(K):
            u0 = Ut[a, 0]
            Vh[a, 0] += (1 if a == 0 else -1) * beta * u0 / (u0 @ u0)
            Uh[a] += noise * rng.standard_normal((d, r)) / np.sqrt(d)
            Vh[a] += noise * rng.standard_normal((d, r)) / np.sqrt(d)
        return Uh, Vh

    near, far = estimate(0.005, 0.01), estimate(0.1, 0.1)
    M_near = near[0] @ near[1].swapaxes(1, 2)
    T1 = np.zeros((d, d))
    T1[0, 0] = 1.0
    T2 = T1.copy()
    T2[1, 1], T2[2, 2] = 2.0, -3.0
    targets = {"T1": T1, "T2": T2}
    infs = {name: LinearFormInference(d, d, r, K, targets, n_trials=b_trials) for name in names}
    factors = {
        name: tuple(np.broadcast_to(F, (b_trials, *F.shape)) for F in est)
        for name, est in (("near", near), ("far", far))
    }
    M_far = far[0] @ far[1].swapaxes(1, 2)
    # One GEMM per round gives <M_a, X>, <M_near_a, X>, <M_far_a, X>, <X, T1>, <X, T2>.
    lin = np.concatenate(
        [
            M.reshape(K, -1),
            M_near.reshape(K, -1),
            M_far.reshape(K, -1),
            T1.reshape(1, -1),
            T2.reshape(1, -1),
        ]
    ).T
    plug = np.einsum("kij,tij->kt", M_far, np.stack([T1, T2]))
    # Per-trial <M^unbs, T> computed directly, with and without the 1/pi weight.
    ipw = np.zeros((b_trials, K, 2))
    no_weight = np.zeros((b_trials, K, 2))
    trials = np.arange(b_trials)
    for _ in range(n_rounds):
        X = rng.standard_normal((b_trials, d, d))
        proj = _rowwise(X.reshape(b_trials, -1), lin)
        mean_reward, pred_near, pred_far, XT = (
            proj[:, :2],
            proj[:, 2:4],
            proj[:, 4:6],
            proj[:, 6:],
        )
        greedy = np.argmax(pred_near, axis=1)
        p = np.full((b_trials, K), 0.05)
        p[trials, greedy] = 0.95
        a = (rng.random(b_trials) < p[:, 1]).astype(np.int64)
        y = mean_reward[trials, a] + SIGMA * rng.standard_normal(b_trials)
        for name, inf in infs.items():
            inf.update(*factors[name], X, a, y, p)
        for i in range(K):
            res = (a == i) * (y - pred_far[:, i])
            ipw[:, i] += plug[i] + (res / p[:, i])[:, None] * XT
            no_weight[:, i] += plug[i] + res[:, None] * XT
    stackT = np.stack([T1, T2])
    return {
        "infs": infs,
        "truth": np.einsum("kij,tij->kt", M, stackT),
        "plug_in": np.einsum("kij,tij->kt", M_far, stackT),
        "ipw": ipw / n_rounds,
        "no_weight": no_weight / n_rounds,
        "targets": targets,
    }


@pytest.fixture(scope="module")
def paper_setting():
    """The paper's setting (d = 50, r = 3), B = 300 bandits of 300 rounds."""
    return _fixed_estimate_study(D, R, B_TRIALS, N_ROUNDS, seed=2024)


def _bias_z(values: np.ndarray, truth: float) -> float:
    """z statistic of the mean of B independent estimates against the truth."""
    return (values.mean() - truth) / (values.std(ddof=1) / np.sqrt(values.size))


def test_debiased_mean_is_unbiased_and_controls_fail(paper_setting):
    """<M^unbs_i, T> is unbiased for <M_i, T> although M_hat is far off; the same sum
    without the 1/pi weight, and the plug-in <M_hat_i, T>, are clearly biased."""
    inf = paper_setting["infs"]["far"]
    truth = paper_setting["truth"]
    for i in range(2):
        unbs = inf.debiased_mean(i)
        for k, name in enumerate(paper_setting["targets"]):
            est = np.einsum("bij,ij->b", unbs, paper_setting["targets"][name])
            assert abs(_bias_z(est, truth[i, k])) < 4.0, (i, name)
            # the class computes exactly the direct inverse-propensity sum ...
            np.testing.assert_allclose(est, paper_setting["ipw"][:, i, k], rtol=1e-9)
            # ... and the controls fail the same test
            assert abs(_bias_z(paper_setting["no_weight"][:, i, k], truth[i, k])) > 8.0
            if name == "T1":  # the far estimate is off by ~0.1 in entry (1, 1)
                se_mean = est.std(ddof=1) / np.sqrt(est.size)
                assert abs(paper_setting["plug_in"][i, k] - truth[i, k]) > 8.0 * se_mean


def test_intervals_are_roughly_calibrated(paper_setting):
    """Near the truth, z = (m_hat - m) / se is ~N(0, 1): mean 0, variance 1, coverage .95.

    A variance off by a factor 2 gives var(z) = 2 or 0.5, outside [0.7, 1.4] (the sampling
    sd of var(z) with B = 300 is ~0.08).  :func:`test_intervals_are_calibrated` resolves a
    standard error off by 10%."""
    inf = paper_setting["infs"]["near"]
    truth = paper_setting["truth"]
    for i in range(2):
        for k, name in enumerate(paper_setting["targets"]):
            ci = inf.interval(i, name)
            z = (ci.estimate - truth[i, k]) / ci.standard_error
            assert abs(z.mean()) < 0.3, (i, name, z.mean())
            assert 0.7 < z.var() < 1.4, (i, name, z.var())
            assert 0.9 <= ci.contains(truth[i, k]).mean() <= 0.99
        diff = inf.difference(1, 0, "T2")
        zd = (diff.estimate - (truth[1, 1] - truth[0, 1])) / diff.standard_error
        assert abs(zd.mean()) < 0.3 and 0.7 < zd.var() < 1.4


#: Replications of the calibration study: the sampling sd of var(z) is sqrt(2/B) = 0.037.
CALIBRATION_TRIALS = 1500


@pytest.mark.slow
def test_intervals_are_calibrated():
    """The standard error is right to within 10%: var(z) of every arm, target and difference
    lies in [0.87, 1.13] at B = 1500 in the paper's setting (the band is 1 ± 3.6 sampling
    sd, sqrt(2/B) = 0.037), while the same z with the standard error x0.9 or x1.1 (var(z)
    x1.23 or x0.83) falls outside it.  The mean of z is 0 within 4 sampling sd
    (1/sqrt(B) = 0.026) plus 0.05 for the finite-n bias, and coverage is 0.95 within 4 Monte
    Carlo s.e. (0.0056).  About 20 s: the near estimate only."""
    study = _fixed_estimate_study(D, R, CALIBRATION_TRIALS, N_ROUNDS, seed=2024, names=("near",))
    inf, truth = study["infs"]["near"], study["truth"]
    B = CALIBRATION_TRIALS
    mcse = np.sqrt(0.95 * 0.05 / B)
    cases = [
        (f"<M_{i}, {name}>", inf.interval(i, name), truth[i, k])
        for i in range(2)
        for k, name in enumerate(study["targets"])
    ]
    for k, name in enumerate(study["targets"]):
        cases.append(
            (f"<M_1 - M_0, {name}>", inf.difference(1, 0, name), truth[1, k] - truth[0, k])
        )
    for label, ci, value in cases:
        z = (ci.estimate - value) / ci.standard_error
        assert abs(z.mean()) < 4 / np.sqrt(B) + 0.05, (label, z.mean())
        assert 0.87 < z.var() < 1.13, (label, z.var())
        for factor in (0.9, 1.1):  # the band resolves a standard error off by 10%
            assert not 0.87 < (z / factor).var() < 1.13, (label, factor, (z / factor).var())
        assert abs(ci.contains(value).mean() - 0.95) < 4 * mcse, (label, ci.contains(value).mean())


# ----------------------------------------------------------------------------- insufficient data


def _small(**kw):
    T = np.zeros((4, 3))
    T[0, 0] = 1.0
    return LinearFormInference(4, 3, 1, 2, {"T": T}, **kw)


def _round(rng, K=2, d1=4, d2=3, r=1):
    return (
        rng.standard_normal((K, d1, r)),
        rng.standard_normal((K, d2, r)),
        rng.standard_normal((d1, d2)),
    )


def test_no_rounds_gives_nan_and_warning():
    inf = _small()
    with pytest.warns(InsufficientDataWarning, match="at least 1 more round"):
        ci = inf.interval(0, "T")
    assert np.isnan([ci.estimate, ci.low, ci.high, ci.standard_error, ci.p_value]).all()
    assert ci.n_obs == 0
    with pytest.warns(InsufficientDataWarning):
        assert np.isnan(inf.debiased_mean(0)).all()
    with pytest.warns(InsufficientDataWarning):
        assert np.isnan(inf.difference(0, 1, "T").estimate)
    assert np.isnan(inf.sigma2).all() and np.isnan(inf.S2).all()


def test_arm_never_pulled_warns_with_count():
    rng = np.random.default_rng(0)
    inf = _small()
    U, V, X = _round(rng)
    inf.update(U, V, X, 0, 1.0, np.array([0.5, 0.5]))
    with pytest.warns(InsufficientDataWarning, match="at least 1 more pull of arm 1"):
        ci = inf.interval(1, "T")
    assert np.isnan(ci.estimate) and np.isnan(ci.low)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(inf.interval(0, "T").low)


def test_batched_insufficient_data_is_per_trial():
    rng = np.random.default_rng(0)
    inf = _small(n_trials=3)
    U, V, X = _round(rng)
    stackU, stackV = np.stack([U] * 3), np.stack([V] * 3)
    inf.update(
        stackU, stackV, np.stack([X] * 3), np.array([0, 1, 0]), np.ones(3), np.full((3, 2), 0.5)
    )
    with pytest.warns(InsufficientDataWarning, match="in 2 of 3 trials"):
        ci = inf.interval(1, "T")
    assert np.isnan(ci.low[[0, 2]]).all() and np.isfinite(ci.low[1])
    assert ci.contains(0.0).dtype == bool


def test_zero_estimate_variance_not_estimable():
    rng = np.random.default_rng(0)
    inf = _small()
    _, _, X = _round(rng)
    zeroU, zeroV = np.zeros((2, 4, 1)), np.zeros((2, 3, 1))
    inf.update(zeroU, zeroV, X, 0, 1.0, np.array([0.5, 0.5]))
    with pytest.warns(InsufficientDataWarning, match="non-zero estimate"):
        ci = inf.interval(0, "T")
    assert np.isnan(ci.low) and np.isnan(ci.standard_error)


# ----------------------------------------------------------------------------- bad input


def _valid(rng, B=None):
    K, d1, d2, r = 2, 4, 3, 1
    shape = () if B is None else (B,)
    return dict(
        U=rng.standard_normal(shape + (K, d1, r)),
        V=rng.standard_normal(shape + (K, d2, r)),
        X=rng.standard_normal(shape + (d1, d2)),
        action=0 if B is None else np.zeros(B, dtype=int),
        reward=0.5 if B is None else np.full(B, 0.5),
        propensities=np.array([0.5, 0.5]) if B is None else np.full((B, 2), 0.5),
    )


def _bad_inputs():
    nan_X = np.ones((4, 3))
    nan_X[1, 2] = np.nan
    inf_U = np.ones((2, 4, 1))
    inf_U[1, 0, 0] = np.inf
    return [
        ("action", 2, "action"),
        ("action", -1, "action"),
        ("action", 0.0, "action"),
        ("action", True, "action"),
        ("reward", np.nan, "reward"),
        ("reward", np.inf, "reward"),
        ("reward", [1.0, 2.0], "reward"),
        ("X", nan_X, "X"),
        ("X", np.ones((3, 4)), "X"),
        ("U", inf_U, "U"),
        ("U", np.ones((2, 4, 2)), "U"),
        ("V", np.ones((3, 3, 1)), "V"),
        ("propensities", np.array([0.0, 1.0]), "propensities"),
        ("propensities", np.array([-0.1, 1.1]), "propensities"),
        ("propensities", np.array([np.nan, 0.5]), "propensities"),
        ("propensities", np.array([0.5, 0.6]), "sum to 1"),
        ("propensities", np.array([1.0]), "propensities"),
    ]


@pytest.mark.parametrize(("arg", "value", "match"), _bad_inputs())
def test_bad_update_raises_and_leaves_state_unchanged(arg, value, match):
    rng = np.random.default_rng(0)
    inf = _small(projection="paper")
    for _ in range(3):
        kw = _valid(rng)
        kw["action"] = int(rng.integers(2))
        inf.update(**kw)
    before = inf.state_dict()
    kw = _valid(rng)
    kw[arg] = value
    with pytest.raises(ValueError, match=match):
        inf.update(**kw)
    after = inf.state_dict()
    for key, val in before.items():
        if isinstance(val, np.ndarray):
            assert val.tobytes() == after[key].tobytes(), key
        else:
            assert val == after[key], key


def test_bad_batched_update_names_trial():
    rng = np.random.default_rng(0)
    inf = _small(n_trials=3)
    kw = _valid(rng, B=3)
    kw["propensities"] = np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]])
    kw["action"] = np.array([0, 0, 1])
    with pytest.raises(ValueError, match=r"trial 2"):
        inf.update(**kw)
    kw = _valid(rng, B=3)
    kw["reward"] = np.array([0.0, np.nan, 0.0])
    with pytest.raises(ValueError, match=r"reward.*trial 1"):
        inf.update(**kw)
    assert inf.n_obs == 0


@pytest.mark.parametrize(
    ("targets", "match"),
    [
        ({}, "at least one"),
        ({"T": np.ones((3, 4))}, r"targets\['T'\]"),
        ({"T": np.full((4, 3), np.nan)}, r"targets\['T'\]"),
        ([("T", np.ones((4, 3))), ("T", np.eye(4, 3))], "duplicate target name 'T'"),
        ({3: np.ones((4, 3))}, "target names"),
        (np.ones((4, 3)), "mapping"),
    ],
)
def test_bad_targets(targets, match):
    with pytest.raises(ValueError, match=match):
        LinearFormInference(4, 3, 1, 2, targets)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"context": "poisson"}, "context"),
        ({"projection": "full"}, "projection"),
        ({"point_estimate": "svd"}, "point_estimate"),
        ({"n_trials": 0}, "n_trials"),
        ({"rank": 5}, "rank"),
        ({"n_actions": 1}, "n_actions"),
    ],
)
def test_bad_constructor_arguments(kw, match):
    args = dict(d1=4, d2=3, rank=1, n_actions=2, targets={"T": np.ones((4, 3))})
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        LinearFormInference(**args)


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.2, float("nan"), float("inf"), "0.9"])
def test_bad_confidence_level(level):
    rng = np.random.default_rng(0)
    inf = _small()
    inf.update(**_valid(rng))
    with pytest.raises(ValueError, match="confidence_level"):
        inf.interval(0, "T", confidence_level=level)
    with pytest.raises(ValueError, match="confidence_level"):
        inf.difference(0, 1, "T", confidence_level=level)


def test_bad_readout_arguments():
    inf = _small()
    with pytest.raises(ValueError, match="arm"):
        inf.interval(2, "T")
    with pytest.raises(ValueError, match="target must be one of 'T'; got 'S'"):
        inf.interval(0, "S")
    with pytest.raises(ValueError, match="arm_a and arm_b must differ"):
        inf.difference(1, 1, "T")
    with pytest.raises(ValueError, match="arm"):
        inf.debiased_mean(-1)


def test_inference_imports_no_plotting_or_pandas():
    code = (
        "import sys, inference.linear_form, inference.optimal_value, "
        "inference.exploration_only, inference.results; "
        "bad = [m for m in ('matplotlib', 'pandas') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
