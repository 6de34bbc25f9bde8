"""The low-rank ground truth of a matrix-context bandit and its oracle quantities.

docs/method.md §1: each arm's parameter ``M_a = U_a diag(s_a) V_aᵀ`` with ``U_a, V_a`` the Q
factors of Gaussian matrices; the optimal value ``V* = E[max_a <M_a, X>]`` has closed forms.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["draw_low_rank_truth", "gaussian_expected_max", "optimal_value", "validate_params"]

_RANK_RTOL = 1e-10


def _singular_value_table(singular_values, n_actions: int, rank: int) -> np.ndarray:
    """Broadcast ``singular_values`` (scalar, (rank,) or (K, rank)) to shape (K, rank)."""
    s = np.asarray(singular_values, dtype=float)
    if s.ndim == 0:
        s = np.full((n_actions, rank), float(s))
    elif s.ndim == 1:
        if s.shape != (rank,):
            raise ValueError(
                f"singular_values must be a scalar, a length-rank ({rank}) vector or a "
                f"(n_actions, rank) = ({n_actions}, {rank}) array; got shape {s.shape}: {s!r}"
            )
        s = np.broadcast_to(s, (n_actions, rank)).copy()
    elif s.shape != (n_actions, rank):
        raise ValueError(
            f"singular_values must be a scalar, a length-rank ({rank}) vector or a "
            f"(n_actions, rank) = ({n_actions}, {rank}) array; got shape {s.shape}"
        )
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"singular_values must be finite and positive; got {s.tolist()!r}")
    return s


def draw_low_rank_truth(
    d1: int, d2: int, rank: int, n_actions: int, singular_values=1.0, seed=0
) -> np.ndarray:
    """Draw ``(K, d1, d2)`` rank-``rank`` parameters as in the paper's simulations.

    ``U_a`` and ``V_a`` are the Q factors of ``d1×r`` and ``d2×r`` standard Gaussian
    matrices, and ``M_a = U_a diag(s_a) V_aᵀ`` (Section 5 of the paper).

    Parameters
    ----------
    d1, d2, rank, n_actions : int
        Sizes; validated by the caller.
    singular_values : float, array of shape (rank,) or (n_actions, rank)
        Top-r singular values of every arm.
    seed : int, SeedSequence or None
        Seed of the truth, independent of the environment's reset seed.
    """
    s = _singular_value_table(singular_values, n_actions, rank)
    rng = np.random.default_rng(seed)
    params = np.empty((n_actions, d1, d2))
    for a in range(n_actions):
        u = np.linalg.qr(rng.standard_normal((d1, rank)))[0]
        v = np.linalg.qr(rng.standard_normal((d2, rank)))[0]
        params[a] = (u * s[a]) @ v.T
    return params


def validate_params(params, n_actions: int, d1: int, d2: int, rank: int) -> np.ndarray:
    """Check a user-supplied truth: shape ``(K, d1, d2)``, finite, every arm of rank ≤ ``rank``."""
    p = np.asarray(params, dtype=float)
    if p.shape != (n_actions, d1, d2):
        raise ValueError(
            f"params must have shape (n_actions, d1, d2) = ({n_actions}, {d1}, {d2}); got {p.shape}"
        )
    if not np.all(np.isfinite(p)):
        raise ValueError("params must be finite; got NaN or inf entries")
    for a in range(n_actions):
        sv = np.linalg.svd(p[a], compute_uv=False)
        arm_rank = int(np.sum(sv > _RANK_RTOL * max(sv[0], 1e-300))) if sv[0] > 0 else 0
        if arm_rank > rank:
            raise ValueError(
                f"params[{a}] has rank {arm_rank} > rank={rank} "
                f"(singular values {np.round(sv[: rank + 2], 6).tolist()} ...)"
            )
    return p.copy()


def _orthant_probability(cov: np.ndarray) -> float:
    """``P(W ≥ 0)`` for a zero-mean Gaussian vector ``W`` with covariance ``cov``.

    Exact closed forms up to dimension 3 (Sheppard / Childs); beyond that scipy's Genz-Bretz
    integration with tight tolerances.
    """
    m = cov.shape[0]
    if m == 0:
        return 1.0
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    if np.any(sd <= 1e-14):
        # A coordinate that is a.s. zero contributes a boundary event; drop it (measure-zero
        # ties between arms are removed before this point).
        keep = sd > 1e-14
        return _orthant_probability(cov[np.ix_(keep, keep)]) if keep.any() else 1.0
    corr = np.clip(cov / np.outer(sd, sd), -1.0, 1.0)
    if m == 1:
        return 0.5
    if m == 2:
        return 0.25 + math.asin(corr[0, 1]) / (2 * math.pi)
    if m == 3:
        return 0.125 + (math.asin(corr[0, 1]) + math.asin(corr[0, 2]) + math.asin(corr[1, 2])) / (
            4 * math.pi
        )
    from scipy import stats  # here: scipy.stats is most of the package's import time

    # P(W >= 0) = P(-W <= 0) and -W has the same zero-mean law; a fixed rng makes the
    # randomised lattice rule deterministic.
    return float(
        stats.multivariate_normal.cdf(
            np.zeros(m),
            mean=np.zeros(m),
            cov=corr,
            allow_singular=True,
            maxpts=200_000 * m,
            abseps=1e-9,
            releps=1e-8,
            rng=np.random.default_rng(0),
        )
    )


def gaussian_expected_max(gram: np.ndarray) -> float:
    """``E[max_a Z_a]`` for ``Z ~ N(0, gram)`` (Stein's identity, exact for K ≤ 5).

    ``E[Z_i 1{Z_i ≥ Z_j ∀j}] = Σ_{j≠i} (G_ii − G_ij) φ_{W_j}(0) P(W_{-j} ≥ 0 | W_j = 0)`` with
    ``W_j = Z_i − Z_j``; the conditional orthant probability has dimension K − 2.
    """
    # Identical arms tie with probability one and never change the maximum: keep one of each.
    k = gram.shape[0]
    keep: list[int] = []
    for i in range(k):
        dup = False
        for j in keep:
            diff_var = gram[i, i] + gram[j, j] - 2 * gram[i, j]
            if diff_var <= 1e-14 * max(gram[i, i] + gram[j, j], 1e-300):
                dup = True
                break
        if not dup:
            keep.append(i)
    g = gram[np.ix_(keep, keep)]
    k = g.shape[0]
    if k == 1:
        return 0.0
    total = 0.0
    for i in range(k):
        others = [j for j in range(k) if j != i]
        # W = Z_i - Z_others, Cov(W) = A G Aᵀ with A = [1 ... -e_j ...]
        a = np.zeros((k - 1, k))
        a[:, i] = 1.0
        for row, j in enumerate(others):
            a[row, j] = -1.0
        cov_w = a @ g @ a.T
        cov_zw = (a @ g)[:, i]  # Cov(Z_i, W_j) = G_ii - G_ij
        for row in range(k - 1):
            var_j = cov_w[row, row]
            rest = [q for q in range(k - 1) if q != row]
            cond = cov_w[np.ix_(rest, rest)] - np.outer(cov_w[rest, row], cov_w[rest, row]) / var_j
            density0 = 1.0 / math.sqrt(2 * math.pi * var_j)
            total += cov_zw[row] * density0 * _orthant_probability(cond)
    return total


def optimal_value(params: np.ndarray, context: str) -> float:
    """``V* = E[max_a <M_a, X>]`` (docs/method.md §1).

    Gaussian contexts: ``<M_a, X>`` is a zero-mean Gaussian vector with covariance
    ``G_ab = <M_a, M_b>``; K = 2 gives ``‖M_1 − M_0‖_F/√(2π)``, K ≤ 5 is exact through
    closed-form orthant probabilities, K ≥ 6 uses deterministic Genz-Bretz integration.
    Completion contexts: the mean over entries of ``max_a M_a[j, k]``.
    """
    params = np.asarray(params, dtype=float)
    if context == "completion":
        return float(params.max(axis=0).mean())
    if context != "gaussian":
        raise ValueError(f"context must be 'gaussian' or 'completion'; got {context!r}")
    flat = params.reshape(params.shape[0], -1)
    if params.shape[0] == 2:
        return float(np.linalg.norm(flat[1] - flat[0]) / math.sqrt(2 * math.pi))
    return gaussian_expected_max(flat @ flat.T)
