"""Debiasing for any context law (docs/method.md §1): the laws' whitening, the running
estimate, the contexts' check, the simulator's contexts and V*, and the data path."""

import warnings

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from inference import ContextLawWarning, LinearFormInference, ParameterInference, analyze
from inference.cores.context_check import ContextCheck
from inference.cores.running_law import RunningSecondMoment
from lrbandit_gym.context_law import (
    CONDITION_LIMIT,
    EntryLaw,
    EstimatedLaw,
    IsotropicLaw,
    KroneckerLaw,
    SecondMomentLaw,
    ar1_correlation,
    as_context_law,
)
from lrbandit_gym.logs import LogFormatError, load_log, make_log, save_log, validate_log
from lrbandit_gym.onehot import OneHotContexts

D1, D2 = 6, 5


def _kron_law(rho=0.7, std=0.5, mean=True):
    rng = np.random.default_rng(3)
    mu = 0.3 * rng.standard_normal((D1, D2)) if mean else None
    return KroneckerLaw(std**2 * ar1_correlation(D1, rho), ar1_correlation(D2, -0.4), mu)


def _dense_second_moment(law: KroneckerLaw) -> np.ndarray:
    S = np.kron(law.row_cov, law.col_cov)  # row-major vec: Cov(X_ij, X_kl) = R_ik C_jl
    if law.mean is not None:
        S = S + np.outer(law.mean.ravel(), law.mean.ravel())
    return S


def _draw(law: KroneckerLaw, rng, n):
    Lr, Lc = np.linalg.cholesky(law.row_cov), np.linalg.cholesky(law.col_cov)
    X = Lr @ rng.standard_normal((n, D1, D2)) @ Lc.T
    return X if law.mean is None else X + law.mean


# ---------------------------------------------------------------------------- the laws
@pytest.mark.parametrize("mean", [False, True])
def test_kronecker_whitening_is_the_inverse_second_moment(mean):
    law = _kron_law(mean=mean)
    X = np.random.default_rng(0).standard_normal((4, D1, D2))
    expected = X.reshape(4, -1) @ np.linalg.inv(_dense_second_moment(law))
    np.testing.assert_allclose(law.whiten(X).reshape(4, -1), expected, rtol=1e-9, atol=1e-9)
    full = SecondMomentLaw(_dense_second_moment(law), (D1, D2))
    np.testing.assert_allclose(full.whiten(X), law.whiten(X), rtol=1e-8, atol=1e-9)
    A = np.random.default_rng(1).standard_normal((3, D1, D2))
    np.testing.assert_allclose(law.predicted_moment(A), full.predicted_moment(A), rtol=1e-10)


def test_isotropic_laws_are_the_papers_scales():
    assert IsotropicLaw(D1, D2, "gaussian").isotropic_scale == 1.0
    assert IsotropicLaw(D1, D2, "completion").isotropic_scale == D1 * D2
    p = np.random.default_rng(2).uniform(0.5, 2.0, (D1, D2))
    law = EntryLaw(p)
    rows, cols = np.array([0, 3]), np.array([4, 1])
    np.testing.assert_allclose(law.entry_scale(rows, cols), 1 / law.probs[rows, cols])


def test_a_singular_second_moment_is_inverted_on_its_range():
    # One pixel is always 0 (a digit's corner): Σ is singular, the pseudo-inverse whitens.
    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, D1, D2))
    X[:, 0, 0] = 0.0
    law = SecondMomentLaw.of_contexts(X)
    W = law.whiten(X[:3])
    assert np.isfinite(W).all() and np.all(W[:, 0, 0] == pytest.approx(0.0, abs=1e-9))


def test_bad_laws_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match="row_cov"):
        KroneckerLaw(-np.eye(3), np.eye(2))
    with pytest.raises(ValueError, match="probs"):
        EntryLaw(-np.ones((2, 2)))
    with pytest.raises(ValueError, match="context_law must be one of"):
        as_context_law("images", D1, D2)
    with pytest.raises(ValueError, match="shape"):
        as_context_law(IsotropicLaw(3, 3), D1, D2)


