"""``projection="none"``: the debiased mean ``<M^unbs, T>`` without the low-rank step
(docs/method.md §12), and the identification check that goes with it."""

import warnings

import numpy as np
import pytest

from inference import ContextLawWarning, LinearFormInference
from inference.cores.running_law import RunningSecondMoment
from lrbandit_gym.context_law import (
    EntryLaw,
    EstimatedLaw,
    KroneckerLaw,
    SecondMomentLaw,
    ar1_correlation,
    pseudo_inverse,
)

D1, D2, K = 6, 5, 2
PMF = np.array([0.3, 0.7])


def _target() -> np.ndarray:
    T = np.zeros((D1, D2))
    T[2, 2] = 1.0
    return T


def _z_scores(law, declared, *, B=500, n=400, seed=1, weight_free=False):
    """z-scores of ``<M_0, T>`` over ``B`` trials with a fixed, poor estimate (a rank-1
    matrix unrelated to the truth): only the debiasing can make the interval right."""
    rng = np.random.default_rng(seed)
    L_r, L_c = np.linalg.cholesky(law.row_cov), np.linalg.cholesky(law.col_cov)
    M = np.stack([np.outer(rng.standard_normal(D1), rng.standard_normal(D2)) / 2 for _ in range(K)])
    U = np.broadcast_to(rng.standard_normal((K, D1, 1)), (B, K, D1, 1)).copy()
    V = np.broadcast_to(rng.standard_normal((K, D2, 1)), (B, K, D2, 1)).copy()
    inf = LinearFormInference(
        D1, D2, rank=1, n_actions=K, targets={"e": _target()}, projection="none",
        context_law=declared, n_trials=B,
    )  # fmt: skip
    reported = np.full((B, K), 0.5) if weight_free else np.broadcast_to(PMF, (B, K))
    for _ in range(n):
        X = L_r @ rng.standard_normal((B, D1, D2)) @ L_c.T
        a = (rng.random(B) < PMF[1]).astype(int)
        y = np.einsum("bij,bij->b", M[a], X) + 0.5 * rng.standard_normal(B)
        inf.update(U, V, X, action=a, reward=y, propensities=reported)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ContextLawWarning)
        iv = inf.interval(0, "e")
    return (iv.estimate - M[0, 2, 2]) / iv.standard_error


LAW = KroneckerLaw(ar1_correlation(D1, 0.8), ar1_correlation(D2, 0.8))


def test_the_debiased_mean_covers_under_a_correlated_law_however_poor_the_estimate():
    z = _z_scores(LAW, LAW)
    # 500 trials: a coverage s.e. of 0.01, a z s.d. s.e. of 0.03.
    assert 0.93 <= np.mean(np.abs(z) < 1.96) <= 0.97
    assert abs(z.mean()) < 0.15
    assert 0.92 <= z.std() <= 1.08


def test_the_debiased_mean_under_the_wrong_law_misses():
    z = _z_scores(LAW, "gaussian")  # Σ = I declared, the contexts correlated
    assert np.mean(np.abs(z) < 1.96) < 0.85


def test_the_debiased_mean_without_the_propensities_misses():
    z = _z_scores(LAW, LAW, weight_free=True)  # 1/π read as 2 where it is 1/0.3
    assert abs(z.mean()) > 0.3  # 0.54 here, 12 Monte Carlo s.e. off centre


def test_the_debiased_mean_is_the_mean_of_the_corrected_estimates():
    rng = np.random.default_rng(3)
    inf = LinearFormInference(
        D1, D2, rank=1, n_actions=K, targets={"e": _target()}, projection="none",
        context_law=LAW,
    )  # fmt: skip
    U, V = rng.standard_normal((K, D1, 1)), rng.standard_normal((K, D2, 1))
    whitened = []
    for t in range(30):
        X = rng.standard_normal((D1, D2))
        a = t % 2
        y = float(rng.normal())
        if a == 0:
            res = y - float(U[0, :, 0] @ X @ V[0, :, 0])
            whitened.append(res / PMF[0] * LAW.whiten(X[None])[0])
        inf.update(U, V, X, action=a, reward=y, propensities=PMF)
    expected = (U[0] @ V[0].T) + np.sum(whitened, axis=0) / 30
    assert inf.interval(0, "e").estimate == pytest.approx(expected[2, 2], rel=1e-12)


