"""What the two factored fits of eq. (10) share: the weights, the penalty, the sweeps.

Both :func:`agents.warm_start.factored.factored_nuclear_norm_fit` (dense contexts) and
:func:`agents.warm_start.factored_completion.completion_factored_fit` (completion contexts
as indices) minimise eq. (10) restricted to rank ≤ r in factored form,

    (1/(2W)) Σ_t w_t (y_t − <U Vᵀ, X_t>)² + (λ/2)(‖U‖² + ‖V‖²),

by alternating ridge regressions.  They differ in how a sweep reads the contexts; what
they share lives here: each arm's normalised weights and effective number of rounds
(:func:`arm_weights`), the data-driven penalty ``λ = C σ̂ (√d1 + √d2)/√n_eff``
(:func:`data_penalty`), and the run of penalised sweeps followed by the unpenalised refit
sweeps (:func:`alternate`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["RIDGE_FLOOR", "alternate", "arm_weights", "data_penalty"]

#: Ridge of the unpenalised refit sweeps (and of arms whose penalty is zero): keeps the
#: systems of an arm with few or no rounds non-singular.
RIDGE_FLOOR = 1e-10


def data_penalty(
    sigma: np.ndarray, n_eff: np.ndarray, d1: int, d2: int, penalty_scale: float
) -> np.ndarray:
    """The data-driven ``λ = C σ̂ (√d1 + √d2)/√n_eff`` per arm (Negahban & Wainwright's rate).

    An arm without rounds (or whose spectral start fits exactly, e.g. all rewards 0) has
    ``σ̂ = 0`` and an all-zero system: it gets :data:`RIDGE_FLOOR`, which keeps it solvable
    (its estimate is then exactly zero).  Every other arm keeps its penalty.
    """
    rate = (np.sqrt(d1) + np.sqrt(d2)) / np.sqrt(np.maximum(n_eff, 1.0))
    lam = penalty_scale * sigma * rate
    return np.where(lam > 0, lam, RIDGE_FLOOR)


def alternate(sweep, U, V, lam, penalised_sweeps: int, refit_sweeps: int) -> np.ndarray:
    """Run ``sweep(U, V, lam) -> (U, V)`` with the penalty, then without it, and return
    every arm's ``U Vᵀ``.

    The unpenalised refit sweeps from the penalised solution remove its shrinkage (the
    role of the tangent-space refit in the proximal-gradient path).
    """
    for _ in range(penalised_sweeps):
        U, V = sweep(U, V, lam)
    for _ in range(refit_sweeps):
        U, V = sweep(U, V, np.full(len(lam), RIDGE_FLOOR))
    return np.matmul(U, V.swapaxes(-1, -2))


def arm_weights(
    actions: np.ndarray,
    rewards: np.ndarray,
    n_actions: int,
    weights: np.ndarray | None,
    penalty: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """What both factored fits (dense and index contexts) need per trial and arm.

    Parameters
    ----------
    actions, rewards : ndarray of shape (B, n)
    n_actions : int
    weights : ndarray of shape (B, n) or None (all 1)
    penalty : array_like broadcastable to (B, K), or None

    Returns
    -------
    omega : ndarray (B, n, K)
        Each arm's rounds' weights, normalised to sum to 1 (0 off the arm).
    n_eff : ndarray (B, K)
        Kish effective number of rounds per arm, ``(Σw)²/Σw²`` (0 without rounds).
    y : ndarray (B, n)
        The rewards as float.
    lam : ndarray (B, K) or None
        The penalty per trial and arm.
    """
    B, n = actions.shape
    w = np.ones((B, n)) if weights is None else np.asarray(weights, dtype=float)
    W = (actions[..., None] == np.arange(n_actions)) * w[..., None]  # (B, n, K)
    total = W.sum(axis=1)  # (B, K)
    omega = W / np.where(total > 0, total, 1.0)[:, None, :]  # normalised weights per arm
    n_eff = np.where((W**2).sum(1) > 0, total**2 / np.maximum((W**2).sum(1), 1e-300), 0.0)
    y = np.asarray(rewards, dtype=float)
    lam = None
    if penalty is not None:
        lam = np.broadcast_to(np.asarray(penalty, dtype=float), (B, n_actions))
    return omega, n_eff, y, lam
