"""Tests for :class:`inference.cores.linear_form.LinearFormInference` (Section 3,
docs/method.md §4):
its arithmetic.

* online == batch: the running sums equal a direct numpy computation that forms every
  ``M_hat_{i,t-1}`` and every d x d projector at every round;
* batched == B unbatched objects, saved state, the queue of held estimates;
* the seams the wrappers use: a checked Round, its two phases, the parts of a shared
  estimator.

Its statistics are in test_linear_form_statistics.py, its refusals and warnings in
test_linear_form_inputs.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import ndtri

from inference.cores.linear_form import LinearFormInference
from inference.cores.linear_form_round import PulledEstimate
from inference.cores.remainder import remainder_variance_reference
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
    inf = LinearFormInference(
        d1, d2, r, K, targets, context=context, projection=projection, design_variance="pulled"
    )
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
    inf = LinearFormInference(
        d1, d2, r, K, targets, point_estimate=point_estimate, design_variance="pulled"
    )
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
    pulls = [sum(row[3] == i for row in hist) for i in range(K)]
    for k, name in enumerate(targets):
        m = [np.sum(point[i] * targets[name]) for i in range(K)]
        # The one-step read-out adds its remainder's variance τ² (inference.cores.remainder),
        # from an SVD of the last estimate and the arm's pulls; the truncation has none.
        tau2 = [
            remainder_variance_reference(
                U_last[i] @ V_last[i].T, targets[name], r, sigma2[i], 1.0, pulls[i]
            )
            if point_estimate == "one-step"
            else 0.0
            for i in range(K)
        ]
        assert point_estimate == "projection" or min(tau2) > 0
        se = [np.sqrt(sigma2[i] * S2[i, k] / n + tau2[i]) for i in range(K)]
        ci = inf.interval(1, name, confidence_level=0.9)
        assert isinstance(ci, IntervalEstimate)
        assert ci.estimate == pytest.approx(m[1], rel=1e-9)
        assert ci.standard_error == pytest.approx(se[1], rel=1e-8)
        assert (ci.low, ci.high) == pytest.approx((m[1] - z * se[1], m[1] + z * se[1]), rel=1e-8)
        assert ci.n_obs == n and ci.confidence_level == 0.9
        diff = inf.difference(1, 0, name, confidence_level=0.9)
        se_d = np.sqrt((sigma2[0] * S2[0, k] + sigma2[1] * S2[1, k]) / n + tau2[0] + tau2[1])
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
    from inference.cores.debiased_sum import RING, DebiasedSum

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


def test_a_saved_state_keeps_its_keys():
    """The saved format: the configuration, the targets, n, then every part's arrays in this
    order (a saved state names its parts' fields; an estimated law adds its own)."""
    inf = LinearFormInference(4, 3, 1, 2, {"T": np.eye(4, 3)}, context_law="estimated")
    config = "kind d1 d2 rank n_actions n_trials context context_law projection design_variance"
    sums = "acc held last_U last_V ring_U ring_V ring_n initialized sigma_sum S2_sum V_sum pulls"
    sums += " unweighted_pulls"
    parts = "weight_sum weight_max design_sum design_max check_sum check_sq check_n"
    law = "law_sum_xx law_op_inverse law_op_second_moment law_n law_refreshed_at"
    keys = f"{config} target_names targets n {sums} {parts} {law}".split()
    state = inf.state_dict()
    assert list(state) == keys and state["kind"] == "linear_form"
    given = LinearFormInference(4, 3, 1, 2, {"T": np.eye(4, 3)}).state_dict()
    assert list(given) == keys[: -len(law.split())]


@pytest.mark.parametrize("n_trials", [None, 1])
def test_one_trials_standard_errors_are_the_array_expressions(n_trials):
    """One trial's standard errors (the running values in the wrappers' info), computed with
    Python floats, are those of the arrays' expression bit for bit, with the remainder's
    variance added as the read-outs add it."""
    rng = np.random.default_rng(12)
    K, d1, d2, r = 3, 6, 5, 2
    inf = LinearFormInference(d1, d2, r, K, _targets(rng, d1, d2), n_trials=n_trials)
    for U, V, X, a, y, p in make_history(rng, 30, K, d1, d2, r, B=n_trials):
        inf.update(U, V, X, a, y, p)
    n, s = inf.n_obs, inf.state
    main = np.sqrt((s.sigma_sum / n)[..., None] * s.S2_sum / n / n)
    tau2 = inf.remainders() if n_trials else inf.remainders()[None]
    assert (tau2 > 0).all()
    expected = np.hypot(main, np.sqrt(tau2))
    got = inf.standard_errors()
    assert got.shape == (expected.shape if n_trials else expected.shape[1:])
    np.testing.assert_array_equal(got, expected if n_trials else expected[0])


def test_interval_is_sigma_times_S_over_root_n_with_the_remainder():
    rng = np.random.default_rng(11)
    K, d1, d2, r = 3, 6, 5, 2
    targets = _targets(rng, d1, d2)
    inf = LinearFormInference(d1, d2, r, K, targets)
    for row in make_history(rng, 30, K, d1, d2, r):
        inf.update(*row)
    n, tau2 = inf.n_obs, inf.remainders()
    for k, name in enumerate(targets):
        ci = inf.interval(2, name)
        se = np.sqrt(inf.sigma2[2]) * np.sqrt(inf.S2[2, k]) / np.sqrt(n)
        assert ci.standard_error == np.hypot(se, np.sqrt(tau2[2, k]))
        assert ci.standard_error == pytest.approx(inf.standard_errors()[2, k], rel=1e-14)
        diff = inf.difference(2, 0, name)
        var = inf.sigma2[[2, 0]] * inf.S2[[2, 0], k]
        expected = np.sqrt(var.sum() / n + tau2[[2, 0], k].sum())
        assert diff.standard_error == pytest.approx(expected, rel=1e-15)