def test_projection_none_refuses_the_rank_r_truncation():
    with pytest.raises(ValueError, match="point_estimate='projection'"):
        LinearFormInference(
            D1, D2, rank=1, n_actions=K, targets={"e": _target()}, projection="none",
            point_estimate="projection",
        )  # fmt: skip


def _range_part(S: np.ndarray, A: np.ndarray) -> np.ndarray:
    a = A.reshape(A.shape[0], -1)
    return (a @ pseudo_inverse(S) @ S).reshape(A.shape)


def test_each_law_gives_its_range_part():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, D1, D2))
    R, C = ar1_correlation(D1, 0.5), np.diag([1.0, 1.0, 0.0, 2.0, 1.0])  # a column never moves
    mean = rng.standard_normal((D1, D2))
    for law in (KroneckerLaw(R, C), KroneckerLaw(R, C, mean)):
        S = np.kron(R, C)
        if law.mean is not None:
            S = S + np.outer(mean.ravel(), mean.ravel())
        np.testing.assert_allclose(law.range_part(A), _range_part(S, A), atol=1e-10)
    flat = rng.standard_normal((40, D1 * D2 - 4))  # rank D1 D2 - 4
    S = (flat @ rng.standard_normal((D1 * D2 - 4, D1 * D2))).T
    S = S @ S.T
    np.testing.assert_allclose(
        SecondMomentLaw(S, (D1, D2)).range_part(A), _range_part(S, A), atol=1e-8
    )
    p = rng.random((D1, D2))
    p[0, 0] = 0.0
    np.testing.assert_allclose(EntryLaw(p).range_part(A), A * (p > 0))
    for structure in ("full", "kronecker"):
        running = RunningSecondMoment(EstimatedLaw(D1, D2, structure), 2)
        for _ in range(200):
            X = rng.standard_normal((2, D1, D2))
            X[..., 2] = 0.0  # the third column never moves
            running.observe(X)
        part = running.range_part(A)
        np.testing.assert_allclose(part[..., 2], 0.0, atol=1e-8)
        np.testing.assert_allclose(
            np.delete(part, 2, -1),
            np.broadcast_to(np.delete(A, 2, -1), (2, 3, D1, D2 - 1)),
            atol=1e-8,
        )


def test_a_target_the_contexts_never_take_warns_and_one_they_take_does_not():
    C = np.eye(D2)
    C[4, 4] = 0.0  # the last column is always zero
    law = KroneckerLaw(np.eye(D1), C)
    inside, outside = _target(), np.zeros((D1, D2))
    outside[1, 4] = 1.0
    inf = LinearFormInference(
        D1, D2, rank=1, n_actions=K, targets={"in": inside, "out": outside},
        projection="none", context_law=law,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    U, V = rng.standard_normal((K, D1, 1)), rng.standard_normal((K, D2, 1))
    for t in range(40):
        X = rng.standard_normal((D1, D2)) @ C
        inf.update(U, V, X, action=t % 2, reward=float(rng.normal()), propensities=PMF)
    np.testing.assert_allclose(inf.unidentified_fractions(), [0.0, 1.0], atol=1e-12)
    assert inf.law_flags()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLawWarning)
        inf.interval(0, "in")
    with pytest.warns(ContextLawWarning, match="100.0% of the target"):
        inf.interval(0, "out")


