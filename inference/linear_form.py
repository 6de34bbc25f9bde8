"""Online inference on linear forms ``<M_i, T>`` of the arms' parameters (Section 3).

:class:`LinearFormInference` implements the online debiasing of Algorithm 2, the variance
estimators ``sigma_hat_i^2`` and ``S_hat_i^2`` of Section 3.3, the low-rank projection
and Wald interval of Algorithm 3, and the two-arm contrast of Corollary 3.3
(ALGORITHMS.md §4).  Everything is a running sum: memory is ``O(K d1 d2)`` per trial and
the per-round cost does not grow with the number of rounds.

How a round is absorbed (``B`` trials in lock step, ``K`` arms, rank ``r``)
--------------------------------------------------------------------------
* ``sum_t M_hat_{i,t-1}``: an estimate only changes when its arm is pulled, so each arm keeps
  the factors it was last given and a count of rounds they have been *held*.  Factors that
  differ from the stored ones (compared exactly, so no assumption about the caller; the
  wrappers instead pass the arms whose :class:`agents.LowRankSGD` version changed) first
  queue ``held * U V^T``, which one GEMM adds to the arm's accumulator every ``_RING``
  rounds.  With an SGD agent only the previous round's pulled arm changes: one
  ``d1 x d2 x r`` product per trial per round, not ``K``.
* The correction ``c 1{a_t=i}/pi_t(i) (y_t - <M_hat, X_t>) X_t`` goes into the same
  accumulator (only the pulled arm's is touched).
* ``S_i^2`` needs ``<G_t, X_t>`` for the pulled arm only.  Orthonormal bases come from the
  ``r x r`` Gram matrices (``Q_U = U L^{-T}`` from ``U^T U = L L^T``, or
  ``U R_U D_U^{-1/2}`` from its eigendecomposition when ill-conditioned), and

  ``<G, X> = <T, X P_V> + <T, P_U X> - kappa <T, P_U X P_V>``

  with ``kappa = 2`` for the paper's ``G = P_U⊥ T P_V + P_U T P_V⊥`` and ``kappa = 1`` for
  the tangent-space projection ``G = T - P_U⊥ T P_V⊥``.  Each term is evaluated from
  ``X Q_V`` (d1 x r) and ``Q_U^T X`` (r x d2) and the targets' singular triplets
  ``T = sum_l s_l x_l y_l^T`` (computed once), e.g. ``<x y^T, P_U X> =
  (Q_U^T x) . (Q_U^T X y)``; no ``d1 x d2`` projector is ever formed, and only the rows
  in the triplets' support are read: ``O(r^2)`` per triplet for ``e_i e_j^T`` targets,
  ``O(r (d1 + d2))`` for dense ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from scipy.linalg.blas import daxpy as _daxpy

from inference.results import (
    IntervalEstimate,
    normal_interval,
    trials_phrase,
    warn_insufficient,
)
from lrbandit_gym import engine
from lrbandit_gym.validation import (
    check_actions,
    check_arm,
    check_batch_vector,
    check_choice,
    check_confidence_level,
    check_factors,
    check_matrix_stack,
    check_n_trials,
    check_positive_int,
    check_propensities,
    check_target_name,
    check_targets,
)

__all__ = ["LinearFormInference"]

_CONTEXTS = ("gaussian", "completion")
_PROJECTIONS = ("tangent", "paper")
# Negative controls for validity studies, never for inference: "no_ipw" replaces 1/pi_t by 1
# (the bias adaptive sampling causes), "no_debias" drops the correction term (the bias of
# the low-rank estimate itself).  A study that cannot tell them from the real procedure
# has no power to certify it.
_ABLATIONS = (None, "no_ipw", "no_debias")
# An eigenvalue of U^T U below this fraction of the largest counts as zero: that direction
# is dropped from the basis instead of being divided by ~0.
_EIG_FLOOR = 1e-12
# Cholesky is ~10x cheaper than eigh for a stack of r x r matrices; a trial whose smallest
# pivot L_jj^2 is below this fraction of the largest diagonal entry of U^T U is redone with
# eigh (det = prod L_jj^2, so a tiny eigenvalue forces some small pivot).
_CHOL_FLOOR = 1e-6
# Singular values of a target below this fraction of its largest are dropped.
_TARGET_FLOOR = 1e-13
# Rounds of held * U V^T terms queued before they are added to the accumulators in one GEMM
# (a bounded buffer of factors, never of contexts).
_RING = 16


def _inverse_column_norms(F: np.ndarray, sq: np.ndarray | None = None) -> np.ndarray:
    """``diag(FᵀF)^{-1/2}`` as (B, r) for factors with orthogonal columns, so that
    ``F * s[:, None, :]`` is orthonormal (zero columns stay 0); ``sq``: the squared column
    norms when known (the singular values, for balanced factors)."""
    if sq is None:
        sq = np.einsum("bir,bir->br", F, F)
    top = sq.max(axis=-1, keepdims=True)
    keep = (sq > _EIG_FLOOR * top) & (top > 0)
    return np.where(keep, 1.0 / np.sqrt(np.where(keep, sq, 1.0)), 0.0)


def _basis_transform(F: np.ndarray) -> np.ndarray:
    """``r x r`` matrices ``S`` such that ``Q = F S`` is an orthonormal basis of ``col(F)``.

    Works on the Gram matrix ``F^T F`` only (never a ``d x d`` decomposition): ``S = L^{-T}``
    from its Cholesky factor, or ``S = R diag(lam^{-1/2})`` from its eigendecomposition for
    ill-conditioned or rank-deficient trials, where directions with
    ``lam <= _EIG_FLOOR * max(lam)`` give zero columns.  The projection ``Q Q^T`` does not
    depend on which basis is used.

    Parameters
    ----------
    F : ndarray of shape (B, d, r)

    Returns
    -------
    S : ndarray of shape (B, r, r)
    """
    gram = np.matmul(F.swapaxes(-1, -2), F)
    scale = np.diagonal(gram, axis1=-2, axis2=-1).max(axis=-1)
    try:
        L = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError:
        weak = np.ones(gram.shape[0], dtype=bool)
        S = np.empty_like(gram)
    else:
        pivots = np.diagonal(L, axis1=-2, axis2=-1)
        weak = ~(pivots.min(axis=-1) ** 2 > _CHOL_FLOOR * scale)
        S = np.linalg.inv(L).swapaxes(-1, -2)
    if weak.any():
        lam, R = np.linalg.eigh(gram[weak])
        top = lam[:, -1:]
        keep = (lam > _EIG_FLOOR * top) & (top > 0)
        inv_root = np.where(keep, 1.0 / np.sqrt(np.where(keep, lam, 1.0)), 0.0)
        S[weak] = R * inv_root[:, None, :]
    return S


def _factor_targets(T: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack the singular triplets of every target: ``T_k = sum_{l in k} s_l x_l y_l^T``.

    Returns
    -------
    Xs : ndarray of shape (d1, R)
    Ys : ndarray of shape (d2, R)
    Sw : ndarray of shape (R, n_T)
        ``Sw[l, k] = s_l`` if triplet ``l`` belongs to target ``k``, else 0.
    """
    xs, ys, cols = [], [], []
    nT = T.shape[0]
    for k in range(nT):
        u, sv, vt = np.linalg.svd(T[k], full_matrices=False)
        keep = sv > _TARGET_FLOOR * sv[0] if sv[0] > 0 else np.zeros(sv.shape, dtype=bool)
        for j in np.flatnonzero(keep):
            xs.append(u[:, j])
            ys.append(vt[j])
            col = np.zeros(nT)
            col[k] = sv[j]
            cols.append(col)
    if not xs:  # only zero targets: keep one zero triplet so the shapes stay valid
        xs, ys, cols = [np.zeros(T.shape[1])], [np.zeros(T.shape[2])], [np.zeros(nT)]
    return np.stack(xs, axis=1), np.stack(ys, axis=1), np.stack(cols)