# ---------------------------------------------------------------------------- estimated
@pytest.mark.parametrize("structure", ["kronecker", "full"])
def test_the_running_estimate_converges_to_the_law(structure):
    law = _kron_law()
    est = RunningSecondMoment(EstimatedLaw(D1, D2, structure), 2)
    rng = np.random.default_rng(5)
    for X in _draw(law, rng, 20000).reshape(10000, 2, D1, D2):
        est.observe(X)
    A = rng.standard_normal((8, D1, D2))
    exact = law.whiten(A).reshape(8, -1)
    got = est.whiten(np.broadcast_to(A, (2, 8, D1, D2))).reshape(2, 8, -1)
    err = np.linalg.norm(got - exact, axis=-1) / np.linalg.norm(exact, axis=-1)
    assert err.max() < 0.06


def test_an_estimated_law_without_contexts_refuses_the_round():
    inf = LinearFormInference(D1, D2, 1, 2, {"T": np.ones((D1, D2))}, context_law="estimated")
    U, V = np.ones((2, D1, 1)), np.ones((2, D2, 1))
    with pytest.raises(ValueError, match="seen no context"):
        inf.update(U, V, np.ones((D1, D2)), 0, 1.0, np.array([0.5, 0.5]))
    assert inf.n_obs == 0


def test_an_estimated_law_state_round_trips():
    rng = np.random.default_rng(6)
    law = _kron_law()
    U = 0.3 * rng.standard_normal((2, D1, 1))
    V = 0.3 * rng.standard_normal((2, D2, 1))
    targets = {"T": np.eye(D1, D2)}
    a = LinearFormInference(D1, D2, 1, 2, targets, context_law="estimated-kronecker")
    b = LinearFormInference(D1, D2, 1, 2, targets, context_law="estimated-kronecker")
    X = _draw(law, rng, 400)
    for x in X[:50]:
        a.observe_context(x[None])
    for t, x in enumerate(X[50:200]):
        a.update(U, V, x, t % 2, float(rng.normal()), np.array([0.5, 0.5]))
    b.load_state_dict(a.state_dict())
    for t, x in enumerate(X[200:]):
        for inf in (a, b):
            inf.update(U, V, x, t % 2, float(t % 3), np.array([0.5, 0.5]))
    assert a.interval(0, "T") == b.interval(0, "T")
    bad = a.state_dict()
    bad["law_sum_rows"] = bad["law_sum_rows"][..., :-1]
    with pytest.raises(ValueError, match="law_sum_rows"):
        b.load_state_dict(bad)


