"""The two engines (lrbandit_gym.engine): numpy and the numba kernels compute the same
rounds, rank-deficient and diverging pairs included, and the switch validates its input."""

from __future__ import annotations

import numpy as np
import pytest

from lrbandit_gym import engine

numba_only = pytest.mark.skipif(not engine.numba_available(), reason="needs numba (fast extra)")


# --------------------------------------------------------------------------- the switch
def test_set_engine_validates_and_use_restores():
    before = engine.get_engine()
    with pytest.raises(ValueError, match="'cuda'"):
        engine.set_engine("cuda")
    assert engine.get_engine() == before  # a refused choice changes nothing
    with engine.use("numpy"):
        assert engine.active_engine() == "numpy" and not engine.compiled()
    assert engine.get_engine() == before


def test_numba_requested_without_numba_is_an_error(monkeypatch):
    monkeypatch.setattr(engine, "numba_available", lambda: False)
    with pytest.raises(ImportError, match=r"lrbandit-gym\[fast\]"):
        engine.set_engine("numba")
    with engine.use("auto"):
        assert engine.active_engine() == "numpy"  # auto: numpy when numba is missing


def test_broken_numba_warns_and_auto_runs_numpy(monkeypatch):
    import sys

    monkeypatch.setattr(engine, "_numba_ok", None)
    monkeypatch.setitem(sys.modules, "numba", None)  # "import numba" raises ImportError
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: object())
    with pytest.warns(RuntimeWarning, match="cannot be imported"):
        assert not engine.numba_available()
    with engine.use("auto"):
        assert engine.active_engine() == "numpy"
    with pytest.raises(ImportError, match="needs numba"):
        engine.set_engine("numba")


# --------------------------------------------------------------------------- agreement
def _run_estimator(name, M_init, X, A, Y, P, **kwargs):
    from agents import LowRankSGD

    B = None if X.ndim == 3 else X.shape[1]
    K, d1, d2 = M_init.shape[-3:]
    with engine.use(name):
        est = LowRankSGD(d1, d2, kwargs.pop("rank"), K, n_trials=B, **kwargs)
        est.initialize(M_init)
        res = [est.update(X[t], A[t], Y[t], P[t]) for t in range(len(X))]
        return est, np.array(res)


