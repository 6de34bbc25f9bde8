"""Online low-rank SGD estimator of the arms' reward matrices (Algorithm 1).

The estimator keeps, for every arm ``a``, factors ``U_a`` (d1 x r) and ``V_a`` (d2 x r) with
``M_hat_a = U_a V_a^T``.  Each round only the pulled arm moves, by one inverse-propensity
weighted gradient step on ``(y_t - <U V^T, X_t>)^2 / 2`` taken from the *balanced*
factorisation (``U^T U = V^T V = D`` diagonal): eq. (8), in
:meth:`LowRankSGD.step_validated`.  Taking the step from the balanced factors is exactly the
renormalised update of eq. (8) (top-r SVD of ``U V^T`` before the step); by Lemma 2.1 the
balancing needs only r x r eigen/singular value decompositions instead of a d1 x d2 SVD
(docs/method.md §3).

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
  then :meth:`LowRankSGD.commit_step`), so a step that fails a check leaves the estimator
  as it was, and a stack of inference wrappers can prepare every layer's step before it
  commits any.
* Divergence guard: a step whose new estimate has a singular value above
  :attr:`LowRankSGD.max_singular_value` raises ``FloatingPointError`` instead of being
  taken (see the class notes for the bound and why).
* The machinery lives beside this module: :mod:`agents.balancing` (Lemma 2.1),
  :mod:`agents.product_cache` (the products ``X V_a`` and ``Xᵀ U_a`` that a round's
  prediction, the inference wrappers' snapshot and the step share) and
  :mod:`agents.kernels` (the same round compiled with numba, engine "numba").
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from agents.balancing import DIVERGED, balance
from agents.product_cache import ProductCache
from agents.state import plain, read_bool, read_int, same_value
from lrbandit_gym import engine
from lrbandit_gym.validation import (
    check_actions,
    check_choice,
    check_context_fingerprint,
    check_finite,
    check_positive_float,
    check_positive_int,
    check_propensities,
    check_rewards,
)

__all__ = ["DIVERGENCE_FACTOR", "LowRankSGD", "ProposedStep", "PulledArms"]

#: Default divergence bound of :class:`LowRankSGD`, relative to the scale at initialisation:
#: ``max_singular_value = DIVERGENCE_FACTOR * max(1, largest initial singular value)``.
DIVERGENCE_FACTOR = 1e6

_CONTEXTS = ("gaussian", "completion")
_PROPENSITIES = ("known", "unknown")
_CONFIG_KEYS = (
    "d1",
    "d2",
    "rank",
    "n_actions",
    "n_trials",
    "context",
    "step_scale",
    "step_offset",
    "step_decay",
    "propensities",
)


class PulledArms(NamedTuple):
    """The pulled arms' factors before the step, and the round's products with them
    (:meth:`LowRankSGD.pulled`).  ``B`` is the batch size (1 unbatched).

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
    """One step of eq. (8), computed but not written (:meth:`LowRankSGD.propose_step`).

    :meth:`LowRankSGD.commit_step` writes it.  ``B`` is the batch size (1 unbatched).

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
        :attr:`LowRankSGD.version` of the estimator when the step was proposed.
    owner : int
        ``id()`` of the estimator that proposed it.
    """

    actions: np.ndarray
    residuals: np.ndarray
    U: np.ndarray
    V: np.ndarray
    sv: np.ndarray
    version: int
    owner: int