# ---------------------------------------------------------------------------- coverage
def _coverage(law_spec, context_law, *, weights=True, B=400, n=2000, seed=7):
    """Monte Carlo over ``B`` trials of the core under correlated, scaled contexts with a
    mean; the estimate is the truth's factors perturbed (the debiasing must remove it);
    arm 0 is played more often where the target's entry is far from its mean (a missing 1/π
    biases)."""
    d1, d2 = 8, 6
    rng0 = np.random.default_rng(1)
    u, v = rng0.standard_normal((2, d1, 1)), rng0.standard_normal((2, d2, 1))
    M = np.matmul(u, v.transpose(0, 2, 1)) / 3
    U = np.broadcast_to(u / np.sqrt(3) + 0.15 * rng0.standard_normal((2, d1, 1)), (B, 2, d1, 1))
    V = np.broadcast_to(v / np.sqrt(3) + 0.15 * rng0.standard_normal((2, d2, 1)), (B, 2, d2, 1))
    T = np.zeros((d1, d2))
    T[1, 2] = 1.0
    R = 0.25 * ar1_correlation(d1, law_spec)
    C = ar1_correlation(d2, law_spec)
    mean = np.full((d1, d2), 0.2)
    Lr, Lc = np.linalg.cholesky(R), np.linalg.cholesky(C)
    law = KroneckerLaw(R, C, mean) if context_law == "known" else context_law
    inf = LinearFormInference(d1, d2, 1, 2, {"T": T}, context_law=law, n_trials=B)
    rng = np.random.default_rng(seed)
    for _ in range(300):  # a warm start's contexts
        inf.observe_context(Lr @ rng.standard_normal((B, d1, d2)) @ Lc.T + mean)
    for _ in range(n):
        X = Lr @ rng.standard_normal((B, d1, d2)) @ Lc.T + mean
        p1 = np.where(np.abs(X[:, 1, 2] - mean[1, 2]) > 0.34, 0.2, 0.8)
        a = (rng.random(B) < p1).astype(int)
        y = np.einsum("bij,bij->b", M[a], X) + 0.3 * rng.standard_normal(B)
        props = np.stack([1 - p1, p1], axis=1)
        inf.update(U, V, X, a, y, props if weights else np.full((B, 2), 0.5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ci = inf.interval(0, "T")
    z = (ci.estimate - M[0, 1, 2]) / ci.standard_error
    warned = any(issubclass(w.category, ContextLawWarning) for w in caught)
    return np.mean(np.abs(z) < 1.959964), z.std(), warned


@pytest.mark.parametrize("law", ["known", "estimated-kronecker"])
def test_intervals_cover_under_a_correlated_scaled_law_with_a_mean(law):
    cover, zsd, warned = _coverage(0.8, law)
    assert 0.925 <= cover <= 0.975 and 0.88 <= zsd <= 1.12, (cover, zsd)
    assert not warned


def test_the_wrong_law_under_covers_and_says_so():
    cover, zsd, warned = _coverage(0.8, "gaussian", B=100, n=1000)
    assert cover < 0.5 and warned


def test_without_the_weights_the_intervals_miss():
    # The check that the test above has power: 1/π dropped, the same law.
    cover, zsd, _ = _coverage(0.8, "known", weights=False, B=200, n=1000)
    assert cover < 0.9 or zsd > 1.15


# ---------------------------------------------------------------------------- the check
def _check_rates(make, law, n=2000, B=500, seed=8):
    chk = ContextCheck(D1, D2, B, law)
    rng = np.random.default_rng(seed)
    estimated = getattr(law, "estimated", False)
    for _ in range(300 if estimated else 0):  # a warm start's contexts
        law.observe(make(rng, B))
    for _ in range(n):  # as the core: checked against the law before the round
        X = make(rng, B)
        chk.add(X)
        if estimated:
            law.observe(X)
    return chk.flagged().mean()


def test_the_check_fires_on_the_wrong_scale_and_is_quiet_on_the_right_laws():
    gauss = IsotropicLaw(D1, D2, "gaussian")
    half = lambda rng, B: 0.5 * rng.standard_normal((B, D1, D2))  # noqa: E731
    std = lambda rng, B: rng.standard_normal((B, D1, D2))  # noqa: E731
    assert _check_rates(half, gauss) >= 0.99
    assert _check_rates(std, gauss) <= 0.02

    completion = IsotropicLaw(D1, D2, "completion")

    def uniform(rng, B):
        return OneHotContexts.unchecked(rng.integers(0, D1, B), rng.integers(0, D2, B), D1, D2)

    def skewed(rng, B):  # rows 0-2 revealed 3 times as often as the others
        rows = np.where(rng.random(B) < 0.75, rng.integers(0, 3, B), rng.integers(3, D1, B))
        return OneHotContexts.unchecked(rows, rng.integers(0, D2, B), D1, D2)

    assert _check_rates(uniform, completion) <= 0.02
    assert _check_rates(skewed, completion) >= 0.99

    law = _kron_law(mean=False)
    est = RunningSecondMoment(EstimatedLaw(D1, D2, "kronecker"), 500)
    assert _check_rates(lambda rng, B: _draw(law, rng, B), est) <= 0.02


def test_a_probe_without_noise_reads_exact_and_the_warning_names_a_flagging_probe():
    # Completion contexts give the all-ones probe the value 1 in every round: no noise.  A
    # law whose entry frequencies sum to 1 only to rounding must read it as exact (t = 0),
    # and a warning must name a probe that is significant *and* relevant, not this one.
    probs = np.outer(np.arange(1.0, D1 + 1.0), np.arange(1.0, D2 + 1.0)) ** -1.5
    law = EntryLaw(probs / probs.sum())
    assert law.predicted_moment(np.ones((1, D1, D2)))[0] != 1.0  # rounding, as in the grid
    rng = np.random.default_rng(3)
    B, flat = 50, law.probs.ravel()

    def draw(p):
        idx = rng.choice(D1 * D2, size=B, p=p)
        return OneHotContexts.unchecked(idx // D2, idx % D2, D1, D2)

    right = ContextCheck(D1, D2, B, law)
    for _ in range(400):
        right.add(draw(flat))
    _, t = right.statistics()
    assert (t[:, 0] == 0.0).all()
    assert not right.flagged().any()
    # Uniform entries against the law: the top rows and left columns flag, all-ones cannot.
    wrong = ContextCheck(D1, D2, B, law)
    for _ in range(400):
        wrong.add(draw(np.full(D1 * D2, 1.0 / (D1 * D2))))
    assert wrong.flagged().all()
    with pytest.warns(ContextLawWarning, match="probe '(top rows|left columns)'"):
        wrong.warn("<M_0, T>", "'entries'", batched=True)


# ---------------------------------------------------------------------------- simulator
@pytest.mark.parametrize(
    "kwargs",
    [
        {"context_std": 0.5, "context_corr": 0.8},
        {"context_corr": (0.5, -0.3), "n_actions": 3},
        {"context": "completion", "entry_probs": np.arange(1.0, 31.0).reshape(D1, D2)},
        {"contexts": np.random.default_rng(9).standard_normal((40, D1, D2))},
    ],
)
def test_the_simulator_knows_its_law_and_v_star(kwargs):
    env = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1, **kwargs)
    u = env.unwrapped
    X, _ = u.problem.draw_contexts(np.random.default_rng(10), 200_000)
    values = np.einsum("bij,aij->ba", X, u.true_params).max(axis=1)
    assert abs(values.mean() - u.optimal_value) < 5 * values.std() / np.sqrt(len(values))
    A = np.random.default_rng(11).standard_normal((2, D1, D2))
    flat = X.reshape(len(X), -1)
    empirical = np.einsum("bp,kp->bk", flat, A.reshape(2, -1)) ** 2
    np.testing.assert_allclose(empirical.mean(axis=0), u.context_law.predicted_moment(A), rtol=0.03)


def test_defaults_are_the_papers_draws():
    a = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1)
    b = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1, context_std=1.0)
    np.testing.assert_array_equal(a.reset(seed=3)[0], b.reset(seed=3)[0])
    assert isinstance(a.unwrapped.context_law, IsotropicLaw)
    with pytest.raises(ValueError, match="context_corr"):
        gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1, context_corr=1.0)
    with pytest.raises(ValueError, match="entry_probs"):
        gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1, entry_probs=np.ones((D1, D2)))


