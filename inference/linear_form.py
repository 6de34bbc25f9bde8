"""Online inference on linear forms ``<M_i, T>`` of the arms' parameters (Section 3).

Algorithms 2-3 of the paper (docs/method.md §4).  Per round ``t`` and arm ``i``, with
``M̂ = M̂_{i,t−1}`` the estimate *before* round ``t``'s update, ``res_t = y_t − <M̂, X_t>`` and
``c = 1`` (gaussian contexts) or ``d1·d2`` (completion, Appendix C)::

    M̃_{i,t}    = M̂ + c·1{a_t=i}/π_t(i)·res_t·X_t               Algorithm 2
    M^unbs_i   = (1/n) Σ_t M̃_{i,t}                              eq. (11)
    m̂_i        = <M̂_i + P_T̂(M^unbs_i − M̂_i), T>                  one-step (method.md §4)
                 T̂ the tangent space of the rank-r matrices at the arm's current estimate
                 M̂_i; with point_estimate="projection" the paper's <M^proj_i, T>,
                 M^proj_i the rank-r SVD truncation of M^unbs_i        eq. (12), Algorithm 3
    σ̂²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)·res_t²               eq. (13)
    Ŝ²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)²·c²·<G_t, X_t>²       eq. (14)
    interval     m̂_i ± z·σ̂_i·Ŝ_i/√n                             eq. (15)
    difference   (m̂_a − m̂_b) ± z·√((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)   Corollary 3.3

Everything is a running sum: memory is ``O(K d1 d2)`` per trial and the per-round cost does
not grow with the number of rounds.  The machinery that keeps a round cheap lives beside
this module: :mod:`inference.held_queue` (``Σ_t M̃`` with the held estimates queued
and added by one GEMM every few rounds), :mod:`inference.tangent_space` (``<M̂, X_t>``
and ``<G_t, X_t>`` from ``r x r`` algebra, never a ``d1 x d2`` projector) and
:mod:`inference._kernels` (the same round compiled by numba).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from agents.product_cache import one_hot_products
from agents.state import read_bool
from inference._persistence import check_config, check_count, copy_arrays
from inference.held_queue import DebiasedSum
from inference.results import (
    IntervalEstimate,
    normal_interval,
    trials_phrase,
    warn_insufficient,
)
from inference.sequences import DEFAULT_TUNING_N, check_kind, kind_interval, sequence_phrase
from inference.tangent_space import TargetTriplets, basis_transform, pulled_arm_terms
from lrbandit_gym import engine
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like, one_hot_contexts
from lrbandit_gym.validation import (
    MAX_MAGNITUDE,
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
_POINT_ESTIMATES = ("one-step", "projection")
# Negative controls for validity studies, never for inference: "no_ipw" replaces 1/pi_t by 1
# (the bias adaptive sampling causes), "no_debias" drops the correction term (the bias of
# the low-rank estimate itself).  A study that cannot tell them from the real procedure
# has no power to certify it.
_ABLATIONS = (None, "no_ipw", "no_debias")

Changes = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Products = tuple[np.ndarray, np.ndarray, np.ndarray]


class RoundTerms(NamedTuple):
    """One round computed and checked by ``propose_parts``, for ``commit_round``."""

    changes: tuple[np.ndarray, ...]
    X: Any
    action: np.ndarray
    weight: np.ndarray
    res: np.ndarray
    """The pulled arms' residuals ``y_t − <M̂, X_t>``, shape (B,)."""
    g: np.ndarray
    """``<G_t, X_t>`` of every target, shape (B, n_T)."""
    compiled: bool
    position: tuple[int, int]
    """The core's :attr:`position` the round was computed against."""


def check_estimate_scale(U: np.ndarray, V: np.ndarray, batched: bool) -> None:
    """Refuse factors whose estimate ``U Vᵀ`` may have entries beyond
    :data:`~lrbandit_gym.validation.MAX_MAGNITUDE`: ``r · max|U| · max|V|`` bounds them,
    and ``Σ_t M̂`` adds the estimate once a round (factors of 1e100 each are admissible
    values, their product of 1e200 is not).  ``U`` (B, K, d1, r), ``V`` (B, K, d2, r).
    """
    top = np.abs(U).max(axis=(-1, -2)) * np.abs(V).max(axis=(-1, -2)) * U.shape[-1]
    big = ~(top <= MAX_MAGNITUDE)
    if big.any():
        b, a = (int(i) for i in np.argwhere(big)[0])
        where = f" (trial {b})" if batched else ""
        raise ValueError(
            f"the estimate U[{a}] V[{a}]ᵀ may have entries up to rank * max|U| * max|V| = "
            f"{top[b, a]:.3g}{where}, beyond MAX_MAGNITUDE = {MAX_MAGNITUDE:g}: its products "
            "with the contexts would overflow float64; rescale the factors to order 1"
        )