def _add_rows(
    acc: np.ndarray, rows: np.ndarray, values: np.ndarray, scale: np.ndarray | None = None
) -> None:
    """``acc[rows[j]] += scale[j] * values[j]`` for unique ``rows``, in place.

    One BLAS ``daxpy`` per row beats fancy-index ``+=``: each step touches one contiguous
    row that stays in cache instead of gathering and scattering ``B x d1 x d2`` temporaries.
    ``acc`` must be C-contiguous float64 so that ``daxpy`` updates its rows in place.
    """
    if scale is None:
        scale = np.ones(len(rows))
    for j, (row, s) in enumerate(zip(rows.tolist(), scale.tolist(), strict=True)):
        if s != 0.0:
            _daxpy(values[j], acc[row], a=s)


class _DebiasedLinearForm:
    """Shared engine of :class:`LinearFormInference` and the exploration-only baseline.

    Subclasses validate their own ``update`` arguments, turn them into one inverse-propensity
    weight per trial for the pulled arm (0 for a round that must not be used) and call
    :meth:`_absorb`.
    """

    _kind = "linear_form"

    def __init__(
        self,
        d1: int,
        d2: int,
        rank: int,
        n_actions: int,
        targets: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        context: str = "gaussian",
        projection: str = "tangent",
        n_trials: int | None = None,
        ablation: str | None = None,
    ) -> None:
        if ablation not in _ABLATIONS:
            raise ValueError(f"ablation must be one of {_ABLATIONS}; got {ablation!r}")
        self.ablation = ablation
        self.d1 = check_positive_int(d1, "d1")
        self.d2 = check_positive_int(d2, "d2")
        self.rank = check_positive_int(rank, "rank")
        if self.rank > min(self.d1, self.d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(self.d1, self.d2)}, got {rank!r}")
        self.n_actions = check_positive_int(n_actions, "n_actions", minimum=2)
        self.context = check_choice(context, "context", _CONTEXTS)
        self.projection = check_choice(projection, "projection", _PROJECTIONS)
        self.n_trials = check_n_trials(n_trials)
        names, stack = check_targets(targets, self.d1, self.d2)
        self._names = names
        self._T = np.ascontiguousarray(stack)
        self.c = float(self.d1 * self.d2) if self.context == "completion" else 1.0
        self._kappa = 2.0 if self.projection == "paper" else 1.0
        # <G, X> is evaluated through the targets' singular triplets (see _absorb).
        self._Xs, self._Ys, self._Sw = _factor_targets(self._T)
        # Only the rows in the triplets' support enter <G_t, X_t> (see _tangent_terms).
        self._x_rows = np.flatnonzero((self._Xs != 0).any(axis=1))
        self._y_rows = np.flatnonzero((self._Ys != 0).any(axis=1))
        self._Xs_sub = np.ascontiguousarray(self._Xs[self._x_rows])
        self._Ys_sub = np.ascontiguousarray(self._Ys[self._y_rows])
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        B, K, d1, d2, r = self._B, self.n_actions, self.d1, self.d2, self.rank
        self._n = 0
        self._generation = getattr(self, "_generation", 0) + 1  # bumped when state is replaced
        self._initialized = False
        self._acc = np.zeros((B, K, d1 * d2))  # sum of M_tilde minus the held part
        self._held = np.zeros((B, K), dtype=np.int64)
        self._last_U = np.zeros((B, K, d1, r))
        self._last_V = np.zeros((B, K, d2, r))
        # Queued held * U V^T terms not yet in _acc (slot s of the last _ring_n rounds).
        self._ring_U = np.zeros((B, K, _RING, r, d1))  # factors transposed, slot-major
        self._ring_V = np.zeros((B, K, _RING, r, d2))
        self._ring_n = 0
        self._sigma_sum = np.zeros((B, K))
        self._S2_sum = np.zeros((B, K, len(self._names)))
        self._pulls = np.zeros((B, K), dtype=np.int64)
        self._cache: dict[int, np.ndarray] = {}

    @property
    def _B(self) -> int:
        return 1 if self.n_trials is None else self.n_trials

    @property
    def batched(self) -> bool:
        """Whether results carry a leading trial axis."""
        return self.n_trials is not None

    def _out(self, arr: np.ndarray) -> np.ndarray:
        return arr if self.batched else arr[0]

    @property
    def target_names(self) -> tuple[str, ...]:
        """Names of the targets ``T``, in the order of the last axis of :attr:`S2`."""
        return self._names

    @property
    def n_obs(self) -> int:
        """Rounds absorbed so far (``n``)."""
        return self._n

    @property
    def n_pulls(self) -> np.ndarray:
        """Rounds that entered each arm's correction term, shape ``(K,)`` or ``(B, K)``."""
        return self._out(self._pulls.copy())

    @property
    def sigma2(self) -> np.ndarray:
        """``sigma_hat_i^2`` per arm (Section 3.3), shape ``(K,)`` or ``(B, K)``; NaN at n = 0."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._out(self._sigma_sum / self._n if self._n else self._sigma_sum * np.nan)

    @property
    def S2(self) -> np.ndarray:
        """``S_hat_i^2`` per arm and target (Section 3.3); shape ``(K, n_T)`` or ``(B, K, n_T)``.

        The last axis follows :attr:`target_names`.  NaN before any data.
        """
        return self._out(self._S2_sum / self._n if self._n else self._S2_sum * np.nan)

    # ------------------------------------------------------------------ one round
    def _absorb(
        self,
        U: np.ndarray,
        V: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        weight: np.ndarray,
    ) -> None:
        """Absorb one validated round (batched layout) given every arm's factors.

        The arms whose factors differ from the ones last absorbed are found by exact
        comparison (all of them in the first round); see :meth:`_absorb_parts` for the rest.
        """
        trials = np.arange(self._B)
        bi, ki = np.nonzero(self._changed_arms(U, V))
        changes = (bi, ki, U[bi, ki], V[bi, ki])
        self._absorb_parts(changes, U[trials, action], V[trials, action], X, action, reward, weight)

    def _changed_arms(self, U: np.ndarray, V: np.ndarray) -> np.ndarray:
        """(B, K) mask of the arms whose factors differ (exactly) from the ones last
        absorbed; every arm before the first round."""
        if not self._initialized:
            return np.ones(self._held.shape, dtype=bool)
        return (U != self._last_U).any(axis=(2, 3)) | (V != self._last_V).any(axis=(2, 3))

    def _absorb_parts(
        self,
        changes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        Ua: np.ndarray,
        Va: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        weight: np.ndarray,
        balanced: bool = False,
        products: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Absorb one validated round from the parts of the factors it needs.

        ``changes = (bi, ki, U_new, V_new)``: the (trial, arm) pairs whose factors differ
        from the ones last absorbed (every pair in the first round), with their new factors
        (n, d1, r) and (n, d2, r).  ``Ua``, ``Va``: the pulled arms' factors, (B, d1, r) and
        (B, d2, r).

        ``products``, if given, is ``(X V_a, Xᵀ U_a, D_a)`` for the pulled arms' factors
        (shapes (B, d1, r), (B, d2, r), (B, r)), which the estimator computed for its own
        step; ``D_a`` (the singular values) is only read with ``balanced=True``.

        ``balanced=True`` promises ``UᵀU`` and ``VᵀV`` diagonal (as
        :class:`agents.LowRankSGD` stores them), so the orthonormal bases are ``U D^{-1/2}``
        without a Cholesky factorisation.

        ``weight[b]`` is the inverse-propensity weight of the pulled arm ``action[b]``;
        0 keeps the round out of the correction, ``sigma^2`` and ``S^2`` sums.
        """
        if balanced and products is not None and engine.compiled():
            self._absorb_compiled(changes, Ua, Va, X, action, reward, weight, products)
            return
        B, K, D = self._B, self.n_actions, self.d1 * self.d2
        trials = np.arange(B)
        self._hold(*changes)

        # 2. The pulled arm: residual, then <G_t, X_t> from orthonormal bases.
        if products is None:
            XV = np.matmul(X, Va)  # (B, d1, r)
            XtU = np.matmul(X.swapaxes(-1, -2), Ua)  # (B, d2, r)
            sq = None
        else:
            XV, XtU, sq = products
        if balanced:  # Q = F diag(s), s = D^{-1/2}: no r x r factorisation
            P = np.matmul(Ua.swapaxes(-1, -2), XV)  # U^T X V, (B, r, r)
            pred = np.einsum("bss->b", P)
            s = _inverse_column_norms(Ua, sq)  # the same for V: U^T U = V^T V = diag(sq)
            g = self._tangent_terms(Ua, Va, XV, XtU, P, s * s) @ self._Sw
        else:
            pred = np.einsum("bir,bir->b", Ua, XV)
            Su = _basis_transform(Ua)  # Q_U = U Su
            Sv = _basis_transform(Va)  # Q_V = V Sv
            XQv = np.matmul(XV, Sv)
            Qu = np.matmul(Ua, Su)
            P = np.matmul(Qu.swapaxes(-1, -2), XQv)
            ones = np.ones(Ua.shape[::2])
            g = (
                self._tangent_terms(Qu, np.matmul(Va, Sv), XQv, np.matmul(XtU, Su), P, ones)
                @ self._Sw
            )  # <G_t, X_t> for every target, (B, n_T)
        res = reward - pred
        cw = self.c * weight

        # 3. sigma^2 and S^2 running sums (pulled arm only).
        self._sigma_sum[trials, action] += weight * res * res
        self._S2_sum[trials, action] += (cw * cw)[:, None] * g * g

        # 4. Correction term into the pulled arm's accumulator.
        if self.ablation != "no_debias":
            acc = self._acc.reshape(B * K, D)
            _add_rows(acc, trials * K + action, X.reshape(B, D), cw * res)
        self._pulls[trials, action] += weight > 0
        self._n += 1
        self._cache.clear()

    def _absorb_compiled(self, changes, Ua, Va, X, action, reward, weight, products) -> None:
        """:meth:`_absorb_parts` for balanced factors by the numba kernels
        (:mod:`inference._kernels`): the same arithmetic, one loop over trials."""
        from inference import _kernels

        bi, ki, U_new, V_new = changes
        if bi.size > 1 and (np.diff(bi) < 0).any():  # the kernel walks the changes by trial
            order = np.argsort(bi, kind="stable")
            bi, ki, U_new, V_new = bi[order], ki[order], U_new[order], V_new[order]
        XV, XtU, sq = products
        queued = _kernels.absorb_round(
            bi,
            ki,
            U_new,
            V_new,
            self._held,
            self._last_U,
            self._last_V,
            self._ring_U,
            self._ring_V,
            self._ring_n,
            Ua,
            Va,
            XV,
            XtU,
            sq,
            X.reshape(self._B, -1),
            action,
            reward,
            weight,
            self.c,
            self._kappa,
            self._x_rows,
            self._y_rows,
            self._Xs_sub,
            self._Ys_sub,
            self._Sw,
            self.ablation != "no_debias",
            self._sigma_sum,
            self._S2_sum,
            self._acc,
            self._pulls,
        )
        self._initialized = True
        if queued:
            self._ring_n += 1
            if self._ring_n == _RING:
                self._flush_ring()
        self._n += 1
        self._cache.clear()

    def _hold(self, bi: np.ndarray, ki: np.ndarray, U_new: np.ndarray, V_new: np.ndarray) -> None:
        """``sum_t M_hat_{i,t-1}``: arms ``(bi, ki)`` got new factors, so their old ones leave
        ``held * U V^T`` in the queue; then every arm is held one more round."""
        if bi.size:
            held = self._held[bi, ki]
            live = held > 0
            if live.any():
                # Queue held * U V^T (as transposed factors) in this round's ring slot; every
                # _RING rounds one GEMM of inner size _RING * r adds the queue to _acc.
                b2, k2, h = bi[live], ki[live], held[live]
                queued = self._last_U[b2, k2]
                if (h != 1).any():
                    queued *= h[:, None, None]
                s = self._ring_n
                self._ring_U[b2, k2, s] = queued.swapaxes(-1, -2)
                self._ring_V[b2, k2, s] = self._last_V[b2, k2].swapaxes(-1, -2)
                self._ring_n += 1
                if self._ring_n == _RING:
                    self._flush_ring()
            self._last_U[bi, ki] = U_new
            self._last_V[bi, ki] = V_new
            self._held[bi, ki] = 0
        self._held += 1
        self._initialized = True

    def _tangent_terms(self, U, V, XV, XtU, P, q) -> np.ndarray:
        """``<x_l y_lᵀ, P_U X + X P_V − kappa P_U X P_V>`` for every target triplet, (B, R).

        ``U`` (B, d1, r) and ``V`` (B, d2, r) have orthogonal columns with
        ``Q_U = U diag(q)^{1/2}`` and ``Q_V = V diag(q)^{1/2}`` orthonormal bases (``q = 0``
        drops a column); ``XV = X V``, ``XtU = Xᵀ U``, ``P = Uᵀ X V``.  With
        ``a = Uᵀ x``, ``b = Vᵀ y``: ``<x yᵀ, P_U X> = Σ_s q_s a_s (Uᵀ X y)_s``,
        ``<x yᵀ, X P_V> = Σ_s (xᵀ X V)_s q_s b_s`` and
        ``<x yᵀ, P_U X P_V> = (q a)ᵀ P (q b)``.  Only the rows in the targets' support are
        read, so sparse targets such as ``e_i e_jᵀ`` cost ``O(r^2)`` per triplet.
        """
        xr, yr, Xs, Ys = self._x_rows, self._y_rows, self._Xs_sub, self._Ys_sub
        a = np.matmul(U[:, xr].swapaxes(-1, -2), Xs) * q[:, :, None]  # q·Uᵀx, (B, r, R)
        b = np.matmul(V[:, yr].swapaxes(-1, -2), Ys) * q[:, :, None]  # q·Vᵀy
        UtXy = np.matmul(XtU[:, yr].swapaxes(-1, -2), Ys)  # Uᵀ X y, (B, r, R)
        xtXV = np.matmul(XV[:, xr].swapaxes(-1, -2), Xs)  # (xᵀ X V)ᵀ, (B, r, R)
        return (
            np.einsum("bsl,bsl->bl", a, UtXy)
            + np.einsum("bsl,bsl->bl", xtXV, b)
            - self._kappa * np.einsum("bsl,bsl->bl", a, np.matmul(P, b))
        )

    def _ring_sum(self, arm=slice(None)) -> np.ndarray:
        """Sum of the queued ``held * U V^T`` terms, shape (B, [K,] d1, d2): one GEMM of inner
        size ``_RING * r`` per trial and arm."""
        U, V = self._ring_U[:, arm], self._ring_V[:, arm]  # (B, [K,] L, r, d)
        lead = U.shape[:-3]
        return np.matmul(
            U.reshape(*lead, _RING * self.rank, self.d1).swapaxes(-1, -2),
            V.reshape(*lead, _RING * self.rank, self.d2),
        )

    def _flush_ring(self) -> None:
        B, K = self._B, self.n_actions
        self._acc += self._ring_sum().reshape(B, K, -1)
        self._ring_U[...] = 0.0  # V slots are multiplied by these zeros until rewritten
        self._ring_n = 0

    # ------------------------------------------------------------------ read-out
    def _warn_no_rounds(self, what: str) -> None:
        warn_insufficient(
            f"no rounds observed yet: at least 1 more round (with a pull of each arm "
            f"involved) is needed to estimate {what}; returning NaN",
            stacklevel=4,
        )

    def _debiased(self, arm: int) -> np.ndarray:
        """``M^unbs_arm``, shape (B, d1, d2); needs ``n > 0``."""
        held = self._held[:, arm].astype(float)[:, None, None]
        total = (
            self._acc[:, arm].reshape(-1, self.d1, self.d2)
            + self._ring_sum(arm)
            + np.matmul(self._last_U[:, arm] * held, self._last_V[:, arm].swapaxes(-1, -2))
        )
        return total / self._n

    def debiased_mean(self, arm: int) -> np.ndarray:
        """``M^unbs_{arm,n} = (1/n) sum_t M_tilde_{arm,t}`` (Section 3.1, Algorithm 2).

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        arm = check_arm(arm, self.n_actions)
        if self._n == 0:
            self._warn_no_rounds(f"M^unbs_{arm}")
            return self._out(np.full((self._B, self.d1, self.d2), np.nan))
        return self._out(self._debiased(arm))

    def _projected(self, arm: int) -> np.ndarray:
        if arm not in self._cache:
            u, s, vt = np.linalg.svd(self._debiased(arm), full_matrices=False)
            r = self.rank
            self._cache[arm] = np.matmul(u[..., :r] * s[..., None, :r], vt[..., :r, :])
        return self._cache[arm]

    def projected(self, arm: int) -> np.ndarray:
        """``M^proj_{arm,n}``: the top-``r`` SVD truncation of ``M^unbs_{arm,n}`` (Alg. 3).

        Cached until the next update.

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        arm = check_arm(arm, self.n_actions)
        if self._n == 0:
            self._warn_no_rounds(f"M^proj_{arm}")
            return self._out(np.full((self._B, self.d1, self.d2), np.nan))
        return self._out(self._projected(arm).copy())

    def _arm_estimate(self, arm: int, k: int, target: str) -> tuple[np.ndarray, np.ndarray]:
        """``m_hat`` and ``sigma^2 S^2 n^2`` sums for one arm/target, NaN where unusable."""
        est = np.einsum("bij,ij->b", self._projected(arm), self._T[k])
        var_n = self._sigma_sum[:, arm] * self._S2_sum[:, arm, k]  # n^2 sigma^2 S^2
        never = self._pulls[:, arm] == 0
        if never.any():
            warn_insufficient(
                f"arm {arm} has never been pulled{self._pull_kind}"
                f"{trials_phrase(never, self.batched)}: at least 1 more "
                f"{self._pull_noun} of arm {arm} is needed before <M_{arm}, T[{target!r}]> "
                f"and its variance can be estimated; returning NaN",
                stacklevel=4,
            )
        flat = ~never & ~(var_n > 0)
        if flat.any():
            warn_insufficient(
                f"the variance of <M_{arm}, T[{target!r}]> is not estimable yet"
                f"{trials_phrase(flat, self.batched)}: sigma_hat^2 * S_hat^2 = 0 (every "
                f"{self._pull_noun} of arm {arm} so far had a zero residual or a zero "
                f"<G_t, X_t>, e.g. while M_hat_{arm} = 0); at least 1 more "
                f"{self._pull_noun} of arm {arm} with a non-zero estimate M_hat_{arm} is "
                f"needed; returning NaN",
                stacklevel=4,
            )
        bad = never | flat
        est = np.where(bad, np.nan, est)
        var_n = np.where(bad, np.nan, var_n)
        return est, var_n

    _pull_kind = ""
    _pull_noun = "pull"
    _method_name = "online debiased low-rank estimate (Algorithms 2-3)"

    def interval(self, arm: int, target: str, confidence_level: float = 0.95) -> IntervalEstimate:
        """Confidence interval for ``m = <M_arm, T>`` (Section 3.3, Algorithm 3).

        ``m_hat = <M^proj_arm, T>``, ``se = sigma_hat S_hat / sqrt(n)``; the p-value is
        two-sided for ``H0: <M_arm, T> = 0``.

        Parameters
        ----------
        arm : int
            Arm index ``i`` in ``[0, K)``.
        target : str
            Name of ``T`` given at construction.
        confidence_level : float, default 0.95

        Returns
        -------
        IntervalEstimate
            NaN entries, with an :class:`InsufficientDataWarning`, before the first round,
            where the arm was never pulled, or where ``sigma_hat^2 S_hat^2 = 0``.
        """
        level = check_confidence_level(confidence_level)
        arm = check_arm(arm, self.n_actions)
        k = check_target_name(target, self._names)
        method = f"<M_{arm}, T[{target!r}]>: {self._method_name}, {self.projection} projection"
        if self._n == 0:
            self._warn_no_rounds(f"<M_{arm}, T[{target!r}]>")
            nan = np.full(self._B, np.nan)
            return normal_interval(
                nan, nan, n_obs=0, confidence_level=level, method=method, batched=self.batched
            )
        est, var_n = self._arm_estimate(arm, k, target)
        se = np.sqrt(var_n / self._n**3)
        return normal_interval(
            est, se, n_obs=self._n, confidence_level=level, method=method, batched=self.batched
        )

    def difference(
        self, arm_a: int, arm_b: int, target: str, confidence_level: float = 0.95
    ) -> IntervalEstimate:
        """Confidence interval for ``<M_a - M_b, T>`` (Corollary 3.3).

        ``(m_hat_a - m_hat_b) +- z sqrt((sigma_a^2 S_a^2 + sigma_b^2 S_b^2) / n)``; the
        p-value is two-sided for ``H0: <M_a, T> = <M_b, T>``.

        Parameters
        ----------
        arm_a, arm_b : int
            Two different arms.
        target : str
        confidence_level : float, default 0.95
        """
        level = check_confidence_level(confidence_level)
        a = check_arm(arm_a, self.n_actions, "arm_a")
        b = check_arm(arm_b, self.n_actions, "arm_b")
        if a == b:
            raise ValueError(f"arm_a and arm_b must differ, got both = {a}")
        k = check_target_name(target, self._names)
        method = (
            f"<M_{a} - M_{b}, T[{target!r}]>: {self._method_name}, {self.projection} "
            f"projection (Corollary 3.3)"
        )
        if self._n == 0:
            self._warn_no_rounds(f"<M_{a} - M_{b}, T[{target!r}]>")
            nan = np.full(self._B, np.nan)
            return normal_interval(
                nan, nan, n_obs=0, confidence_level=level, method=method, batched=self.batched
            )
        est_a, var_a = self._arm_estimate(a, k, target)
        est_b, var_b = self._arm_estimate(b, k, target)
        se = np.sqrt((var_a + var_b) / self._n**3)
        return normal_interval(
            est_a - est_b,
            se,
            n_obs=self._n,
            confidence_level=level,
            method=method,
            batched=self.batched,
        )

    # ------------------------------------------------------------------ persistence
    _CONFIG = (
        "kind",
        "d1",
        "d2",
        "rank",
        "n_actions",
        "n_trials",
        "context",
        "projection",
        "target_names",
    )

    def state_dict(self) -> dict[str, Any]:
        """Configuration and running sums as plain Python / numpy values (copies).

        Arrays are in the internal batched layout (leading trial axis, ``B = 1`` when
        unbatched; ``n_trials`` is stored as 0 then).
        """
        return {
            "kind": self._kind,
            "d1": self.d1,
            "d2": self.d2,
            "rank": self.rank,
            "n_actions": self.n_actions,
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "context": self.context,
            "projection": self.projection,
            "target_names": list(self._names),
            "targets": self._T.copy(),
            "n": int(self._n),
            "initialized": bool(self._initialized),
            "acc": self._acc.copy(),
            "held": self._held.copy(),
            "last_U": self._last_U.copy(),
            "last_V": self._last_V.copy(),
            "ring_U": self._ring_U.copy(),
            "ring_V": self._ring_V.copy(),
            "ring_n": int(self._ring_n),
            "sigma_sum": self._sigma_sum.copy(),
            "S2_sum": self._S2_sum.copy(),
            "pulls": self._pulls.copy(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (validated first; a failure changes nothing)."""
        mine = self.state_dict()
        missing = [k for k in mine if k not in state]
        if missing:
            raise ValueError(f"state is missing keys {missing}")
        for key in self._CONFIG:
            theirs = list(state[key]) if key == "target_names" else state[key]
            if theirs != mine[key]:
                raise ValueError(
                    f"state[{key!r}] = {state[key]!r} does not match this object's "
                    f"{key} = {mine[key]!r}"
                )
        targets = np.asarray(state["targets"], dtype=float)
        if targets.shape != self._T.shape or not np.array_equal(targets, self._T):
            raise ValueError("state['targets'] does not match this object's targets")
        new: dict[str, np.ndarray] = {}
        arrays = ("acc", "held", "last_U", "last_V", "ring_U", "ring_V", "sigma_sum", "S2_sum")
        for key in (*arrays, "pulls"):
            arr = np.asarray(state[key])
            if arr.shape != mine[key].shape or arr.dtype != mine[key].dtype:
                raise ValueError(
                    f"state[{key!r}] must be a {mine[key].dtype} array of shape "
                    f"{mine[key].shape}, got {arr.dtype} array of shape {arr.shape}"
                )
            if not np.isfinite(arr).all():
                raise ValueError(f"state[{key!r}] must be finite")
            new[key] = arr.copy()
        n = state["n"]
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise ValueError(f"state['n'] must be a non-negative integer, got {n!r}")
        ring_n = state["ring_n"]
        if isinstance(ring_n, bool) or not isinstance(ring_n, int | np.integer):
            raise ValueError(f"state['ring_n'] must be an integer, got {ring_n!r}")
        if not 0 <= ring_n < _RING:
            raise ValueError(f"state['ring_n'] must be in [0, {_RING}), got {ring_n!r}")
        self._n = int(n)
        self._generation += 1
        self._ring_n = int(ring_n)
        self._initialized = bool(state["initialized"])
        self._acc = new["acc"]
        self._held = new["held"]
        self._last_U = new["last_U"]
        self._last_V = new["last_V"]
        self._ring_U = new["ring_U"]
        self._ring_V = new["ring_V"]
        self._sigma_sum = new["sigma_sum"]
        self._S2_sum = new["S2_sum"]
        self._pulls = new["pulls"]
        self._cache = {}

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"{type(self).__name__}(d1={self.d1}, d2={self.d2}, rank={self.rank}, "
            f"n_actions={self.n_actions}, targets={list(self._names)}, "
            f"context={self.context!r}, projection={self.projection!r}{batch}; "
            f"n_obs={self._n})"
        )


class LinearFormInference(_DebiasedLinearForm):
    """Online confidence intervals for ``<M_i, T>`` and ``<M_a - M_b, T>`` (Section 3).

    Feed every round with :meth:`update` *before* the estimator takes its step, passing the
    estimate ``M_hat_{a,t-1} = U[a] V[a]^T`` that the policy used; read intervals at any time
    with :meth:`interval` and :meth:`difference`.

    Per round and for every arm ``i`` (ALGORITHMS.md §4, Algorithm 2):
    ``M_tilde_{i,t} = M_hat_{i,t-1} + c 1{a_t=i}/pi_t(i) (y_t - <M_hat_{i,t-1}, X_t>) X_t``,
    ``sigma_hat_i^2 = (1/n) sum_t 1{a_t=i}/pi_t(i) (y_t - <M_hat_{i,t-1}, X_t>)^2`` and
    ``S_hat_i^2 = (1/n) sum_t 1{a_t=i}/pi_t(i)^2 c^2 <G_t, X_t>^2``; at read-out
    ``m_hat = <M^proj_i, T>`` with ``M^proj_i`` the rank-``r`` truncation of
    ``M^unbs_i = (1/n) sum_t M_tilde_{i,t}`` and ``se = sigma_hat_i S_hat_i / sqrt(n)``.

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    rank : int
        Rank ``r`` of the estimates and of the projection.
    n_actions : int
        Number of arms ``K >= 2``.
    targets : mapping of str to array_like of shape (d1, d2)
        The matrices ``T`` of interest, by name (all are tracked at once).
    context : {"gaussian", "completion"}, default "gaussian"
        Sets ``c = 1`` or ``c = d1 d2`` (Appendix C; only the correction term carries it).
    projection : {"tangent", "paper"}, default "tangent"
        ``G_t`` in ``S^2``: "paper" is ``P_U⊥ T P_V + P_U T P_V⊥`` (Section 3.3);
        "tangent" is the full tangent-space projection ``T - P_U⊥ T P_V⊥``, which also keeps
        ``P_U T P_V`` (negligible only as ``d -> inf``).
    n_trials : int or None, default None
        None: one bandit, scalar results.  ``B``: ``B`` independent bandits in lock step;
        every per-round argument gains a leading axis of length ``B`` and results are
        arrays of shape ``(B,)``.
    ablation : {None, "no_ipw", "no_debias"}, default None
        Negative controls for validity studies only: "no_ipw" replaces ``1/pi_t`` by 1,
        "no_debias" drops the correction term.  Both give invalid intervals by design.

    Notes
    -----
    Validity needs ``pi_t(i) >= p0 > 0`` for every arm (``beta = 0``, Theorem 3.1).  The
    bases ``P_U``, ``P_V`` are those of the column/row spaces of the given factors
    (``U (U^T U)^+ U^T``); for a rank-deficient factor the dropped directions are those with
    Gram eigenvalue below ``1e-12`` times the largest.

    Examples
    --------
    >>> import numpy as np
    >>> inf = LinearFormInference(4, 3, rank=1, n_actions=2, targets={"T": np.eye(4, 3)})
    >>> rng = np.random.default_rng(0)
    >>> U, V = rng.standard_normal((2, 4, 1)), rng.standard_normal((2, 3, 1))
    >>> for t in range(20):
    ...     X = rng.standard_normal((4, 3))
    ...     inf.update(U, V, X, action=t % 2, reward=float(rng.normal()),
    ...                propensities=np.array([0.5, 0.5]))
    >>> low, high = inf.interval(0, "T")
    """

    def update(
        self,
        U: Any,
        V: Any,
        X: Any,
        action: Any,
        reward: Any,
        propensities: Any,
    ) -> None:
        """Absorb round ``t``.

        Parameters
        ----------
        U : array_like of shape (K, d1, r) or (B, K, d1, r)
            Left factors of the estimates *before* round ``t``'s update.
        V : array_like of shape (K, d2, r) or (B, K, d2, r)
            Right factors; ``M_hat_a = U[a] @ V[a].T``.
        X : array_like of shape (d1, d2) or (B, d1, d2)
            Context ``X_t``.
        action : int or array_like of int of shape (B,)
            Pulled arm ``a_t``.
        reward : float or array_like of shape (B,)
            Observed ``y_t``.
        propensities : array_like of shape (K,) or (B, K)
            ``pi_t(a)`` for every arm; must be positive at ``a_t``.

        Raises
        ------
        ValueError
            On any malformed input; the object is then unchanged.
        """
        Ub, Vb = check_factors(U, V, self.n_actions, self.d1, self.d2, self.rank, self.n_trials)
        Xb = check_matrix_stack(X, (self.d1, self.d2), self.n_trials, "X")
        a = check_actions(action, self.n_actions, self.n_trials)
        y = check_batch_vector(reward, self.n_trials, "reward")
        p = check_propensities(propensities, a, self.n_actions, self.n_trials)
        self._update_validated(Ub, Vb, Xb, a, y, p)

    def _update_validated(self, U, V, X, a, y, p) -> None:
        """:meth:`update` on validated batched arrays."""
        self._absorb(U, V, X, a, y, self._weight(a, p))

    def _update_parts(self, changes, Ua, Va, X, a, y, p, products) -> None:
        """:meth:`update` from the parts of a :class:`agents.LowRankSGD`'s balanced factors
        (the wrappers' path; see :meth:`_absorb_parts`): ``products`` are ``(X V_a, Xᵀ U_a,
        D_a)`` of the pulled arms, which the estimator computed for its own step."""
        weight = self._weight(a, p)
        self._absorb_parts(changes, Ua, Va, X, a, y, weight, balanced=True, products=products)

    def _weight(self, a, p) -> np.ndarray:
        weight = 1.0 / p[np.arange(self._B), a]
        return np.ones_like(weight) if self.ablation == "no_ipw" else weight
