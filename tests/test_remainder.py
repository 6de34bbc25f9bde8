"""The one-step read-out's remainder variance τ² (inference.cores.remainder).

τ² = (σ̂² c̄ / N_i)² Σ_k λ_k⁻² ‖P_Û⊥ T P_V̂⊥‖²_F sizes R = <P_Û⊥ M P_V̂⊥, T>, the part of
<M, T> the one-step estimate leaves out.  Checked here: the fast geometry against plain
numpy, the first-order variance against a Monte Carlo of R for a least-squares-like
estimate, the law's c̄ against tr(Σ⁺)/(d1 d2), and the pulls N_i a wrapper counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from inference import ParameterInference
from inference.cores.exploration_only import ExplorationOnlyInference
from inference.cores.linear_form import LinearFormInference
from inference.cores.remainder import (
    remainder_geometry,
    remainder_variance,
    remainder_variance_reference,
)
from inference.cores.running_law import RunningSecondMoment
from lrbandit_gym.context_law import (
    EntryLaw,
    EstimatedLaw,
    IsotropicLaw,
    KroneckerLaw,
    SecondMomentLaw,
    ar1_correlation,
)


def _targets(rng, d1, d2):
    entry = np.zeros((d1, d2))
    entry[0, 0] = 1.0
    dense = rng.standard_normal((d1, d2))
    return np.stack([entry, dense / np.linalg.norm(dense)])


def test_geometry_is_the_plain_numpy_formula():
    """Non-orthogonal factors of any scale: the r x r algebra gives the SVD's λ_k and the
    dense projectors' ‖P_Û⊥ T P_V̂⊥‖²."""
    rng = np.random.default_rng(0)
    B, d1, d2, r = 4, 7, 5, 2
    U, V = rng.standard_normal((B, d1, r)), 3.0 * rng.standard_normal((B, d2, r))
    T = _targets(rng, d1, d2)
    got = remainder_geometry(U, V, T)
    for b in range(B):
        for k in range(len(T)):
            ref = remainder_variance_reference(U[b] @ V[b].T, T[k], r, 1.0, 1.0, 1.0)
            assert got[b, k] == pytest.approx(ref, rel=1e-10)
    tau2 = remainder_variance(got, np.full(B, 0.5), 4.0, np.full(B, 8.0))
    np.testing.assert_allclose(tau2, 0.25**2 * got, rtol=1e-15)


def test_an_estimate_of_lower_rank_has_no_remainder_term():
    """Without a rank-r tangent space the one-step read-out is the truncated SVD (no τ²)."""
    rng = np.random.default_rng(1)
    U, V = rng.standard_normal((2, 6, 2)), rng.standard_normal((2, 5, 2))
    U[1, :, 1] = 0.0
    got = remainder_geometry(U, V, _targets(rng, 6, 5))
    assert (got[0] > 0).all() and (got[1] == 0).all()


@pytest.mark.parametrize("target", [0, 1])
def test_first_order_variance_matches_the_remainder_it_sizes(target):
    """A rank-2 truth seen with N(0, s²) noise on every entry (a least-squares fit's error)
    and truncated to rank 2: the mean square of R = <P_Û⊥ M P_V̂⊥, T> over 4000 draws is
    τ² = s⁴ Σ λ_k⁻² ‖P_U⊥ T P_V⊥‖² (a factor 2 either way, or λ_k⁻¹ for λ_k⁻², fails), and
    the plug-in from each draw's estimate is within 10% of it."""
    rng = np.random.default_rng(2)
    d1, d2, r, s, B = 20, 15, 2, 0.01, 4000
    U0 = np.linalg.qr(rng.standard_normal((d1, r)))[0]
    V0 = np.linalg.qr(rng.standard_normal((d2, r)))[0]
    lam = np.array([1.0, 0.5])
    M = (U0 * lam) @ V0.T
    T = _targets(rng, d1, d2)[target]
    W, sv, Vt = np.linalg.svd(M + s * rng.standard_normal((B, d1, d2)))
    W, Vt = W[:, :, :r], Vt[:, :r, :]
    P_U, P_V = np.eye(d1) - W @ W.swapaxes(1, 2), np.eye(d2) - Vt.swapaxes(1, 2) @ Vt
    R = np.einsum("bij,ij->b", P_U @ M @ P_V, T)
    truth = s**4 * remainder_geometry((U0 * lam)[None], V0[None], T[None])[0, 0]
    ratio = np.mean(R**2) / truth
    assert 0.9 < ratio < 1.15, ratio
    root = np.sqrt(sv[:, None, :r])
    plug_in = s**4 * remainder_geometry(W * root, Vt.swapaxes(1, 2) * root, T[None])[:, 0]
    assert plug_in.mean() / truth == pytest.approx(1.0, abs=0.1)


