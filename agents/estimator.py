"""Online low-rank SGD estimator of the arms' reward matrices (Algorithm 1).

The estimator keeps, for every arm ``a``, factors ``U_a`` (d1 x r) and ``V_a`` (d2 x r) with
``M_hat_a = U_a V_a^T``.  Each round only the pulled arm moves, by one inverse-propensity
weighted gradient step on ``(y_t - <U V^T, X_t>)^2 / 2`` taken from the *balanced*
factorisation (``U^T U = V^T V = D`` diagonal).  Taking the step from the balanced factors
is exactly the renormalised update of eq. (8) (top-r SVD of ``U V^T`` before the step); by
Lemma 2.1 it can be done with r x r eigen/singular value decompositions instead of a
d1 x d2 SVD, which is what this module does (ALGORITHMS.md §3).

Implementation notes
--------------------
* Storage is always batched: ``U`` has shape ``(B, K, d1, r)`` and ``V`` ``(B, K, d2, r)``,
  with ``B = 1`` for the unbatched API.  A round gathers the pulled arm's factors of every
  trial with fancy indexing, updates them with stacked ``np.matmul`` calls and scatters them
  back; nothing loops over trials in Python.
* Factors are stored balanced after every change.  The balancing of ALGORITHMS.md §3 step 1
  is run at the *end* of the update for the arm that moved (and once in
  :meth:`LowRankSGD.initialize`); since the other arms did not move this is the same as
  balancing at the start of the next update, and it keeps ``D`` (the singular values of
  ``M_hat_a``) at hand for :meth:`LowRankSGD.subspaces`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

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

__all__ = ["LowRankSGD"]

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
# Relative floor for the eigenvalues of U^T U and V^T V in the balancing: a null direction of
# a rank-deficient factor is raised to it instead of being inverted as ~0 (see _balance).
_EIG_FLOOR = 1e-13
# Balancing by Cholesky (see _balance): a jitter of this fraction of the largest diagonal
# entry keeps the factorisation defined; pairs whose squared pivots fall below 1e3 times it,
# or whose eigenvalues (squared singular values) fall below _WEAK_FLOOR times the largest,
# are balanced by eigendecompositions instead.
_CHOL_FLOOR = 1e-15
_WEAK_FLOOR = 1e-20
_TINY = np.finfo(np.float64).tiny
# Context size from which X V and X^T U are computed column by column (see
# _context_products).
_GEMV_MIN_SIZE = 40_000
_DIVERGED = (
    "LowRankSGD step produced non-finite factors (the iteration diverged): the step size is "
    "too large for the scale of the contexts/rewards; reduce step_scale"
)
# Seed of the fixed weights that fingerprint a context (see LowRankSGD._fingerprint).
_FINGERPRINT_SEED = 20261126


def _context_products(
    X: np.ndarray, U: np.ndarray, V: np.ndarray, xv: bool = True
) -> tuple[np.ndarray | None, np.ndarray]:
    """``X V`` and ``X^T U`` for stacks of contexts (B, d1, d2) and factors (B, d1, r), (B, d2, r).

    For one large context OpenBLAS's gemm with r (~3) columns runs several times slower
    than r matrix-vector products (measured 0.7 ms vs 0.2 ms at d = 500), so that case uses
    one gemv per column; everything else is one stacked matmul per product.  (A batched run
    of large contexts therefore agrees with unbatched runs to rounding, not bit for bit.)
    """
    if X.shape[0] > 1 or X[0].size < _GEMV_MIN_SIZE:
        return (np.matmul(X, V) if xv else None), np.matmul(X.transpose(0, 2, 1), U)
    X2 = X[0]
    r = U.shape[2]
    XV = np.empty((1, X2.shape[0], r)) if xv else None
    XtU = np.empty((1, X2.shape[1], r))
    V_rows = np.ascontiguousarray(V[0].T)
    U_rows = np.ascontiguousarray(U[0].T)
    for j in range(r):
        if xv:
            XV[0, :, j] = X2 @ V_rows[j]
        XtU[0, :, j] = U_rows[j] @ X2
    return XV, XtU


def _balance(U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Balance stacks of factor pairs without forming ``U V^T`` (Lemma 2.1).

    Returns ``(U T_U, V T_V, sv)`` with ``T_U T_V^T = I`` (the product is unchanged) and
    ``(U T_U)^T (U T_U) = (V T_V)^T (V T_V) = diag(sv)``: the pair ``(W_U D^{1/2},
    W_V D^{1/2})`` for the top-r SVD ``W_U D W_V^T`` of ``U V^T``.  Cost O((d1 + d2) r^2 + r^3)
    per pair.

    With the Cholesky factor ``U^T U = L L^T`` and the eigendecomposition
    ``L^T (V^T V) L = Q Λ Q^T`` (eigenvalues decreasing), ``T_U = L^{-T} Q Λ^{1/4}`` and
    ``T_V = L Q Λ^{-1/4}``, ``sv = Λ^{1/2}``: one ``r x r`` Cholesky, inverse and symmetric
    eigendecomposition per pair.  Pairs where ``U`` or ``V`` is (nearly) rank-deficient —
    a Cholesky pivot or an eigenvalue below ``1e-10`` of the largest — take the
    eigendecomposition route of :func:`_balance_eig` instead, which handles null directions.
    The choice is made per pair, so a batch gives the same numbers as its pairs one by one.

    Parameters
    ----------
    U : ndarray of shape (N, d1, r)
    V : ndarray of shape (N, d2, r)

    Returns
    -------
    U_bal : ndarray of shape (N, d1, r)
    V_bal : ndarray of shape (N, d2, r)
    sv : ndarray of shape (N, r)
        The diagonal of ``D`` (singular values of ``U V^T``, decreasing).
    """
    n, _, r = U.shape
    gram = np.empty((2, n, r, r))
    np.matmul(U.transpose(0, 2, 1), U, out=gram[0])
    np.matmul(V.transpose(0, 2, 1), V, out=gram[1])
    if not np.isfinite(gram).all():
        raise FloatingPointError(_DIVERGED)
    # Positive definite by construction unless U is rank-deficient; pivots of such pairs are
    # replaced below, so the factorisation of the others never fails.
    scale = np.diagonal(gram[0], axis1=-2, axis2=-1).max(axis=-1)
    safe = gram[0] + (_TINY + _CHOL_FLOOR * scale)[:, None, None] * np.eye(r)
    L = np.linalg.cholesky(safe)
    pivots = np.diagonal(L, axis1=-2, axis2=-1) ** 2
    with np.errstate(over="ignore", invalid="ignore"):
        S = np.matmul(L.transpose(0, 2, 1), np.matmul(gram[1], L))
    overflow = ~np.isfinite(S).all(axis=(1, 2))  # huge but finite Grams: eigen route below
    if overflow.any():
        S[overflow] = np.eye(r)
    lam, Q = np.linalg.eigh(S)
    lam, Q = lam[:, ::-1], Q[:, :, ::-1]  # decreasing
    weak = (
        overflow
        | (pivots.min(axis=-1) <= 1e3 * _CHOL_FLOOR * scale)
        | ~(lam[:, -1] > _WEAK_FLOOR * lam[:, 0])
    )
    root4 = np.sqrt(np.sqrt(np.where(weak[:, None], 1.0, lam)))[:, None, :]
    T_U = np.matmul(np.linalg.inv(L).transpose(0, 2, 1), Q) * root4
    T_V = np.matmul(L, Q) / root4
    U_bal, V_bal, sv = np.matmul(U, T_U), np.matmul(V, T_V), np.sqrt(np.maximum(lam, 0.0))
    if weak.any():
        with np.errstate(over="ignore", invalid="ignore"):  # checked below
            try:
                U_w, V_w, sv_w = _balance_eig(U[weak], V[weak], gram[:, weak])
            except np.linalg.LinAlgError:
                raise FloatingPointError(_DIVERGED) from None
        if not (np.isfinite(U_w).all() and np.isfinite(V_w).all() and np.isfinite(sv_w).all()):
            raise FloatingPointError(_DIVERGED)
        U_bal[weak], V_bal[weak], sv[weak] = U_w, V_w, sv_w
    return U_bal, V_bal, sv