def test_the_wrapper_uses_the_envs_law_and_feeds_an_estimated_one_its_warm_start():
    env = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1, context_corr=0.5)
    params = ParameterInference(env, {"T": np.eye(D1, D2)}, rank=1, warm_start=100)
    assert isinstance(params.core.context_law, KroneckerLaw)
    est = ParameterInference(
        gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1),
        {"T": np.eye(D1, D2)},
        rank=1,
        warm_start=100,
        context_law="estimated",
        propensity_fn=lambda obs: np.array([0.5, 0.5]),
    )
    est.reset(seed=0)
    for t in range(150):
        est.step(t % 2)
    assert est.core.n_obs == 50
    assert est.core.state_dict()["law_n"] == 150  # every round's context, warm start included


# ---------------------------------------------------------------------------- data path
def test_make_log_names_every_missing_piece():
    with pytest.raises(LogFormatError, match="contexts, rewards, pmf or propensities"):
        make_log(None, [0, 1], None, n_actions=2)


def test_make_log_defaults_and_the_law_round_trips(tmp_path):
    rng = np.random.default_rng(12)
    n = 50
    X = rng.standard_normal((n, D1, D2))
    log = make_log(X, rng.integers(0, 2, n), rng.standard_normal(n), pmf=np.full((n, 2), 0.5))
    assert str(log["context_law"]) == "estimated"
    idx = np.stack([rng.integers(0, D1, n), rng.integers(0, D2, n)], axis=1)
    log = make_log(idx, rng.integers(0, 2, n), rng.standard_normal(n), pmf=np.full((n, 2), 0.5))
    assert str(log["context_law"]) == "entries"
    law = _kron_law()
    given = make_log(X, np.zeros(n, int), np.zeros(n), propensities=np.ones(n), n_actions=2,
                     context_law=law)  # fmt: skip
    for suffix in (".npz", ".parquet"):
        back = load_log(save_log(given, tmp_path / f"log{suffix}"))
        np.testing.assert_array_equal(back["context_row_cov"], law.row_cov)
        np.testing.assert_array_equal(back["context_mean"], law.mean)
    broken = dict(given)
    broken["context_row_cov"] = -np.eye(D1)
    with pytest.raises(LogFormatError, match="context_row_cov"):
        validate_log(broken)
    del broken["context_row_cov"]
    with pytest.raises(LogFormatError, match="context_row_cov"):
        validate_log(broken)