def _brute_mean_scale(law, d1, d2):
    basis = np.eye(d1 * d2).reshape(d1 * d2, d1, d2)
    return np.einsum("kij,kij->", law.whiten(basis), basis) / (d1 * d2)


def test_mean_scale_is_the_mean_diagonal_of_the_inverse_second_moment():
    rng = np.random.default_rng(3)
    d1, d2 = 4, 3
    A = rng.standard_normal((d1 * d2, d1 * d2))
    mean = rng.standard_normal((d1, d2))
    probs = rng.random((d1, d2))
    probs[0, 1] = 0.0
    laws = [
        IsotropicLaw(d1, d2, "gaussian"),
        IsotropicLaw(d1, d2, "completion"),
        KroneckerLaw(ar1_correlation(d1, 0.7), 2.0 * ar1_correlation(d2, 0.3)),
        KroneckerLaw(ar1_correlation(d1, 0.7), ar1_correlation(d2, 0.3), mean=mean),
        SecondMomentLaw(A @ A.T / (d1 * d2), (d1, d2)),
        EntryLaw(probs),
    ]
    for law in laws:
        assert law.mean_scale() == pytest.approx(_brute_mean_scale(law, d1, d2), rel=1e-9)
    assert laws[1].mean_scale() == d1 * d2


@pytest.mark.parametrize("structure", ["kronecker", "full"])
def test_an_estimated_laws_mean_scale_is_its_operators(structure):
    rng = np.random.default_rng(4)
    d1, d2, B = 4, 3, 2
    running = RunningSecondMoment(EstimatedLaw(d1, d2, structure), B)
    assert np.isnan(running.mean_scale()).all()  # no whitening yet
    for _ in range(60):
        running.observe(rng.standard_normal((B, d1, d2)) + 0.5)
    basis = np.eye(d1 * d2).reshape(d1 * d2, d1, d2)
    white = running.whiten(np.broadcast_to(basis, (B, *basis.shape)).copy())
    brute = np.einsum("bkij,kij->b", white, basis) / (d1 * d2)
    np.testing.assert_allclose(running.mean_scale(), brute, rtol=1e-9)


def test_the_wrapper_counts_the_warm_starts_pulls_and_keeps_them():
    """N_i includes the rounds before inference (the own warm start): counted per arm,
    saved with the state, and a state saved without them reads as none."""
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401  (registers the environment)

    env = gym.make("MatrixContextBandit-v0", d1=6, d2=5, rank=1, n_actions=2)
    T = {"T": np.eye(6, 5)}
    uniform = np.array([0.5, 0.5])
    wrapped = ParameterInference(env, T, rank=1, warm_start=200, propensity_fn=lambda o: uniform)
    wrapped.reset(seed=0)
    rng = np.random.default_rng(5)
    for _ in range(260):
        wrapped.step(int(rng.integers(2)))
    core = wrapped.core
    assert core.state.unweighted_pulls.sum() == 200 and core.state.unweighted_pulls.min() > 50
    assert core.n_obs == 60
    state = core.state_dict()
    fresh = LinearFormInference(6, 5, 1, 2, T)
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(fresh.state.unweighted_pulls, core.state.unweighted_pulls)
    old = {k: v for k, v in state.items() if k != "unweighted_pulls"}
    fresh.load_state_dict(old)
    assert (fresh.state.unweighted_pulls == 0).all()
    wider = fresh.interval(0, "T").standard_error
    assert wider > core.interval(0, "T").standard_error  # fewer pulls: a larger τ²


def test_the_exploration_only_baseline_counts_every_pull_of_its_sgd():
    """Its sums weigh the explored rounds only, but the SGD behind the estimate absorbs every
    round: N_i counts the unexplored pulls too."""
    rng = np.random.default_rng(6)
    d1, d2, r, K = 5, 4, 1, 2
    core = ExplorationOnlyInference(d1, d2, r, K, {"T": np.eye(d1, d2)})
    actions, flags = rng.integers(0, K, 50), rng.random(50) < 0.3
    for a, explored in zip(actions, flags, strict=True):
        U, V = rng.standard_normal((K, d1, r)), rng.standard_normal((K, d2, r))
        core.update(U, V, rng.standard_normal((d1, d2)), a, 0.1, explored, 0.3)
    s = core.state
    np.testing.assert_array_equal(s.pulls[0], np.bincount(actions[flags], minlength=K))
    np.testing.assert_array_equal(s.unweighted_pulls[0], np.bincount(actions[~flags], minlength=K))
