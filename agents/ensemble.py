"""Ensemble sampling: approximate Thompson sampling for low-rank matrix-context bandits.

This is the policy of the paper's Appendix on approximate Thompson sampling (Algorithm 6;
docs/method.md §2 and §5).  ``n_models`` models each hold, for every arm ``a``, rank-``r``
factors ``U_a^(m)`` (d1 x r) and ``V_a^(m)`` (d2 x r).  Every round one model is picked
uniformly at random and the policy plays its greedy arm, so the exact propensity is

``pi_t(a) = #{m : argmax_b <U_b^(m) V_b^(m)T, X_t> = a} / n_models``.

After the reward ``y_t`` of arm ``a_t`` is seen, every model draws its own perturbation
``w^(m) ~ N(0, perturbation_std^2)`` and refits arm ``a_t`` to the MAP of eq. (MAP obj) on
all of that arm's data with its perturbed rewards ``y~^(m)_s = y_s + w_s^(m)``:

``1/(2 sigma^2) sum_s (y~_s - <X_s, U V^T>)^2 + 1/(2 sigma_u^2) ||U - mu_u||_F^2
+ 1/(2 sigma_v^2) ||V - mu_v||_F^2``,

by alternating least squares (ALS) warm-started from the model's previous factors.

Implementation notes
--------------------
* **Bounded per-round cost.**  The objective depends on the data only through, per arm,
  ``S_xx = sum_s vec(X_s) vec(X_s)^T`` (shared by the models), per model
  ``Y^(m) = sum_s y~^(m)_s X_s`` and the count.  With ``V`` fixed the U-step's normal
  equations are ``(C_U + lambda_u I) vec(U) = vec(Y V) + lambda_u vec(mu_u)`` with
  ``C_U[(j,l),(J,L)] = sum_{k,K} S_xx[(j,k),(J,K)] V_kl V_KL`` and
  ``lambda_u = sigma^2 / sigma_u^2`` (the V-step is the mirror image).  These contractions
  of ``S_xx`` cost ``O((d1 d2)^2 r n_models)`` per sweep, whatever the round ``t``; a round
  runs ``als_sweeps`` sweeps for the pulled arm only.
* **Statistics, blocks, all or nothing.**  Their memory bound
  (:func:`ensemble_memory_bytes`), the absorption of trials in cache-sized blocks, the
  overflow checks that make a round all or nothing, and the state's persistence live in
  :mod:`agents.ensemble_stats`; this module keeps the refit and the policy.
* **Prior means.**  The default ``mu_u = mu_v = 0`` is the symmetric choice of eq. (MAP
  obj) (a common non-zero mean would pull every model towards the same arbitrary matrix
  ``mu_u mu_v^T`` and kill early exploration).  Zero is then a stationary point of the
  factored objective and the MAP itself is 0 while
  ``||sum_s y~_s X_s||_op <= sigma^2 / (sigma_u sigma_v)`` (1 with the paper's
  ``sigma_u = sigma_v = sigma = 0.1``; 100 with ``sigma_u = sigma_v = 0.01``).  Near 0 an
  ALS sweep scales the factors by about ``(sigma_u sigma_v ||Y||_op / sigma^2)^2``, so after
  a few small rewards the iterate can sit at ~1e-10 (at the defaults) or underflow
  (smaller prior stds) and would then need many rounds to grow once the MAP is non-zero.
  Two remedies: warm starts whose product scale fell below ``1e-6`` of the prior's are
  rescaled to the prior scale before the sweep (same objective, new starting point; see
  ``EnsembleSampling._rescue``), and ``prior_anchor="sample"`` centres each model's
  penalty on its own prior draw (the randomised-prior form of ensemble sampling, Lu & Van
  Roy 2017), where 0 is not stationary.  A small prior std still shrinks the MAP
  (each singular value is reduced by about ``sigma^2 / (sigma_u sigma_v n_a)`` after ``n_a``
  Gaussian-context pulls): that is the model, not
  a numerical effect.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.base import PolicyBase
from agents.ensemble_stats import (
    STATE_ARRAYS,
    BlockWorkspace,
    block_trials,
    check_arrays,
    check_config,
    check_memory,
    check_overflow,
    ensemble_config,
    ensemble_memory_bytes,
    failure_message,
    per_arm,
    prior_mean,
)
from lrbandit_gym.input_checks import (
    check_choice,
    check_positive_float,
    check_positive_int,
)

__all__ = ["EnsembleSampling", "als_sweep", "ensemble_memory_bytes"]

_ANCHORS = ("mean", "sample")
# Relative product scale below which a warm start is rescaled (see EnsembleSampling._rescue).
_RESCUE = 1e-6


def _u_step(S, Y, V, mu, lam):
    """Solve the U-step of eq. (MAP obj) for stacks of models from sufficient statistics.

    Parameters
    ----------
    S : ndarray of shape (N, d1 d2, d1 d2)
        ``sum_s vec(X_s) vec(X_s)^T`` (row-major ``vec``), shared by the models of a trial.
    Y : ndarray of shape (N, M, d1, d2)
        ``sum_s y~_s^(m) X_s`` per model.
    V : ndarray of shape (N, M, d2, r)
        The fixed right factors.
    mu : ndarray of shape (N, M, d1, r)
        Prior means of the rows of U.
    lam : ndarray of shape (N,)
        ``sigma^2 / sigma_u^2``.

    Returns
    -------
    ndarray of shape (N, M, d1, r)
        ``argmin_U sum_s (y~_s - <X_s, U V^T>)^2 + lam ||U - mu||_F^2``.
    """
    N, M, d2, r = V.shape
    d1 = Y.shape[-2]
    # R[n, j, (m, l), (J, K)] = sum_k V[n, m, k, l] S[n, (j, k), (J, K)]: for each row block
    # j one small product serves all models, and S is read once, in storage order.
    Vt = V.transpose(0, 1, 3, 2).reshape(N, 1, M * r, d2)
    R = np.matmul(Vt, S.reshape(N, d1, d2, d1 * d2)).reshape(N, d1, M, r * d1, d2)
    # C[n, m, (j, l), (J, L)] = sum_K R[n, j, m, (l, J), K] V[n, m, K, L]
    C = np.matmul(R, V[:, None]).reshape(N, d1, M, r, d1, r)
    C = C.transpose(0, 2, 1, 3, 4, 5).reshape(N, M, d1 * r, d1 * r)
    return _ridge_solve(C, np.matmul(Y, V), mu, lam)


def _v_step(S, Y, U, mu, lam):
    """Solve the V-step of eq. (MAP obj); the mirror image of :func:`_u_step`.

    ``U`` has shape ``(N, M, d1, r)``, ``mu`` ``(N, M, d2, r)`` and ``lam`` is
    ``sigma^2 / sigma_v^2``; returns ``(N, M, d2, r)``.
    """
    N, M, d1, r = U.shape
    d2 = Y.shape[-1]
    # R[n, k, (m, l), (J, K)] = sum_j U[n, m, j, l] S[n, (j, k), (J, K)], reading S through
    # a strided view (row blocks k) rather than a transposed copy.
    Ut = U.transpose(0, 1, 3, 2).reshape(N, 1, M * r, d1)
    S_k = S.reshape(N, d1, d2, d1 * d2).transpose(0, 2, 1, 3)
    R = np.matmul(Ut, S_k).reshape(N, d2, M, r, d1, d2).swapaxes(-1, -2)
    # C[n, m, (k, l), (K, L)] = sum_J R[n, k, m, l, K, J] U[n, m, J, L]
    C = np.matmul(R, U[:, None, :, None])
    C = C.transpose(0, 2, 1, 3, 4, 5).reshape(N, M, d2 * r, d2 * r)
    return _ridge_solve(C, np.matmul(Y.swapaxes(-1, -2), U), mu, lam)


def _ridge_solve(C, rhs, mu, lam):
    """Solve ``(C + lam I) vec(W) = vec(rhs + lam mu)`` for stacks; returns ``W``."""
    N, M, n, _ = C.shape
    diag = np.arange(n)
    C[..., diag, diag] += lam[:, None, None]
    b = (rhs + lam[:, None, None, None] * mu).reshape(N, M, n, 1)
    return np.linalg.solve(C, b).reshape(rhs.shape)


def als_sweep(S, Y, U, V, mu_u, mu_v, lam_u, lam_v, n_sweeps: int = 1):
    """Alternating least squares on eq. (MAP obj) from sufficient statistics (Algorithm 6).

    One sweep is an exact U-step with ``V`` fixed followed by an exact V-step with the new
    ``U``.  The cost is independent of the number of observations behind ``S`` and ``Y``.

    Parameters
    ----------
    S : ndarray of shape (N, d1 d2, d1 d2)
        ``sum_s vec(X_s) vec(X_s)^T`` with the row-major ``vec`` (``X.ravel()``).
    Y : ndarray of shape (N, M, d1, d2)
        ``sum_s y~_s^(m) X_s`` for each of the ``M`` models.
    U : ndarray of shape (N, M, d1, r)
        Left factors (only used through the sweeps' order: the first U-step ignores it).
    V : ndarray of shape (N, M, d2, r)
        Right factors to start from.
    mu_u, mu_v : ndarray of shapes (N, M, d1, r) and (N, M, d2, r)
        Prior means.
    lam_u, lam_v : ndarray of shape (N,)
        ``sigma^2 / sigma_u^2`` and ``sigma^2 / sigma_v^2``.
    n_sweeps : int, default 1

    Returns
    -------
    U, V : ndarrays of shapes (N, M, d1, r) and (N, M, d2, r)
    """
    for _ in range(n_sweeps):
        U = _u_step(S, Y, V, mu_u, lam_u)
        V = _v_step(S, Y, U, mu_v, lam_v)
    return U, V


class EnsembleSampling(PolicyBase):
    """Ensemble sampling with per-model MAP refits by ALS (Algorithm 6, eq. (MAP obj)).

    ``n_models`` models share the data but perturb every reward independently; the policy
    picks a model uniformly at random and plays its greedy arm, so
    ``pi_t(a)`` is the exact fraction of models whose greedy arm at ``X_t`` is ``a``
    (docs/method.md §2).  The per-round cost and memory do not grow with ``t`` (see the module
    notes and :mod:`agents.ensemble_stats`): ``O(B K (d1 d2)^2)`` memory and
    ``O(B M r (d1 d2)^2 als_sweeps)`` time a round.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv, optional
        A ``MatrixContextBandit-v0`` environment (single or vector) to read the sizes from.
    rank : int, default 1
        Rank ``r`` of every model's estimate.
    n_models : int, default 10
        Ensemble size (``K`` in Algorithm 6).
    prior_std_u, prior_std_v : float, default 0.1
        ``sigma_u``, ``sigma_v``: standard deviations of the Gaussian prior on the rows of
        ``U`` and ``V`` (initial draws and MAP penalty).
    noise_std : float or array_like of shape (n_actions,), default 0.1
        ``sigma`` in the likelihood of eq. (MAP obj); one per arm allowed.
    perturbation_std : float, default 0.05
        ``sigma~``: std of the reward perturbations ``w^(m)``; 0 gives pure MAP refits.
    prior_mean_u, prior_mean_v : array_like, optional
        ``mu_u``, ``mu_v``, broadcastable to ``(n_actions, d1, rank)`` and
        ``(n_actions, d2, rank)``; zeros by default (see the module notes).
    prior_anchor : {"mean", "sample"}, default "mean"
        "mean": the penalty is centred on ``mu`` as printed in eq. (MAP obj).  "sample":
        each model's penalty is centred on its own initial prior draw (randomised priors).
    als_sweeps : int, default 1
        ALS sweeps (a U-step then a V-step) per round, warm-started from the previous
        factors; the cost of a round is proportional.  Once an arm has a few hundred pulls
        each round moves its MAP little and one sweep keeps every model within ~1e-3
        (Frobenius) of it; early on the iterates lag the MAP whatever the (small) number of
        sweeps: more sweeps lower the early regret somewhat and change neither the final
        estimation error nor the late regret.
    max_memory_bytes : int, default 2**31
        Refuse to build when :func:`ensemble_memory_bytes` exceeds it.
    seed : int or SeedSequence, optional
        Seeds the policy's generator (prior draws, perturbations, actions).
    d1, d2, n_actions, context, n_trials
        Sizes when no ``env`` is given (see :func:`agents.base.problem_shape`).

    Attributes
    ----------
    counts : ndarray
        Pulls per arm, ``(K,)`` or ``(B, K)``.
    block_trials : int
        Trials updated together in one vectorised block (cache-sized, see
        :mod:`agents.ensemble_stats`); a pure performance setting.

    Raises
    ------
    ValueError
        On invalid hyper-parameters or when the statistics would exceed
        ``max_memory_bytes``.

    Examples
    --------
    >>> import numpy as np
    >>> pol = EnsembleSampling(d1=4, d2=3, n_models=5, seed=0)
    >>> X = np.ones((4, 3))
    >>> d = pol.act(X)
    >>> pol.update(X, d, 1.0)
    >>> pol.model_predictions(X).shape
    (5, 2)
    """

    def __init__(
        self,
        env=None,
        *,
        rank: int = 1,
        n_models: int = 10,
        prior_std_u: float = 0.1,
        prior_std_v: float = 0.1,
        noise_std: Any = 0.1,
        perturbation_std: float = 0.05,
        prior_mean_u: Any = None,
        prior_mean_v: Any = None,
        prior_anchor: str = "mean",
        als_sweeps: int = 1,
        max_memory_bytes: int = 2**31,
        seed=None,
        d1: int | None = None,
        d2: int | None = None,
        n_actions: int | None = None,
        context: str | None = None,
        n_trials: int | None = None,
    ) -> None:
        super().__init__(
            env, seed=seed, d1=d1, d2=d2, n_actions=n_actions, context=context, n_trials=n_trials
        )
        d1, d2, K = self.d1, self.d2, self.n_actions
        self.rank = check_positive_int(rank, "rank")
        if self.rank > min(d1, d2):
            raise ValueError(f"rank must be <= min(d1, d2) = {min(d1, d2)}, got {self.rank}")
        self.n_models = check_positive_int(n_models, "n_models")
        self.prior_std_u = check_positive_float(prior_std_u, "prior_std_u")
        self.prior_std_v = check_positive_float(prior_std_v, "prior_std_v")
        self.noise_std = per_arm(noise_std, "noise_std", K)
        self.perturbation_std = check_positive_float(
            perturbation_std, "perturbation_std", allow_zero=True
        )
        self.prior_anchor = check_choice(prior_anchor, "prior_anchor", _ANCHORS)
        self.als_sweeps = check_positive_int(als_sweeps, "als_sweeps")
        self.max_memory_bytes = check_positive_int(max_memory_bytes, "max_memory_bytes")
        r, M = self.rank, self.n_models
        mean_u = prior_mean(prior_mean_u, "prior_mean_u", (K, d1, r))
        mean_v = prior_mean(prior_mean_v, "prior_mean_v", (K, d2, r))
        check_memory(d1, d2, r, K, M, self.n_trials, self.max_memory_bytes)
        # lambda = sigma^2 / sigma_u^2 per arm: eq. (MAP obj) multiplied by sigma^2.
        self._lam_u = self.noise_std**2 / self.prior_std_u**2
        self._lam_v = self.noise_std**2 / self.prior_std_v**2
        B, p = self._n_batch, d1 * d2
        # Algorithm 6, initialisation: rows of U^(m)_a ~ N(mu_u, sigma_u^2 I), same for V.
        self._U = mean_u[None, :, None] + self.prior_std_u * self.rng.standard_normal(
            (B, K, M, d1, r)
        )
        self._V = mean_v[None, :, None] + self.prior_std_v * self.rng.standard_normal(
            (B, K, M, d2, r)
        )
        if self.prior_anchor == "sample":
            self._mu_u, self._mu_v = self._U.copy(), self._V.copy()
        else:
            self._mu_u = np.ascontiguousarray(np.broadcast_to(mean_u[None, :, None], self._U.shape))
            self._mu_v = np.ascontiguousarray(np.broadcast_to(mean_v[None, :, None], self._V.shape))
        self._S = np.zeros((B, K, p, p))
        self._Y = np.zeros((B, K, M, d1, d2))
        self._counts = np.zeros((B, K), dtype=np.int64)
        self._rows = np.arange(B)
        # Scratch of the block updates, kept between rounds (agents.ensemble_stats).
        self._workspace = BlockWorkspace(p, block_trials(d1, d2, self.n_trials))

    @property
    def block_trials(self) -> int:
        """Trials updated together in one vectorised block (cache-sized, see
        :mod:`agents.ensemble_stats`); a pure performance setting."""
        return self._workspace.block_trials

    @block_trials.setter
    def block_trials(self, value: int) -> None:
        self._workspace.block_trials = value

    @property
    def _n_batch(self) -> int:
        return 1 if self.n_trials is None else self.n_trials

    # -- acting ---------------------------------------------------------------------------
    def _predictions(self, x: np.ndarray) -> np.ndarray:
        """``<U_a^(m) V_a^(m)T, X_b>`` for batched contexts, shape ``(B, M, K)``."""
        XV = np.matmul(x[:, None, None], self._V)  # (B, K, M, d1, r)
        return np.einsum("bkmjl,bkmjl->bmk", self._U, XV)

    def _probs(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # checked next
            preds = self._predictions(x)
        self._check_predictions(preds, x)  # argmax of NaN would silently pick an arm
        greedy = preds.argmax(axis=-1)  # (B, M); ties go to the lower arm
        counts = (greedy[..., None] == np.arange(self.n_actions)).sum(axis=1)
        return counts / self.n_models

    def model_predictions(self, obs) -> np.ndarray:
        """Every model's predicted reward ``<U_a^(m) V_a^(m)T, X>`` for every arm.

        Parameters
        ----------
        obs : array_like of shape (d1, d2) or (B, d1, d2)

        Returns
        -------
        ndarray of shape (n_models, K) or (B, n_models, K)
        """
        return self._out(self._predictions(self._batch(obs)))

    def ensemble_mean_predictions(self, obs) -> np.ndarray:
        """``eta_{a,t}`` of Algorithm 6: the models' mean predicted reward per arm.

        Parameters
        ----------
        obs : array_like of shape (d1, d2) or (B, d1, d2)

        Returns
        -------
        ndarray of shape (K,) or (B, K)
            ``argmax`` gives ``a_hat(X_t)``; the fraction of models whose prediction for
            another arm exceeds that of ``a_hat`` is ``e_hat_t`` (docs/method.md §5).
        """
        return self._out(self._predictions(self._batch(obs)).mean(axis=1))

    def greedy_actions(self, obs) -> np.ndarray:
        """Each model's greedy arm at ``obs``: ``(n_models,)`` or ``(B, n_models)``."""
        return self._out(self._predictions(self._batch(obs)).argmax(axis=-1))

    # -- learning -------------------------------------------------------------------------
    def _draw_perturbations(self, n: int) -> np.ndarray:
        """``w^(m)`` for every trial and model, shape ``(n, n_models)``."""
        return self.perturbation_std * self.rng.standard_normal((n, self.n_models))

    def _learn(self, x, actions, rewards, props) -> None:
        """Absorb a validated round: perturb, update the statistics, refit the pulled arm.

        All or nothing: if the round cannot be absorbed (see :meth:`_absorb`), the
        generator is set back to its state before the perturbations were drawn and nothing
        else has changed.
        """
        before = self.rng.bit_generator.state
        try:
            self._absorb(x, actions, rewards, self._draw_perturbations(x.shape[0]))
        except BaseException:
            self.rng.bit_generator.state = before
            raise

    def _absorb(self, x, actions, rewards, w) -> None:
        """The update of Algorithm 6 given the perturbations ``w`` (shape ``(B, M)``).

        Trials are processed in blocks of :attr:`block_trials`, vectorised within a block:
        the round is memory-bound (it streams ``(d1 d2)^2`` floats per trial several times),
        and a block's working set stays in cache where the whole batch's would not.

        Two passes: the first computes every block's new statistics and refitted factors
        without storing them and checks them (:meth:`_propose_block`); only when every
        block passed does the second store them (:meth:`_commit_block`, which recomputes
        the statistics' rank-one update, bit for bit the same, rather than keeping a copy
        of every block's statistics).

        Raises
        ------
        FloatingPointError
            If the round would make the statistics or factors non-finite or an ALS system
            singular (contexts or rewards far outside the scale of the prior); the state is
            then unchanged.
        """
        y_tilde = rewards[:, None] + w
        step = self.block_trials
        blocks = []
        for lo in range(0, x.shape[0], step):
            sl = slice(lo, lo + step)
            blocks.append((sl, *self._propose_block(sl, x[sl], actions[sl], y_tilde[sl])))
        # ---- every block passed its checks: nothing below raises ----------------------
        for sl, U, V in blocks:
            self._commit_block(sl, x[sl], actions[sl], y_tilde[sl], U, V)

    def _propose_block(self, sl, x, actions, y_tilde):
        """A block's refitted factors ``(U, V)`` of the pulled arms, computed from its new
        statistics without storing anything; raises ``FloatingPointError`` if the
        statistics would overflow or the factors are not finite."""
        n = x.shape[0]
        rows = self._rows[sl]
        xf = x.reshape(n, -1)
        one_arm = bool(np.all(actions == actions[0]))
        # The statistics' rank-one updates must stay finite (S's diagonal bounds S).
        S_diag = np.diagonal(self._S, axis1=-2, axis2=-1)[rows, actions]  # (n, p), a copy
        Y_old = self._Y[rows, actions]
        check_overflow(S_diag, Y_old, xf, x, y_tilde, sl, self.n_trials)
        # ---- the statistics' updates are finite (each term below 1e250) ------------------
        if one_arm:  # S + x x^T into the scratch, the statistics untouched
            S = self._workspace.plus_outer(self._S[sl, actions[0]], xf, self._workspace.scratch(n))
        else:  # a gathered copy, updated in place
            S = self._S[rows, actions]
            self._workspace.plus_outer(S, xf, S)
        Y = Y_old + y_tilde[:, :, None, None] * x[:, None]
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite factors: see below
            U, V = self._rescue(self._U[rows, actions], self._V[rows, actions])
            try:
                U, V = als_sweep(
                    S,
                    Y,
                    U,
                    V,
                    self._mu_u[rows, actions],
                    self._mu_v[rows, actions],
                    self._lam_u[actions],
                    self._lam_v[actions],
                    self.als_sweeps,
                )
            except np.linalg.LinAlgError:
                raise FloatingPointError(
                    failure_message(self.n_trials, sl, x, y_tilde, None, "singular")
                ) from None
        finite = np.isfinite(U.reshape(n, -1)).all(axis=1) & np.isfinite(V.reshape(n, -1)).all(
            axis=1
        )
        if not finite.all():
            b = int(np.argmin(finite))
            raise FloatingPointError(failure_message(self.n_trials, sl, x, y_tilde, b, "factors"))
        return U, V

    def _commit_block(self, sl, x, actions, y_tilde, U, V) -> None:
        """Store a block's statistics and the factors :meth:`_propose_block` computed."""
        n = x.shape[0]
        rows = self._rows[sl]
        xf = x.reshape(n, -1)
        if np.all(actions == actions[0]):
            # One arm for the whole block (always so unbatched): update the statistics in
            # place through views instead of gathering and scattering them.
            S = self._S[sl, actions[0]]
            self._workspace.plus_outer(S, xf, S)
            Y = self._Y[sl, actions[0]]
            Y += y_tilde[:, :, None, None] * x[:, None]
        else:
            S = self._S[rows, actions]
            self._workspace.plus_outer(S, xf, S)
            self._S[rows, actions] = S
            self._Y[rows, actions] = self._Y[rows, actions] + y_tilde[:, :, None, None] * x[:, None]
        self._counts[rows, actions] += 1
        self._U[rows, actions] = U
        self._V[rows, actions] = V

    def _rescue(self, U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Restore the prior scale of warm starts that ALS has shrunk to (almost) zero.

        ``U = V = 0`` is a stationary point of eq. (MAP obj) and ALS leaves its neighbourhood
        only geometrically, so factors that shrank while the MAP was 0 (few, small rewards)
        would need many rounds to grow once it is not.  A pair whose product scale
        ``||U||_F ||V||_F`` fell below ``_RESCUE * sigma_u sigma_v sqrt(d1 d2) r`` is rescaled
        to the prior's scale, keeping its directions.  This moves the ALS starting point
        only; the objective is unchanged, and if its minimiser is 0 the sweep shrinks again.
        """
        nu = np.linalg.norm(U, axis=(-2, -1))
        nv = np.linalg.norm(V, axis=(-2, -1))
        floor = (
            _RESCUE * self.prior_std_u * self.prior_std_v * math.sqrt(self.d1 * self.d2) * self.rank
        )
        low = (nu * nv < floor) & (nu > 0) & (nv > 0)
        if not low.any():
            return U, V
        su = np.where(
            low, self.prior_std_u * math.sqrt(self.d1 * self.rank) / np.where(low, nu, 1.0), 1.0
        )
        sv = np.where(
            low, self.prior_std_v * math.sqrt(self.d2 * self.rank) / np.where(low, nv, 1.0), 1.0
        )
        return U * su[..., None, None], V * sv[..., None, None]

    # -- readouts -------------------------------------------------------------------------
    @property
    def estimates(self) -> np.ndarray:
        """Ensemble mean of ``U_a^(m) V_a^(m)T``: ``(K, d1, d2)`` or ``(B, K, d1, d2)``."""
        return self._out(np.matmul(self._U, self._V.swapaxes(-1, -2)).mean(axis=2))

    @property
    def factors(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of ``U`` ``(K, M, d1, r)`` and ``V`` ``(K, M, d2, r)`` (leading B if batched)."""
        return self._out(self._U.copy()), self._out(self._V.copy())

    @property
    def counts(self) -> np.ndarray:
        """Pulls per arm, ``(K,)`` or ``(B, K)`` (a copy)."""
        return self._out(self._counts.copy())

    # -- save and resume ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Configuration, generator state and every array (copies), for bit-identical resume.

        Flat (:mod:`agents.state`): it saves with ``np.savez`` and loads with
        ``np.load(allow_pickle=False)``; ``noise_std`` is a ``(K,)`` array.
        """
        state = super().state_dict()
        state.update(ensemble_config(self))
        for name in STATE_ARRAYS:
            state[name] = getattr(self, "_" + name).copy()
        return state

    def validate_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` (also as ``np.load`` returns it), changing
        nothing.

        Raises
        ------
        ValueError
            On a missing key, a configuration that differs from this policy's, an array of
            the wrong shape or dtype or with non-finite entries, negative counts, counts
            that do not add up to ``t`` in every trial, or an invalid generator state
            (:func:`agents.ensemble_stats.check_config`,
            :func:`agents.ensemble_stats.check_arrays`).
        """
        check_config(state, ensemble_config(self))
        checked = super().validate_state_dict(state)
        current = {name: getattr(self, "_" + name) for name in STATE_ARRAYS}
        checked["arrays"] = check_arrays(state, current, checked["t"])
        return checked

    def _apply_state(self, checked: dict[str, Any]) -> None:
        super()._apply_state(checked)
        for name, arr in checked["arrays"].items():
            setattr(self, "_" + name, arr)

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"EnsembleSampling(d1={self.d1}, d2={self.d2}, rank={self.rank}, "
            f"n_actions={self.n_actions}, n_models={self.n_models}{batch}, t={self.t})"
        )
