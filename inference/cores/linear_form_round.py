"""One round of Algorithm 2 (docs/method.md §4): the running sums of the debiased estimate.

Per round ``t``, with ``M̂ = M̂_{a_t,t−1}`` the pulled arm's estimate *before* round ``t``'s
update, ``w_t = 1/π_t(a_t)``, ``res_t = y_t − <M̂, X_t>`` and ``c = 1`` (gaussian contexts)
or ``d1·d2`` (completion, Appendix C)::

    Σ_t M̃_{i,t}  += M̂_{i,t−1} + c·1{a_t=i}·w_t·res_t·X_t       Algorithm 2, eq. (11)
    n·σ̂²_{a_t}   += w_t·res_t²                                eq. (13)
    n·Ŝ²_{a_t}   += (c·w_t)²·<G_t, X_t>²   (every target)       eq. (14)

A round runs in two phases: the first (:func:`propose`) computes the pulled arm's
residual and ``<G_t, X_t>`` and checks that the sums can hold them, writing nothing;
:func:`commit` writes them.  The functions here read the core's public fields and its
:class:`~inference.cores.linear_form_state.LinearFormState`; the core binds
:func:`propose`, :func:`commit`, :func:`estimate_parts`, :func:`changed_arms` and
:func:`observe_context` as its methods.
The estimate before the round enters as a :class:`PulledEstimate`: the arms it moved and
the pulled arms' factors.  ``Σ_t M̃`` lives in
:class:`~inference.cores.debiased_sum.DebiasedSum`; ``<M̂, X_t>`` and ``<G_t, X_t>`` come from
``r x r`` algebra (:mod:`inference.cores.tangent_space`) or from the compiled kernels
(:mod:`inference.cores._kernels`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from agents.estimator.products import one_hot_products
from inference.cores.checks import check_matrix_stack
from inference.cores.design_variance import all_arm_terms, design_terms
from inference.cores.tangent_space import pulled_arm_terms
from inference.results import trials_phrase
from lrbandit_gym import engine
from lrbandit_gym.context_law import EntryLaw
from lrbandit_gym.input_checks import MAX_MAGNITUDE
from lrbandit_gym.onehot import OneHotContexts, check_index, is_index_like, one_hot_contexts
from lrbandit_gym.rounds import Round

__all__ = [
    "Changes",
    "Products",
    "PulledEstimate",
    "RoundTerms",
    "changed_arms",
    "check_estimate_scale",
    "checked_contexts",
    "commit",
    "estimate_parts",
    "observe_context",
    "propose",
]

Changes = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Products = tuple[np.ndarray, np.ndarray, np.ndarray]


class PulledEstimate(NamedTuple):
    """The estimate before round ``t`` as Algorithm 2 reads it: the arms it moved since the
    last round absorbed and the pulled arms' factors."""

    changes: tuple[np.ndarray, ...]
    """``(bi, ki, U_new, V_new)`` or ``(bi, ki, U_new, V_new, support)``: the (trial, arm)
    pairs whose factors differ from the ones last absorbed (every pair in the first round),
    with their new factors, shapes (m, d1, r), (m, d2, r).  ``support`` (m, 2), optional:
    ``(j, k)`` where a change is one SGD step on the completion context ``e_j e_kᵀ`` (its
    estimate moved only in row ``j`` and column ``k``; :attr:`agents.LowRankSGD.step_support`),
    ``(-1, -1)`` where not known: ``Σ_t M̂`` then follows it at O((d1 + d2) r)
    (:mod:`inference.cores.debiased_sum`)."""
    U: np.ndarray
    """The pulled arms' ``U_a``, shape (B, d1, r)."""
    V: np.ndarray
    """The pulled arms' ``V_a``, shape (B, d2, r)."""
    products: Products | None = None
    """``(X V_a, Xᵀ U_a, D_a)`` of the pulled arms (shapes (B, d1, r), (B, d2, r), (B, r)),
    when the estimator computed them for its own step; ``D_a`` (the singular values) is
    only read with ``balanced``."""
    balanced: bool = False
    """True promises ``UᵀU`` and ``VᵀV`` diagonal (as :class:`agents.LowRankSGD` stores
    them), so the orthonormal bases need no ``r x r`` factorisation."""