def test_an_ill_conditioned_law_warns_with_a_projection_and_names_projection_none():
    C = np.diag([1.0, 1.0, 1.0, 1.0, 1e-7])
    law = KroneckerLaw(np.eye(D1), C)
    rng = np.random.default_rng(0)
    U, V = rng.standard_normal((K, D1, 1)), rng.standard_normal((K, D2, 1))
    cores = {
        p: LinearFormInference(
            D1, D2, rank=1, n_actions=K, targets={"e": _target()}, projection=p, context_law=law
        )
        for p in ("tangent", "none")
    }
    for t in range(40):
        X = rng.standard_normal((D1, D2)) @ np.sqrt(C)
        for core in cores.values():
            core.update(U, V, X, action=t % 2, reward=float(rng.normal()), propensities=PMF)
    with pytest.warns(ContextLawWarning, match="projection='none'"):
        cores["tangent"].interval(0, "e")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLawWarning)
        cores["none"].interval(0, "e")


@pytest.mark.parametrize("one_hot_law", ["completion", "entries"])
def test_completion_contexts_take_the_debiased_mean(one_hot_law):
    """Index contexts under the uniform law and under given entry frequencies: the same
    numbers as the dense one-hot matrices."""
    rng = np.random.default_rng(5)
    p = rng.random((D1, D2)) + 0.2
    law = "completion" if one_hot_law == "completion" else EntryLaw(p)
    cores = [
        LinearFormInference(
            D1,
            D2,
            rank=1,
            n_actions=K,
            targets={"e": _target()},
            context="completion",
            projection="none",
            context_law=law,
        )  # fmt: skip
        for _ in range(2)
    ]
    U, V = rng.standard_normal((K, D1, 1)), rng.standard_normal((K, D2, 1))
    for t in range(200):
        j, k = rng.integers(D1), rng.integers(D2)
        X = np.zeros((D1, D2))
        X[j, k] = 1.0
        y, a = float(rng.normal()), t % 2
        cores[0].update(U, V, np.array([j, k]), action=a, reward=y, propensities=PMF)
        cores[1].update(U, V, X, action=a, reward=y, propensities=PMF)
    one, two = (c.interval(1, "e") for c in cores)
    assert one.estimate == pytest.approx(two.estimate, rel=1e-12)
    assert one.standard_error == pytest.approx(two.standard_error, rel=1e-12)


def _classification_z(declared, *, B=200, n=800, seed=0):
    """z-scores of ``<M*_0 − M*_1, center>`` on the digits classification bandit over ``B``
    trials of uniform logging, with a fixed poor estimate."""
    from lrbandit_gym.digits import digits_bandit

    env = digits_bandit().unwrapped
    x, R = env.contexts, env.expected_rewards
    K, (d1, d2) = env.n_actions, x.shape[1:]
    center = np.zeros((d1, d2))
    center[d1 // 2, d2 // 2] = 1.0
    truth = env.linear_parameters()
    rng = np.random.default_rng(seed)
    U = np.broadcast_to(0.1 * rng.standard_normal((K, d1, 1)), (B, K, d1, 1)).copy()
    V = np.broadcast_to(0.1 * rng.standard_normal((K, d2, 1)), (B, K, d2, 1)).copy()
    law = env.context_law if declared == "env" else declared
    inf = LinearFormInference(
        d1, d2, rank=1, n_actions=K, targets={"center": center}, projection="none",
        context_law=law, n_trials=B,
    )  # fmt: skip
    pmf = np.full((B, K), 1.0 / K)
    for _ in range(n):
        i = rng.integers(len(x), size=B)
        a = rng.integers(K, size=B)
        inf.update(U, V, x[i], action=a, reward=R[i, a], propensities=pmf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ContextLawWarning)
        iv = inf.difference(0, 1, "center")
    return (iv.estimate - np.sum((truth[0] - truth[1]) * center)) / iv.standard_error


def test_the_classification_bandits_linear_parameters_are_covered():
    """Real images, rewards not linear in them: the debiased mean under the images' own law
    covers the best linear predictor's parameters; under the paper's law it misses."""
    z = _classification_z("env")
    assert 0.92 <= np.mean(np.abs(z) < 1.96) <= 0.98  # 200 trials: s.e. 0.015
    assert abs(z.mean()) < 0.3 and 0.88 <= z.std() <= 1.12  # s.e. 0.07 and 0.05
    wrong = _classification_z("gaussian")
    assert abs(wrong.mean()) > 0.5  # 0.96 here: 13 Monte Carlo s.e. off centre
