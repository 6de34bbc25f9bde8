"""Online inference on linear forms ``<M_i, T>`` of the arms' parameters (Section 3).

Algorithms 2-3 of the paper (docs/method.md §4).  Per round ``t`` and arm ``i``, with
``M̂ = M̂_{i,t−1}`` the estimate *before* round ``t``'s update, ``res_t = y_t − <M̂, X_t>`` and
``c = 1`` (gaussian contexts) or ``d1·d2`` (completion, Appendix C)::

    M̃_{i,t}    = M̂ + c·1{a_t=i}/π_t(i)·res_t·X_t               Algorithm 2
    M^unbs_i   = (1/n) Σ_t M̃_{i,t}                              eq. (11)
    m̂_i        = <M̂_i + P_T̂(M^unbs_i − M̂_i), T>                  one-step (method.md §4)
                 or the paper's <M^proj_i, T>                     eq. (12), Algorithm 3
    σ̂²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)·res_t²               eq. (13)
    Ŝ²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)²·c²·<G_t, X_t>²       eq. (14)
    interval     m̂_i ± z·σ̂_i·Ŝ_i/√n                             eq. (15)
    difference   (m̂_a − m̂_b) ± z·√((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)   Corollary 3.3

:func:`debiased_sums_reference` below computes Algorithm 2's sums in plain numpy from a list
of rounds, and :func:`inference.cores.linear_form_readout.readout_reference` Algorithm 3's interval
from them; the tests compare both with the fast path.

Everything is a running sum: memory is ``O(K d1 d2)`` per trial and the per-round cost does
not grow with the number of rounds.  :class:`LinearFormCore` holds the configuration and
owns the sums, a :class:`~inference.cores.linear_form_state.LinearFormState` with public
fields; what it does with them are functions of its public fields, one module each, that
it binds as its methods: :mod:`inference.cores.linear_form_round` (one round of
Algorithm 2, two-phase), :mod:`inference.cores.linear_form_readout` (the point estimates and
intervals of Algorithm 3) and :mod:`inference.cores.linear_form_state` (the sums, saved and
restored).  What keeps a round
cheap lives below them: :mod:`inference.cores.debiased_sum` (``Σ_t M̃`` with the held estimates
queued and added by one GEMM every few rounds), :mod:`inference.cores.tangent_space`
(``<M̂, X_t>`` and ``<G_t, X_t>`` from ``r x r`` algebra, never a ``d1 x d2`` projector)
and :mod:`inference.cores._kernels` (the same round compiled by numba).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from inference.cores import linear_form_readout, linear_form_round, linear_form_state
from inference.cores.checks import check_batch_vector, check_factors, check_n_trials, check_targets
from inference.cores.design_variance import DESIGN_VARIANCES, design_floor
from inference.cores.linear_form_round import check_estimate_scale
from inference.cores.linear_form_state import LinearFormState
from inference.cores.projection_choice import PROJECTIONS, choose_projection
from lrbandit_gym.context_law import IsotropicLaw, as_context_law
from lrbandit_gym.input_checks import (
    check_actions,
    check_choice,
    check_positive_int,
    check_propensities,
)
from lrbandit_gym.rounds import Round

__all__ = ["LinearFormCore", "LinearFormInference", "debiased_sums_reference"]

_CONTEXTS = ("gaussian", "completion")
_POINT_ESTIMATES = ("one-step", "projection")


def debiased_sums_reference(
    X, actions, rewards, propensities, M_before, targets, rank, *, c=1.0, projection="tangent"
):
    """Algorithm 2 in plain numpy: the running sums :class:`LinearFormInference` keeps.

    ``X`` (n, d1, d2), ``actions`` (n,), ``rewards`` (n,), ``propensities`` (n, K): the rounds;
    ``M_before`` (n, K, d1, d2): the estimates *before* each round's step; ``targets``
    (n_T, d1, d2); ``c = 1`` (Gaussian contexts) or ``d1 d2`` (completion).  Under another
    context law ``c·X_t`` in the correction and in ``<G_t, ·>`` is ``ContextLaw.whiten(X_t)``
    (and the standard error the robust one).  Returns ``Σ_t M̃_{i,t}`` (K, d1, d2), ``n σ̂²``
    (K,) and ``n Ŝ²`` (K, n_T); :meth:`LinearFormInference.propose` and ``commit`` are the
    fast path, :func:`inference.cores.linear_form_readout.readout_reference` reads them out.
    """
    M_sum = M_before.sum(axis=0)  # Σ_t M̂_{i,t−1}
    sigma_sum, S2_sum = np.zeros(M_sum.shape[0]), np.zeros((M_sum.shape[0], len(targets)))
    for Xt, a, y, p, M in zip(X, actions, rewards, propensities, M_before, strict=True):
        w, res = 1.0 / p[a], y - np.sum(M[a] * Xt)  # w_t = 1/π_t(a_t), res_t = y_t − <M̂, X_t>
        M_sum[a] += c * w * res * Xt  # M̃_{a,t} = M̂ + c·1{a_t=a}/π_t(a)·res_t·X_t, eq. (11)
        sigma_sum[a] += w * res**2  # eq. (13)
        W, _, Zt = np.linalg.svd(M[a])
        P_U, P_V = W[:, :rank] @ W[:, :rank].T, Zt[:rank].T @ Zt[:rank]
        for k, T in enumerate(targets):  # G_t = T − P_U⊥ T P_V⊥, or eq. (14)'s P_U⊥TP_V + P_UTP_V⊥
            G = P_U @ T + T @ P_V - (1 if projection == "tangent" else 2) * P_U @ T @ P_V
            S2_sum[a, k] += (c * w * np.sum(G * Xt)) ** 2  # eq. (14)
    return M_sum, sigma_sum, S2_sum


class LinearFormCore:
    """Shared engine of :class:`LinearFormInference` and the exploration-only baseline.

    Subclasses validate their own ``update`` arguments into a
    :class:`~lrbandit_gym.rounds.Round` and run the round's two phases (:meth:`propose`,
    with the pulled arm's weight where it is not ``1/π_t(a_t)``: 0 for a round that must
    not be used; then :meth:`commit`).

    The running sums are :attr:`state`; the round, the read-outs and persistence are
    functions of the core's public fields in their modules, bound below as methods.
    """

    #: The ``kind`` a saved state carries: a state loads only into a core of its kind.
    state_kind = "linear_form"
    #: Words of the read-outs' messages, which a subclass's own rounds change.
    pull_kind = ""
    pull_noun = "pull"
    method_name = "online debiased low-rank estimate (Algorithms 2-3)"

    #: Whether a round adds its correction term ``c·1{a_t=i}/π_t(i)·res_t·X_t`` to the
    #: debiased sum (Algorithm 2); the method always does, a negative control of a validity
    #: study (:mod:`lrbandit_gym.experiments.controls`) does not.
    debias: bool = True
    #: Whether a round's weight is ``1/π_t(a_t)``; a negative control weighs every round 1.
    ipw: bool = True
    #: Whether the core's rounds allow ``design_variance="all-rounds"`` (every arm's
    #: ``1/π_t(i)`` is the weight its design term would have had).
    all_rounds_design: bool = True

    def __init__(
        self,
        d1: int,
        d2: int,
        rank: int,
        n_actions: int,
        targets: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        context: str = "gaussian",
        projection: str = "auto",
        point_estimate: str = "one-step",
        n_trials: int | None = None,
        context_law: Any = None,
        check_contexts: bool = True,
        design_variance: str = "auto",
    ) -> None:
        self.d1 = check_positive_int(d1, "d1")
        self.d2 = check_positive_int(d2, "d2")
        self.rank = check_positive_int(rank, "rank")
        if self.rank > min(self.d1, self.d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(self.d1, self.d2)}, got {rank!r}")
        self.n_actions = check_positive_int(n_actions, "n_actions", minimum=2)
        self.context = check_choice(context, "context", _CONTEXTS)
        projection = check_choice(projection, "projection", PROJECTIONS)
        self.point_estimate = check_choice(point_estimate, "point_estimate", _POINT_ESTIMATES)
        if projection == "none" and self.point_estimate == "projection":
            raise ValueError(
                "point_estimate='projection' reads the rank-r truncation of M^unbs, which "
                "projection='none' does not use: pass point_estimate='one-step' (with "
                "projection='none' it is <M^unbs, T> itself)"
            )
        self.n_trials = check_n_trials(n_trials)
        #: Whether results carry a leading trial axis.
        self.batched = self.n_trials is not None
        names, stack = check_targets(targets, self.d1, self.d2)
        #: Names of the targets ``T``, in the order of the last axis of :attr:`S2`.
        self.target_names = names
        law = (
            IsotropicLaw(self.d1, self.d2, self.context)
            if context_law is None
            else as_context_law(context_law, self.d1, self.d2)
        )
        if law.estimated and law.structure == "kronecker" and self.context == "completion":
            raise ValueError(
                f"context_law {law.describe()} cannot describe completion contexts, whose "
                "second moment is diagonal: give the entries' frequencies, "
                "context_law=EntryLaw(p) or EntryLaw.of_counts(rows, cols, (d1, d2)) from a log "
                "(docs/method.md §11)"
            )
        if law.name in ("completion", "entries") and self.context != "completion":
            raise ValueError(
                f"context_law {law.describe()} describes completion contexts (one revealed "
                f"entry); the contexts here are dense ({self.context!r})"
            )
        #: The law of the contexts the debiasing divides by (docs/method.md §1).
        self.context_law = law
        #: The read-out: "tangent", "paper" or "none" ("auto" resolved by the law,
        #: :func:`~inference.cores.projection_choice.choose_projection`).
        self.projection = choose_projection(projection, law, self.point_estimate)
        #: ``c`` of ``Σ = I/c`` (1 or ``d1·d2``), or None for a law whose correction whitens.
        self.c = law.isotropic_scale
        #: Whether the standard error is the heteroscedasticity-robust one (a law other
        #: than the paper's, docs/method.md §11) rather than ``σ̂·Ŝ/√n``.  Completion
        #: contexts under the low-rank read-outs keep the paper's product form: a sum of a
        #: few heavy design terms (rare entries) normalised by itself is conservative.
        self.robust = self.c is None and (self.context != "completion" or self.projection == "none")
        if not isinstance(check_contexts, bool):
            raise ValueError(f"check_contexts must be True or False; got {check_contexts!r}")
        design_variance = check_choice(design_variance, "design_variance", DESIGN_VARIANCES)
        if design_variance == "all-rounds" and not (self.ipw and self.all_rounds_design):
            raise ValueError(
                f"design_variance='all-rounds' weighs every round by 1/π_t(i); "
                f"{type(self).__name__} weighs its rounds otherwise: pass "
                "design_variance='pulled'"
            )
        if design_variance == "all-rounds" and self.c is None:
            raise ValueError(
                f"design_variance='all-rounds' supports the laws with Σ = I/c (the "
                f"'gaussian' and 'completion' contexts' own); got context_law "
                f"{law.describe()}: pass design_variance='pulled'"
            )
        #: The design part of the variance as asked: "auto", "pulled" (eq. (14)) or
        #: "all-rounds" (:mod:`inference.cores.design_variance`, docs/method.md §13).
        self.design_variance = design_variance
        #: The propensity from which a round's design term is the all-rounds one: None for
        #: eq. (14) alone ("pulled", and "auto" on completion contexts or where the rounds
        #: or the law do not allow the all-rounds term), 0 for every round,
        #: ``DESIGN_FLOOR`` for "auto" on dense contexts.
        self.design_floor = (
            None
            if not (self.ipw and self.all_rounds_design and self.c is not None)
            else design_floor(design_variance, self.context)
        )
        self.check_contexts = check_contexts
        B = 1 if self.n_trials is None else self.n_trials
        #: The running sums and what a round reads with them (linear_form_state).
        self.state = LinearFormState(
            B, self.n_actions, self.d1, self.d2, self.rank, names, stack, self.projection, law
        )
        #: Rounds absorbed so far (``n``).
        self.n_obs = 0
        #: ``(n, generation)``: identifies the rounds absorbed so far.  ``generation``
        #: changes whenever the state is replaced (a :meth:`load_state_dict`), so equal
        #: positions mean the same absorbed stream.
        self.position = (0, 1)

    # The round (linear_form_round).
    propose = linear_form_round.propose
    observe_context = linear_form_round.observe_context
    changed_arms = linear_form_round.changed_arms
    estimate_parts = linear_form_round.estimate_parts
    commit = linear_form_round.commit
    # The read-outs (linear_form_readout).
    interval = linear_form_readout.interval
    difference = linear_form_readout.difference
    debiased_mean = linear_form_readout.debiased_mean
    projected = linear_form_readout.projected
    standard_errors = linear_form_readout.standard_errors
    remainders = linear_form_readout.remainders
    one_step = linear_form_readout.one_step
    round_shares = linear_form_readout.round_shares
    design_shares = linear_form_readout.design_shares
    condition_numbers = linear_form_readout.condition_numbers
    unidentified_fractions = linear_form_readout.unidentified_fractions
    law_flags = linear_form_readout.law_flags
    context_flags = linear_form_readout.context_flags
    # Persistence (linear_form_state).
    state_dict = linear_form_state.state_dict
    validate_state_dict = linear_form_state.validate_state_dict
    load_state_dict = linear_form_state.load_state_dict

    @property
    def n_pulls(self) -> np.ndarray:
        """Rounds that entered each arm's correction term, shape ``(K,)`` or ``(B, K)``."""
        pulls = self.state.pulls.copy()
        return pulls if self.batched else pulls[0]

    @property
    def sigma2(self) -> np.ndarray:
        """``σ̂²_i`` per arm (eq. (13)), shape ``(K,)`` or ``(B, K)``; NaN at n = 0."""
        n, sums = self.n_obs, self.state.sigma_sum
        sigma2 = sums / n if n else sums * np.nan
        return sigma2 if self.batched else sigma2[0]

    @property
    def S2(self) -> np.ndarray:
        """``Ŝ²_i`` per arm and target (eq. (14)); shape ``(K, n_T)`` or ``(B, K, n_T)``.

        The last axis follows :attr:`target_names`.  NaN before any data.
        """
        n, sums = self.n_obs, self.state.S2_sum
        S2 = sums / n if n else sums * np.nan
        return S2 if self.batched else S2[0]

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"{type(self).__name__}(d1={self.d1}, d2={self.d2}, rank={self.rank}, "
            f"n_actions={self.n_actions}, targets={list(self.target_names)}, "
            f"context={self.context!r}, context_law={self.context_law.name!r}, "
            f"projection={self.projection!r}, "
            f"point_estimate={self.point_estimate!r}{batch}; "
            f"n_obs={self.n_obs})"
        )