class RoundTerms(NamedTuple):
    """One round computed and checked (the first phase), for :func:`commit`."""

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
    factors: np.ndarray | None = None
    """``1/π_t(a)`` of every arm, shape (B, K) (``inf`` where zero): the round's
    predictable variance factors (:mod:`inference.cores.weight_share`)."""
    whitened: Any = None
    """``Σ⁻¹ vec X_t`` as matrices (B, d1, d2) under a law that is not ``I/c``; None when the
    correction is ``c·X_t``."""
    scale: Any = None
    """The correction's scalar per trial (B,) under such a law (1 for a whitened dense
    context, ``1/p_jk`` for an entry law); None for the core's ``c``."""
    design: Any = None
    """The ``n Ŝ²`` sums (B, K, n_T) with the round's design terms of every arm and target
    (:mod:`inference.cores.design_variance`), which replace eq. (14)'s; None for eq. (14)
    alone (:attr:`~inference.cores.linear_form.LinearFormCore.design_floor` None)."""


def check_estimate_scale(U: np.ndarray, V: np.ndarray, batched: bool) -> None:
    """Refuse factors whose estimate ``U Vᵀ`` may have entries beyond
    :data:`~lrbandit_gym.input_checks.MAX_MAGNITUDE`: ``r · max|U| · max|V|`` bounds them,
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


def checked_contexts(core, X: Any) -> np.ndarray | OneHotContexts:
    """Validate ``update``'s contexts: ``(B, d1, d2)``, or for completion contexts
    :class:`~lrbandit_gym.onehot.OneHotContexts` (from an index ``[j, k]``, shape (2,)
    or (B, 2), or from one-hot matrices, found in one pass)."""
    completion = core.context == "completion"
    if completion and is_index_like(X, core.n_trials):
        return check_index(X, core.d1, core.d2, core.n_trials)
    Xb = check_matrix_stack(X, (core.d1, core.d2), core.n_trials, "X")
    if completion:
        ctx = one_hot_contexts(Xb)
        if ctx is not None:
            return ctx
    return Xb


def observe_context(core, X: Any, actions: Any = None) -> None:
    """Add a round that does not enter the inference (a warm start's): its context to an
    estimated law (nothing for a given law) and its arm to the pulls the estimate rests on
    before inference (the remainder's ``N_i``, :mod:`inference.cores.remainder`).  ``X``:
    the contexts in the batched layout (B, d1, d2), or
    :class:`~lrbandit_gym.onehot.OneHotContexts`, already checked; ``actions``: the arms
    pulled (B,), already checked, or None (no arm counted)."""
    whitener = core.state.whitener
    if whitener.estimated:
        whitener.observe(X)
    if actions is not None:
        s = core.state
        s.unweighted_pulls[s.trials, actions] += 1


def changed_arms(core, U: np.ndarray, V: np.ndarray) -> np.ndarray:
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
    return core.state.sum.changed(U, V)


def estimate_parts(core, U: np.ndarray, V: np.ndarray, action: np.ndarray) -> PulledEstimate:
    """The parts of an estimate given by every arm's factors that a round reads: the arms
    whose factors changed (:meth:`changed_arms`) and the pulled arms' factors.

    Parameters
    ----------
    U, V : ndarray of shape (B, K, d1, r) and (B, K, d2, r)
        Factors of the estimates before round ``t``'s update, validated.
    action : ndarray of int, shape (B,)
    """
    trials = np.arange(core.state.B)
    bi, ki = np.nonzero(core.state.sum.changed(U, V))
    changes = (bi, ki, U[bi, ki], V[bi, ki])
    return PulledEstimate(changes, U[trials, action], V[trials, action])


def propose(core, round_: Round, estimate: PulledEstimate, weight=None) -> RoundTerms:
    """The first phase of a round: its terms computed and checked against the running sums,
    nothing written; :func:`commit` writes them.  An inference wrapper proposes its core's
    round before any layer of its step commits.

    The pulled arm's residual ``res_t = y_t − <M̂, X_t>`` and ``<G_t, X_t>`` (every
    target) are the round's expensive part; they are kept for the commit.  The round is
    refused when ``w·res²`` or ``(c·w)²·<G_t, X_t>²`` would make a running sum
    infinite, or when ``|c·w·res|`` (the correction's coefficient, times context entries
    of at most :data:`~lrbandit_gym.input_checks.MAX_MAGNITUDE`) exceeds
    ``MAX_MAGNITUDE``: such a round would turn every later interval into NaN.

    Parameters
    ----------
    core : LinearFormCore
        The core, read through its public fields and :attr:`~LinearFormCore.state`.
    round_ : Round
        The round, checked; completion contexts in index form make it O((d1 + d2) r) (with
        a change's ``support``).
    estimate : PulledEstimate
        The estimate before the round: :func:`estimate_parts` of every arm's factors, or
        what a shared :class:`agents.LowRankSGD` computed for its own step
        (:class:`~inference.wrappers.shared_estimator.SharedEstimate`).
    weight : ndarray of shape (B,), optional
        The pulled arm's weight, for a round whose weight is not ``1/π_t(a_t)`` (the
        exploration-only baseline; 0 keeps the round out of the correction, ``σ̂²`` and
        ``Ŝ²`` sums).  By default ``1/π_t(a_t)`` from the round's propensities (positive
        at the pulled arms), whose ``1/π_t(a)`` of every arm are the round's predictable
        variance factors (:mod:`inference.cores.weight_share`); 1 for a core whose
        :attr:`~LinearFormCore.ipw` is off.

    Raises
    ------
    ValueError
        If the sums cannot absorb the round (naming the trial, reward and residual); the
        core is then unchanged.
    """
    s = core.state
    X, action, reward = round_.contexts, round_.actions, round_.rewards
    factors = None
    if weight is None:
        props = round_.propensities
        if len(props) == 1 and min(props[0].tolist()) > 0:  # one trial, every arm possible
            factors = 1.0 / props
        else:
            with np.errstate(divide="ignore"):  # a zero propensity: an infinite factor
                factors = 1.0 / props
        weight = factors[s.trials, action] if core.ipw else np.ones(s.B)  # w_t = 1/π_t(a_t)
    if core.design_floor == 0:
        _require_all_rounds_inputs(core, factors)
    if core.projection == "none":
        terms = _propose_unprojected(core, estimate, X, action, reward, weight)
        design = None
        if core.design_floor is not None:  # G = T for every arm
            g = np.broadcast_to(terms.g[:, None], s.S2_sum.shape)
            design = _design_sums(core, g, action, terms.weight, factors)
        return terms._replace(factors=factors, design=design)
    changes, Ua, Va, products, balanced = estimate
    one_hot = isinstance(X, OneHotContexts)
    compiled = balanced and products is not None and engine.compiled()
    c, whitened, observed = core.c, None, reward
    if c is None:  # a law that is not I/c (docs/method.md §11)
        if one_hot or not compiled:
            terms = _propose_whitened(core, estimate, X, action, reward, weight)
            return terms._replace(factors=factors)
        # The kernel reads the prediction and <G_t, ·> off the products it is given: given
        # those of the whitened context, its residual would be taken against <M̂, W_t>,
        # so the reward it sees is shifted to make that residual y_t − <M̂, X_t>.
        whitened = s.whitener.whiten(X)
        pred = np.einsum("bir,bir->b", Ua, products[0])
        products = (
            np.matmul(whitened, Va),
            np.matmul(whitened.swapaxes(-1, -2), Ua),
            products[2],
        )
        reward = reward - pred + np.einsum("bir,bir->b", Ua, products[0])
        c = 1.0
    design = bad_design = None
    if compiled:  # positional calls: the round's fixed cost is numba's dispatch
        from inference.cores import _kernels

        res = np.empty(s.B)
        g = np.empty((s.B, s.S2_sum.shape[2]))
        tr = s.triplets
        bi, ki = changes[:2]  # sorted by trial, as the kernels walk them, and contiguous
        if bi.size > 1 and (np.diff(bi) < 0).any():  # (np.nonzero's strided views: one
            order = np.argsort(bi, kind="stable")  # compiled signature serves)
            changes = tuple(x[order] for x in changes[:4]) + changes[4:]
        else:
            changes = (np.ascontiguousarray(bi), np.ascontiguousarray(ki), *changes[2:])
        if core.design_floor is not None:  # every arm's design terms in the same call
            design = np.empty(s.S2_sum.shape)
            held = (s.sum.last_U, s.sum.last_V, *changes[:4], factors, core.design_floor)
            held += (design,)
        if one_hot:  # the pulled arm's O(r) part
            args = (
                X.rows, X.cols, Ua, Va, products[2], action, reward, weight, c, s.kappa,
                MAX_MAGNITUDE, tr.Xs, tr.Ys, tr.x_rows, tr.y_rows, tr.Xs_sub, tr.Ys_sub,
                tr.Sw, s.sigma_sum, s.S2_sum, res, g,
            )  # fmt: skip
            if design is None:
                bad = _kernels.one_hot_terms(*args)
            else:
                bad, bad_design = _kernels.one_hot_round_design(*args, *held)
        else:
            XV, XtU, sq = products
            args = (
                Ua, Va, XV, XtU, sq, action, reward, weight, c, s.kappa, MAX_MAGNITUDE,
                tr.x_rows, tr.y_rows, tr.Xs_sub, tr.Ys_sub, tr.Sw, s.sigma_sum, s.S2_sum,
                res, g,
            )  # fmt: skip
            if design is None:
                bad = _kernels.round_terms(*args)
            else:
                bad, bad_design = _kernels.round_design(*args, X, *held)
    else:
        if one_hot and products is None:  # X V_a = e_j V_a[k]ᵀ, Xᵀ U_a = e_k U_a[j]ᵀ
            products = (*one_hot_products(X, Ua, Va), None)
        # <M̂_{a_t,t−1}, X_t> and <G_t, X_t> (every target) of the pulled arm.
        with np.errstate(over="ignore", invalid="ignore"):  # refused below
            pred, g = pulled_arm_terms(
                Ua, Va, X, s.triplets, s.kappa, balanced=balanced, products=products
            )
            res = reward - pred  # res_t = y_t − <M̂, X_t>
            bad = _refused(s, action, weight, res, g, core.c)
    if bad >= 0:
        _refuse(core, bad, action, observed, weight, res, g)
    if bad_design is not None and bad_design >= 0:
        _refuse_design(core, s.trials == bad_design)
    if core.design_floor is not None and not compiled:
        U, V = s.sum.last_U.copy(), s.sum.last_V.copy()
        bi, ki, U_new, V_new = changes[:4]
        U[bi, ki], V[bi, ki] = U_new, V_new  # every arm's estimate before the round
        with np.errstate(over="ignore", invalid="ignore"):
            g_all = all_arm_terms(U, V, X, s.triplets, s.kappa)
        g_all[s.trials, action] = g  # the pulled arm's, as eq. (14) reads it
        design = _design_sums(core, g_all, action, weight, factors)
    return RoundTerms(
        changes,
        X,
        action,
        weight,
        res,
        g,
        compiled,
        core.position,
        factors,
        whitened,
        None,
        design,
    )


def _require_all_rounds_inputs(core, factors) -> None:
    """Refuse a round ``design_variance="all-rounds"`` cannot read: an arm with propensity 0
    (its term would be infinite)."""
    bad = ~np.isfinite(factors)
    if bad.any():
        b, a = (int(i[0]) for i in np.nonzero(bad))
        where = f" in trial {b}" if core.batched else ""
        raise ValueError(
            f"design_variance='all-rounds' divides by every arm's propensity; arm {a}'s is 0"
            f" or too small to invert{where}: every arm needs a positive propensity (or pass "
            "design_variance='pulled'); nothing was changed"
        )


def _design_sums(core, g, action, weight, factors) -> np.ndarray:
    """The ``n Ŝ²`` sums (B, K, n_T) with the round's design terms
    (:mod:`inference.cores.design_variance`) from every arm's ``g = <G_{i,t}, X_t>``."""
    s = core.state
    with np.errstate(over="ignore", invalid="ignore"):
        sums = s.S2_sum + design_terms(g, factors, core.design_floor, action, weight, core.c)
    _refuse_design(core, ~np.isfinite(sums).all(axis=(1, 2)))
    return sums


