"""The paper's three algorithms in plain numpy against the fast paths.

:func:`agents.estimator.sgd_step_reference` (Algorithm 1, eq. (8)),
:func:`inference.cores.linear_form.debiased_sums_reference` (Algorithm 2) and
:func:`inference.cores.linear_form_readout.readout_reference` (Algorithm 3) are driven on the same
rounds as :class:`agents.LowRankSGD` and a :class:`inference.LinearFormInference` core fed as
the inference wrappers feed it (:class:`inference.wrappers.shared_estimator.SharedEstimate`: a
snapshot before the estimator's step, absorbed after it), under both engines, for Gaussian
and completion contexts; they agree to ``1e-10`` relative.  The propensities vary from
round to round (an ε-greedy policy on the current estimate), so a dropped ``1/π`` weight, a
wrong ``c`` or step size, or a projection of the wrong kind shows.
"""

from __future__ import annotations

import numpy as np
import pytest

from agents.estimator import LowRankSGD, sgd_step_reference
from inference.cores.linear_form import LinearFormInference, debiased_sums_reference
from inference.cores.linear_form_readout import readout_reference
from inference.wrappers.shared_estimator import SharedEstimate
from lrbandit_gym import engine

D1, D2, RANK, K, ROUNDS = 4, 5, 2, 3, 400  # past t* = 300, where the step decays
EPS = 0.3  # ε-greedy: 1/π_t(a_t) takes the values 1/(1 − ε + ε/K) and K/ε
TOL = 1e-10

ENGINES = ["numpy"] + (["numba"] if engine.numba_available() else [])


def _close(fast, ref, what):
    fast, ref = np.asarray(fast, dtype=float), np.asarray(ref, dtype=float)
    err = np.max(np.abs(fast - ref)) / max(np.max(np.abs(ref)), 1e-300)
    assert err <= TOL, f"{what}: relative error {err:.3g}"


def _context(rng, context):
    if context == "gaussian":
        return rng.standard_normal((D1, D2))
    X = np.zeros((D1, D2))
    X[rng.integers(D1), rng.integers(D2)] = 1.0
    return X


def _run(context, n0, seed, projection="tangent", point_estimate="one-step"):
    """Play ROUNDS rounds of an ε-greedy policy on a LowRankSGD, feeding two inference
    cores as the wrappers do; return them and the rounds the references read."""
    rng = np.random.default_rng(seed)
    truth = rng.standard_normal((K, D1, RANK)) @ rng.standard_normal((K, RANK, D2))
    scale = np.array([1.0, 2.0, 0.05])[:, None, None]  # the last arm's step meets the floor
    targets = {"T1": np.eye(D1, D2), "T2": rng.standard_normal((D1, D2))}
    est = LowRankSGD(D1, D2, RANK, K, context=context)
    est.initialize(scale * (truth + 0.3 * rng.standard_normal(truth.shape)), prior_rounds=n0)
    cores = [
        LinearFormInference(
            D1,
            D2,
            RANK,
            K,
            targets,
            context=context,
            projection=projection,
            point_estimate=point_estimate,
            design_variance="pulled",  # the reference sums eq. (14)'s pulled-round terms
        )  # fmt: skip
        for _ in range(2)
    ]
    feed = SharedEstimate(est, cores[0])  # a LowRankSGD's wrapper: the estimator's products
    log = {k: [] for k in ("X", "a", "y", "p", "M")}
    for _ in range(ROUNDS):
        X = _context(rng, context)
        M = est.estimates.copy()
        p = np.full(K, EPS / K)
        p[int(np.argmax(est.predict(X)))] += 1 - EPS
        a = int(rng.choice(K, p=p))
        y = float(np.sum(scale[a] * truth[a] * X) + 0.1 * rng.standard_normal())
        round_ = est.check_round(X, a, y, p)
        snapshot = feed.snapshot(round_.contexts, round_.actions, round_.fingerprint)
        cores[1].update(*est.factors, X, a, y, p)  # any other estimator's: its factors
        est.step(round_)
        feed.absorb(snapshot, round_)
        for k, v in zip(log, (X, a, y, p, M), strict=True):
            log[k].append(v)
    return est, cores, targets, {k: np.array(v) for k, v in log.items()}


