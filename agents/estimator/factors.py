"""Where :class:`agents.estimator.LowRankSGD` keeps its factors, and the per-round machinery.

The estimator of Algorithm 1 (docs/method.md §3) stores, for every trial ``b`` and arm
``a``, the balanced factors ``U_a`` (d1 x r) and ``V_a`` (d2 x r) with their singular values
``D_a``.  :class:`FactorStore`, an object the estimator owns (``LowRankSGD.store``), owns
that storage and everything that reads or writes it without being part of the algorithm's
arithmetic:

* the batched layout: ``U`` of shape ``(B, K, d1, r)``, ``V`` ``(B, K, d2, r)`` (``B = 1``
  for the unbatched API), with ``V`` also kept side by side, ``(B, d2, K, r)``, for the
  all-arm product of a prediction;
* the round's products with the context (:meth:`FactorStore.check_context`,
  :meth:`FactorStore.predict_checked`, :meth:`FactorStore.pulled`), computed once by
  :class:`agents.estimator.products.ProductCache` and shared by the policy's prediction, the
  inference wrappers' snapshot and the step;
* the counters that tell what changed: the state's :attr:`FactorStore.version` and the
  per (trial, arm) :attr:`FactorStore.arm_versions`, with read-only views
  (:attr:`FactorStore.batched_factors`) and gathers (:meth:`FactorStore.arm_factors`) for
  callers that keep copies;
* the read-outs of the factors (:attr:`FactorStore.estimates`, :meth:`FactorStore.subspaces`);
* the writes: every arm at once (:meth:`FactorStore.set_factors`, for ``initialize`` and
  ``load_state_dict``) and the second half of the two-phase step
  (:meth:`FactorStore.commit`), which writes a :class:`ProposedStep` computed (and checked)
  by :meth:`agents.estimator.LowRankSGD.propose_step`, so a failed check leaves the state as
  it was and a stack of inference wrappers can prepare every layer's step before it
  commits any.

The estimator's public API forwards to these methods under the same names
(:meth:`~agents.estimator.LowRankSGD.commit_step` for :meth:`FactorStore.commit`).

Completion contexts (``context="completion"``) travel as
:class:`~lrbandit_gym.onehot.OneHotContexts` from :meth:`FactorStore.check_context` on,
whether they arrived as an index ``[j, k]`` or as a dense one-hot matrix: a round's
prediction, products and step then cost O((d1 + d2) r) (:mod:`agents.estimator.products`), and
:attr:`FactorStore.step_support` records which row and column each arm's last step
changed, so the inference can follow the estimate at that cost too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from agents.estimator.products import ProductCache
from lrbandit_gym import engine
from lrbandit_gym.input_checks import check_context_fingerprint
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like, one_hot_contexts

__all__ = ["FactorArrays", "FactorStore", "ProposedStep", "PulledArms"]


class PulledArms(NamedTuple):
    """The pulled arms' factors before the step, and the round's products with them
    (:meth:`FactorStore.pulled`).  ``B`` is the batch size (1 unbatched).

    Attributes
    ----------
    U : ndarray of shape (B, d1, r)
        ``U_a`` of the pulled arms.
    V : ndarray of shape (B, d2, r)
        ``V_a`` of the pulled arms.
    XV : ndarray of shape (B, d1, r)
        ``X V_a``.
    XtU : ndarray of shape (B, d2, r)
        ``Xᵀ U_a``.
    sv : ndarray of shape (B, r)
        The pulled arms' singular values ``D_a`` (decreasing), a gathered copy.
    """

    U: np.ndarray
    V: np.ndarray
    XV: np.ndarray
    XtU: np.ndarray
    sv: np.ndarray


class ProposedStep(NamedTuple):
    """One step of eq. (8), computed but not written.

    :meth:`LowRankSGD.propose_step <agents.estimator.LowRankSGD.propose_step>` makes it and
    :meth:`LowRankSGD.commit_step <agents.estimator.LowRankSGD.commit_step>` writes it
    (:meth:`FactorStore.commit`).  ``B`` is the batch size (1 unbatched).

    Attributes
    ----------
    actions : ndarray of int64, shape (B,)
        The pulled arms.
    residuals : ndarray of shape (B,)
        ``y_t - <M_hat_{a_t, t-1}, X_t>`` before the step.
    U : ndarray of shape (B, d1, r)
        The pulled arms' new balanced ``U`` factors.
    V : ndarray of shape (B, d2, r)
        The pulled arms' new balanced ``V`` factors.
    sv : ndarray of shape (B, r)
        Their singular values (decreasing).
    version : int
        :attr:`FactorStore.version` of the estimator when the step was proposed.
    owner : int
        ``id()`` of the estimator that proposed it.
    support : ndarray of int64, shape (B, 2), or None
        ``(j, k)`` of each trial's one-hot context ``e_j e_kᵀ``: the step changes ``U_a``
        only in row ``j`` and ``V_a`` only in row ``k`` (before the balancing, which leaves
        ``U_a V_aᵀ`` unchanged elsewhere).  None for dense contexts.
    square_weights : ndarray of shape (B, K), or None
        ``1{a_t = a}/π_t(a)²`` of every arm, added to the running sum that the step's
        warm-start cap reads (:func:`agents.estimator.step_size.continuing_gain`); None without
        known propensities.
    """

    actions: np.ndarray
    residuals: np.ndarray
    U: np.ndarray
    V: np.ndarray
    sv: np.ndarray
    version: int
    owner: int
    support: np.ndarray | None = None
    square_weights: np.ndarray | None = None


class FactorArrays(NamedTuple):
    """The live arrays of a :class:`FactorStore` in the batched layout (``B = 1``
    unbatched), for the estimator's arithmetic and its saved state: read them, never write
    them (the store writes through :meth:`FactorStore.commit` and
    :meth:`FactorStore.set_factors`).

    Attributes
    ----------
    U : ndarray of shape (B, K, d1, r)
    V : ndarray of shape (B, K, d2, r)
    sv : ndarray of shape (B, K, r)
        The singular values ``D_a`` of every estimate (decreasing).
    counts : ndarray of int64, shape (B, K)
        The per-arm update counts ``s_a``.
    """

    U: np.ndarray
    V: np.ndarray
    sv: np.ndarray
    counts: np.ndarray


class FactorStore:
    """The balanced factors of ``K`` arms for ``B`` trials, and the machinery around them.

    Owned by :class:`agents.estimator.LowRankSGD` (its ``store``), which validates the
    sizes, sets the factors (eq. (10)) and computes the steps (eq. (8)); see the module
    docstring for what lives here.

    Parameters
    ----------
    d1, d2 : int
        Context (and parameter) matrix shape.
    rank : int
        Rank ``r`` of the factors.
    n_actions : int
        Number of arms ``K``.
    n_trials : int or None
        None for the unbatched API, else the batch size ``B``.
    context : {"gaussian", "completion"}, default "gaussian"
        The context law.  With "completion", :meth:`check_context` returns one-hot contexts
        in index form.

    Attributes
    ----------
    initialized : bool
        Whether :meth:`initialize` (or :meth:`load_state_dict`) has set the factors.
    arm_versions : ndarray of int64, shape (B, K)
        Per (trial, arm) counter bumped whenever those factors change (``B = 1``
        unbatched).  A caller that keeps copies of factors (the inference wrappers) tells
        which arms moved by comparing versions instead of factors.  A read-only view that
        follows the estimator: copy it to keep a snapshot.
    step_support : ndarray of int64, shape (B, K, 2)
        ``(j, k)`` of the one-hot context of the step that last changed each arm.  A step
        on ``e_j e_kᵀ`` changes ``M_hat_a = U_a V_aᵀ`` only in row ``j`` and column ``k``
        (docs/method.md §3), so a caller that keeps a running sum of the estimates (the
        inference's ``Σ_t M_hat_{i,t-1}``) can follow it at O((d1 + d2) r) cost when an
        arm's :attr:`arm_versions` moved by exactly one step.  ``(-1, -1)`` where the last
        change was anything else (:meth:`initialize`, :meth:`load_state_dict`, a step on a
        dense context).  A read-only view that follows the estimator.
    fingerprint : callable
        ``fingerprint(Xb)``: per-trial ``<X, W>`` of contexts ``Xb`` in the batched layout
        (B, d1, d2) or :class:`~lrbandit_gym.onehot.OneHotContexts`, not validated, shape
        (B,), with fixed weights ``W`` drawn once in ``[1, 2)`` (one GEMV;
        :meth:`agents.estimator.products.ProductCache.fingerprint`).  It tells whether a
        context is the one the round's products were computed for, so a round's
        prediction, the inference wrappers' snapshot and the step share one ``X V`` and one
        ``Xᵀ U`` however the caller copied or reshaped the array in between, while an array
        edited in place is recomputed.  Since no weight is zero, a non-finite entry makes it
        non-finite: it doubles as a finiteness check.

    Notes
    -----
    The sizes are assumed validated (the estimator does it).  Until the estimator sets the
    factors (:meth:`set_factors`) they are zero and :attr:`initialized` is False.  The
    methods named here without a class (:meth:`initialize`, :meth:`update`,
    :meth:`step`, :meth:`propose_step`, :meth:`load_state_dict`, ...) are
    :class:`~agents.estimator.LowRankSGD`'s.
    """

    def __init__(
        self,
        d1: int,
        d2: int,
        rank: int,
        n_actions: int,
        n_trials: int | None,
        context: str = "gaussian",
    ) -> None:
        self.context = context
        self.d1 = d1
        self.d2 = d2
        self.rank = rank
        self.n_actions = n_actions
        self.n_trials = n_trials
        B = self._B
        K = self.n_actions
        self._U = np.zeros((B, K, self.d1, self.rank))
        self._V = np.zeros((B, K, self.d2, self.rank))
        self._sv = np.zeros((B, K, self.rank))
        self._counts = np.zeros((B, K), dtype=np.int64)
        self._t = 0
        self.initialized = False
        self._trials = np.arange(B)
        # Products of the current round's context with the factors, shared by predict(),
        # the inference wrappers and update().
        self._product_cache = ProductCache(self.d1, self.d2, self.n_trials)
        # Per (trial, arm) counter bumped whenever those factors change (arm_versions).
        self._arm_version = np.zeros((B, K), dtype=np.int64)
        # The V factors side by side, (B, d2, K, r), for the all-arm product of predict().
        self._V_cat = np.zeros((B, self.d2, K, self.rank))
        # Counter bumped by every change of the state (propose_step/commit_step compare it).
        self._version = 0
        # (j, k) of the one-hot context of each arm's last step; -1 after any other change.
        self._support = np.full((B, K, 2), -1, dtype=np.int64)
        # Read-only views of the two counters above (never replaced, written in place).
        self.arm_versions = self._arm_version.view()
        self.arm_versions.flags.writeable = False
        self.step_support = self._support.view()
        self.step_support.flags.writeable = False
        # The cache's fingerprint, handed out as the store's own.
        self.fingerprint = self._product_cache.fingerprint

    @property
    def _B(self) -> int:
        return 1 if self.n_trials is None else self.n_trials

    @property
    def batched(self) -> bool:
        """Whether the batched API (``n_trials`` given) is in use."""
        return self.n_trials is not None

    @property
    def t(self) -> int:
        """Number of rounds absorbed by :meth:`update` since :meth:`initialize`."""
        return self._t

    @property
    def counts(self) -> np.ndarray:
        """Per-arm update counts ``s_a``, shape ``(K,)`` or ``(B, K)`` (a copy)."""
        return self._out(self._counts.copy())

    @property
    def version(self) -> int:
        """Counter bumped by every change of the state (steps, :meth:`initialize`,
        :meth:`load_state_dict`): a :class:`ProposedStep` made at another version is
        refused by :meth:`commit_step`."""
        return self._version

    def _out(self, arr: np.ndarray) -> np.ndarray:
        """Drop the internal batch axis in the unbatched API."""
        return arr[0] if self.n_trials is None else arr

    # ------------------------------------------------------------------ per-round API
    def check_context(self, X: Any) -> tuple[np.ndarray | OneHotContexts, np.ndarray]:
        """Validate a context for this estimator (one pass over its entries).

        Parameters
        ----------
        X : array_like of shape (d1, d2), or (B, d1, d2) batched
            The context matrix.  With ``context="completion"`` also its index: an integer
            array ``[j, k]`` of shape (2,), or (B, 2) batched
            (:func:`lrbandit_gym.onehot.check_index`).

        Returns
        -------
        Xb : ndarray of shape (B, d1, d2), or OneHotContexts
            The context in the batched layout (``B = 1`` unbatched).  With
            ``context="completion"``, one-hot contexts come back in index form (an index
            as given, a dense matrix after one pass that finds its single 1; any other
            matrix stays dense).
        fingerprint : ndarray of shape (B,)
            Its :attr:`fingerprint`, which is both the finiteness check and the key of the
            round's products: pass it on to :meth:`predict_checked`, :meth:`pulled` and
            :meth:`step` (the ``fingerprint`` of its :class:`~lrbandit_gym.rounds.Round`).

        Raises
        ------
        ValueError
            If ``X`` is not a real array of the right shape or has a non-finite entry, or
            an index is not integer or out of range.
        """
        completion = self.context == "completion"
        if completion and is_index_like(X, self.n_trials):
            ctx = check_index(X, self.d1, self.d2, self.n_trials)
            return ctx, self._product_cache.fingerprint(ctx)
        try:
            X, fp = check_context_fingerprint(
                X, self.d1, self.d2, self.n_trials, self._product_cache.weights
            )
        except ValueError as exc:
            if completion and "shape" in str(exc):
                index = (2,) if self.n_trials is None else (self.n_trials, 2)
                raise ValueError(
                    f"{exc}; or a completion index (row, column): integers of shape {index}"
                ) from None
            raise
        Xb = X if self.n_trials is not None else X[None]
        if completion:
            ctx = one_hot_contexts(Xb)
            if ctx is not None:
                return ctx, fp  # the dense fingerprint of e_j e_kᵀ is W[j, k], as ctx's
        return Xb, fp

    def predict_checked(self, Xb: np.ndarray, fingerprint: np.ndarray | None = None) -> np.ndarray:
        """:meth:`predict` on contexts :meth:`check_context` has checked, in the batched
        layout (what :meth:`predict` runs after its check).

        Parameters
        ----------
        Xb : ndarray of shape (B, d1, d2), or OneHotContexts
            Contexts from :meth:`check_context` (not checked again).
        fingerprint : ndarray of shape (B,), optional
            Their fingerprint from :meth:`check_context`; computed if omitted.

        Returns
        -------
        ndarray of shape (B, K)
            ``<M_hat_a, X>`` for every trial and arm (for one-hot contexts ``e_j e_kᵀ``,
            ``U_a[j] · V_a[k]``: O(K r)).
        """
        return self._product_cache.predictions(Xb, self._U, self._V, self._V_cat, fingerprint)

    def pulled(
        self, Xb: np.ndarray, actions: np.ndarray, fingerprint: np.ndarray | None = None
    ) -> PulledArms:
        """What the pulled arms' factors are before the step, and their products with ``X``.

        The products are the ones :meth:`step` then uses on the same context
        (cached for the round), so a caller that snapshots the round computes nothing twice.

        Parameters
        ----------
        Xb : ndarray of shape (B, d1, d2)
            Contexts from :meth:`check_context` (assumed validated).
        actions : ndarray of int64, shape (B,)
            The pulled arms (assumed validated).
        fingerprint : ndarray of shape (B,), optional
            The fingerprint of ``Xb`` from :meth:`check_context`; computed if omitted.

        Returns
        -------
        PulledArms
            ``U``, ``V``, ``XV``, ``XtU`` (read-only by convention: they are shared with the
            cache; unbatched, ``U`` and ``V`` are views of the factors, so copy them to keep
            them past the step) and ``sv`` (a copy).
        """
        U, V, XV, XtU = self._product_cache.pulled(Xb, actions, self._U, self._V, fingerprint)
        if self.n_trials is None:  # one trial: a basic-indexing copy, no gather
            return PulledArms(U, V, XV, XtU, self._sv[0, int(actions[0])][None].copy())
        return PulledArms(U, V, XV, XtU, self._sv[self._trials, actions])

    def pulled_products(
        self, Xb: np.ndarray, actions: np.ndarray, fingerprint: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`pulled` without the singular values: ``(U, V, XV, XtU)`` (what the step
        reads)."""
        return self._product_cache.pulled(Xb, actions, self._U, self._V, fingerprint)

    # ------------------------------------------------------------------ read-outs
    def require_init(self, what: str) -> None:
        """Refuse ``LowRankSGD.<what>`` before the factors are set (``RuntimeError``)."""
        if not self.initialized:
            raise RuntimeError(
                f"LowRankSGD.{what} called before initialization: call initialize(M_init) "
                "first (e.g. with agents.warm_start.nuclear_norm_fit) or use a warm start."
            )

    @property
    def estimates(self) -> np.ndarray:
        """Current estimates ``M_hat_a = U_a V_a^T``: ``(K, d1, d2)`` or ``(B, K, d1, d2)``."""
        self.require_init("estimates")
        return self._out(np.matmul(self._U, self._V.swapaxes(-1, -2)))

    def subspaces(self) -> tuple[np.ndarray, np.ndarray]:
        """Orthonormal bases of the column and row spaces of each estimate.

        From the balanced form, ``Q_U = U D^{-1/2}`` and ``Q_V = V D^{-1/2}`` (r x r work;
        the projections ``P_U = Q_U Q_U^T`` of Section 3 follow).  A zero singular value
        gives a zero column.

        Returns
        -------
        Q_U : ndarray of shape (K, d1, r) or (B, K, d1, r)
        Q_V : ndarray of shape (K, d2, r) or (B, K, d2, r)
        """
        self.require_init("subspaces")
        sv = self._sv
        ok = sv > 0
        inv_root = np.where(ok, 1.0 / np.sqrt(np.where(ok, sv, 1.0)), 0.0)[..., None, :]
        return self._out(self._U * inv_root), self._out(self._V * inv_root)

    # ------------------------------------------------------------------ the write of a step
    def commit(self, proposed: ProposedStep) -> None:
        """Write the pulled arms' new factors of a step proposed on the current state
        (:meth:`LowRankSGD.commit_step <agents.estimator.LowRankSGD.commit_step>`, which
        checks first that the step is its estimator's).

        Raises
        ------
        ValueError
            If the state changed since ``proposed`` was computed (another step,
            :meth:`initialize`, :meth:`load_state_dict`); nothing is written then.
        """
        if proposed.version != self._version:
            raise ValueError(
                f"proposed was computed at version {proposed.version} of the estimator, "
                f"which has changed since (version {self._version}): propose the step again"
            )
        a = proposed.actions
        if proposed.support is None:
            self._support[self._trials, a] = -1
        else:
            self._support[self._trials, a] = proposed.support
        if engine.compiled():
            from agents.estimator import kernels

            state = (self._U, self._V, self._sv, self._V_cat, self._counts, self._arm_version)
            kernels.write_pulled(*state, a, proposed.U, proposed.V, proposed.sv)
            self._t += 1
            self._product_cache.invalidate()
        else:
            self._store_pulled(a, proposed.U, proposed.V, proposed.sv)
        self._version += 1

    # ------------------------------------------------------------------ per-arm versions
    @property
    def batched_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """Read-only views ``(U, V)`` of the balanced factors in the batched layout.

        Shapes (B, K, d1, r) and (B, K, d2, r) (``B = 1`` unbatched).  The views follow the
        steps, but :meth:`initialize` and :meth:`load_state_dict` replace the arrays: read
        the property again after those.  :attr:`factors` returns copies instead.
        """
        U, V = self._U.view(), self._V.view()
        U.flags.writeable = False
        V.flags.writeable = False
        return U, V

    def arm_factors(self, trials: Any, arms: Any) -> tuple[np.ndarray, np.ndarray]:
        """Gathered copies ``(U[trials, arms], V[trials, arms])`` of chosen arms' factors.

        Parameters
        ----------
        trials, arms : array_like of int
            Index arrays (broadcast together) of the (trial, arm) pairs, e.g. from
            ``np.nonzero`` of a comparison of :attr:`arm_versions`; assumed in range.

        Returns
        -------
        U : ndarray of shape (N, d1, r)
        V : ndarray of shape (N, d2, r)
            For ``N`` broadcast pairs.
        """
        return self._U[trials, arms], self._V[trials, arms]

    @property
    def factors(self) -> tuple[np.ndarray, np.ndarray]:
        """Balanced factors ``(U, V)`` (copies), shapes ``(K, d1, r)``, ``(K, d2, r)``.

        Batched: ``(B, K, d1, r)``, ``(B, K, d2, r)``.  ``U_a^T U_a = V_a^T V_a = D_a``.
        """
        return self._out(self._U.copy()), self._out(self._V.copy())

    @property
    def singular_values(self) -> np.ndarray:
        """Singular values ``D`` of each estimate (decreasing): ``(K, r)`` or ``(B, K, r)``."""
        return self._out(self._sv.copy())

    @property
    def arrays(self) -> FactorArrays:
        """The live ``U``, ``V``, singular values and counts in the batched layout
        (:class:`FactorArrays`; not copies, not to be written)."""
        return FactorArrays(self._U, self._V, self._sv, self._counts)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the store holds: the factors, their singular values, ``V``
        side by side, the counters, and the round's products
        (:attr:`agents.estimator.products.ProductCache.nbytes`)."""
        arrays = (
            self._U,
            self._V,
            self._sv,
            self._V_cat,
            self._counts,
            self._arm_version,
            self._support,
            self._trials,
        )
        return sum(x.nbytes for x in arrays) + self._product_cache.nbytes

    # ------------------------------------------------------------------ state changes
    def _store_pulled(
        self, a: np.ndarray, U_bal: np.ndarray, V_bal: np.ndarray, sv: np.ndarray
    ) -> None:
        """Write the pulled arms' new balanced factors (nothing here raises)."""
        if self.n_trials is None:  # basic indexing: cheaper than the gather/scatter
            a0 = int(a[0])
            self._U[0, a0] = U_bal[0]
            self._V[0, a0] = V_bal[0]
            self._sv[0, a0] = sv[0]
            self._counts[0, a0] += 1
            self._V_cat[0, :, a0] = V_bal[0]
        else:
            self._U[self._trials, a] = U_bal
            self._V[self._trials, a] = V_bal
            self._sv[self._trials, a] = sv
            self._counts[self._trials, a] += 1
            self._V_cat[self._trials, :, a] = V_bal
        self._t += 1
        self._product_cache.invalidate()
        self._arm_version[self._trials, a] += 1

    def set_factors(
        self,
        U: np.ndarray,
        V: np.ndarray,
        sv: np.ndarray,
        counts: np.ndarray,
        t: int,
        initialized: bool,
    ) -> None:
        """Replace every arm's factors and the counters (:meth:`initialize`,
        :meth:`load_state_dict`): the arrays, in the batched layout, become the store's."""
        self._U = U
        self._V = V
        self._sv = sv
        self._counts = counts
        self._t = t
        self.initialized = initialized
        self._product_cache.invalidate()
        self._version += 1
        self._arm_version += 1
        self._support[...] = -1
        self._V_cat = np.ascontiguousarray(self._V.transpose(0, 2, 1, 3))