def _refuse_design(core, overflow: np.ndarray) -> None:
    """Refuse the round whole where a design term would make ``Ŝ²``'s sum infinite."""
    if overflow.any():
        raise ValueError(
            "the round cannot be absorbed: an arm's design term c²<G, X_t>²/π_t overflows "
            f"the running sum of S^2 (design_variance={core.design_variance!r})"
            f"{trials_phrase(overflow, core.batched)}; nothing was changed: rescale the "
            "contexts and estimates to order 1"
        )


def _propose_whitened(core, estimate, X, action, reward, weight) -> RoundTerms:
    """:func:`propose` under a law whose ``Σ`` is not ``I/c``: the residual reads
    ``X_t``, the correction and ``<G_t, ·>`` read ``Σ⁻¹ vec X_t`` (docs/method.md §1),
    whitened by the law before this round (an estimated one: from earlier contexts)."""
    s = core.state
    changes, Ua, Va, products, balanced = estimate
    one_hot = isinstance(X, OneHotContexts)
    _require_law_contexts(s.whitener)
    if one_hot and products is None:
        products = (*one_hot_products(X, Ua, Va), None)
    with np.errstate(over="ignore", invalid="ignore"):
        if one_hot and isinstance(s.whitener, EntryLaw):  # Σ⁻¹ e_j e_kᵀ = e_j e_kᵀ/p_jk
            pred, g = pulled_arm_terms(
                Ua, Va, X, s.triplets, s.kappa, balanced=balanced, products=products
            )
            # <G_t, Σ⁻¹X_t> = g/p_jk: the scale carries it, as c does for the paper's law.
            scale, whitened = s.whitener.entry_scale(X.rows, X.cols), None
        else:
            dense = X.dense() if one_hot else X
            XV = np.matmul(dense, Va) if products is None else products[0]
            pred = np.einsum("bir,bir->b", Ua, XV)  # <M̂, X_t> = tr(Uᵀ X V)
            whitened = s.whitener.whiten(dense)
            white = (
                np.matmul(whitened, Va),
                np.matmul(whitened.swapaxes(-1, -2), Ua),
                None if products is None else products[2],
            )
            scale = np.ones(s.B)
            _, g = pulled_arm_terms(
                Ua,
                Va,
                whitened,
                s.triplets,
                s.kappa,
                balanced=balanced and white[2] is not None,
                products=white,
            )
        res = reward - pred
        bad = _refused(s, action, weight, res, g, scale)
    if bad >= 0:
        _refuse(core, bad, action, reward, weight, res, g)
    return RoundTerms(
        changes, X, action, weight, res, g, False, core.position, None, whitened, scale
    )