class _DebiasedLinearForm:
    """Shared engine of :class:`LinearFormInference` and the exploration-only baseline.

    Subclasses validate their own ``update`` arguments, turn them into one inverse-propensity
    weight per trial for the pulled arm (0 for a round that must not be used) and call
    :meth:`absorb`.
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
        point_estimate: str = "one-step",
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
        self.point_estimate = check_choice(point_estimate, "point_estimate", _POINT_ESTIMATES)
        self.n_trials = check_n_trials(n_trials)
        names, stack = check_targets(targets, self.d1, self.d2)
        self._names = names
        self._T = np.ascontiguousarray(stack)
        self.c = float(self.d1 * self.d2) if self.context == "completion" else 1.0
        # <G, X> = <T, X P_V> + <T, P_U X> - kappa <T, P_U X P_V> (see tangent_space).
        self._kappa = 2.0 if self.projection == "paper" else 1.0
        self._triplets = TargetTriplets.from_targets(self._T)
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        B, K = self._B, self.n_actions
        self._n = 0
        self._generation = getattr(self, "_generation", 0) + 1  # bumped when state is replaced
        self._sum = DebiasedSum(B, K, self.d1, self.d2, self.rank)  # n·M^unbs, eq. (11)
        self._sigma_sum = np.zeros((B, K))  # n·σ̂², eq. (13)
        self._S2_sum = np.zeros((B, K, len(self._names)))  # n·Ŝ², eq. (14)
        self._pulls = np.zeros((B, K), dtype=np.int64)
        self._cache: dict[tuple[str, int], np.ndarray] = {}

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
    def position(self) -> tuple[int, int]:
        """``(n, generation)``: identifies the rounds absorbed so far.

        ``n`` counts rounds; ``generation`` changes whenever the state is replaced (a
        :meth:`load_state_dict`), so equal positions mean the same absorbed stream.
        """
        return self._n, self._generation

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
        """``σ̂²_i`` per arm (eq. (13)), shape ``(K,)`` or ``(B, K)``; NaN at n = 0."""
        return self._out(self._sigma_sum / self._n if self._n else self._sigma_sum * np.nan)

    @property
    def S2(self) -> np.ndarray:
        """``Ŝ²_i`` per arm and target (eq. (14)); shape ``(K, n_T)`` or ``(B, K, n_T)``.

        The last axis follows :attr:`target_names`.  NaN before any data.
        """
        return self._out(self._S2_sum / self._n if self._n else self._S2_sum * np.nan)

    # ------------------------------------------------------------------ one round
    def _check_contexts(self, X: Any) -> np.ndarray | OneHotContexts:
        """Validate ``update``'s contexts: ``(B, d1, d2)``, or for completion contexts
        :class:`~lrbandit_gym.onehot.OneHotContexts` (from an index ``[j, k]``, shape (2,)
        or (B, 2), or from one-hot matrices, found in one pass)."""
        completion = self.context == "completion"
        if completion and is_index_like(X, self.n_trials):
            return check_index(X, self.d1, self.d2, self.n_trials)
        Xb = check_matrix_stack(X, (self.d1, self.d2), self.n_trials, "X")
        if completion:
            ctx = one_hot_contexts(Xb)
            if ctx is not None:
                return ctx
        return Xb

    def changed_arms(self, U: np.ndarray, V: np.ndarray) -> np.ndarray:
        """Which arms' factors differ from the ones last absorbed.

        Parameters
        ----------
        U, V : ndarray of shape (B, K, d1, r) and (B, K, d2, r)
            Every arm's factors, assumed validated.

        Returns
        -------
        ndarray of bool, shape (B, K)
            Exact comparison; every arm before the first round.
        """
        return self._sum.changed(U, V)

    def absorb(
        self,
        U: np.ndarray,
        V: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        weight: np.ndarray,
    ) -> None:
        """Absorb one round given every arm's factors and the pulled arm's weight.

        The arms whose factors changed are found by :meth:`changed_arms`; the rest is
        :meth:`absorb_parts`.  Inputs are assumed validated, in the batched layout.

        Parameters
        ----------
        U, V : ndarray of shape (B, K, d1, r) and (B, K, d2, r)
            Factors of the estimates before round ``t``'s update.
        X : ndarray of shape (B, d1, d2)
        action : ndarray of int, shape (B,)
        reward : ndarray of shape (B,)
        weight : ndarray of shape (B,)
            Inverse-propensity weight of the pulled arm; 0 keeps the round out of the sums.
        """
        self.commit_round(self.propose(U, V, X, action, reward, weight))

    def propose(
        self,
        U: np.ndarray,
        V: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        weight: np.ndarray,
    ) -> RoundTerms:
        """:meth:`absorb`'s first phase: :meth:`propose_parts` from every arm's factors."""
        trials = np.arange(self._B)
        bi, ki = np.nonzero(self.changed_arms(U, V))
        changes = (bi, ki, U[bi, ki], V[bi, ki])
        return self.propose_parts(
            changes, U[trials, action], V[trials, action], X, action, reward, weight
        )

    def absorb_parts(
        self,
        changes: Changes,
        Ua: np.ndarray,
        Va: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        weight: np.ndarray,
        balanced: bool = False,
        products: Products | None = None,
    ) -> None:
        """Absorb one round from the parts of the factors it needs (Algorithm 2):
        :meth:`propose_parts` then :meth:`commit_round`; a round the sums cannot absorb
        raises :class:`ValueError` and changes nothing."""
        self.commit_round(
            self.propose_parts(changes, Ua, Va, X, action, reward, weight, balanced, products)
        )

    def propose_parts(
        self,
        changes: Changes,
        Ua: np.ndarray,
        Va: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        weight: np.ndarray,
        balanced: bool = False,
        products: Products | None = None,
    ) -> RoundTerms:
        """Compute one round's terms and check that the sums can absorb them, writing
        nothing; :meth:`commit_round` writes them.

        The pulled arm's residual ``res_t = y_t − <M̂, X_t>`` and ``<G_t, X_t>`` (every
        target) are the round's expensive part; they are kept for the commit.  The round is
        refused when ``w·res²`` or ``(c·w)²·<G_t, X_t>²`` would make a running sum
        infinite, or when ``|c·w·res|`` (the correction's coefficient, times context entries
        of at most :data:`~lrbandit_gym.validation.MAX_MAGNITUDE`) exceeds
        ``MAX_MAGNITUDE``: such a round would turn every later interval into NaN.

        Parameters
        ----------
        changes : tuple ``(bi, ki, U_new, V_new)`` or ``(bi, ki, U_new, V_new, support)``
            The (trial, arm) pairs whose factors differ from the ones last absorbed (every
            pair in the first round), with their new factors, shapes (m, d1, r), (m, d2, r).
            ``support`` (m, 2), optional: ``(j, k)`` where a change is one SGD step on the
            completion context ``e_j e_kᵀ`` (its estimate moved only in row ``j`` and
            column ``k``; :attr:`agents.LowRankSGD.step_support`), ``(-1, -1)`` where not
            known: ``Σ_t M̂`` then follows it at O((d1 + d2) r) (:mod:`inference.held_queue`).
        Ua, Va : ndarray of shape (B, d1, r) and (B, d2, r)
            The pulled arms' factors.
        X : ndarray of shape (B, d1, d2), or OneHotContexts
            The contexts; completion contexts in index form make the round O((d1 + d2) r)
            (with ``support``).
        action : ndarray of int, shape (B,)
        reward : ndarray of shape (B,)
        weight : ndarray of shape (B,)
            Inverse-propensity weight ``1/pi_t(a_t)`` of the pulled arm; 0 keeps the round
            out of the correction, ``sigma^2`` and ``S^2`` sums.
        balanced : bool, default False
            True promises ``UᵀU`` and ``VᵀV`` diagonal (as :class:`agents.LowRankSGD`
            stores them), so the orthonormal bases need no ``r x r`` factorisation.
        products : tuple of ndarray, optional
            ``(X V_a, Xᵀ U_a, D_a)`` of the pulled arms (shapes (B, d1, r), (B, d2, r),
            (B, r)), when the estimator computed them for its own step; ``D_a`` (the
            singular values) is only read with ``balanced=True``.

        Raises
        ------
        ValueError
            If the sums cannot absorb the round (naming the trial, reward and residual).
        """
        one_hot = isinstance(X, OneHotContexts)
        compiled = balanced and products is not None and engine.compiled()
        if compiled:  # positional calls: the round's fixed cost is numba's dispatch
            from inference import _kernels

            res = np.empty(self._B)
            g = np.empty((self._B, self._S2_sum.shape[2]))
            tr = self._triplets
            if one_hot:  # the pulled arm's O(r) part
                bad = _kernels.one_hot_terms(
                    X.rows, X.cols, Ua, Va, products[2], action, reward, weight, self.c,
                    self._kappa, MAX_MAGNITUDE, tr.Xs, tr.Ys, tr.x_rows, tr.y_rows, tr.Xs_sub,
                    tr.Ys_sub, tr.Sw, self._sigma_sum, self._S2_sum, res, g,
                )  # fmt: skip
            else:
                XV, XtU, sq = products
                bad = _kernels.round_terms(
                    Ua, Va, XV, XtU, sq, action, reward, weight, self.c, self._kappa,
                    MAX_MAGNITUDE, tr.x_rows, tr.y_rows, tr.Xs_sub, tr.Ys_sub, tr.Sw,
                    self._sigma_sum, self._S2_sum, res, g,
                )  # fmt: skip
        else:
            if one_hot and products is None:  # X V_a = e_j V_a[k]ᵀ, Xᵀ U_a = e_k U_a[j]ᵀ
                products = (*one_hot_products(X, Ua, Va), None)
            # <M̂_{a_t,t−1}, X_t> and <G_t, X_t> (every target) of the pulled arm.
            with np.errstate(over="ignore", invalid="ignore"):  # refused below
                pred, g = pulled_arm_terms(
                    Ua, Va, X, self._triplets, self._kappa, balanced=balanced, products=products
                )
                res = reward - pred  # res_t = y_t − <M̂, X_t>
                bad = self._refused(action, weight, res, g)
        if bad >= 0:
            self._refuse(bad, action, reward, weight, res, g)
        return RoundTerms(changes, X, action, weight, res, g, compiled, self.position)

    def _refused(self, action, weight, res, g) -> int:
        """The first trial whose round the sums cannot absorb (numpy), or -1."""
        trials = np.arange(self._B)
        cw = self.c * weight
        ok = np.isfinite(self._sigma_sum[trials, action] + weight * res * res)
        ok &= np.isfinite(self._S2_sum[trials, action] + (cw * cw)[:, None] * g * g).all(axis=1)
        ok &= np.abs(cw * res) <= MAX_MAGNITUDE
        return -1 if ok.all() else int(np.argmin(ok))

    def _refuse(self, b, action, reward, weight, res, g) -> None:
        where = f" (trial {b})" if self.batched else ""
        with np.errstate(over="ignore", invalid="ignore"):
            top = float(np.max(np.abs(g[b]))) if g.shape[1] else 0.0
        raise ValueError(
            f"the round cannot be absorbed{where}: reward {float(reward[b])!r} against the "
            f"estimate's prediction gives the residual {float(res[b]):.3g} (weight 1/pi = "
            f"{float(weight[b]):.3g}, largest |<G_t, X_t>| = {top:.3g}), whose square in the "
            f"running sums of sigma^2 and S^2, or whose correction c*w*res (at most "
            f"MAX_MAGNITUDE = {MAX_MAGNITUDE:g}), overflows float64; nothing was changed: "
            "rescale the rewards, contexts and estimates to order 1"
        )

    def commit_round(self, terms: RoundTerms) -> None:
        """Write a round proposed by :meth:`propose_parts` (nothing here fails on data).

        Raises
        ------
        RuntimeError
            If the state changed since the round was proposed.
        """
        if terms.position != self.position:
            raise RuntimeError(
                "the round was proposed before the last change to this object's state; "
                "propose it again"
            )
        changes, X, action, weight, res, g = terms[:6]
        debias = self.ablation != "no_debias"
        if terms.compiled:
            from inference import _kernels

            if isinstance(X, OneHotContexts):  # the held estimates here
                self._sum.hold(*changes)
                _kernels.one_hot_write(
                    X.rows, X.cols, action, weight, self.c, res, g, debias, self._sigma_sum,
                    self._S2_sum, self._sum.acc, self._pulls, self.d2,
                )  # fmt: skip
            else:  # (the queue of held estimates is exact for any change: no support needed)
                _kernels.absorb_balanced(
                    self._sum, changes[:4], X, action, weight, res, g, self.c, debias,
                    self._sigma_sum, self._S2_sum, self._pulls,
                )  # fmt: skip
        else:
            trials = np.arange(self._B)
            # Σ_t M̂_{i,t−1}: the arms whose estimate moved queue the one they held.
            self._sum.hold(*changes)
            cw = self.c * weight  # c·1{a_t=i}/π_t(i), at i = a_t
            self._sigma_sum[trials, action] += weight * res * res  # σ̂², eq. (13)
            self._S2_sum[trials, action] += (cw * cw)[:, None] * g * g  # Ŝ², eq. (14)
            if debias:  # M̃ = M̂ + c·1{a_t=i}/π_t(i)·res_t·X_t
                self._sum.add_correction(action, X, cw * res)
            self._pulls[trials, action] += weight > 0
        self._n += 1
        self._cache.clear()

    # ------------------------------------------------------------------ read-out
    def _warn_no_rounds(self, what: str, stacklevel: int = 4) -> None:
        warn_insufficient(
            f"no rounds observed yet: at least 1 more round (with a pull of each arm "
            f"involved) is needed to estimate {what}; returning NaN",
            stacklevel=stacklevel,
        )

    def _debiased(self, arm: int) -> np.ndarray:
        """``M^unbs_arm = (1/n) Σ_t M̃_{arm,t}``, shape (B, d1, d2); needs ``n > 0``."""
        return self._sum.total(arm) / self._n

    def _matrix_readout(self, arm, what: str, compute) -> np.ndarray:
        """A copy of ``compute(arm)`` in the caller's layout; NaN, with a warning naming
        ``what`` (formatted with ``arm``), before the first round."""
        arm = check_arm(arm, self.n_actions)
        if self._n == 0:
            self._warn_no_rounds(what.format(arm=arm), stacklevel=5)  # the public caller's
            return self._out(np.full((self._B, self.d1, self.d2), np.nan))
        return self._out(compute(arm).copy())

    def debiased_mean(self, arm: int) -> np.ndarray:
        """``M^unbs_{arm,n} = (1/n) Σ_t M̃_{arm,t}`` (eq. (11), Algorithm 2).

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        return self._matrix_readout(arm, "M^unbs_{arm}", self._debiased)

    def _projected(self, arm: int) -> np.ndarray:
        key = ("projection", arm)
        if key not in self._cache:
            u, s, vt = np.linalg.svd(self._debiased(arm), full_matrices=False)
            r = self.rank
            self._cache[key] = np.matmul(u[..., :r] * s[..., None, :r], vt[..., :r, :])
        return self._cache[key]

    def projected(self, arm: int) -> np.ndarray:
        """``M^proj_{arm,n}``: the top-``r`` SVD truncation of ``M^unbs_{arm,n}`` (Alg. 3).

        Cached until the next update.

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        return self._matrix_readout(arm, "M^proj_{arm}", self._projected)

    def _one_step(self, arm: int) -> np.ndarray:
        key = ("one-step", arm)
        if key not in self._cache:
            # The reference: the arm's current estimate M̂ = U Vᵀ (the one held for the
            # last round absorbed), and orthonormal bases of its column and row spaces.
            U, V = self._sum.last_U[:, arm], self._sum.last_V[:, arm]
            Q_U = np.matmul(U, basis_transform(U))
            Q_V = np.matmul(V, basis_transform(V))
            M_ref = np.matmul(U, V.swapaxes(-1, -2))
            E = self._debiased(arm) - M_ref
            # P_T̂(E) = P_U E + E P_V − P_U E P_V = Q_U (Q_Uᵀ E) + (E Q_V − Q_U Q_Uᵀ E Q_V) Q_Vᵀ
            UtE = np.matmul(Q_U.swapaxes(-1, -2), E)
            EV = np.matmul(E, Q_V) - np.matmul(Q_U, np.matmul(UtE, Q_V))
            step = M_ref + np.matmul(Q_U, UtE) + np.matmul(EV, Q_V.swapaxes(-1, -2))
            # An estimate of rank below r spans no rank-r tangent space: there the
            # reference is M^proj itself, around which the one-step is M^proj.
            full = (np.abs(Q_U).sum(axis=-2) > 0).all(axis=-1)
            full &= (np.abs(Q_V).sum(axis=-2) > 0).all(axis=-1)
            if not full.all():
                step[~full] = self._projected(arm)[~full]
            self._cache[key] = step
        return self._cache[key]

    def one_step(self, arm: int) -> np.ndarray:
        """The one-step estimate ``M̂ + P_T̂(M^unbs − M̂)`` of ``M_arm`` (docs/method.md §4).

        ``M̂`` is the arm's current low-rank estimate and ``P_T̂`` the projection onto the
        tangent space of the rank-``r`` matrices at ``M̂``; where ``M̂`` has rank below
        ``r`` the reference is ``M^proj`` (and the one-step estimate is ``M^proj``).  Its
        error is the projected noise ``P_T̂(M^unbs − M)`` plus a remainder quadratic in
        ``M̂ − M``, where the SVD truncation's remainder is quadratic in the noise of
        ``M^unbs``.  Cached until the next update.

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        return self._matrix_readout(arm, "the one-step estimate of M_{arm}", self._one_step)

    def _point(self, arm: int) -> np.ndarray:
        """The matrix whose inner product with ``T`` is ``m̂`` (``point_estimate``)."""
        return self._one_step(arm) if self.point_estimate == "one-step" else self._projected(arm)

    def _arm_estimate(
        self, arm: int, k: int, target: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``m̂`` (the one-step estimate, or eq. (12)'s ``<M^proj_arm, T>``), ``σ̂²`` and
        ``Ŝ²`` for one arm and target, shape (B,) each; NaN, with a warning, where they are
        unusable."""
        m_hat = np.einsum("bij,ij->b", self._point(arm), self._T[k])
        sigma2 = self._sigma_sum[:, arm] / self._n
        S2 = self._S2_sum[:, arm, k] / self._n
        never = self._pulls[:, arm] == 0
        if never.any():
            warn_insufficient(
                f"arm {arm} has never been pulled{self._pull_kind}"
                f"{trials_phrase(never, self.batched)}: at least 1 more "
                f"{self._pull_noun} of arm {arm} is needed before <M_{arm}, T[{target!r}]> "
                f"and its variance can be estimated; returning NaN",
                stacklevel=4,
            )
        flat = ~never & ~(sigma2 * S2 > 0)
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
        return (
            np.where(bad, np.nan, m_hat),
            np.where(bad, np.nan, sigma2),
            np.where(bad, np.nan, S2),
        )

    _pull_kind = ""
    _pull_noun = "pull"

    @property
    def _settings_phrase(self) -> str:
        return f"{self.point_estimate} point estimate, {self.projection} projection"

    _method_name = "online debiased low-rank estimate (Algorithms 2-3)"

    def _nan_interval(self, level: float, method: str) -> IntervalEstimate:
        nan = np.full(self._B, np.nan)
        return normal_interval(
            nan, nan, n_obs=0, confidence_level=level, method=method, batched=self.batched
        )

    def interval(
        self,
        arm: int,
        target: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``m = <M_arm, T>`` (eq. (15), Algorithm 3).

        ``m̂`` is the point estimate chosen at construction (``point_estimate``: the one-step
        estimate, or ``<M^proj_arm, T>``) and ``se = σ̂·Ŝ/√n``; the p-value is two-sided for
        ``H0: <M_arm, T> = 0``.

        Parameters
        ----------
        arm : int
            Arm index ``i`` in ``[0, K)``.
        target : str
            Name of ``T`` given at construction.
        confidence_level : float, default 0.95
        kind : {"fixed", "sequence"}, default "fixed"
            "fixed": the paper's interval ``m̂ ± z·se``, valid at a number of rounds fixed in
            advance.  "sequence": the asymptotic confidence sequence of
            :mod:`inference.sequences`, valid at every round at once (read it as often as
            you like and stop on any rule); its p-value is anytime-valid.
        tuning_n : int, default 1000
            Round at which the sequence is tightest (``kind="sequence"`` only); fix it
            before looking at the data.

        Returns
        -------
        IntervalEstimate
            NaN entries, with an :class:`InsufficientDataWarning`, before the first round,
            where the arm was never pulled, or where ``σ̂²·Ŝ² = 0``.
        """
        level = check_confidence_level(confidence_level)
        arm = check_arm(arm, self.n_actions)
        k = check_target_name(target, self._names)
        kind, tuning_n = check_kind(kind, tuning_n)
        what = f"<M_{arm}, T[{target!r}]>"
        method = f"{what}: {self._method_name}, {self._settings_phrase}"
        method += sequence_phrase(kind, tuning_n)
        if self._n == 0:
            self._warn_no_rounds(what)
            return self._nan_interval(level, method)
        n = self._n
        m_hat, sigma2, S2 = self._arm_estimate(arm, k, target)
        se = np.sqrt(sigma2) * np.sqrt(S2) / np.sqrt(n)  # σ̂·Ŝ/√n, eq. (15)
        return kind_interval(
            kind,
            tuning_n,
            estimate=m_hat,
            standard_error=se,
            n_obs=n,
            confidence_level=level,
            method=method,
            batched=self.batched,
        )

    def difference(
        self,
        arm_a: int,
        arm_b: int,
        target: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``<M_a - M_b, T>`` (Corollary 3.3).

        ``(m̂_a − m̂_b) ± z·√((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)``: the two arms' main terms are
        uncorrelated, so their variances add.  The p-value is
        two-sided for ``H0: <M_a, T> = <M_b, T>``.

        Parameters
        ----------
        arm_a, arm_b : int
            Two different arms.
        target : str
        confidence_level : float, default 0.95
        kind : {"fixed", "sequence"}, default "fixed"
        tuning_n : int, default 1000
            As in :meth:`interval`.
        """
        level = check_confidence_level(confidence_level)
        a = check_arm(arm_a, self.n_actions, "arm_a")
        b = check_arm(arm_b, self.n_actions, "arm_b")
        if a == b:
            raise ValueError(f"arm_a and arm_b must differ, got both = {a}")
        k = check_target_name(target, self._names)
        kind, tuning_n = check_kind(kind, tuning_n)
        what = f"<M_{a} - M_{b}, T[{target!r}]>"
        method = f"{what}: {self._method_name}, {self._settings_phrase} (Corollary 3.3)"
        method += sequence_phrase(kind, tuning_n)
        if self._n == 0:
            self._warn_no_rounds(what)
            return self._nan_interval(level, method)
        n = self._n
        m_a, sigma2_a, S2_a = self._arm_estimate(a, k, target)
        m_b, sigma2_b, S2_b = self._arm_estimate(b, k, target)
        se = np.sqrt((sigma2_a * S2_a + sigma2_b * S2_b) / n)  # √((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)
        return kind_interval(
            kind,
            tuning_n,
            estimate=m_a - m_b,
            standard_error=se,
            n_obs=n,
            confidence_level=level,
            method=method,
            batched=self.batched,
        )

    # ------------------------------------------------------------------ persistence
    _CONFIG = ("kind", "d1", "d2", "rank", "n_actions", "n_trials", "context", "projection")
    _ARRAYS = ("acc", "held", "last_U", "last_V", "ring_U", "ring_V", "sigma_sum", "S2_sum")

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
            **self._sum.state_dict(),
            "sigma_sum": self._sigma_sum.copy(),
            "S2_sum": self._S2_sum.copy(),
            "pulls": self._pulls.copy(),
        }

    def validate_state_dict(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` against this object, changing nothing.

        The configuration and targets must be this object's, every array must have its
        shape, dtype and finite entries, the counts (``n``, ``held``, ``pulls``) must be
        non-negative integers with no arm pulled more often than ``n``, the sums of
        squares (``sigma_sum``, ``S2_sum``) non-negative and ``initialized`` a bool.

        Returns
        -------
        dict
            Validated copies (``n``, ``ring_n``, ``initialized`` and the arrays), for
            :meth:`load_state_dict`.

        Raises
        ------
        ValueError
            Naming the first key that fails a check.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        mine = self.state_dict()
        check_config(state, mine, (*self._CONFIG, "target_names"))
        try:
            same = np.array_equal(np.asarray(state["targets"], dtype=float), self._T)
        except (TypeError, ValueError):
            same = False
        if not same:
            raise ValueError("state['targets'] does not match this object's targets")
        new = copy_arrays(state, mine, (*self._ARRAYS, "pulls"))
        n = check_count(state["n"], "n")
        ring_n = DebiasedSum.check_ring_n(state["ring_n"])
        initialized = read_bool(state["initialized"], "state['initialized']")
        for key in ("held", "pulls", "sigma_sum", "S2_sum"):
            if (new[key] < 0).any():
                raise ValueError(f"state[{key!r}] must be >= 0, got minimum {new[key].min()!r}")
        if (new["pulls"].sum(axis=-1) > n).any():
            raise ValueError(
                f"state['pulls'] counts more pulls than state['n'] = {n} rounds, got "
                f"{new['pulls'].tolist()}"
            )
        if n > 0 and not initialized:
            raise ValueError(f"state['initialized'] is False but state['n'] = {n} rounds")
        return {"n": n, "ring_n": ring_n, "initialized": initialized, **new}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`: everything is validated first
        (:meth:`validate_state_dict`), so a failure changes nothing."""
        new = self.validate_state_dict(state)
        self._n = new["n"]
        self._generation += 1
        self._sum.load(new, new["ring_n"], new["initialized"])
        self._sigma_sum = new["sigma_sum"]
        self._S2_sum = new["S2_sum"]
        self._pulls = new["pulls"]
        self._cache = {}

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"{type(self).__name__}(d1={self.d1}, d2={self.d2}, rank={self.rank}, "
            f"n_actions={self.n_actions}, targets={list(self._names)}, "
            f"context={self.context!r}, projection={self.projection!r}, "
            f"point_estimate={self.point_estimate!r}{batch}; "
            f"n_obs={self._n})"
        )


class LinearFormInference(_DebiasedLinearForm):
    """Online confidence intervals for ``<M_i, T>`` and ``<M_a - M_b, T>`` (Section 3).

    Feed every round with :meth:`update` *before* the estimator takes its step, passing the
    estimate ``M_hat_{a,t-1} = U[a] V[a]^T`` that the policy used; read intervals at any time
    with :meth:`interval` and :meth:`difference`.

    Per round and for every arm ``i`` (Algorithm 2, docs/method.md §4):
    ``M̃_{i,t} = M̂_{i,t−1} + c·1{a_t=i}/π_t(i)·(y_t − <M̂_{i,t−1}, X_t>)·X_t``, with the
    running sums of ``σ̂²_i`` and ``Ŝ²_i`` (eqs. (13), (14)); at read-out
    ``m̂ = <M̂_i + P_T̂(M^unbs_i − M̂_i), T>``, the one-step estimate from the arm's current
    estimate ``M̂_i`` with ``M^unbs_i = (1/n) Σ_t M̃_{i,t}`` (or the paper's
    ``<M^proj_i, T>``, ``M^proj_i`` the rank-``r`` truncation of ``M^unbs_i``), and
    ``se = σ̂_i·Ŝ_i/√n`` (eq. (15)).  The module docstring lists every formula.

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
        ``G_t`` in ``S^2``: "paper" is ``P_U⊥ T P_V + P_U T P_V⊥`` (eq. (14));
        "tangent" is the full tangent-space projection ``T - P_U⊥ T P_V⊥``, which also keeps
        ``P_U T P_V`` (negligible only as ``d -> inf``).
    point_estimate : {"one-step", "projection"}, default "one-step"
        How ``m̂`` is read from ``M^unbs``: "one-step" is ``<M̂ + P_T̂(M^unbs − M̂), T>``
        around the arm's current estimate ``M̂`` (:meth:`one_step`), whose remainder is
        quadratic in ``M̂ − M``; "projection" is the paper's ``<M^proj, T>`` (eq. (12),
        :meth:`projected`), whose remainder is quadratic in the noise of ``M^unbs`` and
        inflates the variance when that noise is large against the smallest singular value
        (docs/method.md §8).  Both have the same first-order term and standard error.
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
            Context ``X_t``; with ``context="completion"`` also its index ``[j, k]``
            (integers, shape (2,) or (B, 2)).
        action : int or array_like of int of shape (B,)
            Pulled arm ``a_t``.
        reward : float or array_like of shape (B,)
            Observed ``y_t``.
        propensities : array_like of shape (K,) or (B, K)
            ``pi_t(a)`` for every arm; must be positive at ``a_t``.

        Raises
        ------
        ValueError
            On any malformed input, an estimate ``U Vᵀ`` whose entries may exceed
            :data:`~lrbandit_gym.validation.MAX_MAGNITUDE`, or a round whose squares the
            running sums cannot hold; the object is then unchanged.
        """
        Ub, Vb = check_factors(U, V, self.n_actions, self.d1, self.d2, self.rank, self.n_trials)
        check_estimate_scale(Ub, Vb, self.batched)
        Xb = self._check_contexts(X)
        a = check_actions(action, self.n_actions, self.n_trials)
        y = check_batch_vector(reward, self.n_trials, "reward")
        p = check_propensities(propensities, a, self.n_actions, self.n_trials)
        self.update_validated(Ub, Vb, Xb, a, y, p)

    def update_validated(
        self,
        U: np.ndarray,
        V: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        propensities: np.ndarray,
    ) -> None:
        """:meth:`update` on inputs assumed validated, in the batched layout.

        Parameters
        ----------
        U, V : ndarray of shape (B, K, d1, r) and (B, K, d2, r)
        X : ndarray of shape (B, d1, d2)
        action : ndarray of int, shape (B,)
        reward : ndarray of shape (B,)
        propensities : ndarray of shape (B, K)
            Positive at ``action``.
        """
        self.absorb(U, V, X, action, reward, self._weight(action, propensities))

    def update_parts(
        self,
        changes: Changes,
        Ua: np.ndarray,
        Va: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        propensities: np.ndarray,
        products: Products,
    ) -> None:
        """:meth:`update` from the parts of a :class:`agents.LowRankSGD`'s balanced factors.

        Inputs are assumed validated, in the batched layout; see :meth:`absorb_parts` for
        ``changes``, ``Ua``, ``Va`` and ``products`` (``(X V_a, Xᵀ U_a, D_a)`` of the pulled
        arms, which the estimator computed for its own step).

        Parameters
        ----------
        changes : tuple ``(bi, ki, U_new, V_new)``
        Ua, Va : ndarray of shape (B, d1, r) and (B, d2, r)
        X : ndarray of shape (B, d1, d2)
        action : ndarray of int, shape (B,)
        reward : ndarray of shape (B,)
        propensities : ndarray of shape (B, K)
            Positive at ``action``.
        products : tuple of ndarray
        """
        self.commit_round(
            self.propose_update_parts(changes, Ua, Va, X, action, reward, propensities, products)
        )

    def propose_update_parts(
        self,
        changes: Changes,
        Ua: np.ndarray,
        Va: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        propensities: np.ndarray,
        products: Products,
    ) -> RoundTerms:
        """:meth:`update_parts`' first phase (:meth:`propose_parts`): the round computed and
        checked, nothing written; :meth:`commit_round` writes it.

        Raises
        ------
        ValueError
            If the running sums cannot absorb the round.
        """
        weight = self._weight(action, propensities)
        return self.propose_parts(
            changes, Ua, Va, X, action, reward, weight, balanced=True, products=products
        )

    def propose_validated(
        self,
        U: np.ndarray,
        V: np.ndarray,
        X: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        propensities: np.ndarray,
    ) -> RoundTerms:
        """:meth:`update_validated`'s first phase: the round computed and checked, nothing
        written; :meth:`commit_round` writes it.

        Raises
        ------
        ValueError
            If the running sums cannot absorb the round.
        """
        return self.propose(U, V, X, action, reward, self._weight(action, propensities))

    def _weight(self, action: np.ndarray, propensities: np.ndarray) -> np.ndarray:
        """``1/pi_t(a_t)`` per trial (1 under the "no_ipw" control)."""
        weight = 1.0 / propensities[np.arange(self._B), action]
        return np.ones_like(weight) if self.ablation == "no_ipw" else weight
