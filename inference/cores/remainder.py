"""The one-step read-out's remainder, and the variance it adds to an interval (docs/method.md §4).

The one-step estimate ``m̂ = <M̂ + P_T̂(M^unbs − M̂), T>`` is exact on the tangent space at
``M̂`` and leaves out ``R = −<P_Û⊥ M P_V̂⊥, T>``.  With the estimate's error written through
its factors, ``P_Û⊥ U ≈ −δU`` and ``δU ≈ P_U⊥ Z V Λ⁻¹`` (likewise ``δV``), where ``Z`` is the
error of a least-squares fit of ``M`` with entries of variance ``s²``::

    R      ≈ Σ_k (P_U⊥ Z v_k)ᵀ T (P_V⊥ Zᵀ u_k) / λ_k
    Var R  ≈ s⁴ · Σ_k λ_k⁻² · ‖P_Û⊥ T P_V̂⊥‖²_F                        τ²
    s²     = σ̂² · c̄ / N_i,      c̄ = tr(Σ⁺)/(d1 d2)   (c under Σ = I/c)
    se     = (σ̂² Ŝ²/n + τ²)^½                                          eq. (15) with τ²

``N_i`` counts the rounds that pulled arm ``i`` and that the estimate rests on: the ones
before inference started (a warm start) and the ones since, weighed in the sums or not (the
exploration-only baseline's unexplored rounds).  ``R`` is of second order and
``τ²`` negligible where ``T`` meets the tangent space well; where ``T``'s tangent part is
as small as the tangent space's own uncertainty (a single entry on rows and columns the
singular vectors barely touch), ``R`` is as large as the main term, and an interval
without ``τ`` misses in the trials whose estimated tangent part came out small.

:func:`remainder_variance_reference` is ``τ²`` in plain numpy from one estimate;
:func:`remainder_geometry` computes the factor ``Σ_k λ_k⁻² ‖P_Û⊥ T P_V̂⊥‖²_F`` for a stack
of trials and every target from the factors' ``r x r`` Gram matrices.
"""

from __future__ import annotations

import numpy as np

from inference.cores.tangent_space import basis_transform

__all__ = ["remainder_geometry", "remainder_variance", "remainder_variance_reference"]


def remainder_variance_reference(M_hat, T, rank, sigma2, mean_scale, information):
    """``τ²`` for one estimate ``M̂`` (d1, d2) of rank ``rank`` and one target ``T``, in
    plain numpy (an SVD and dense projectors)."""
    W, lam, Zt = np.linalg.svd(M_hat)
    P_U = np.eye(M_hat.shape[0]) - W[:, :rank] @ W[:, :rank].T
    P_V = np.eye(M_hat.shape[1]) - Zt[:rank].T @ Zt[:rank]
    s2 = sigma2 * mean_scale / information
    return s2 * s2 * np.sum(lam[:rank] ** -2.0) * np.sum((P_U @ T @ P_V) ** 2)


def remainder_geometry(
    U: np.ndarray,
    V: np.ndarray,
    T: np.ndarray,
    transforms: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """``Σ_k λ_k⁻² · ‖P_Û⊥ T P_V̂⊥‖²_F`` of ``M̂ = U Vᵀ`` for every trial and target.

    With ``Q_U = U S_U`` and ``Q_V = V S_V`` orthonormal
    (:func:`~inference.cores.tangent_space.basis_transform`), ``M̂ = Q_U (S_U⁻¹ S_V⁻ᵀ) Q_Vᵀ``,
    so ``Σ_k λ_k⁻² = ‖S_Vᵀ S_U‖²_F``, and ``‖P_Û⊥ T P_V̂⊥‖²_F = ‖T‖² − ‖Q_Uᵀ T‖² −
    ‖T Q_V‖² + ‖Q_Uᵀ T Q_V‖²``.

    Parameters
    ----------
    U, V : ndarray of shape (B, d1, r) and (B, d2, r)
    T : ndarray of shape (n_T, d1, d2)
    transforms : (S_U, S_V), optional
        ``basis_transform(U)`` and ``basis_transform(V)`` where the caller has them already
        (the one-step read-out of the same estimate).

    Returns
    -------
    ndarray of shape (B, n_T)
        0 where ``M̂`` has rank below ``r`` (no rank-``r`` tangent space: the one-step
        read-out is then the truncated SVD, :func:`inference.cores.linear_form_readout.one_step`).
    """
    S_U, S_V = (basis_transform(U), basis_transform(V)) if transforms is None else transforms
    Q_U, Q_V = np.matmul(U, S_U), np.matmul(V, S_V)
    inverse_sq = np.square(np.matmul(S_V.swapaxes(-1, -2), S_U)).sum(axis=(-1, -2))
    UtT = np.matmul(Q_U.swapaxes(-1, -2)[:, None], T)  # Q_Uᵀ T, (B, n_T, r, d2)
    TV = np.matmul(T, Q_V[:, None])  # T Q_V, (B, n_T, d1, r)
    UtTV = np.matmul(UtT, Q_V[:, None])  # Q_Uᵀ T Q_V, (B, n_T, r, r)
    perp = (
        np.square(T).sum(axis=(-1, -2))
        - np.square(UtT).sum(axis=(-1, -2))
        - np.square(TV).sum(axis=(-1, -2))
        + np.square(UtTV).sum(axis=(-1, -2))
    )
    full = (np.abs(S_U).sum(axis=-2) > 0).all(axis=-1) & (np.abs(S_V).sum(axis=-2) > 0).all(axis=-1)
    return np.where(full[:, None], inverse_sq[:, None] * np.maximum(perp, 0.0), 0.0)


def remainder_variance(
    geometry: np.ndarray, sigma2: np.ndarray, mean_scale, information: np.ndarray
) -> np.ndarray:
    """``τ² = (σ̂² c̄ / N_i)² · geometry``, shape of ``geometry`` (B, n_T).

    ``sigma2`` and ``information`` are (B,) (the arm's ``σ̂²`` and ``N_i``), ``mean_scale``
    ``c̄`` a float or (B,).  A trial with ``N_i = 0`` gives NaN (its arm was never pulled).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        s2 = sigma2 * mean_scale / information
    return (s2 * s2)[..., None] * geometry