def _require_law_contexts(whitener) -> None:
    """Refuse a round an estimated law cannot whiten yet (no earlier context)."""
    if whitener.estimated and whitener.n == 0:
        raise ValueError(
            "context_law='estimated' has seen no context before this round, so it cannot "
            "whiten it by earlier ones: give it the contexts of a warm start first "
            "(observe_context; the inference wrappers give it every round they see)"
        )


def _propose_unprojected(core, estimate, X, action, reward, weight) -> RoundTerms:
    """:func:`propose` with ``projection="none"``: ``G_t = T``, so the design term is
    ``<T, W_t>`` with ``W_t = c·X_t`` or ``Σ⁻¹ vec X_t`` (docs/method.md §12)."""
    s = core.state
    changes, Ua, Va, products, _ = estimate
    trials = np.arange(s.B)
    whitened, scale = None, None
    if core.c is None:
        _require_law_contexts(s.whitener)
    with np.errstate(over="ignore", invalid="ignore"):
        if isinstance(X, OneHotContexts):
            # <M̂, e_j e_kᵀ> = U_a[j]·V_a[k]; <T, e_j e_kᵀ> = T[j, k]
            pred = np.einsum("br,br->b", Ua[trials, X.rows], Va[trials, X.cols])
            if core.c is None and not isinstance(s.whitener, EntryLaw):
                whitened = s.whitener.whiten(X.dense())
                g, scale = np.einsum("bij,kij->bk", whitened, s.T), np.ones(s.B)
            else:  # Σ⁻¹ e_j e_kᵀ = e_j e_kᵀ·scale: the scale carries the law
                g = s.T[:, X.rows, X.cols].T
                if core.c is None:
                    scale = s.whitener.entry_scale(X.rows, X.cols)
        else:
            XV = np.matmul(X, Va) if products is None else products[0]
            pred = np.einsum("bir,bir->b", Ua, XV)  # <M̂, X_t> = tr(Uᵀ X V)
            if core.c is None:
                whitened = s.whitener.whiten(X)
                scale = np.ones(s.B)
            g = np.einsum("bij,kij->bk", X if whitened is None else whitened, s.T)
        res = reward - pred
        bad = _refused(s, action, weight, res, g, core.c if scale is None else scale)
    if bad >= 0:
        _refuse(core, bad, action, reward, weight, res, g)
    return RoundTerms(
        changes, X, action, weight, res, g, False, core.position, None, whitened, scale
    )