@pytest.mark.parametrize("eng", ENGINES)
@pytest.mark.parametrize(
    ("context", "n0"), [("gaussian", 0), ("gaussian", 2000), ("completion", 0)]
)
def test_sgd_step_matches_reference(eng, context, n0):
    """Every round of LowRankSGD is sgd_step_reference from the same estimates (eq. (8)),
    and the reference run on its own stays on the fast path's estimates."""
    with engine.use(eng):
        est, _, _, log = _run(context, n0, seed=1)
    c = D1 * D2 if context == "completion" else 1.0
    square = np.zeros(K)  # Σ_s 1{a_s=a}/π_s(a)², the warm-start cap's v̄ times t
    chain = log["M"][0]
    for t in range(1, ROUNDS + 1):
        X, a, y, p, M = (log[k][t - 1] for k in ("X", "a", "y", "p", "M"))
        square[a] += 1.0 / p[a] ** 2
        kw = {"c": c, "n0": n0, "v_bar": square[a] / t}
        after = log["M"][t] if t < ROUNDS else est.estimates
        new, _ = sgd_step_reference(M, X, y, a, p[a], t, RANK, **kw)
        _close(after, new, f"estimates after round {t}")
        chain, _ = sgd_step_reference(chain, X, y, a, p[a], t, RANK, **kw)
    _close(est.estimates, chain, "estimates after the reference's own run")


def _check_core(core, targets, log, sums, point_estimate):
    """The core's Algorithm 2 read-outs and Algorithm 3 intervals against the references'."""
    M_sum, sigma_sum, S2_sum = sums
    T, n = np.stack(list(targets.values())), ROUNDS
    assert core.n_obs == n and (core.n_pulls > 0).all()
    _close(core.sigma2, sigma_sum / n, "sigma^2, eq. (13)")
    _close(core.S2, S2_sum / n, "S^2, eq. (14)")
    for arm in range(K):
        _close(core.debiased_mean(arm), M_sum[arm] / n, f"M^unbs_{arm}, eq. (11)")
        for k, name in enumerate(targets):
            ref = readout_reference(
                M_sum[arm], sigma_sum[arm], S2_sum[arm, k], n, log["M"][-1, arm], T[k], RANK,
                level=0.9, point_estimate=point_estimate,
                information=np.sum(log["a"] == arm), mean_scale=core.context_law.mean_scale(),
            )  # fmt: skip
            got = core.interval(arm, name, confidence_level=0.9)
            fast = (got.estimate, got.standard_error, got.low, got.high)
            _close(fast, ref, f"<M_{arm}, {name}>: estimate, se, low, high")


@pytest.mark.parametrize("eng", ENGINES)
@pytest.mark.parametrize("context", ["gaussian", "completion"])
@pytest.mark.parametrize(
    ("projection", "point_estimate"), [("tangent", "one-step"), ("paper", "projection")]
)
def test_debiased_sums_and_readout_match_reference(eng, context, projection, point_estimate):
    """σ̂², Ŝ², M^unbs (Algorithm 2) and the intervals (Algorithm 3) of a core fed by the
    shared estimator, and of one fed every arm's factors, are the references' on the same
    rounds."""
    with engine.use(eng):
        _, cores, targets, log = _run(context, 0, 2, projection, point_estimate)
    c = D1 * D2 if context == "completion" else 1.0
    T = np.stack(list(targets.values()))
    sums = debiased_sums_reference(
        log["X"], log["a"], log["y"], log["p"], log["M"], T, RANK, c=c, projection=projection
    )
    for core in cores:
        _check_core(core, targets, log, sums, point_estimate)