@numba_only
@pytest.mark.parametrize(
    ("n_trials", "propensities", "K"), [(None, "known", 2), (7, "known", 3), (7, "unknown", 2)]
)
def test_estimator_engines_agree(n_trials, propensities, K):
    rng = np.random.default_rng(3)
    d1, d2, r, T = 9, 6, 2, 120
    lead = () if n_trials is None else (n_trials,)
    M_init = rng.standard_normal((*lead, K, d1, r)) @ rng.standard_normal((*lead, K, r, d2))
    X = rng.standard_normal((T, *lead, d1, d2))
    A = rng.integers(0, K, (T, *lead))
    Y = rng.standard_normal((T, *lead))
    P = rng.dirichlet(np.ones(K), (T, *lead)) * 0.8 + 0.2 / K
    runs = {
        name: _run_estimator(
            name, M_init, X, A, Y, P, rank=r, propensities=propensities, step_scale=0.05
        )
        for name in ("numpy", "numba")
    }
    (e0, r0), (e1, r1) = runs["numpy"], runs["numba"]
    np.testing.assert_allclose(r1, r0, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(e1.estimates, e0.estimates, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(e1.singular_values, e0.singular_values, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(e1.counts, e0.counts)
    U, V = e1.factors  # stored balanced: UᵀU = VᵀV = diag(singular values)
    D = e1.singular_values[..., None] * np.eye(r)
    np.testing.assert_allclose(np.swapaxes(U, -1, -2) @ U, D, atol=1e-10)
    np.testing.assert_allclose(np.swapaxes(V, -1, -2) @ V, D, atol=1e-10)


@numba_only
def test_kernel_flags_rank_deficient_pairs_for_the_eigen_route(awkward_factor_pairs):
    """Pairs the numpy engine balances by eigendecompositions are flagged and left alone by
    the kernel; the estimator then balances them as numpy does."""
    from agents.estimator import kernels
    from agents.estimator.balancing import balance

    N, r = 30, 3
    U, V = awkward_factor_pairs(N)
    V[3] = np.nan  # diverged
    Ub, Vb, sv, work = U.copy(), V.copy(), np.zeros((N, r)), np.empty((10, r, r))
    status = np.array([kernels.balance_pair(Ub[i], Vb[i], sv[i], work) for i in range(N)])
    assert status[0] == status[1] == kernels.WEAK
    assert status[3] == kernels.NONFINITE
    assert (status[[2, *range(4, N)]] == kernels.OK).all()
    for i in (0, 1, 3):  # left as they were
        np.testing.assert_array_equal(Ub[i], U[i])
    ok = status == kernels.OK
    Ur, Vr, sr = balance(U[ok], V[ok])
    np.testing.assert_allclose(sv[ok], sr, rtol=1e-10)
    np.testing.assert_allclose(
        Ub[ok] @ Vb[ok].transpose(0, 2, 1),
        U[ok] @ V[ok].transpose(0, 2, 1),
        atol=1e-12 * np.abs(U[ok] @ V[ok].transpose(0, 2, 1)).max(),
    )
    # the same columns up to sign (the eigenvectors' signs are free)
    np.testing.assert_allclose(np.abs(Ub[ok]), np.abs(Ur), atol=1e-9 * np.abs(Ur).max())


@numba_only
def test_rank_deficient_start_agrees_across_engines():
    from agents import LowRankSGD

    rng = np.random.default_rng(5)
    M = rng.standard_normal((2, 6, 1)) @ rng.standard_normal((2, 1, 5))  # rank 1 < r = 2
    X = rng.standard_normal((20, 6, 5))
    out = {}
    for name in ("numpy", "numba"):
        with engine.use(name):
            est = LowRankSGD(6, 5, 2)
            with pytest.warns(RuntimeWarning, match="fewer than rank"):
                est.initialize(M)
            for x in X:
                est.update(x, 1, 0.3, np.array([0.5, 0.5]))
            out[name] = est.estimates
    np.testing.assert_allclose(out["numba"], out["numpy"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["numpy", pytest.param("numba", marks=numba_only)])
def test_divergence_raises_without_corrupting_state_in_both_engines(name):
    from agents import LowRankSGD

    with engine.use(name):
        est = LowRankSGD(5, 4, 2, n_trials=3, step_scale=1e300, step_offset=1)
        est.initialize(np.random.default_rng(0).standard_normal((2, 5, 4)))
        before = est.state_dict()
        X = np.ones((3, 5, 4))
        X[1] = 1e10  # only trial 1 diverges: trials 0 and 2 must not move either
        with pytest.raises(FloatingPointError, match="step_scale"), np.errstate(all="ignore"):
            est.update(X, np.array([0, 1, 0]), np.array([0.0, 1e150, 0.0]), np.full((3, 2), 0.5))
        after = est.state_dict()
    for key in ("U", "V", "singular_values", "counts", "t"):
        np.testing.assert_array_equal(after[key], before[key])


@numba_only
def test_symmetric_eigen_matches_lapack():
    from agents.estimator.kernels import symmetric_eigen

    rng = np.random.default_rng(2)
    for r in (1, 2, 3, 5, 8):
        for repeated in (False, True):
            Q0 = np.linalg.qr(rng.standard_normal((r, r)))[0]
            lam0 = rng.uniform(0.1, 3.0, r)
            if repeated and r > 1:
                lam0[1] = lam0[0]
            S = (Q0 * lam0) @ Q0.T
            Q, lam = np.empty((r, r)), np.empty(r)
            symmetric_eigen(S.copy(), Q, lam)
            np.testing.assert_allclose(np.sort(lam), np.linalg.eigvalsh(S), rtol=1e-12)
            np.testing.assert_allclose((Q * lam) @ Q.T, S, atol=1e-12)
            np.testing.assert_allclose(Q.T @ Q, np.eye(r), atol=1e-12)


@numba_only
def test_study_chunk_engines_agree():
    """A whole study chunk — warm start, ε-greedy SGD, both projections, the negative
    control, the exploration-only baseline and the value interval — gives the same
    intervals under both engines."""
    from lrbandit_gym.experiments.studies import StudyConfig, run_chunk

    config = StudyConfig(
        d1=8,
        d2=7,
        rank=2,
        warm_start=400,
        checkpoints=(60, 150),
        value=True,
        variants=("paper", "no_ipw", "exploration_only"),
    )
    out = {}
    for name in ("numpy", "numba"):
        with engine.use(name):
            out[name] = run_chunk(config, 6, 9)
    for key, ref in out["numpy"].items():
        if key == "phase_seconds":
            continue
        got = out["numba"][key]
        if np.asarray(ref).dtype.kind == "f":
            np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12, err_msg=key)
        else:
            np.testing.assert_array_equal(got, ref, err_msg=key)
