"""Online low-rank SGD estimator of the arms' reward matrices (Algorithm 1).

The estimator keeps, for every arm ``a``, factors ``U_a`` (d1 x r) and ``V_a`` (d2 x r) with
``M_hat_a = U_a V_a^T``.  Each round only the pulled arm moves, by one inverse-propensity
weighted gradient step on ``(y_t - <U V^T, X_t>)^2 / 2`` taken from the *balanced*
factorisation (``U^T U = V^T V = D`` diagonal): eq. (8), in
:meth:`LowRankSGD.propose_step`.  Taking the step from the balanced factors is exactly the
renormalised update of eq. (8) (top-r SVD of ``U V^T`` before the step); by Lemma 2.1 the
balancing needs only r x r eigen/singular value decompositions instead of a d1 x d2 SVD
(docs/method.md §3).  :func:`sgd_step_reference` below is that round in plain numpy, which
the tests compare with the fast path.

Implementation notes
--------------------
* Storage is always batched: ``U`` has shape ``(B, K, d1, r)`` and ``V`` ``(B, K, d2, r)``,
  with ``B = 1`` for the unbatched API.  A round gathers the pulled arm's factors of every
  trial with fancy indexing, updates them with stacked ``np.matmul`` calls and scatters them
  back; nothing loops over trials in Python.
* Factors are stored balanced after every change.  The balancing (docs/method.md §3,
  "Balanced factors") is run at the *end* of the update for the arm that moved (and once in
  :meth:`LowRankSGD.initialize`); since the other arms did not move this is the same as
  balancing at the start of the next update, and it keeps ``D`` (the singular values of
  ``M_hat_a``) at hand for :meth:`LowRankSGD.subspaces`.
* A step is computed in full before anything is written (:meth:`LowRankSGD.propose_step`,
  then :meth:`~agents.estimator.factors.FactorStore.commit_step`), so a step that fails a check
  leaves the estimator as it was, and a stack of inference wrappers can prepare every
  layer's step before it commits any.
* Divergence guard: a step whose new estimate has a singular value above
  :attr:`LowRankSGD.max_singular_value` raises ``FloatingPointError`` instead of being
  taken (:mod:`agents.estimator.divergence` gives the bound and why).

The machinery lives beside this module: :mod:`agents.estimator.factors` (the base class
that keeps the factors, the round's context products, the per-arm versions and the write of
a proposed step), :mod:`agents.estimator.persistence` (the base class that saves, checks and
restores the state), :mod:`agents.estimator.products` (the products ``X V_a`` and
``Xᵀ U_a`` that a round's prediction, the inference wrappers' snapshot and the step share),
:mod:`agents.estimator.divergence` (the guard), :mod:`agents.estimator.balancing` (Lemma 2.1) and
:mod:`agents.estimator.kernels` (the same round compiled with numba, engine "numba").
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from agents.estimator import divergence
from agents.estimator.balancing import balance
from agents.estimator.divergence import DIVERGENCE_FACTOR
from agents.estimator.factors import FactorStore, ProposedStep, PulledArms
from agents.estimator.persistence import EstimatorPersistence
from agents.estimator.step_size import (
    DEFAULT_STEP_GAIN,
    NUCLEAR_NORM_FLOOR,
    continuing_gain,
    normalized_step,
    resolve_step,
    schedule,
)
from lrbandit_gym import engine
from lrbandit_gym.input_checks import (
    check_actions,
    check_choice,
    check_finite,
    check_positive_float,
    check_positive_int,
    check_propensities,
    check_rewards,
)
from lrbandit_gym.onehot import OneHotContexts
from lrbandit_gym.rounds import Round

__all__ = ["DIVERGENCE_FACTOR", "LowRankSGD", "ProposedStep", "PulledArms", "sgd_step_reference"]

_CONTEXTS = ("gaussian", "completion")
_PROPENSITIES = ("known", "unknown")


def sgd_step_reference(M, X, y, a, p, t, rank, *, c=1.0, n0=0, v_bar=0.0):
    """One round of Algorithm 1 in plain numpy: the step of eq. (8) for the pulled arm ``a``.

    ``M`` (K, d1, d2): the estimates before round ``t`` (from 1); ``X`` (d1, d2), reward
    ``y``, ``p = π_t(a)``; ``c = 1`` (Gaussian contexts) or ``d1 d2`` (completion; no other
    law enters the step, ``ContextLaw.whiten`` only Algorithm 2's correction).  The step size
    is :class:`LowRankSGD`'s default, the scale-free ``η = g (t*/max(t, t*))^α / ((d1 + d2)
    ν_a)`` with ``ν_a`` the nuclear norm of ``M̂_a`` (floored at 0.1 of the largest arm's),
    after a warm start of ``n0`` rounds capped by
    :func:`~agents.estimator.step_size.continuing_gain`
    (``v_bar``: the mean of ``1{a_s=a}/π_s(a)²`` over rounds ``s <= t``).  Returns the new
    estimates and ``y − <M̂_a, X>``; :meth:`LowRankSGD.propose_step` is the fast path.
    """
    K, d1, d2 = M.shape
    W, s, Zt = np.linalg.svd(M[a])  # eq. (8) steps from the top-r SVD form W D^½, Z D^½
    U, V = W[:, :rank] * np.sqrt(s[:rank]), Zt[:rank].T * np.sqrt(s[:rank])
    nu = np.linalg.svd(M, compute_uv=False)[:, :rank].sum(axis=1)  # nuclear norms
    gain = DEFAULT_STEP_GAIN * (300 / max(t, 300)) ** 0.99  # t* = 300, α = 0.99
    if n0:
        gain = min(gain, (d1 + d2) * rank / (n0 * v_bar / K + t))
    eta = gain / ((d1 + d2) * max(nu[a], NUCLEAR_NORM_FLOOR * nu.max()))
    res = y - np.sum(M[a] * X)  # y_t − <M̂_a, X_t>
    step = eta * c / p * res  # η_t c w_t res_t with w_t = 1/π_t(a_t)
    out = M.copy()
    out[a] = (U + step * X @ V) @ (V + step * X.T @ U).T  # U + η c w res X V, V + … Xᵀ U
    return out, res


class LowRankSGD(EstimatorPersistence, FactorStore):
    """Inverse-propensity weighted low-rank SGD for K reward matrices (Algorithm 1).

    Arm ``a`` is estimated by ``M_hat_a = U_a V_a^T`` with rank ``r`` factors.  At round
    ``t`` only the pulled arm ``a = a_t`` moves (docs/method.md §3, eq. (8)):

    ``res = y_t - <U V^T, X_t>``, ``U <- U + eta_t c w_t res X_t V``,
    ``V <- V + eta_t c w_t res X_t^T U``,

    from factors balanced so that ``U^T U = V^T V = D`` (the top-r SVD form; Lemma 2.1 shows
    this equals the renormalised update computed with a d1 x d2 SVD).  Here
    by default ``eta_t = step_gain * (step_offset / max(t, step_offset)) ** step_decay /
    ((d1 + d2) nu_a)`` with ``nu_a`` the nuclear norm of the pulled arm's estimate (the
    scale-free step of :mod:`agents.estimator.step_size`), or, given ``step_scale``, the paper's
    ``eta_t = step_scale * max(t, step_offset) ** (-step_decay)``; ``w_t = 1/pi_t(a_t)`` and
    ``c = 1`` for Gaussian contexts, ``c = d1 d2`` for matrix completion (Appendix C).
    With ``propensities="unknown"`` (Algorithm 4) the weight is dropped (``w_t = 1``) and the
    step uses the arm's own update count ``s_a`` in place of ``t``.

    Parameters
    ----------
    d1, d2 : int
        Context (and parameter) matrix shape.
    rank : int
        Rank ``r`` of every estimate, ``1 <= r <= min(d1, d2)``.
    n_actions : int, default 2
        Number of arms ``K >= 2``.
    n_trials : int or None, default None
        None for the unbatched API (one bandit); ``B`` to run ``B`` independent bandits in
        lock step, every array argument then gaining a leading axis of length ``B``.
    context : {"gaussian", "completion"}, default "gaussian"
        Context distribution; sets the gradient scale ``c`` (1 or ``d1 * d2``).  Completion
        contexts are read by their index ``(j, k)`` (given as ``[j, k]`` or found in the
        one-hot matrix): a round's prediction and step then cost O((d1 + d2) r).
    step_scale : float, optional
        ``c_eta`` of the paper's absolute step ``c_eta max(t, t*)^{-alpha}`` (its studies pass
        0.1).  Default None: the scale-free step (docs/method.md §3, "Step size").
    step_gain : float, optional
        ``g`` of the scale-free step: the fraction of its own residual that a round of
        unit weight removes (to first order, on average over contexts), at ``t <= t*`` (default
        :data:`agents.estimator.step_size.DEFAULT_STEP_GAIN` = 0.03).  Not with ``step_scale``.
    step_offset : float, default 300
        ``t*``: the step size is constant for ``t <= t*``.
    step_decay : float, default 0.99
        ``alpha`` in the step size.
    propensities : {"known", "unknown"}, default "known"
        "known": weight by ``1/pi_t(a_t)`` and index the step by the round ``t``
        (Algorithm 1).  "unknown": no weight, step indexed by the arm's update count
        (Algorithm 4).
    max_singular_value : float, optional
        Divergence guard: a step whose new estimate has a singular value above this bound
        raises ``FloatingPointError`` and is not taken.  Default: set at
        :meth:`initialize`, per trial, to ``DIVERGENCE_FACTOR * max(1, s_max)`` with
        ``s_max`` the largest singular value of the trial's initial estimates
        (:mod:`agents.estimator.divergence` says why).

    Attributes
    ----------
    c : float
        Context scale multiplying every gradient.
    t : int
        Rounds absorbed since :meth:`initialize`.
    max_singular_value_setting : float or None
        The ``max_singular_value`` given to the constructor (None: the default rule).

    Notes
    -----
    The estimator must be initialised (:meth:`initialize`, eq. (10)) before use, e.g. from
    :func:`agents.warm_start.nuclear_norm_fit`.  A rank-deficient start (``M_init`` with
    fewer than ``r`` non-zero singular values) cannot grow the missing directions: zero is
    a stationary point of the factored gradient.

    Policies and inference wrappers that drive a round themselves use the per-round API
    of the base class :class:`~agents.estimator.factors.FactorStore`: :meth:`check_context`
    checks the context once, then :meth:`predict_checked`, :meth:`pulled` and :meth:`step`
    (on the round's :class:`~lrbandit_gym.rounds.Round`) share its products (keyed by the
    context's :meth:`fingerprint`);
    :attr:`arm_versions`, :attr:`batched_factors` and :meth:`arm_factors` read the state
    without copying all of it.  :meth:`propose_step` and :meth:`commit_step` split a step
    into its arithmetic (every check included) and its write, so that several estimators
    can be stepped together or not at all.

    Examples
    --------
    >>> import numpy as np
    >>> est = LowRankSGD(5, 4, rank=2)
    >>> est.initialize(np.random.default_rng(1).standard_normal((2, 5, 4)))
    >>> X = np.random.default_rng(0).standard_normal((5, 4))
    >>> res = est.update(X, action=1, reward=0.5, propensities=np.array([0.5, 0.5]))
    >>> est.predict(X).shape
    (2,)
    """

    def __init__(
        self,
        d1: int,
        d2: int,
        rank: int,
        n_actions: int = 2,
        *,
        n_trials: int | None = None,
        context: str = "gaussian",
        step_scale: float | None = None,
        step_offset: float = 300,
        step_decay: float = 0.99,
        propensities: str = "known",
        step_gain: float | None = None,
        max_singular_value: float | None = None,
    ) -> None:
        d1 = check_positive_int(d1, "d1")
        d2 = check_positive_int(d2, "d2")
        rank = check_positive_int(rank, "rank")
        if rank > min(d1, d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {rank}")
        n_actions = check_positive_int(n_actions, "n_actions", minimum=2)
        n_trials = None if n_trials is None else check_positive_int(n_trials, "n_trials")
        self.context = check_choice(context, "context", _CONTEXTS)
        self.step_scale, self.step_gain = resolve_step(step_scale, step_gain)
        self.step_offset = check_positive_float(step_offset, "step_offset")
        self.step_decay = check_positive_float(step_decay, "step_decay")
        self.propensities = check_choice(propensities, "propensities", _PROPENSITIES)
        self.max_singular_value_setting = (
            None
            if max_singular_value is None
            else check_positive_float(max_singular_value, "max_singular_value")
        )
        self.c = float(d1 * d2) if self.context == "completion" else 1.0
        # The factors, the round's products and the counters (agents.estimator.factors).
        super().__init__(d1, d2, rank, n_actions, n_trials)
        # Set by initialize(): the warm start behind M_init and Σ_t 1{a_t=a}/π_t(a)², read
        # by the step's warm-start cap (agents.estimator.step_size.continuing_gain).
        self._prior_rounds = 0
        self._square_weight_sum = np.zeros((self._B, n_actions))
        # Divergence bound per trial, set by initialize() unless given
        # (agents.estimator.divergence).
        self._sv_bound = np.full(self._B, divergence.fixed_bound(self.max_singular_value_setting))

    # ------------------------------------------------------------------ properties
    @property
    def max_singular_value(self) -> float | np.ndarray:
        """The divergence bound in force: a float, or ``(B,)`` per trial when batched.

        ``inf`` before :meth:`initialize` unless ``max_singular_value`` was given.
        """
        bound = self._sv_bound.copy()
        return float(bound[0]) if self.n_trials is None else bound

    def step_size(self, t: Any) -> Any:
        """Step size of the absolute step, ``eta_t = step_scale * max(t, step_offset) **
        (-step_decay)``; with the scale-free step (``step_scale`` None), the gain
        ``step_gain * (step_offset / max(t, step_offset)) ** step_decay`` (the step of arm
        ``a`` is that divided by ``(d1 + d2) nu_a``,
        :func:`agents.estimator.step_size.normalized_step`).

        Parameters
        ----------
        t : int or array_like of int
            Round index (known propensities) or per-arm count (Algorithm 4), from 1.

        Returns
        -------
        float or ndarray
        """
        if self.step_scale is None:
            eta = self.step_gain * schedule(t, self.step_offset, self.step_decay)
        else:
            tt = np.maximum(np.asarray(t, dtype=np.float64), self.step_offset)
            eta = self.step_scale * tt ** (-self.step_decay)
        return float(eta) if eta.ndim == 0 else eta

    def _eta(self, t: int) -> float:
        """Scalar :meth:`step_size` of the absolute step in plain Python (the per-round hot
        path)."""
        return self.step_scale * max(float(t), self.step_offset) ** (-self.step_decay)

    def _step_coefficients(self, actions: np.ndarray, propensities: np.ndarray | None):
        """``eta c w`` of the round for the pulled arm of every trial: ``(B,)``."""
        a = actions
        known = self.propensities == "known"
        if self.step_scale is not None:  # the paper's absolute step
            if known:  # eta_t c w_t with w_t = 1 / pi_t(a_t)
                return (self._eta(self._t + 1) * self.c) / propensities[self._trials, a]
            # Algorithm 4: w_t = 1, eta indexed by the arm's own update count
            return self.step_size(self._counts[self._trials, a] + 1) * self.c
        t = self._t + 1 if known else self._counts[self._trials, a] + 1
        sched = schedule(t, self.step_offset, self.step_decay)
        if known and self._prior_rounds:
            # Never faster than the step that continues the warm start's average.
            if self.n_trials is None:  # one trial: scalars, cheaper than (1,) gathers
                w = 1.0 / float(propensities[0, a[0]])
                mean_square = (float(self._square_weight_sum[0, a[0]]) + w * w) / t
            else:
                w = 1.0 / propensities[self._trials, a]
                mean_square = (self._square_weight_sum[self._trials, a] + w * w) / t
            cap = continuing_gain(
                self._prior_rounds, mean_square, self.n_actions, t, self.d1, self.d2, self.rank
            )
            sched = np.minimum(sched, cap / self.step_gain)
        eta = normalized_step(self.step_gain, sched, self._sv, a, self.d1, self.d2)
        return eta * self.c / propensities[self._trials, a] if known else eta * self.c

    # ------------------------------------------------------------------ initialisation
    def initialize(self, M_init: Any, *, prior_rounds: int = 0) -> None:
        """Set the factors from initial estimates by eq. (10).

        ``U_0 = W_U D^{1/2}``, ``V_0 = W_V D^{1/2}`` from the top-r SVD ``W_U D W_V^T`` of
        each ``M_init[a]``.  Resets the round counter ``t`` and the per-arm counts.  Also
        sets the divergence bound :attr:`max_singular_value` (unless it was given).

        Parameters
        ----------
        M_init : array_like of shape (K, d1, d2) or (B, K, d1, d2)
            Initial estimates (need not have rank r: they are truncated).  In batched mode
            a ``(K, d1, d2)`` array is used for every trial.
        prior_rounds : int, default 0
            Uniformly explored rounds that ``M_init`` was fitted on (a warm start's
            length).  With the scale-free step and known propensities the step then never
            exceeds the gain that continues their average
            (:func:`agents.estimator.step_size.continuing_gain`); 0 (an estimate from elsewhere): no
            such cap.

        Raises
        ------
        ValueError
            If ``M_init`` has the wrong shape or non-finite entries, or ``prior_rounds`` is
            not a non-negative integer (nothing changes then).
        """
        prior_rounds = check_positive_int(prior_rounds, "prior_rounds", minimum=0)
        K, d1, d2 = self.n_actions, self.d1, self.d2
        try:
            M = np.asarray(M_init, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"M_init must be a real array, got {M_init!r}") from None
        shapes = [(K, d1, d2)] + ([(self._B, K, d1, d2)] if self.batched else [])
        if M.shape not in shapes:
            expected = " or ".join(str(s) for s in shapes)
            raise ValueError(f"M_init must have shape {expected}, got shape {M.shape}")
        check_finite(M, "M_init")
        M = np.broadcast_to(M, (self._B, K, d1, d2))
        W_U, s, W_Vt = np.linalg.svd(M, full_matrices=False)
        r = self.rank
        root = np.sqrt(s[..., :r])
        U = W_U[..., :r] * root[..., None, :]
        V = W_Vt[..., :r, :].swapaxes(-1, -2) * root[..., None, :]
        top = s[..., :1]
        if np.any(s[..., r - 1] <= 1e-12 * np.maximum(top[..., 0], np.finfo(float).tiny)):
            warnings.warn(
                f"M_init has fewer than rank={r} non-zero singular values for some arm; "
                "the factored SGD cannot grow the missing directions from zero.",
                RuntimeWarning,
                stacklevel=2,
            )
        self._set_factors(
            np.ascontiguousarray(U),
            np.ascontiguousarray(V),
            np.ascontiguousarray(s[..., :r]),
            np.zeros((self._B, K), dtype=np.int64),
            0,
            True,
        )
        self._sv_bound = divergence.initial_bound(
            self._sv, self.max_singular_value_setting, self._B
        )
        self._prior_rounds = prior_rounds
        self._square_weight_sum = np.zeros((self._B, K))

    # ------------------------------------------------------------------ the update
    def update(
        self, X: Any, action: Any, reward: Any, propensities: Any = None
    ) -> float | np.ndarray:
        """Absorb one round: one weighted SGD step for the pulled arm (Algorithm 1).

        Parameters
        ----------
        X : array_like of shape (d1, d2) or (B, d1, d2)
            Context ``X_t``; with ``context="completion"`` also its index ``[j, k]``,
            shape (2,) or (B, 2) (:meth:`check_context`).
        action : int or array_like of int, shape (B,)
            Pulled arm ``a_t``.
        reward : float or array_like of shape (B,)
            Observed ``y_t``.
        propensities : array_like of shape (K,) or (B, K), optional
            ``pi_t(a)`` for every arm.  Required with ``propensities="known"``.  With
            "unknown" (Algorithm 4) it may be omitted; if given it is validated (shape,
            non-negative, sums to 1) and otherwise ignored.

        Returns
        -------
        float or ndarray of shape (B,)
            The residual ``y_t - <M_hat_{a_t, t-1}, X_t>`` before the step (what the
            debiasing and variance estimators of Section 3 need).

        Raises
        ------
        ValueError
            On invalid input; raised before any state changes.
        FloatingPointError
            If the step diverges (non-finite factors, or a singular value above
            :attr:`max_singular_value`); the state is then unchanged.
        RuntimeError
            If the estimator has not been initialised.
        """
        self._require_init("update")
        res = self.step(self.check_round(X, action, reward, propensities))
        return float(res[0]) if self.n_trials is None else res

    def check_round(self, X: Any, action: Any, reward: Any, propensities: Any = None) -> Round:
        """Check one round's raw inputs as :meth:`update` takes them and return them as a
        :class:`~lrbandit_gym.rounds.Round` in the batched layout, with the contexts'
        fingerprint (completion contexts as :class:`~lrbandit_gym.onehot.OneHotContexts`
        where they are one-hot; :meth:`check_context`).

        With ``propensities="unknown"`` the propensities may be None, and given ones need
        not be positive at the pulled arm.

        Raises
        ------
        ValueError
            Naming the argument and the offending value (and trial, when batched); nothing
            changes.
        """
        B = self.n_trials
        Xb, fp = self.check_context(X)
        a = check_actions(action, self.n_actions, B)
        y = check_rewards(reward, B)
        known = self.propensities == "known"
        if propensities is None:
            if known:
                raise ValueError(
                    "propensities must be given (an array of pi_t(a) for every arm) when "
                    "propensities='known', got None"
                )
            p = None
        else:
            p = check_propensities(
                propensities, a, self.n_actions, B, require_chosen_positive=known
            )
        return Round(Xb, a, y, p, fp)

    # ------------------------------------------------------------------ the step of eq. (8)
    def step(self, round_: Round) -> np.ndarray:
        """One step of eq. (8) on a checked round: :meth:`propose_step` then
        :meth:`commit_step`.  :meth:`update` is this step behind the check of the raw
        inputs; a policy that checked the round itself (its context when it acted, the
        rest when it learns) calls it directly.

        Parameters
        ----------
        round_ : Round
            The round in the batched layout (``B = 1`` unbatched), checked
            (:meth:`check_round`, or :meth:`check_context` and the checks of
            :mod:`lrbandit_gym.input_checks`): contexts from :meth:`check_context` (one-hot
            contexts in index form make the step O((d1 + d2) r)), their fingerprint (or
            None: computed), and propensities positive at the pulled arms, read only with
            ``propensities="known"``.

        Returns
        -------
        ndarray of shape (B,)
            The residuals ``y_t - <M_hat_{a_t, t-1}, X_t>`` before the step.

        Raises
        ------
        FloatingPointError
            If the step diverges (non-finite factors, or a singular value above
            :attr:`max_singular_value`); the state is then unchanged.

        Notes
        -----
        Both APIs run the same arithmetic on (B, ., .) stacks, so that a batched run equals
        B unbatched runs bit for bit (but see
        :func:`agents.estimator.products.context_products` for one large context); the
        unbatched API only swaps the fancy-indexed gather/scatter for basic indexing.
        """
        return self.commit_step(self.propose_step(round_))

    def propose_step(self, round_: Round) -> ProposedStep:
        """Compute one step of eq. (8) and run every check on it, without writing anything.

        The arithmetic of :meth:`step` up to the write: the residuals, the weighted SGD
        step, the balancing of Lemma 2.1 and the divergence checks.  Nothing of the
        estimator changes (the round's context products are cached, as for
        :meth:`predict_checked`); :meth:`commit_step` writes the result.

        Parameters
        ----------
        round_ : Round
            As in :meth:`step` (checked, in the batched layout).

        Returns
        -------
        ProposedStep
            The new factors of the pulled arms, the residuals and the version of the state
            they were computed from.

        Raises
        ------
        FloatingPointError
            If the step diverges: non-finite factors, or a new largest singular value above
            :attr:`max_singular_value`.  The message names the trial, arm, reward and
            residual and the knobs (``step_scale``, the warm start, ``max_singular_value``).
        RuntimeError
            If the estimator has not been initialised.
        """
        self._require_init("propose_step")
        Xb, a, y, fingerprint = round_.contexts, round_.actions, round_.rewards, round_.fingerprint
        coef = self._step_coefficients(a, round_.propensities)
        # Overflow (a diverging step, or contexts far outside the estimate's scale) shows
        # as non-finite factors or a singular value above the bound, both refused below.
        with np.errstate(over="ignore", invalid="ignore"):
            # The pulled arms' balanced factors and X V, Xᵀ U (not modified in place below).
            U, V, XV, XtU = self._product_cache.pulled(Xb, a, self._U, self._V, fingerprint)
            try:
                if engine.compiled():
                    from agents.estimator import kernels

                    one_hot = (Xb.rows, Xb.cols) if isinstance(Xb, OneHotContexts) else None
                    res, U_new, V_new, sv_new = kernels.propose_pulled(
                        self._U, self._V, a, y, coef, XV, XtU, one_hot, self._sv
                    )
                else:
                    # eq. (8): res = y - <U V^T, X> = y - <U, X V>,
                    #          U <- U + eta c w res X V,  V <- V + eta c w res X^T U,
                    # then the balancing of Lemma 2.1, so that the next step starts from
                    # balanced factors.
                    n = len(y)
                    res = y - np.matmul(XV.reshape(n, 1, -1), U.reshape(n, -1, 1))[:, 0, 0]
                    step = (coef * res)[:, None, None]
                    U_new, V_new, sv_new = balance(U + step * XV, V + step * XtU)
            except FloatingPointError:
                raise divergence.diverged(self.n_trials, Xb, a, y, XV, U) from None
        divergence.check_within_bound(
            sv_new, self._sv_bound, self.max_singular_value_setting, self.n_trials, Xb, a, y, XV, U
        )
        return ProposedStep(
            np.array(a, dtype=np.int64, copy=True),
            res,
            U_new,
            V_new,
            sv_new,
            self._version,
            id(self),
            Xb.index if isinstance(Xb, OneHotContexts) else None,
            self._square_weights(a, round_.propensities),
        )

    def _square_weights(self, a: np.ndarray, propensities: np.ndarray) -> np.ndarray | None:
        """``1{a_t = a}/π_t(a)²`` of every arm, ``(B, K)`` (None without known
        propensities): the round's share of the realized variance factor that the step's
        warm-start cap reads."""
        if self.propensities != "known":
            return None
        out = np.zeros((self._B, self.n_actions))
        if self.n_trials is None:
            w = 1.0 / float(propensities[0, a[0]])
            out[0, a[0]] = w * w  # as the batched path computes it, bit for bit
            return out
        w = 1.0 / propensities[self._trials, a]
        out[self._trials, a] = w * w
        return out

    # ------------------------------------------------------------------ read-outs
    def predict(self, X: Any) -> np.ndarray:
        """Predicted mean rewards ``<M_hat_a, X>`` for every arm.

        Computed as one batched product of ``X`` with the arms' concatenated ``V`` factors
        followed by a sum against ``U``: no d1 x d2 matrix is formed per arm.

        Parameters
        ----------
        X : array_like of shape (d1, d2) or (B, d1, d2)

        Returns
        -------
        ndarray of shape (K,) or (B, K)
        """
        self._require_init("predict")
        Xb, fp = self.check_context(X)
        return self._out(self.predict_checked(Xb, fp))

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"LowRankSGD(d1={self.d1}, d2={self.d2}, rank={self.rank}, "
            f"n_actions={self.n_actions}{batch}, context={self.context!r}, "
            f"propensities={self.propensities!r}, t={self._t})"
        )