def test_analyze_warns_on_the_declared_law_and_covers_with_the_estimated_one():
    rng = np.random.default_rng(13)
    n, d, K = 2000, 6, 3
    M = np.stack([np.outer(rng.standard_normal(d), rng.standard_normal(d)) / d for _ in range(K)])
    X = 0.5 * rng.standard_normal((n, d, d))
    a = rng.integers(0, K, n)
    y = np.einsum("nij,nij->n", M[a], X) + 0.1 * rng.standard_normal(n)
    pmf = np.full((n, K), 1 / K)
    with pytest.warns(ContextLawWarning, match="'gaussian'"):
        analyze(make_log(X, a, y, pmf=pmf, context_law="gaussian"), {"I": np.eye(d)},
                rank=1, warm_start=500, value=False)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLawWarning)
        res = analyze(make_log(X, a, y, pmf=pmf), {"I": np.eye(d)}, rank=1, warm_start=500)
    ci = res["<M_0, I>"]
    assert ci.low <= np.trace(M[0]) <= ci.high


def _run_core(law, X, U, V, seed=14, projection="auto"):
    rng = np.random.default_rng(seed)
    T = {"e": np.eye(X.shape[-2], X.shape[-1]), "one": np.ones(X.shape[-2:])}
    inf = LinearFormInference(
        X.shape[-2], X.shape[-1], 1, 2, T, context_law=law, projection=projection
    )
    inf.observe_context(X[:1])
    for t, x in enumerate(X):
        inf.update(U, V, x, t % 2, float(rng.normal()), np.array([0.5, 0.5]))
    return inf


def test_a_kronecker_law_of_identities_gives_the_papers_estimate():
    # The whitened path (compiled or not) against the paper's c·X arithmetic: the same
    # point estimates; the standard error is the robust one, close to σ̂·Ŝ/√n here.
    rng = np.random.default_rng(15)
    X = rng.standard_normal((3000, D1, D2))
    U, V = 0.1 * rng.standard_normal((2, D1, 1)), 0.1 * rng.standard_normal((2, D2, 1))
    paper = _run_core(None, X, U, V)
    whitened = _run_core(KroneckerLaw(np.eye(D1), np.eye(D2)), X, U, V)
    assert not paper.robust and whitened.robust
    for arm in (0, 1):
        a, b = paper.interval(arm, "one"), whitened.interval(arm, "one")
        assert b.estimate == pytest.approx(a.estimate, rel=1e-9, abs=1e-12)
        assert b.standard_error == pytest.approx(a.standard_error, rel=0.1)
    se = whitened.standard_errors()[0, 1]
    assert se == pytest.approx(whitened.interval(0, "one").standard_error, rel=1e-12)


