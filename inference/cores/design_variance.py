"""The design part ``Ŝ²`` of a parameter's variance (docs/method.md §13).

Eq. (14) sums over the rounds that pulled arm ``i``::

    n Ŝ²_i = Σ_t 1{a_t = i}/π_t(i)² · c² <G_{i,t}, X_t>²            (design_variance="pulled")

Its conditional mean given the past is ``E[c² <G_{i,t}, X>² / π_t(i | X)]``, because the
indicator averages to ``π_t(i | X_t)``.  Every round's context and arm ``i``'s propensity in
it give the same conditional mean without the indicator::

    n Ŝ²_i = Σ_t c² <G_{i,t}, X_t>² / π_t(i | X_t)                   (design_variance="all-rounds")

and so does any mix of the two chosen by ``π_t(i | X_t)`` itself, which is known before
the arm is drawn.  On dense contexts the default takes a round's all-rounds term where the
arm's propensity is at least ``f =`` :data:`DESIGN_FLOOR`, and eq. (14)'s below it
(design_variance="auto"); on completion contexts it is eq. (14)::

    n Ŝ²_i = Σ_t [ 1{π_t(i|X_t) ≥ f} c²<G_{i,t}, X_t>²/π_t(i|X_t)
                  + 1{π_t(i|X_t) < f} 1{a_t = i} c²<G_{i,t}, X_t>²/π_t(i)² ]

Why: eq. (14) rests on the rounds that pulled the arm.  An arm explored with probability
``ε/K`` leaves a handful of terms of weight ``1/π²``, so ``Ŝ`` is small by chance in some
trials, together with ``σ̂²``, whose inverse-propensity mean rests on the same rounds, and
their intervals under-cover; the all-rounds term has one every round.  Where an arm's
propensity is tiny in some contexts (a softmax policy at a low temperature), the all-rounds
sum is dominated by those contexts, in which the arm is almost never pulled: the
predictable variance then describes events a run of thousands of rounds rarely sees, and
the interval becomes far wider than the estimate's spread.  Below the floor eq. (14)'s
terms count what did happen.  Under completion contexts ``<G_{i,t}, X_t>²`` is a
heavy-tailed draw (the revealed entry either lies on a target's rows and columns or not),
and the noise the estimate carries is that of the entries the pulled rounds revealed:
eq. (14) sums exactly those, while the all-rounds sum averages over entries the arm never
saw, so its intervals under-cover there (docs/reproduction.md, "Where few rounds carry an
arm").

:func:`design_terms_reference` is one round's terms in plain numpy; the core runs
:func:`all_arm_terms` and :func:`design_terms` (or the compiled kernels of
:mod:`inference.cores._kernels`) on the targets' singular triplets.
"""

from __future__ import annotations

import numpy as np

from agents.estimator.products import one_hot_products
from inference.cores.tangent_space import TargetTriplets, pulled_arm_terms
from lrbandit_gym.onehot import OneHotContexts

__all__ = [
    "DESIGN_FLOOR",
    "DESIGN_VARIANCES",
    "all_arm_terms",
    "design_floor",
    "design_terms",
    "design_terms_reference",
    "largest_factor",
]

#: The design variances of :class:`~inference.cores.linear_form.LinearFormInference`.
DESIGN_VARIANCES = ("auto", "pulled", "all-rounds")

#: The propensity from which ``design_variance="auto"`` takes a round's all-rounds term
#: (docs/reproduction.md, "Where few rounds carry an arm": 0.001 leaves a softmax policy at
#: τ = 0.5 over-covering, 0.01 calibrated).
DESIGN_FLOOR = 0.01


def design_floor(design_variance: str, context: str = "gaussian") -> float | None:
    """The propensity floor of a design variance on ``context`` ("gaussian" or
    "completion"): None for eq. (14) alone ("pulled", and "auto" on completion contexts),
    0 for every round's term ("all-rounds"), :data:`DESIGN_FLOOR` for "auto" on dense
    contexts."""
    if design_variance == "auto" and context == "completion":
        return None  # heavy-tailed designs: eq. (14) follows the revealed entries' noise
    return {"pulled": None, "all-rounds": 0.0, "auto": DESIGN_FLOOR}[design_variance]