class LowRankSGD:
    """Inverse-propensity weighted low-rank SGD for K reward matrices (Algorithm 1).

    Arm ``a`` is estimated by ``M_hat_a = U_a V_a^T`` with rank ``r`` factors.  At round
    ``t`` only the pulled arm ``a = a_t`` moves (docs/method.md §3, eq. (8)):

    ``res = y_t - <U V^T, X_t>``, ``U <- U + eta_t c w_t res X_t V``,
    ``V <- V + eta_t c w_t res X_t^T U``,

    from factors balanced so that ``U^T U = V^T V = D`` (the top-r SVD form; Lemma 2.1 shows
    this equals the renormalised update computed with a d1 x d2 SVD).  Here
    ``eta_t = step_scale * max(t, step_offset) ** (-step_decay)``, ``w_t = 1/pi_t(a_t)`` and
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
        Context distribution; sets the gradient scale ``c`` (1 or ``d1 * d2``).
    step_scale : float, default 0.1
        ``c_eta`` in the step size.
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
        ``s_max`` the largest singular value of the trial's initial estimates (see Notes).

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
    *Divergence guard.*  When the step size is too large for the scale of the contexts and
    rewards, eq. (8) overshoots and the factors grow geometrically; they stay finite for
    many rounds (up to ~1e150) while predictions and the inference built on them are
    already meaningless.  A consistent run keeps every estimate within a small multiple of
    its truth, and a warm-started one starts close to it, so an estimate a million times
    larger than the initial scale (:data:`DIVERGENCE_FACTOR`; the floor 1 covers zero or
    tiny starts) only arises from a diverging iteration.  In the paper's studies the
    estimates stay within the noise level of their truth (singular values 1, or 15 in the
    value study), six orders of magnitude below the bound.  Problems whose estimates
    legitimately grow that much from their start (say, a start at zero for rewards of
    order 1e7) pass ``max_singular_value`` explicitly.

    The estimator must be initialised (:meth:`initialize`, eq. (10)) before use, e.g. from
    :func:`agents.warm_start.nuclear_norm_fit`.  A rank-deficient start (``M_init`` with
    fewer than ``r`` non-zero singular values) cannot grow the missing directions: zero is
    a stationary point of the factored gradient.

    Policies and inference wrappers that drive a round themselves use the per-round API:
    :meth:`check_context` validates the context once, then :meth:`predict_validated`,
    :meth:`pulled` and :meth:`step_validated` share its products (keyed by the context's
    :meth:`fingerprint`); :attr:`arm_versions`, :attr:`batched_factors` and
    :meth:`arm_factors` read the state without copying all of it.
    :meth:`propose_step` and :meth:`commit_step` split a step into its arithmetic (every
    check included) and its write, so that several estimators can be stepped together or
    not at all.

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
        step_scale: float = 0.1,
        step_offset: float = 300,
        step_decay: float = 0.99,
        propensities: str = "known",
        max_singular_value: float | None = None,
    ) -> None:
        self.d1 = check_positive_int(d1, "d1")
        self.d2 = check_positive_int(d2, "d2")
        self.rank = check_positive_int(rank, "rank")
        if self.rank > min(self.d1, self.d2):
            raise ValueError(
                f"rank must be <= min(d1, d2) = {min(self.d1, self.d2)}, got {self.rank}"
            )
        self.n_actions = check_positive_int(n_actions, "n_actions", minimum=2)
        self.n_trials = None if n_trials is None else check_positive_int(n_trials, "n_trials")
        self.context = check_choice(context, "context", _CONTEXTS)
        self.step_scale = check_positive_float(step_scale, "step_scale")
        self.step_offset = check_positive_float(step_offset, "step_offset")
        self.step_decay = check_positive_float(step_decay, "step_decay")
        self.propensities = check_choice(propensities, "propensities", _PROPENSITIES)
        self.max_singular_value_setting = (
            None
            if max_singular_value is None
            else check_positive_float(max_singular_value, "max_singular_value")
        )
        self.c = float(self.d1 * self.d2) if self.context == "completion" else 1.0

        B = self._B
        K = self.n_actions
        self._U = np.zeros((B, K, self.d1, self.rank))
        self._V = np.zeros((B, K, self.d2, self.rank))
        self._sv = np.zeros((B, K, self.rank))
        self._counts = np.zeros((B, K), dtype=np.int64)
        self._t = 0
        self._initialized = False
        self._trials = np.arange(B)
        # Products of the current round's context with the factors, shared by predict(),
        # the inference wrappers and update().
        self._product_cache = ProductCache(self.d1, self.d2, self.n_trials)
        # Per (trial, arm) counter bumped whenever those factors change (arm_versions).
        self._arm_version = np.zeros((B, K), dtype=np.int64)
        # The V factors side by side, (B, d2, K, r), for the all-arm product of predict().
        self._V_cat = np.zeros((B, self.d2, K, self.rank))
        # Divergence bound per trial (set by initialize() unless given) and a counter bumped
        # by every change of the state (propose_step/commit_step compare it).
        self._sv_bound = np.full(B, self._fixed_bound())
        self._version = 0

    # ------------------------------------------------------------------ basic properties
    @property
    def _B(self) -> int:
        return 1 if self.n_trials is None else self.n_trials

    @property
    def batched(self) -> bool:
        """Whether the batched API (``n_trials`` given) is in use."""
        return self.n_trials is not None

    @property
    def initialized(self) -> bool:
        """Whether :meth:`initialize` (or :meth:`load_state_dict`) has set the factors."""
        return self._initialized

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

    @property
    def max_singular_value(self) -> float | np.ndarray:
        """The divergence bound in force: a float, or ``(B,)`` per trial when batched.

        ``inf`` before :meth:`initialize` unless ``max_singular_value`` was given.
        """
        bound = self._sv_bound.copy()
        return float(bound[0]) if self.n_trials is None else bound

    def _fixed_bound(self) -> float:
        """The bound before initialisation: the given one, or none (inf)."""
        setting = self.max_singular_value_setting
        return np.inf if setting is None else setting

    def _bound_for(self, sv: np.ndarray) -> np.ndarray:
        """The per-trial bound for singular values ``sv`` (B, K, r) of a start."""
        if self.max_singular_value_setting is not None:
            return np.full(self._B, self.max_singular_value_setting)
        top = sv[..., 0].max(axis=-1) if sv.size else np.zeros(self._B)
        return DIVERGENCE_FACTOR * np.maximum(1.0, top)

    def step_size(self, t: Any) -> Any:
        """Step size ``eta_t = step_scale * max(t, step_offset) ** (-step_decay)``.

        Parameters
        ----------
        t : int or array_like of int
            Round index (known propensities) or per-arm count (Algorithm 4), from 1.

        Returns
        -------
        float or ndarray
        """
        tt = np.maximum(np.asarray(t, dtype=np.float64), self.step_offset)
        eta = self.step_scale * tt ** (-self.step_decay)
        return float(eta) if eta.ndim == 0 else eta

    def _eta(self, t: int) -> float:
        """Scalar :meth:`step_size` in plain Python (the per-round hot path)."""
        return self.step_scale * max(float(t), self.step_offset) ** (-self.step_decay)

    def _out(self, arr: np.ndarray) -> np.ndarray:
        """Drop the internal batch axis in the unbatched API."""
        return arr[0] if self.n_trials is None else arr

    def _require_init(self, what: str) -> None:
        if not self._initialized:
            raise RuntimeError(
                f"LowRankSGD.{what} called before initialization: call initialize(M_init) "
                "first (e.g. with agents.warm_start.nuclear_norm_fit) or use a warm start."
            )

    # ------------------------------------------------------------------ initialisation
    def initialize(self, M_init: Any) -> None:
        """Set the factors from initial estimates by eq. (10).

        ``U_0 = W_U D^{1/2}``, ``V_0 = W_V D^{1/2}`` from the top-r SVD ``W_U D W_V^T`` of
        each ``M_init[a]``.  Resets the round counter ``t`` and the per-arm counts.

        Parameters
        ----------
        M_init : array_like of shape (K, d1, d2) or (B, K, d1, d2)
            Initial estimates (need not have rank r: they are truncated).  In batched mode
            a ``(K, d1, d2)`` array is used for every trial.

        Also sets the divergence bound :attr:`max_singular_value` (unless it was given).

        Raises
        ------
        ValueError
            If ``M_init`` has the wrong shape or non-finite entries (nothing changes then).
        """
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
        self._U = np.ascontiguousarray(U)
        self._V = np.ascontiguousarray(V)
        self._sv = np.ascontiguousarray(s[..., :r])
        self._counts = np.zeros((self._B, K), dtype=np.int64)
        self._t = 0
        self._initialized = True
        self._sv_bound = self._bound_for(self._sv)
        self._factors_changed()

    # ------------------------------------------------------------------ the update
    def update(
        self, X: Any, action: Any, reward: Any, propensities: Any = None
    ) -> float | np.ndarray:
        """Absorb one round: one weighted SGD step for the pulled arm (Algorithm 1).

        Parameters
        ----------
        X : array_like of shape (d1, d2) or (B, d1, d2)
            Context ``X_t``.
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
        # ---- validated: nothing below raises on user input ---------------------------
        res = self.step_validated(Xb, a, y, p, fp)
        return float(res[0]) if B is None else res

    # ------------------------------------------------------------------ per-round API
    def check_context(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Validate a context for this estimator (one pass over its entries).

        Parameters
        ----------
        X : array_like of shape (d1, d2), or (B, d1, d2) batched

        Returns
        -------
        Xb : ndarray of shape (B, d1, d2)
            The context in the batched layout (``B = 1`` unbatched).
        fingerprint : ndarray of shape (B,)
            Its :meth:`fingerprint`, which is both the finiteness check and the key of the
            round's products: pass it on to :meth:`predict_validated`, :meth:`pulled` and
            :meth:`step_validated`.

        Raises
        ------
        ValueError
            If ``X`` is not a real array of the right shape or has a non-finite entry.
        """
        X, fp = check_context_fingerprint(
            X, self.d1, self.d2, self.n_trials, self._product_cache.weights
        )
        return (X if self.n_trials is not None else X[None]), fp

    def fingerprint(self, Xb: np.ndarray) -> np.ndarray:
        """Per-trial ``<X, W>`` with fixed weights ``W`` drawn once in ``[1, 2)`` (one GEMV).

        It tells whether a context is the one the round's products were computed for, so
        a round's prediction, the inference wrappers' snapshot and the step share one
        ``X V`` and one ``Xᵀ U`` however the caller copied or reshaped the array in between,
        while an array edited in place is recomputed.  Since no weight is zero, a non-finite
        entry makes it non-finite: it doubles as a finiteness check.

        Parameters
        ----------
        Xb : ndarray of shape (B, d1, d2)
            Contexts in the batched layout (``B = 1`` unbatched); not validated.

        Returns
        -------
        ndarray of shape (B,)
        """
        return self._product_cache.fingerprint(Xb)

    def predict_validated(
        self, Xb: np.ndarray, fingerprint: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`predict` on a validated context, in the batched layout.

        Parameters
        ----------
        Xb : ndarray of shape (B, d1, d2)
            Contexts from :meth:`check_context` (assumed validated).
        fingerprint : ndarray of shape (B,), optional
            Their fingerprint from :meth:`check_context`; computed if omitted.

        Returns
        -------
        ndarray of shape (B, K)
            ``<M_hat_a, X>`` for every trial and arm.
        """
        XV = self._product_cache.all_arm_products(Xb, self._V_cat, fingerprint)
        if engine.compiled():
            from agents import kernels

            preds = np.empty((XV.shape[0], self.n_actions))
            kernels.predictions(XV, self._U, preds)
            return preds
        return np.einsum("bikr,bkir->bk", XV, self._U)

    def pulled(
        self, Xb: np.ndarray, actions: np.ndarray, fingerprint: np.ndarray | None = None
    ) -> PulledArms:
        """What the pulled arms' factors are before the step, and their products with ``X``.

        The products are the ones :meth:`step_validated` then uses on the same context
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
        return PulledArms(U, V, XV, XtU, self._sv[self._trials, actions])

    def step_validated(
        self,
        Xb: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        propensities: np.ndarray | None,
        fingerprint: np.ndarray | None = None,
    ) -> np.ndarray:
        """:meth:`update` on validated arrays in the batched layout: one step of eq. (8).

        :meth:`propose_step` then :meth:`commit_step`.

        Parameters
        ----------
        Xb : ndarray of shape (B, d1, d2)
            Contexts from :meth:`check_context` (assumed validated).
        actions : ndarray of int64, shape (B,)
            Pulled arms ``a_t`` (assumed validated).
        rewards : ndarray of shape (B,)
            Observed ``y_t`` (assumed finite).
        propensities : ndarray of shape (B, K) or None
            ``pi_t(a)`` for every arm (assumed validated, positive at the pulled arm); only
            read with ``propensities="known"``.
        fingerprint : ndarray of shape (B,), optional
            The fingerprint of ``Xb`` from :meth:`check_context`; computed if omitted.

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
        :func:`agents.product_cache.context_products` for one large context); the
        unbatched API only swaps the fancy-indexed gather/scatter for basic indexing.
        """
        return self.commit_step(self.propose_step(Xb, actions, rewards, propensities, fingerprint))

    def propose_step(
        self,
        Xb: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        propensities: np.ndarray | None,
        fingerprint: np.ndarray | None = None,
    ) -> ProposedStep:
        """Compute one step of eq. (8) and run every check on it, without writing anything.

        The arithmetic of :meth:`step_validated` up to the write: the residuals, the
        weighted SGD step, the balancing of Lemma 2.1 and the divergence checks.  Nothing
        of the estimator changes (the round's context products are cached, as for
        :meth:`predict_validated`); :meth:`commit_step` writes the result.

        Parameters
        ----------
        Xb, actions, rewards, propensities, fingerprint
            As in :meth:`step_validated` (validated arrays in the batched layout).

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
        a, y = actions, rewards
        if self.propensities == "known":  # eta_t c w_t with w_t = 1 / pi_t(a_t)
            coef = (self._eta(self._t + 1) * self.c) / propensities[self._trials, a]
        else:  # Algorithm 4: w_t = 1, eta indexed by the arm's own update count
            coef = self.step_size(self._counts[self._trials, a] + 1) * self.c
        # Overflow (a diverging step, or contexts far outside the estimate's scale) shows
        # as non-finite factors or a singular value above the bound, both refused below.
        with np.errstate(over="ignore", invalid="ignore"):
            # The pulled arms' balanced factors and X V, Xᵀ U (not modified in place below).
            U, V, XV, XtU = self._product_cache.pulled(Xb, a, self._U, self._V, fingerprint)
            try:
                if engine.compiled():
                    from agents import kernels

                    res, U_new, V_new, sv_new = kernels.propose_pulled(
                        self._U, self._V, a, y, coef, XV, XtU
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
                raise FloatingPointError(
                    DIVERGED + self._step_details(Xb, a, y, XV, U, None) + "; the estimator "
                    "is unchanged"
                ) from None
        over = ~(sv_new[:, 0] <= self._sv_bound)
        if over.any():
            b = int(np.argmax(over))
            how = (
                "given"
                if self.max_singular_value_setting is not None
                else f"{DIVERGENCE_FACTOR:g} x max(1, the largest initial singular value)"
            )
            raise FloatingPointError(
                f"LowRankSGD step would raise the largest singular value of arm {int(a[b])}'s "
                f"estimate to {sv_new[b, 0]:.3g}, above max_singular_value = "
                f"{self._sv_bound[b]:.3g} ({how}): the iteration is diverging"
                f"{self._step_details(Xb, a, y, XV, U, b)}.  Reduce step_scale, start "
                "closer to the truth (a longer warm start or a better M_init), or raise "
                "max_singular_value if estimates this large are expected; the estimator is "
                "unchanged"
            )
        return ProposedStep(
            np.array(a, dtype=np.int64, copy=True),
            res,
            U_new,
            V_new,
            sv_new,
            self._version,
            id(self),
        )

    def commit_step(self, proposed: ProposedStep) -> np.ndarray:
        """Write a step computed by :meth:`propose_step` on the current state.

        Cannot fail on a proposal made against the current state: every check ran in
        :meth:`propose_step`.

        Parameters
        ----------
        proposed : ProposedStep
            From this estimator's :meth:`propose_step`, with no change of the state since.

        Returns
        -------
        ndarray of shape (B,)
            The residuals ``y_t - <M_hat_{a_t, t-1}, X_t>`` before the step.

        Raises
        ------
        ValueError
            If ``proposed`` comes from another estimator or the state changed since it
            was proposed (another step, :meth:`initialize`, :meth:`load_state_dict`);
            nothing is written then.
        """
        if not isinstance(proposed, ProposedStep) or proposed.owner != id(self):
            raise ValueError(
                "proposed must be a ProposedStep from this estimator's propose_step(), got "
                f"{type(proposed).__name__}"
            )
        if proposed.version != self._version:
            raise ValueError(
                f"proposed was computed at version {proposed.version} of the estimator, "
                f"which has changed since (version {self._version}): propose the step again"
            )
        a = proposed.actions
        if engine.compiled():
            from agents import kernels

            state = (self._U, self._V, self._sv, self._V_cat, self._counts, self._arm_version)
            kernels.write_pulled(*state, a, proposed.U, proposed.V, proposed.sv)
            self._t += 1
            self._product_cache.invalidate()
        else:
            self._store_pulled(a, proposed.U, proposed.V, proposed.sv)
        self._version += 1
        return proposed.residuals

    def _step_details(
        self,
        Xb: np.ndarray,
        a: np.ndarray,
        y: np.ndarray,
        XV: np.ndarray,
        U: np.ndarray,
        b: int | None,
    ) -> str:
        """The failing round, for the messages of :meth:`propose_step` (failure path only).

        ``b`` is the failing trial, or None to name the trial with the largest residual.
        """
        with np.errstate(all="ignore"):
            n = len(y)
            res = y - np.matmul(XV.reshape(n, 1, -1), U.reshape(n, -1, 1))[:, 0, 0]
            if b is None:
                size = np.where(np.isfinite(res), np.abs(res), np.inf)
                b = int(np.argmax(size))
            xmax = float(np.abs(Xb[b]).max())
        trial = "" if self.n_trials is None else f"trial {b}, "
        return (
            f" ({trial}arm {int(a[b])}: reward {float(y[b])!r}, residual {float(res[b]):.3g}, "
            f"largest |X| entry {xmax:.3g})"
        )

    @property
    def arm_versions(self) -> np.ndarray:
        """Per (trial, arm) counter bumped whenever those factors change.

        A caller that keeps copies of factors (the inference wrappers) tells which arms
        moved by comparing versions instead of factors.  A read-only view of shape (B, K),
        int64 (``B = 1`` unbatched) that follows the estimator: copy it to keep a snapshot.
        """
        view = self._arm_version.view()
        view.flags.writeable = False
        return view

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

    def _factors_changed(self) -> None:
        """Every arm's factors were set (initialize, load_state_dict)."""
        self._product_cache.invalidate()
        self._version += 1
        self._arm_version += 1
        self._V_cat = np.ascontiguousarray(self._V.transpose(0, 2, 1, 3))

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
        return self._out(self.predict_validated(Xb, fp))

    @property
    def estimates(self) -> np.ndarray:
        """Current estimates ``M_hat_a = U_a V_a^T``: ``(K, d1, d2)`` or ``(B, K, d1, d2)``."""
        self._require_init("estimates")
        return self._out(np.matmul(self._U, self._V.swapaxes(-1, -2)))

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
        self._require_init("subspaces")
        sv = self._sv
        ok = sv > 0
        inv_root = np.where(ok, 1.0 / np.sqrt(np.where(ok, sv, 1.0)), 0.0)[..., None, :]
        return self._out(self._U * inv_root), self._out(self._V * inv_root)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as plain numpy arrays and Python scalars (copies).

        The dict is flat (no ``None``, no nesting), so it round-trips through
        ``np.savez`` and ``np.load(allow_pickle=False)`` (:mod:`agents.state`).

        Returns
        -------
        dict
            Configuration (``d1``, ``d2``, ``rank``, ``n_actions``, ``n_trials`` (``0`` for
            unbatched), ``context``, ``step_scale``, ``step_offset``, ``step_decay``,
            ``propensities``) and state (``U``, ``V``, ``singular_values``, ``counts``,
            ``t``, ``initialized``, ``max_singular_value``: the divergence bound per
            trial), always in the internal batched layout.
        """
        return {
            "d1": self.d1,
            "d2": self.d2,
            "rank": self.rank,
            "n_actions": self.n_actions,
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "context": self.context,
            "step_scale": self.step_scale,
            "step_offset": self.step_offset,
            "step_decay": self.step_decay,
            "propensities": self.propensities,
            "U": self._U.copy(),
            "V": self._V.copy(),
            "singular_values": self._sv.copy(),
            "counts": self._counts.copy(),
            "t": int(self._t),
            "initialized": bool(self._initialized),
            "max_singular_value": self._sv_bound.copy(),
        }

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` against this estimator, changing nothing.

        Accepts what ``np.load`` returns for a saved state (scalars as 0-d arrays) and
        states saved before ``max_singular_value`` was stored (the bound is then set as
        :meth:`initialize` would set it from the loaded singular values).

        Returns
        -------
        dict
            The validated state as copies, for :meth:`load_state_dict`.

        Raises
        ------
        ValueError
            If a key is missing, the configuration differs from this object's, an array has
            the wrong shape, dtype or non-finite entries, ``t`` or a count is negative, a
            singular value is negative or out of order, the counts do not add up to ``t``,
            or an uninitialised state holds factors.
        """
        missing = [
            k
            for k in (*_CONFIG_KEYS, "U", "V", "singular_values", "counts", "t", "initialized")
            if k not in state
        ]
        if missing:
            raise ValueError(f"state is missing keys {missing}")
        mine = self.state_dict()
        for key in _CONFIG_KEYS:
            if not same_value(state[key], mine[key]):
                raise ValueError(
                    f"state[{key!r}] = {state[key]!r} does not match this estimator's "
                    f"{key} = {mine[key]!r}"
                )
        B, K, r = self._B, self.n_actions, self.rank
        arrays = {}
        for key, shape in (
            ("U", (B, K, self.d1, r)),
            ("V", (B, K, self.d2, r)),
            ("singular_values", (B, K, r)),
        ):
            arr = np.asarray(state[key])
            if arr.shape != shape or arr.dtype != np.float64:
                raise ValueError(
                    f"state[{key!r}] must be a float64 array of shape {shape}, got "
                    f"{arr.dtype} array of shape {arr.shape}"
                )
            check_finite(arr, f"state[{key!r}]")
            arrays[key] = np.array(arr, copy=True)
        sv = arrays["singular_values"]
        if (sv < 0).any():
            raise ValueError(
                f"state['singular_values'] must be >= 0, got {sv[sv < 0][0]!r} at index "
                f"{tuple(int(i) for i in np.argwhere(sv < 0)[0])}"
            )
        if (np.diff(sv, axis=-1) > 0).any():
            idx = tuple(int(i) for i in np.argwhere(np.diff(sv, axis=-1) > 0)[0][:2])
            raise ValueError(
                "state['singular_values'] must be in decreasing order for every arm, got "
                f"{sv[idx].tolist()} at (trial, arm) {idx}"
            )
        counts = np.asarray(state["counts"])
        if counts.shape != (B, K) or counts.dtype.kind not in "iu" or (counts < 0).any():
            raise ValueError(
                f"state['counts'] must be a non-negative integer array of shape {(B, K)}, "
                f"got {counts.dtype} array of shape {counts.shape}"
                + (f" with minimum {counts.min()!r}" if counts.size else "")
            )
        t = read_int(state["t"], "state['t']")
        initialized = read_bool(state["initialized"], "state['initialized']")
        if (counts.sum(axis=1) != t).any():
            b = int(np.argmax(counts.sum(axis=1) != t))
            raise ValueError(
                f"state['counts'] must add up to state['t'] = {t} in every trial (one arm "
                f"moves per round), got {counts[b].tolist()} in trial {b}"
            )
        if not initialized and (t != 0 or np.any(arrays["U"]) or np.any(arrays["V"]) or np.any(sv)):
            raise ValueError(
                "state['initialized'] is False but the state holds factors or rounds "
                f"(t = {t}): an uninitialised estimator has t = 0 and zero factors"
            )
        if "max_singular_value" in state:
            bound = np.asarray(state["max_singular_value"])
            if bound.shape != (B,) or bound.dtype != np.float64 or not (bound > 0).all():
                raise ValueError(
                    f"state['max_singular_value'] must be a positive float64 array of shape "
                    f"{(B,)}, got {bound!r}"
                )
            bound = bound.copy()
        elif initialized:
            bound = self._bound_for(sv)
        else:
            bound = np.full(B, self._fixed_bound())
        return {
            "U": arrays["U"],
            "V": arrays["V"],
            "singular_values": sv,
            "counts": counts.astype(np.int64, copy=True),
            "t": t,
            "initialized": initialized,
            "max_singular_value": bound,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`: everything is validated first
        (:meth:`validate_state_dict`), so a failure changes nothing.

        Raises
        ------
        ValueError
            As :meth:`validate_state_dict`.
        """
        checked = self.validate_state_dict(state)
        self._U = checked["U"]
        self._V = checked["V"]
        self._sv = checked["singular_values"]
        self._counts = checked["counts"]
        self._t = checked["t"]
        self._initialized = checked["initialized"]
        self._sv_bound = checked["max_singular_value"]
        self._factors_changed()

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> LowRankSGD:
        """Build an estimator from a :meth:`state_dict`."""
        try:
            n_trials = read_int(state["n_trials"], "state['n_trials']")
            cfg = {k: plain(state[k]) for k in _CONFIG_KEYS if k != "n_trials"}
            est = cls(
                cfg.pop("d1"),
                cfg.pop("d2"),
                cfg.pop("rank"),
                cfg.pop("n_actions"),
                n_trials=None if n_trials == 0 else n_trials,
                **cfg,
            )
        except KeyError as exc:
            raise ValueError(f"state is missing key {exc.args[0]!r}") from None
        est.load_state_dict(state)
        return est

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        other = LowRankSGD.from_state_dict(state)
        self.__dict__.update(other.__dict__)

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"LowRankSGD(d1={self.d1}, d2={self.d2}, rank={self.rank}, "
            f"n_actions={self.n_actions}{batch}, context={self.context!r}, "
            f"propensities={self.propensities!r}, t={self._t})"
        )