class LinearFormInference(LinearFormCore):
    """Online confidence intervals for ``<M_i, T>`` and ``<M_a - M_b, T>`` (Section 3).

    Feed every round with :meth:`update` *before* the estimator takes its step, passing the
    estimate ``M_hat_{a,t-1} = U[a] V[a]^T`` that the policy used; read intervals at any time
    with :meth:`interval` and :meth:`difference`.  A caller that checked the round already
    (a :class:`~lrbandit_gym.rounds.Round`) passes it to :meth:`update`, or runs the step
    in two phases, :meth:`propose` (computed and checked, nothing written) and
    :meth:`commit`, as the inference wrappers do
    (:func:`~inference.cores.linear_form_round.propose`: computed and checked, nothing
    written, and raises ``ValueError`` if the running sums cannot absorb the round).

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
        The contexts' form: dense matrices, or one-hot ``e_j e_kᵀ`` (also given by their
        index); the default law is the simulator's of that name.
    context_law : str or ContextLaw, optional
        The law whose second moment ``Σ`` the correction divides by
        (:mod:`lrbandit_gym.context_law`, docs/method.md §1): default the ``context``'s
        (``Σ = I``, or ``I/(d1 d2)`` for completion: ``c·X_t`` with ``c = 1`` or ``d1 d2``);
        ``"estimated"`` estimates ``Σ`` from the contexts as they arrive
        (:meth:`observe_context` adds the rounds that do not enter the inference);
        a :class:`~lrbandit_gym.context_law.KroneckerLaw`,
        :class:`~lrbandit_gym.context_law.SecondMomentLaw` or
        :class:`~lrbandit_gym.context_law.EntryLaw` gives ``Σ``.
    check_contexts : bool, default True
        Check every round's context against the law (:mod:`inference.cores.context_check`) and
        warn (:class:`~inference.cores.context_check.ContextLawWarning`) at a read-out where they
        do not match.
    design_variance : {"auto", "pulled", "all-rounds"}, default "auto"
        The design part ``Ŝ²`` of the standard error (:mod:`inference.cores.design_variance`,
        docs/method.md §13).  "pulled" is eq. (14), ``(1/n) Σ_t 1{a_t=i}/π_t(i)² c²<G_t,
        X_t>²``; "all-rounds" is ``(1/n) Σ_t c²<G_{i,t}, X_t>²/π_t(i)`` over every round,
        with the same conditional mean and far less noise where few rounds pull the arm
        (an arm explored with probability ``ε/K``);
        "auto" takes, on dense contexts, a round's all-rounds term where ``π_t(i | X_t)``
        is at least ``DESIGN_FLOOR`` (0.01) and eq. (14)'s below it, so that contexts in
        which the arm is almost never pulled do not inflate the interval; on completion
        contexts it is eq. (14), whose sum over the revealed entries of the pulled rounds
        follows the noise the estimate actually carries.  "all-rounds" needs every arm's
        propensity positive in every round; both need the weights ``1/π_t`` and a law
        with ``Σ = I/c``, and "auto" is "pulled" where they are not (:attr:`design_floor`
        None).
    projection : {"auto", "tangent", "paper", "none"}, default "auto"
        ``G_t`` in ``S^2``: "paper" is ``P_U⊥ T P_V + P_U T P_V⊥`` (eq. (14));
        "tangent" is the full tangent-space projection ``T - P_U⊥ T P_V⊥``, which also keeps
        ``P_U T P_V`` (negligible only as ``d -> inf``).  "none" is ``G_t = T`` and the point
        estimate ``<M^unbs, T>``: no low-rank step at the read-out, so no remainder in
        ``M̂ − M``; valid for every target the contexts identify (``Σ⁺Σ vec T = vec T``,
        :meth:`unidentified_fractions`) however poor the estimate, with a wider interval
        (docs/method.md §12): the choice for contexts that barely vary along some
        directions, such as images.  "auto" is "none" where the law's second moment has a
        condition number above :data:`~lrbandit_gym.context_law.CONDITION_LIMIT` on its
        range, else "tangent" (:mod:`inference.cores.projection_choice`; an estimated law,
        unknown before its contexts, gives "tangent"); :attr:`projection` holds the choice.
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
        action: Any = None,
        reward: Any = None,
        propensities: Any = None,
    ) -> None:
        """Absorb round ``t``.

        Parameters
        ----------
        U : array_like of shape (K, d1, r) or (B, K, d1, r)
            Left factors of the estimates *before* round ``t``'s update.
        V : array_like of shape (K, d2, r) or (B, K, d2, r)
            Right factors; ``M_hat_a = U[a] @ V[a].T``.
        X : array_like of shape (d1, d2) or (B, d1, d2), or Round
            Context ``X_t``; with ``context="completion"`` also its index ``[j, k]``
            (integers, shape (2,) or (B, 2)).  A :class:`~lrbandit_gym.rounds.Round`
            (checked at the edge, with propensities) stands for the whole round; then
            ``action``, ``reward`` and ``propensities`` are not given.
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
            :data:`~lrbandit_gym.input_checks.MAX_MAGNITUDE`, or a round whose squares the
            running sums cannot hold; the object is then unchanged.
        """
        Ub, Vb = check_factors(U, V, self.n_actions, self.d1, self.d2, self.rank, self.n_trials)
        check_estimate_scale(Ub, Vb, self.batched)
        if isinstance(X, Round):
            if action is not None or reward is not None or propensities is not None:
                raise TypeError("update(U, V, round) takes no action, reward or propensities")
            if X.propensities is None:
                raise ValueError("the round must carry propensities (pi_t(a) for every arm)")
            round_ = X
        else:
            round_ = self.check_round(X, action, reward, propensities)
        self.commit(self.propose(round_, self.estimate_parts(Ub, Vb, round_.actions)))

    def check_round(self, X: Any, action: Any, reward: Any, propensities: Any) -> Round:
        """Check one round's raw inputs as :meth:`update` takes them and return them as a
        :class:`~lrbandit_gym.rounds.Round` in the batched layout (completion contexts as
        :class:`~lrbandit_gym.onehot.OneHotContexts` where they are one-hot).

        Raises
        ------
        ValueError
            Naming the argument and the offending value (and trial, when batched).
        """
        Xb = linear_form_round.checked_contexts(self, X)
        a = check_actions(action, self.n_actions, self.n_trials)
        y = check_batch_vector(reward, self.n_trials, "reward")
        p = check_propensities(propensities, a, self.n_actions, self.n_trials)
        return Round(Xb, a, y, p)