def largest_factor(floor: float) -> float:
    """The largest ``1/π_t(i)`` whose round takes the all-rounds term (``inf`` at floor 0)."""
    return np.inf if floor == 0 else 1.0 / floor


def design_terms_reference(
    X, M, T, propensities, action, rank, c=1.0, projection="tangent", floor=0.0
):
    """One round's design terms in plain numpy: ``c² <G_i, X>² / π(i)`` where
    ``π(i) ≥ floor``, eq. (14)'s ``c² <G_i, X>² / π(i)²`` for the pulled arm below it, 0
    for the other arms below it.

    ``X`` (d1, d2), ``M`` (K, d1, d2) the estimates before the round, ``T`` (n_T, d1, d2),
    ``propensities`` (K,), ``action`` the pulled arm; returns (K, n_T).
    """
    out = np.zeros((len(M), len(T)))
    for i, Mi in enumerate(M):
        p = propensities[i]
        if p < floor and i != action:
            continue
        W, _, Zt = np.linalg.svd(Mi)
        P_U, P_V = W[:, :rank] @ W[:, :rank].T, Zt[:rank].T @ Zt[:rank]
        for k, Tk in enumerate(T):
            if projection == "none":
                G = Tk
            else:  # G = T − P_U⊥ T P_V⊥ ("tangent"), or without P_U T P_V ("paper")
                G = P_U @ Tk + Tk @ P_V - (1 if projection == "tangent" else 2) * P_U @ Tk @ P_V
            out[i, k] = c * c * np.sum(G * X) ** 2 / (p if p >= floor else p * p)
    return out


def all_arm_terms(
    U: np.ndarray,
    V: np.ndarray,
    X: np.ndarray | OneHotContexts,
    triplets: TargetTriplets,
    kappa: float,
) -> np.ndarray:
    """``<G_{i,t}, X_t>`` for every trial, arm and target, shape (B, K, n_T).

    ``U`` (B, K, d1, r), ``V`` (B, K, d2, r): every arm's factors before the round (any
    factors: the bases come from their Gram matrices); ``X`` (B, d1, d2), or completion
    contexts in index form.  The arms are one batch of ``B·K`` for
    :func:`~inference.cores.tangent_space.pulled_arm_terms`.
    """
    B, K, d1, r = U.shape
    d2 = V.shape[2]
    Uf, Vf = U.reshape(B * K, d1, r), V.reshape(B * K, d2, r)
    if isinstance(X, OneHotContexts):
        rows, cols = np.repeat(X.rows, K), np.repeat(X.cols, K)
        XV, XtU = one_hot_products(OneHotContexts.unchecked(rows, cols, d1, d2), Uf, Vf)
    else:
        XV = np.matmul(X[:, None], V).reshape(B * K, d1, r)
        XtU = np.matmul(X.swapaxes(-1, -2)[:, None], U).reshape(B * K, d2, r)
    _, g = pulled_arm_terms(Uf, Vf, None, triplets, kappa, products=(XV, XtU, None))
    return g.reshape(B, K, -1)


def design_terms(
    g: np.ndarray,
    factors: np.ndarray,
    floor: float,
    action: np.ndarray,
    weight: np.ndarray,
    c: float,
) -> np.ndarray:
    """One round's design terms (B, K, n_T) from ``g = <G_{i,t}, X_t>`` (B, K, n_T) and the
    arms' ``factors = 1/π_t(i)`` (B, K): ``c² g² / π`` where ``π ≥ floor``; below it the
    pulled arm's eq. (14) term ``(c w g)²`` (``weight`` ``w = 1/π_t(a_t)``, (B,)), 0 for
    the others."""
    above = factors <= largest_factor(floor)
    with np.errstate(invalid="ignore", over="ignore"):  # an infinite factor is below
        out = np.where(above[:, :, None], (c * c) * g * g * factors[:, :, None], 0.0)
    trials = np.arange(len(action))
    below = ~above[trials, action]
    if below.any():
        cw = c * weight[below]
        gp = g[trials[below], action[below]]
        out[trials[below], action[below]] = (cw[:, None] * gp) ** 2
    return out