def _refused(s, action, weight, res, g, c) -> int:
    """The first trial whose round the sums of ``s`` cannot absorb (numpy), or -1."""
    trials = np.arange(s.B)
    cw = c * weight
    ok = np.isfinite(s.sigma_sum[trials, action] + weight * res * res)
    ok &= np.isfinite(s.S2_sum[trials, action] + (cw * cw)[:, None] * g * g).all(axis=1)
    ok &= np.abs(cw * res) <= MAX_MAGNITUDE
    return -1 if ok.all() else int(np.argmin(ok))


def _refuse(core, b, action, reward, weight, res, g) -> None:
    where = f" (trial {b})" if core.batched else ""
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


def commit(core, terms: RoundTerms) -> None:
    """Write a round computed and checked by the first phase (nothing here fails on
    data).

    Raises
    ------
    RuntimeError
        If the state changed since the round was proposed.
    """
    if terms.position != core.position:
        raise RuntimeError(
            "the round was proposed before the last change to this object's state; propose it again"
        )
    s = core.state
    changes, X, action, weight, res, g = terms[:6]
    debias = core.debias
    if core.check_contexts:
        s.check.add(X, terms.compiled)  # against the law before this round (context_check)
    if terms.compiled:
        from inference.cores import _kernels

        if isinstance(X, OneHotContexts):  # the held estimates here
            s.sum.hold(*changes)
            _kernels.one_hot_write(
                X.rows, X.cols, action, weight, core.c, res, g, debias, s.sigma_sum,
                s.S2_sum, s.sum.acc, s.pulls, core.d2,
            )  # fmt: skip
        else:  # (the queue of held estimates is exact for any change: no support needed)
            bi, ki, U_new, V_new = changes[:4]  # sorted by trial in propose
            held = s.sum
            W = X if terms.whitened is None else terms.whitened  # the correction's context
            queued = _kernels.absorb_round(
                bi, ki, U_new, V_new, held.held, held.last_U, held.last_V, held.ring_U,
                held.ring_V, held.ring_n, W.reshape(W.shape[0], -1), action, weight,
                1.0 if core.c is None else core.c, res, g, debias, s.sigma_sum,
                s.S2_sum, held.acc, s.pulls,
            )  # fmt: skip
            held.advance(queued)
    else:
        trials = np.arange(s.B)
        # Σ_t M̂_{i,t−1}: the arms whose estimate moved queue the one they held.
        s.sum.hold(*changes)
        c = core.c if terms.scale is None else terms.scale
        cw = c * weight  # c·1{a_t=i}/π_t(i), at i = a_t
        s.sigma_sum[trials, action] += weight * res * res  # σ̂², eq. (13)
        s.S2_sum[trials, action] += (cw * cw)[:, None] * g * g  # Ŝ², eq. (14)
        if debias:  # M̃ = M̂ + c·1{a_t=i}/π_t(i)·res_t·X_t  (Σ⁻¹ vec X_t: whitened)
            Xc = X if terms.whitened is None else terms.whitened
            s.sum.add_correction(action, Xc, cw * res)
        s.pulls[trials, action] += weight > 0
    if terms.factors is not None:
        s.weights.add(terms.factors)
    c = core.c if terms.scale is None else terms.scale
    c = 1.0 if c is None else c
    # The pulled arm's design terms (c·w·<G_t, X_t>)² into the design share (arm a's
    # targets are its quantities a·n_T .. a·n_T + n_T − 1).
    cw = c * weight
    s.design.add_block(s.trials, action, (cw * cw)[:, None] * g * g)
    if core.robust:  # the robust variance's terms (c·w·res·<G_t, W_t>)²
        term = (c * weight * res)[:, None] * g
        s.V_sum[np.arange(s.B), action] += term * term
    if s.whitener.estimated:
        s.whitener.observe(X)
    if terms.design is not None:  # the design terms replace eq. (14)'s, added above
        s.S2_sum[...] = terms.design
    n = core.n_obs + 1
    core.n_obs = n
    core.position = (n, core.position[1])
    s.cache.clear()
