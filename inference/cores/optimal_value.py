"""Online inference on the optimal policy value ``V* = E[max_a <M_a, X>]`` (Section 4).

:class:`OptimalValueInference` implements the doubly robust estimator ``V_hat_n`` and the
variance estimator ``S_hat_V^2`` of Section 4 (Algorithm 3b in docs/method.md §5), and the
variant with estimated exploration probabilities of Appendix A (eq. (A.4)).  Only the
predictions ``<M_hat_{a,t-1}, X_t>`` of every arm enter, so a round costs ``O(K)`` per
trial; no ``d1 x d2`` work and no SVD.

Timing of the running noise estimate
------------------------------------
``S_hat_V^2`` uses ``sigma_hat^2_{a_hat_t, t}`` at every round.  The paper defines
``sigma_hat^2_{i,t} = (1/t) sum_{s <= t} 1{a_s = i}/pi_s(i) (y_s - <M_hat_{i,s-1}, X_s>)^2``
(Section 4, and the ratio form of eq. (A.4) likewise sums ``s = 1..t``): the sum *includes*
round ``t``.  This module follows that definition literally: round ``t``'s residual is added
first, then ``sigma_hat^2_{a_hat_t, t}`` is read.  Either choice is consistent (the term
differs by ``O(1/t)``); including round ``t`` also avoids a ``0/0`` in the
estimated-propensity mode when ``a_hat_t``'s first pull is round ``t`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.state import check_config, check_count, copy_arrays
from inference.cores.checks import (
    check_batch_vector,
    check_confidence_level,
    check_matrix_stack,
    check_n_trials,
)
from inference.results import (
    IntervalEstimate,
    trials_phrase,
    warn_insufficient,
)
from inference.sequences import DEFAULT_TUNING_N, check_kind, kind_interval, sequence_phrase
from lrbandit_gym.input_checks import (
    MAX_MAGNITUDE,
    MIN_PROPENSITY,
    check_actions,
    check_choice,
    check_magnitude,
    check_positive_int,
    check_propensities,
)
from lrbandit_gym.rounds import Round

__all__ = ["OptimalValueInference"]

_MODES = ("known", "estimated")
_SUMS = ("sum_q", "sum_q2", "sum_corr", "sum_sv", "sigma_num", "pulls")


class OptimalValueInference:
    """Online confidence interval and one-sided test for the optimal value ``V*``.

    Per round (docs/method.md §5), with ``q_t = <M_hat_{a_hat_t, t-1}, X_t>``,
    ``a_hat_t = argmax_a <M_hat_{a,t-1}, X_t>`` and ``1 - e_t = pi_t(a_hat_t)``:

    * ``V_hat_n = (1/n) sum_t [q_t + 1{a_t = a_hat_t}/(1 - e_t) (y_t - q_t)]``;
    * ``S_hat_V^2 = (1/n) sum_t sigma_hat^2_{a_hat_t, t}/(1 - e_t)
      + (1/n) sum_t q_t^2 - ((1/n) sum_t q_t)^2``;
    * interval ``V_hat_n +- z S_hat_V / sqrt(n)``.

    Parameters
    ----------
    n_actions : int
        Number of arms ``K >= 2``.
    n_trials : int or None, default None
        None: one bandit, scalar results.  ``B``: ``B`` bandits in lock step; every
        per-round argument gains a leading axis of length ``B``.
    propensities : {"known", "estimated"}, default "known"
        "known": ``propensities`` are the exact ``pi_t`` and
        ``sigma_hat^2_{i,t} = (1/t) sum_{s<=t} 1{a_s=i}/pi_s(i) res_s^2`` (Section 4).
        "estimated" (Appendix A): ``propensities`` are an estimated pmf (e.g. the fraction
        of an ensemble's models whose greedy arm is each arm), only used at ``a_hat_t``
        (``1 - e_hat_t``), and ``sigma_hat^2_{i,t}`` is the plain mean of the squared
        residuals of arm ``i``'s pulls up to ``t`` (eq. (A.4); 0 before its first pull).

    Notes
    -----
    Ties in ``argmax`` go to the lowest arm index, as the paper's
    ``a_hat = 1{<M_hat_1 - M_hat_0, X> > 0}`` does for two arms.  Exploration may decay
    (``beta > 0`` with ``alpha - beta > 1/2``, Theorem 4.1); ``pi_t(a_hat_t) > 0`` is
    required every round.

    Examples
    --------
    >>> import numpy as np
    >>> vi = OptimalValueInference(2)
    >>> rng = np.random.default_rng(0)
    >>> for t in range(50):
    ...     pred = rng.normal(size=2)
    ...     vi.update(pred, action=int(np.argmax(pred)), reward=pred.max() + 0.1,
    ...               propensities=np.where(pred == pred.max(), 0.95, 0.05))
    >>> low, high = vi.interval()
    """

    def __init__(
        self, n_actions: int, *, n_trials: int | None = None, propensities: str = "known"
    ) -> None:
        self.n_actions = check_positive_int(n_actions, "n_actions", minimum=2)
        self.n_trials = check_n_trials(n_trials)
        self.propensities = check_choice(propensities, "propensities", _MODES)
        #: Whether results carry a leading trial axis.
        self.batched = self.n_trials is not None
        self._B = 1 if self.n_trials is None else self.n_trials  # trials in the sums
        self._reset()

    def _reset(self) -> None:
        B, K = self._B, self.n_actions
        #: Rounds absorbed so far (``n``).
        self.n_obs = 0
        self._sum_q = np.zeros(B)  # sum_t q_t
        self._sum_q2 = np.zeros(B)  # sum_t q_t^2
        self._sum_corr = np.zeros(B)  # sum_t 1{a_t = a_hat_t}/(1 - e_t) (y_t - q_t)
        self._sum_sv = np.zeros(B)  # sum_t sigma_hat^2_{a_hat_t, t}/(1 - e_t)
        self._sigma_num = np.zeros((B, K))  # numerator of sigma_hat^2_{i,t}
        self._pulls = np.zeros((B, K), dtype=np.int64)

    def _out(self, arr: np.ndarray) -> Any:
        if self.batched:
            return arr
        return arr[0].item() if arr.ndim == 1 else arr[0]

    # ------------------------------------------------------------------ one round
    def update(
        self,
        predictions: Any,
        action: Any,
        reward: Any = None,
        propensities: Any = None,
    ) -> None:
        """Absorb round ``t``.

        Parameters
        ----------
        predictions : array_like of shape (K,) or (B, K)
            ``<M_hat_{a,t-1}, X_t>`` for every arm, from the estimates *before* round
            ``t``'s update.
        action : int or array_like of int of shape (B,), or Round
            Pulled arm ``a_t``.  A :class:`~lrbandit_gym.rounds.Round` (checked at the
            edge, with propensities) stands for the whole round; then ``reward`` and
            ``propensities`` are not given and ``predictions`` are the batched (B, K) array
            that :meth:`check_predictions` passed.
        reward : float or array_like of shape (B,)
            Observed ``y_t``.
        propensities : array_like of shape (K,) or (B, K)
            ``pi_t(a)`` (known mode; positive at ``a_t``) or its estimate (estimated mode).
            Must be positive at ``a_hat_t = argmax(predictions)``.

        Raises
        ------
        ValueError
            On any malformed input; the object is then unchanged.
        """
        if isinstance(action, Round):
            if reward is not None or propensities is not None:
                raise TypeError("update(predictions, round) takes no reward or propensities")
            if action.propensities is None:
                raise ValueError("the round must carry propensities (pi_t(a) for every arm)")
            self.absorb(predictions, action.actions, action.rewards, action.propensities)
            return
        K = self.n_actions
        pred = check_matrix_stack(predictions, (K,), self.n_trials, "predictions")
        a = check_actions(action, K, self.n_trials)
        y = check_batch_vector(reward, self.n_trials, "reward")
        known = self.propensities == "known"
        p = check_propensities(propensities, a, K, self.n_trials, require_chosen_positive=known)
        self.check_predictions(pred, p)
        self.absorb(pred, a, y, p)

    def check_predictions(self, predictions: np.ndarray, propensities: np.ndarray) -> None:
        """Raise unless ``pi_t(a_hat_t) > 0``, before any state changes.

        The value estimator weights by ``1/(1 - e_t) = 1/pi_t(a_hat_t)``, so the estimated
        optimal arm ``a_hat_t = argmax(predictions)`` needs a positive propensity.  The
        arrays are assumed otherwise validated.

        Parameters
        ----------
        predictions : ndarray of shape (B, K)
            ``<M_hat_{a,t-1}, X_t>`` for every arm.
        propensities : ndarray of shape (B, K)

        Raises
        ------
        ValueError
            If ``propensities[a_hat_t] <= 0`` in some trial (named when batched), or a
            prediction is not finite or above ``MAX_MAGNITUDE`` in magnitude (its square
            enters the sums).
        """
        if len(predictions) == 1:  # one trial, the common case: Python floats
            row = predictions[0].tolist()
            top, total = max(row), sum(row)
            if (
                top <= MAX_MAGNITUDE
                and min(row) >= -MAX_MAGNITUDE
                and total == total  # no NaN (which max and min may pass over)
                and propensities[0, row.index(top)] >= MIN_PROPENSITY  # a_hat: argmax
            ):
                return
        check_magnitude(predictions, "predictions", batched=self.batched)
        a_hat = np.argmax(predictions, axis=1)
        p_hat = propensities[np.arange(propensities.shape[0]), a_hat]  # 1 - e_t
        small = ~(p_hat >= MIN_PROPENSITY)
        if small.any():
            i = int(np.argmax(small))
            where = f" (trial {i})" if self.batched else ""
            raise ValueError(
                f"propensities[a_hat] must be >= MIN_PROPENSITY = {MIN_PROPENSITY:g} for the "
                f"estimated optimal arm a_hat = argmax(predictions) = {int(a_hat[i])}, got "
                f"propensities[{int(a_hat[i])}] = {p_hat[i]!r}{where}: the value estimator "
                f"weights by 1/(1 - e_t) = 1/pi_t(a_hat_t), so the policy must play the arm "
                f"the estimate favours with a positive probability (share the agent's "
                f"estimator, estimator=agent.estimator, or use a policy that explores every "
                f"arm; a deterministic policy cannot be evaluated)"
            )

    def absorb(
        self,
        predictions: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        propensities: np.ndarray,
    ) -> None:
        """One checked round, in the batched layout (:meth:`check_predictions` passed on
        the same arrays): the sums of ``V_hat_n`` (eq. (16)) and ``S_hat_V^2`` (eq. (18)).
        :meth:`update` checks its arguments and calls it; an inference wrapper, which checked
        the round, calls it directly.

        Parameters
        ----------
        predictions : ndarray of shape (B, K)
        action : ndarray of int, shape (B,)
        reward : ndarray of shape (B,)
        propensities : ndarray of shape (B, K)
        """
        if self._B == 1:  # Python scalars: the same operations in the same order as below
            # (so the same numbers), without the per-call cost of small arrays
            pred, p = predictions[0].tolist(), propensities[0].tolist()
            a, y = int(action[0]), float(reward[0])
            q = max(pred)  # finite (check_predictions)
            a_hat = pred.index(q)  # argmax: the first of ties
            p_hat = p[a_hat]
            res = y - pred[a]
            num, pulls = self._sigma_num[0], self._pulls[0]
            if self.propensities == "known":
                num[a] += res * res / p[a]
                pulls[a] += 1
                sigma2_t = float(num[a_hat]) / (self.n_obs + 1)
            else:
                num[a] += res * res
                pulls[a] += 1
                k = int(pulls[a_hat])
                sigma2_t = float(num[a_hat]) / max(k, 1) if k > 0 else 0.0
            self._sum_q[0] += q
            self._sum_q2[0] += q * q
            self._sum_corr[0] += res / p_hat if a == a_hat else 0.0
            self._sum_sv[0] += sigma2_t / p_hat
            self.n_obs += 1
            return
        pred, a, y, p = predictions, action, reward, propensities
        trials = np.arange(self._B)
        a_hat = np.argmax(pred, axis=1)  # eq. (17)
        p_hat = p[trials, a_hat]  # 1 - e_t
        q = pred[trials, a_hat]
        res = y - pred[trials, a]
        if self.propensities == "known":  # sigma_hat^2_{i,t}, eq. (19)
            self._sigma_num[trials, a] += res * res / p[trials, a]
            self._pulls[trials, a] += 1
            sigma2_t = self._sigma_num[trials, a_hat] / (self.n_obs + 1)
        else:  # eq. (A.4): the mean squared residual of the arm's pulls
            self._sigma_num[trials, a] += res * res
            self._pulls[trials, a] += 1
            pulls = self._pulls[trials, a_hat]
            sigma2_t = np.where(
                pulls > 0, self._sigma_num[trials, a_hat] / np.maximum(pulls, 1), 0.0
            )
        self._sum_q += q
        self._sum_q2 += q * q
        self._sum_corr += np.where(a == a_hat, res / p_hat, 0.0)  # V_hat_n, eq. (16)
        self._sum_sv += sigma2_t / p_hat  # S_hat_V^2, eq. (18)
        self.n_obs += 1

    # ------------------------------------------------------------------ read-out
    @property
    def n_pulls(self) -> Any:
        """Pulls of each arm, shape ``(K,)`` or ``(B, K)``."""
        return self._pulls.copy() if self.batched else self._pulls[0].copy()

    @property
    def estimate(self) -> Any:
        """``V_hat_n`` (NaN before the first round)."""
        return self._out(
            (self._sum_q + self._sum_corr) / self.n_obs if self.n_obs else np.full(self._B, np.nan)
        )

    def _S2_V(self) -> np.ndarray:
        n = self.n_obs
        if self._B == 1:  # the same operations on Python floats, without small-array costs
            mean = float(self._sum_q[0]) / n
            spread = float(self._sum_q2[0]) / n - mean * mean
            return np.array([float(self._sum_sv[0]) / n + (0.0 if spread < 0 else spread)])
        mean_q = self._sum_q / n
        context_var = np.maximum(self._sum_q2 / n - mean_q * mean_q, 0.0)
        return self._sum_sv / n + context_var

    @property
    def S2_V(self) -> Any:
        """``S_hat_V^2`` (NaN before the first round)."""
        return self._out(self._S2_V() if self.n_obs else np.full(self._B, np.nan))

    def running_values(self) -> tuple[Any, Any]:
        """``(V_hat_n, S_hat_V / sqrt(n))`` after at least one round, as :attr:`estimate`
        and ``np.sqrt(S2_V / n)`` give them: what an inference wrapper reports in ``info``
        each round, read in one pass."""
        n = self.n_obs
        if self._B == 1:  # Python floats, as _out() returns them; _S2_V()'s operations
            mean = float(self._sum_q[0]) / n
            spread = float(self._sum_q2[0]) / n - mean * mean
            S2_V = float(self._sum_sv[0]) / n + (0.0 if spread < 0 else spread)
            return float(self._sum_q[0] + self._sum_corr[0]) / n, np.sqrt(S2_V / n)
        return (self._sum_q + self._sum_corr) / n, np.sqrt(self._S2_V() / n)

    @property
    def sigma2(self) -> Any:
        """Current ``sigma_hat^2_{i,n}`` per arm, shape ``(K,)`` or ``(B, K)``.

        Known mode: ``(1/n) sum_t 1{a_t=i}/pi_t(i) res_t^2``; estimated mode: the mean
        squared residual of arm ``i``'s pulls (NaN for an arm never pulled).
        """
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.propensities == "known":
                out = self._sigma_num / self.n_obs if self.n_obs else self._sigma_num * np.nan
            else:
                out = np.where(
                    self._pulls > 0, self._sigma_num / np.maximum(self._pulls, 1), np.nan
                )
        return out if self.batched else out[0]

    def _value_and_se(self, what: str) -> tuple[np.ndarray, np.ndarray]:
        """``V_hat_n`` and its standard error per trial; NaN, with a warning, where they are
        not estimable yet."""
        n = self.n_obs
        if n < 2:
            warn_insufficient(
                f"{n} round(s) observed: at least {2 - n} more round(s) are needed to "
                f"estimate {what} and its variance; returning NaN",
                stacklevel=4,
            )
            nan = np.full(self._B, np.nan)
            return nan, nan
        S2 = self._S2_V()
        est = (self._sum_q + self._sum_corr) / n
        flat = ~(S2 > 0)
        if flat.any():
            warn_insufficient(
                f"the variance of {what} is not estimable yet{trials_phrase(flat, self.batched)}:"
                f" S_hat_V^2 = 0 (constant predictions and no residual so far); at least 1 "
                f"more round with a non-zero residual or a different prediction is needed; "
                f"returning NaN",
                stacklevel=4,
            )
        return np.where(flat, np.nan, est), np.where(flat, np.nan, np.sqrt(S2 / n))

    def interval(
        self,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Two-sided confidence interval ``V_hat_n +- z S_hat_V / sqrt(n)`` for ``V*``.

        The p-value is two-sided for ``H0: V* = 0``.

        Parameters
        ----------
        confidence_level : float, default 0.95
        kind : {"fixed", "sequence"}, default "fixed"
            "fixed": the Wald interval above, valid at a number of rounds fixed in advance.
            "sequence": the asymptotic confidence sequence of :mod:`inference.sequences`,
            valid at every round at once; its p-value is anytime-valid.
        tuning_n : int, default 1000
            Round at which the sequence is tightest (``kind="sequence"`` only).

        Returns
        -------
        IntervalEstimate
            NaN entries, with an :class:`InsufficientDataWarning`, before two rounds or
            where ``S_hat_V^2 = 0``.
        """
        level = check_confidence_level(confidence_level)
        kind, tuning_n = check_kind(kind, tuning_n)
        method = (
            f"optimal value V*: doubly robust online estimate ({self.propensities} "
            f"propensities), two-sided Wald interval"
        ) + sequence_phrase(kind, tuning_n)
        est, se = self._value_and_se("V*")
        return kind_interval(
            kind,
            tuning_n,
            estimate=est,
            standard_error=se,
            n_obs=self.n_obs,
            confidence_level=level,
            method=method,
            batched=self.batched,
        )

    def test_greater(
        self,
        v0: Any,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """One-sided test of ``H0: V* <= v0`` against ``H1: V* > v0`` (eq. (5)).

        Parameters
        ----------
        v0 : float or array_like of shape (B,)
            Threshold value ``V_0``.
        confidence_level : float, default 0.95
            Level of the one-sided lower confidence bound reported as ``low``.
        kind : {"fixed", "sequence"}, default "fixed"
            "sequence": the one-sided confidence sequence of :mod:`inference.sequences`;
            ``p_value`` is then anytime-valid (``P(p_n ≤ α for some n) ≤ α`` under ``H0``),
            so the test may be run at every round and stopped at the first rejection.
        tuning_n : int, default 1000
            Round at which the sequence is tightest (``kind="sequence"`` only).

        Returns
        -------
        IntervalEstimate
            ``low = V_hat_n - z_{level} S_hat_V / sqrt(n)``, ``high = inf`` and
            ``p_value = 1 - Phi((V_hat_n - v0) / (S_hat_V / sqrt(n)))``; reject ``H0`` at
            level ``1 - confidence_level`` iff ``low > v0`` (iff ``p_value < 1 -
            confidence_level``).
        """
        level = check_confidence_level(confidence_level)
        if self.batched and np.ndim(v0) == 0 and not isinstance(v0, bool | np.bool_ | str | bytes):
            try:  # one threshold for every trial
                v0 = np.full(self._B, float(v0))
            except (TypeError, ValueError):
                pass  # reported by the check below
        v = check_batch_vector(v0, self.n_trials, "v0")
        kind, tuning_n = check_kind(kind, tuning_n)
        method = (
            f"optimal value V*: one-sided test of H0: V* <= v0 ({self.propensities} "
            f"propensities); p_value is one-sided, high = inf"
        ) + sequence_phrase(kind, tuning_n)
        est, se = self._value_and_se("V*")
        return kind_interval(
            kind,
            tuning_n,
            estimate=est,
            standard_error=se,
            n_obs=self.n_obs,
            confidence_level=level,
            method=method,
            batched=self.batched,
            null_value=v,
            alternative="greater",
        )

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Configuration and running sums (copies; batched layout, ``n_trials`` 0 if None)."""
        return {
            "kind": "optimal_value",
            "n_actions": self.n_actions,
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "propensities": self.propensities,
            "n": int(self.n_obs),
            **{key: getattr(self, "_" + key).copy() for key in _SUMS},
        }

    def validate_state_dict(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Check a :meth:`state_dict` against this object, changing nothing.

        The configuration must be this object's, every sum a finite array of its shape and
        dtype, ``n`` and the pull counts non-negative integers (no more pulls than ``n``)
        and the sums of squares non-negative.

        Returns
        -------
        dict
            ``n`` and validated copies of the sums, for :meth:`load_state_dict`.

        Raises
        ------
        ValueError
            Naming the first key that fails a check.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        mine = self.state_dict()
        check_config(state, mine, ("kind", "n_actions", "n_trials", "propensities"))
        new = copy_arrays(state, mine, _SUMS)
        n = check_count(state["n"], "n")
        for key in ("sum_q2", "sum_sv", "sigma_num", "pulls"):
            if (new[key] < 0).any():
                raise ValueError(f"state[{key!r}] must be >= 0, got minimum {new[key].min()!r}")
        if (new["pulls"].sum(axis=-1) > n).any():
            raise ValueError(
                f"state['pulls'] counts more pulls than state['n'] = {n} rounds, got "
                f"{new['pulls'].tolist()}"
            )
        return {"n": n, **new}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`: everything is validated first
        (:meth:`validate_state_dict`), so a failure changes nothing."""
        new = self.validate_state_dict(state)
        self.n_obs = new.pop("n")
        for key, arr in new.items():
            setattr(self, "_" + key, arr)

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"OptimalValueInference(n_actions={self.n_actions}{batch}, "
            f"propensities={self.propensities!r}; n_obs={self.n_obs})"
        )