def _balance_eig(
    U: np.ndarray, V: np.ndarray, gram: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_balance` through eigendecompositions, robust to rank-deficient factors.

    With ``U^T U = R_U D_U R_U^T`` and ``V^T V = R_V D_V R_V^T`` and
    ``D_U^{1/2} R_U^T R_V D_V^{1/2} = Q_U D Q_V^T`` (r x r SVD), ``T_U = R_U D_U^{-1/2} Q_U
    D^{1/2}`` and ``T_V = R_V D_V^{-1/2} Q_V D^{1/2}``.  Eigenvalues below ``1e-13`` times the
    largest are raised to that floor instead of being inverted as ~0: a null direction of
    ``U`` (rank-deficient estimate) then comes out multiplied by a ~0 singular value rather
    than as NaN.  ``gram`` holds ``U^T U`` and ``V^T V``, shape (2, N, r, r).
    """
    evals, evecs = np.linalg.eigh(gram)  # (2, N, r) increasing, (2, N, r, r)
    evals = np.maximum(evals, _EIG_FLOOR * evals[..., -1:] + _TINY)
    root = np.sqrt(evals)[..., None, :]
    scaled = evecs * root  # R D^{1/2}
    Q_U, sv, Q_Vt = np.linalg.svd(np.matmul(scaled[0].transpose(0, 2, 1), scaled[1]))
    sqrt_sv = np.sqrt(sv)[:, None, :]
    inv = evecs / root  # R D^{-1/2}
    T_U = np.matmul(inv[0], Q_U * sqrt_sv)
    T_V = np.matmul(inv[1], Q_Vt.transpose(0, 2, 1) * sqrt_sv)
    return np.matmul(U, T_U), np.matmul(V, T_V), sv


class LowRankSGD:
    """Inverse-propensity weighted low-rank SGD for K reward matrices (Algorithm 1).

    Arm ``a`` is estimated by ``M_hat_a = U_a V_a^T`` with rank ``r`` factors.  At round
    ``t`` only the pulled arm ``a = a_t`` moves (ALGORITHMS.md §3, eq. (8)):

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

    Attributes
    ----------
    c : float
        Context scale multiplying every gradient.
    t : int
        Rounds absorbed since :meth:`initialize`.

    Notes
    -----
    The estimator must be initialised (:meth:`initialize`, eq. (10)) before use, e.g. from
    :func:`agents.warm_start.nuclear_norm_fit`.  A rank-deficient start (``M_init`` with
    fewer than ``r`` non-zero singular values) cannot grow the missing directions: zero is
    a stationary point of the factored gradient.

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
        # the inference wrappers and update() (see _products_for).
        self._fp_weights = np.random.default_rng(_FINGERPRINT_SEED).uniform(
            1.0, 2.0, self.d1 * self.d2
        )
        self._version = 0
        self._products: dict[str, Any] | None = None
        # Per (trial, arm) counter bumped whenever those factors change, so that a caller
        # that keeps copies (the inference wrappers) can tell which arms moved without
        # comparing the factors.
        self._arm_version = np.zeros((B, K), dtype=np.int64)
        # The V factors side by side, (B, d2, K, r), for the all-arm product of predict().
        self._V_cat = np.zeros((B, self.d2, K, self.rank))

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

        Raises
        ------
        ValueError
            If ``M_init`` has the wrong shape or non-finite entries.
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
        RuntimeError
            If the estimator has not been initialised.
        """
        self._require_init("update")
        B = self.n_trials
        Xb, fp = self._check_context(X)
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
        res = self._step(Xb, a, y, p, fp)
        return float(res[0]) if B is None else res

    def _check_context(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Validate a context for this estimator: ``(Xb, fingerprint)`` with ``Xb`` in the
        batched layout (B, d1, d2) (``B = 1`` unbatched) and its fingerprint (B,) (see
        :meth:`_fingerprint`), the finiteness check and the product-cache key in one pass."""
        X, fp = check_context_fingerprint(X, self.d1, self.d2, self.n_trials, self._fp_weights)
        return (X if self.n_trials is not None else X[None]), fp

    def _step(
        self,
        Xb: np.ndarray,
        a: np.ndarray,
        y: np.ndarray,
        p: np.ndarray | None,
        fp: np.ndarray | None = None,
    ):
        """:meth:`update` on validated arrays in the batched layout (``B = 1`` unbatched):
        ``Xb`` (B, d1, d2), ``a`` and ``y`` (B,), ``p`` (B, K) or None, ``fp`` the context's
        fingerprint if the caller has it; returns ``res``.

        Both APIs run the same arithmetic on (B, ., .) stacks, so that a batched run equals B
        unbatched runs bit for bit; the unbatched API only swaps the fancy-indexed
        gather/scatter for cheaper basic indexing.
        """
        if self.propensities == "known":
            coef = (self._eta(self._t + 1) * self.c) / p[self._trials, a]
        else:
            coef = self.step_size(self._counts[self._trials, a] + 1) * self.c
        U, V, XV, XtU = self._pulled(Xb, a, fp)  # not modified in place below
        if engine.compiled():
            return self._step_compiled(a, y, coef, XV, XtU)
        res = y - np.matmul(XV.reshape(len(y), 1, -1), U.reshape(len(y), -1, 1))[:, 0, 0]
        step = (coef * res)[:, None, None]
        U_bal, V_bal, sv = _balance(U + step * XV, V + step * XtU)
        if self.n_trials is None:
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
        self._version += 1
        self._products = None
        self._arm_version[self._trials, a] += 1
        return res

    def _step_compiled(self, a, y, coef, XV, XtU) -> np.ndarray:
        """The rest of :meth:`_step` by the numba kernels (:mod:`agents._kernels`): the same
        arithmetic, one loop over trials; pairs the kernel flags as nearly rank-deficient are
        balanced by :func:`_balance`, as the numpy engine would."""
        from agents import _kernels

        B, r = len(a), self.rank
        a = np.ascontiguousarray(a, dtype=np.int64)
        U_new = np.empty((B, self.d1, r))
        V_new = np.empty((B, self.d2, r))
        sv_new = np.empty((B, r))
        res = np.empty(B)
        status = np.empty(B, dtype=np.int8)
        coef = np.broadcast_to(np.asarray(coef, dtype=np.float64), (B,))
        _kernels.sgd_step(self._U, self._V, a, y, coef, XV, XtU, U_new, V_new, sv_new, res, status)
        if status.any():
            if (status == _kernels.NONFINITE).any():
                raise FloatingPointError(_DIVERGED)
            weak = status == _kernels.WEAK
            U_new[weak], V_new[weak], sv_new[weak] = _balance(U_new[weak], V_new[weak])
        # ---- nothing below raises: the state changes only now ------------------------
        _kernels.write_pulled(
            self._U,
            self._V,
            self._sv,
            self._V_cat,
            self._counts,
            self._arm_version,
            a,
            U_new,
            V_new,
            sv_new,
        )
        self._t += 1
        self._version += 1
        self._products = None
        return res

    # ------------------------------------------------------------------ shared products
    def _factors_changed(self) -> None:
        """Every arm's factors were set (initialize, load_state_dict)."""
        self._version += 1
        self._products = None
        self._arm_version += 1
        self._V_cat = np.ascontiguousarray(self._V.transpose(0, 2, 1, 3))

    def _fingerprint(self, Xb: np.ndarray) -> np.ndarray:
        """Per-trial ``<X, W>`` with fixed weights drawn once in [1, 2) (one GEMV).

        It tells whether a context is the one products were computed for, so a round's
        ``predict``, the inference wrappers' snapshot and ``update`` share one ``X V`` and
        one ``Xᵀ U`` however the caller copied or reshaped the array in between, while an
        array edited in place is recomputed.
        """
        with np.errstate(over="ignore", invalid="ignore"):  # callers check it is finite
            return Xb.reshape(Xb.shape[0], -1) @ self._fp_weights

    def _products_for(self, Xb: np.ndarray, fp: np.ndarray | None = None) -> dict[str, Any]:
        """The product cache for context ``Xb`` (B, d1, d2) under the current factors
        (``fp``: its fingerprint, if the caller computed it while validating ``Xb``)."""
        if fp is None:
            fp = self._fingerprint(Xb)
        c = self._products
        if c is None or c["version"] != self._version or not np.array_equal(c["fp"], fp):
            c = self._products = {"version": self._version, "fp": fp}
        return c

    def _all_arm_products(self, Xb: np.ndarray, fp: np.ndarray | None = None) -> np.ndarray:
        """``X V_a`` for every arm, shape (B, d1, K, r): one product with the arms'
        ``V`` factors side by side (cached for the round)."""
        c = self._products_for(Xb, fp)
        if "XV" not in c:
            B, K, r = self._B, self.n_actions, self.rank
            V_cat = self._V_cat.reshape(B, self.d2, K * r)
            c["XV"] = np.matmul(Xb, V_cat).reshape(B, self.d1, K, r)
        return c["XV"]

    def _pulled(
        self, Xb: np.ndarray, a: np.ndarray, fp: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The pulled arms' current factors ``U_a`` (B, d1, r), ``V_a`` (B, d2, r) and the
        products ``X V_a`` (B, d1, r), ``Xᵀ U_a`` (B, d2, r), cached for the round: the
        inference wrappers' snapshot and :meth:`update` share them.  The arrays are read-only
        by convention (the unbatched ``U_a``, ``V_a`` are views of the factors)."""
        c = self._products_for(Xb, fp)
        pulled = c.get("pulled")
        if pulled is not None and np.array_equal(pulled[0], a):
            return pulled[1:]
        if self.n_trials is None:
            a0 = int(a[0])
            U, V = self._U[0, a0][None], self._V[0, a0][None]
        else:
            U, V = self._U[self._trials, a], self._V[self._trials, a]  # gathered copies
        if "XV" in c:  # predict() has run on this context
            XV = c["XV"][np.arange(len(a)), :, a, :]
            XtU = _context_products(Xb, U, V, xv=False)[1]
        else:
            XV, XtU = _context_products(Xb, U, V)
        c["pulled"] = (np.array(a, copy=True), U, V, XV, XtU)
        return U, V, XV, XtU

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
        Xb, fp = self._check_context(X)
        return self._out(self._predict(Xb, fp))

    def _predict(self, Xb: np.ndarray, fp: np.ndarray | None = None) -> np.ndarray:
        """:meth:`predict` on a validated (B, d1, d2) stack (``fp``: its fingerprint, if
        known); returns (B, K)."""
        XV = self._all_arm_products(Xb, fp)
        if engine.compiled():
            from agents import _kernels

            preds = np.empty((XV.shape[0], self.n_actions))
            _kernels.predictions(XV, self._U, preds)
            return preds
        return np.einsum("bikr,bkir->bk", XV, self._U)

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

        Returns
        -------
        dict
            Configuration (``d1``, ``d2``, ``rank``, ``n_actions``, ``n_trials`` (``0`` for
            unbatched), ``context``, ``step_scale``, ``step_offset``, ``step_decay``,
            ``propensities``) and state (``U``, ``V``, ``singular_values``, ``counts``,
            ``t``, ``initialized``), always in the internal batched layout.
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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (validated first; a failure changes nothing).

        Raises
        ------
        ValueError
            If a key is missing, the configuration differs from this object's, or an array
            has the wrong shape, dtype or non-finite entries.
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
            if state[key] != mine[key]:
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
        counts = np.asarray(state["counts"])
        if counts.shape != (B, K) or counts.dtype.kind not in "iu" or (counts < 0).any():
            raise ValueError(
                f"state['counts'] must be a non-negative integer array of shape {(B, K)}, "
                f"got {counts.dtype} array of shape {counts.shape}"
            )
        t = state["t"]
        if isinstance(t, bool) or not isinstance(t, int | np.integer) or t < 0:
            raise ValueError(f"state['t'] must be a non-negative integer, got {t!r}")
        initialized = state["initialized"]
        if not isinstance(initialized, bool | np.bool_):
            raise ValueError(f"state['initialized'] must be a bool, got {initialized!r}")
        self._U = arrays["U"]
        self._V = arrays["V"]
        self._sv = arrays["singular_values"]
        self._counts = counts.astype(np.int64, copy=True)
        self._t = int(t)
        self._initialized = bool(initialized)
        self._factors_changed()

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> LowRankSGD:
        """Build an estimator from a :meth:`state_dict`."""
        try:
            n_trials = int(state["n_trials"])
            est = cls(
                state["d1"],
                state["d2"],
                state["rank"],
                state["n_actions"],
                n_trials=None if n_trials == 0 else n_trials,
                context=state["context"],
                step_scale=state["step_scale"],
                step_offset=state["step_offset"],
                step_decay=state["step_decay"],
                propensities=state["propensities"],
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