def test_a_design_held_by_a_few_rounds_shows_in_its_share():
    # Images whose pixel (0, 0) is on in 0.2% of them, with unit second moment: the entry
    # target's variance rests on those few rounds.
    rng = np.random.default_rng(16)
    X = rng.standard_normal((3000, D1, D2))
    X[:, 0, 0] = np.sqrt(500.0) * (rng.random(3000) < 0.002)
    U, V = 0.1 * rng.standard_normal((2, D1, 1)), 0.1 * rng.standard_normal((2, D2, 1))
    law = SecondMomentLaw.of_contexts(X)
    inf = LinearFormInference(D1, D2, 1, 2, {"e00": _e00()}, context_law=law)
    for t, x in enumerate(X[:1500]):
        inf.update(U, V, x, t % 2, float(rng.normal()), np.array([0.5, 0.5]))
    assert np.nanmax(inf.design_shares()[:, 0]) > 0.5
    quiet = _run_core(None, rng.standard_normal((1500, D1, D2)), U, V)
    assert np.nanmax(quiet.design_shares()) < 0.5


def _e00():
    e = np.zeros((D1, D2))
    e[0, 0] = 1.0
    return e


def test_uniform_entry_frequencies_give_the_papers_completion_estimate():
    # EntryLaw's per-round scale 1/p_jk against Appendix C's c = d1 d2: the same estimate
    # and the same σ̂·Ŝ/√n, to rounding (a scale applied twice would multiply it by d1 d2;
    # the robust form, which completion contexts do not take, differs beyond rounding).
    rng = np.random.default_rng(17)
    n = 3000
    idx = np.stack([rng.integers(0, D1, n), rng.integers(0, D2, n)], axis=1)
    U, V = 0.1 * rng.standard_normal((2, D1, 1)), 0.1 * rng.standard_normal((2, D2, 1))
    T = {"e": _e00()}
    cores = [
        LinearFormInference(D1, D2, 1, 2, T, context="completion", context_law=law)
        for law in (None, EntryLaw(np.ones((D1, D2))))
    ]
    for t in range(n):
        y = float(rng.normal())
        for core in cores:
            core.update(U, V, idx[t], t % 2, y, np.array([0.5, 0.5]))
    paper, entries = (core.interval(0, "e") for core in cores)
    assert entries.estimate == pytest.approx(paper.estimate, rel=1e-9, abs=1e-12)
    assert not cores[1].robust  # completion contexts keep the product form
    assert entries.standard_error == pytest.approx(paper.standard_error, rel=1e-9)


def test_an_ill_conditioned_law_warns_and_a_correlated_one_does_not():
    # A pixel that barely varies (s.d. 1e-4 against 1): the law's condition number is 1e8.
    rng = np.random.default_rng(18)
    X = rng.standard_normal((400, D1, D2))
    X[:, 0, 0] *= 1e-4
    U, V = 0.1 * rng.standard_normal((2, D1, 1)), 0.1 * rng.standard_normal((2, D2, 1))
    flat = SecondMomentLaw.of_contexts(X)
    assert flat.condition_number() > CONDITION_LIMIT
    inf = _run_core(flat, X, U, V, projection="tangent")
    with pytest.warns(ContextLawWarning, match="barely vary.*projection='none'"):
        inf.interval(0, "one")
    # "auto" (the default) takes the debiased mean there, and "one" is identified: quiet
    auto = _run_core(flat, X, U, V)
    assert auto.projection == "none"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLawWarning)
        auto.interval(0, "one")
    estimated = _run_core("estimated", X, U, V)
    with pytest.warns(ContextLawWarning, match="barely vary"):
        estimated.interval(0, "one")
    law = KroneckerLaw(ar1_correlation(D1, 0.9), ar1_correlation(D2, 0.9))
    Lr, Lc = np.linalg.cholesky(law.row_cov), np.linalg.cholesky(law.col_cov)
    quiet = _run_core(law, Lr @ rng.standard_normal((400, D1, D2)) @ Lc.T, U, V)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLawWarning)
        quiet.interval(0, "one")


def test_a_kronecker_estimate_is_refused_for_completion_contexts_naming_the_entry_law():
    with pytest.raises(ValueError, match="EntryLaw"):
        LinearFormInference(
            D1, D2, 1, 2, {"e": _e00()}, context="completion", context_law="estimated-kronecker"
        )
    # "estimated" picks the whole second moment at this size, which a diagonal one is.
    core = LinearFormInference(
        D1, D2, 1, 2, {"e": _e00()}, context="completion", context_law="estimated"
    )
    assert core.context_law.structure == "full"
