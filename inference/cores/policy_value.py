"""Online inference on the values of target policies from adaptively collected data.

While a logging policy plays with known propensities ``π_t``, the value
``V(π) = E[Σ_a π(a|X) <M_a, X>]`` of any *target* policy ``π`` (a fixed rule, another
agent, the estimator's greedy rule) is estimated by the augmented inverse-propensity
(doubly robust) average of docs/method.md §9::

    Γ_t(π) = Σ_a π(a|X_t) m̂_{a,t} + π(a_t|X_t)/π_t(a_t) · (y_t − m̂_{a_t,t})        (AIPW)
    V̂_n(π) = (1/n) Σ_t Γ_t(π)
    ŝ²_n(π) = (1/n) Σ_t Γ_t(π)² − V̂_n(π)²
    interval  V̂_n(π) ± z ŝ_n(π)/√n

with ``m̂_{a,t} = <M̂_{a,t−1}, X_t>`` the predictions of an estimate that did not see round
``t``.  Because ``π_t`` is known and ``m̂_t`` is predictable, ``E[Γ_t(π) | past] = V(π_t)``
exactly, where ``π_t`` is the target's rule at round ``t``: ``V̂_n − (1/n) Σ_t V(π_t)`` is an
average of martingale differences, whatever policy logged the data and however it adapted.
For a fixed target the estimand is ``V(π)``; for a target that changes over time (the greedy
rule of a learning estimator, another learning agent) it is the mean value of its rules over
the rounds absorbed.  ``ŝ²`` is consistent for the mean conditional variance when the target is
fixed and conservative (it adds the spread of ``V(π_t)``) when it changes.  The martingale
central limit theorem needs the weights ``π(a_t|X_t)/π_t(a_t)`` to stay bounded: the logging
policy must give every arm the target may play a propensity bounded below (ε-greedy does,
softmax at a moderate temperature nearly does).

Differences ``V(π) − V(π')`` use ``Γ_t(π) − Γ_t(π')`` in the same formulas, so their
standard error accounts for the correlation of the two estimates on the same rounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.state import check_config, check_count, copy_arrays
from inference.cores.checks import (
    check_batch_vector,
    check_confidence_level,
    check_matrix_stack,
    check_n_trials,
)
from inference.cores.weight_share import WeightShare, warn_heavy_rounds
from inference.results import IntervalEstimate, trials_phrase, warn_insufficient
from inference.sequences import DEFAULT_TUNING_N, check_kind, kind_interval, sequence_phrase
from lrbandit_gym.input_checks import (
    PROPENSITY_TOL,
    check_actions,
    check_magnitude,
    check_positive_int,
    check_propensities,
)
from lrbandit_gym.rounds import Round

__all__ = ["PolicyValueInference", "check_target_pmfs"]

_SUMS = ("sum_g", "sum_gg")


def check_target_pmfs(
    pmfs: Any,
    n_policies: int,
    n_actions: int,
    n_trials: int | None,
    *,
    layout: str = "api",
    names: Sequence[str] | None = None,
) -> np.ndarray:
    """Target policies' pmfs as float64 ``(B, P, K)`` after checking them.

    Each row must be finite, ``>= 0`` and sum to 1 within ``PROPENSITY_TOL``.  With
    ``layout="api"`` a single bandit (``n_trials`` None) gives ``(P, K)``; with
    ``layout="batched"`` the input already has the leading trial axis (of length 1 for a
    single bandit).

    Raises
    ------
    ValueError
        Naming the policy (and the trial when batched) whose pmf is malformed.
    """
    single = n_trials is None and layout == "api"
    b = 1 if n_trials is None else n_trials
    shape = (n_policies, n_actions) if single else (b, n_policies, n_actions)
    arr = np.asarray(pmfs, dtype=float)
    if arr.shape != shape:
        raise ValueError(f"target pmfs must have shape {shape}; got {arr.shape}")
    arr = arr[None] if single else arr
    bad = ~np.isfinite(arr).all(axis=-1) | (arr < 0).any(axis=-1)
    bad |= np.abs(arr.sum(axis=-1) - 1.0) > PROPENSITY_TOL
    if bad.any():
        b, j = (int(i[0]) for i in np.nonzero(bad))
        where = f" in trial {b}" if n_trials is not None else ""
        who = repr(names[j]) if names is not None else j
        raise ValueError(
            f"the pmf of target policy {who}{where} must be finite, >= 0 and sum to 1; got "
            f"{arr[b, j]!r}"
        )
    return arr


class PolicyValueInference:
    """Online confidence intervals for the values of target policies and their differences.

    Parameters
    ----------
    n_actions : int
        Number of arms ``K >= 2``.
    policies : sequence of str
        Names of the target policies, in the order of the pmfs given to :meth:`update`.
    n_trials : int or None, default None
        None: one bandit, scalar results.  ``B``: ``B`` bandits in lock step; every
        per-round argument gains a leading axis of length ``B``.

    Notes
    -----
    Memory and cost per round are ``O(P² + P K)`` for ``P`` policies, independent of the
    number of rounds.  The estimator is the AIPW average of the module docstring
    (docs/method.md §9); its per-round term is written out in :meth:`terms`.

    Examples
    --------
    >>> import numpy as np
    >>> pv = PolicyValueInference(2, ["arm 1", "half"])
    >>> rng = np.random.default_rng(0)
    >>> for t in range(200):
    ...     means = np.array([0.0, 1.0])
    ...     a = int(rng.integers(2))
    ...     pv.update(means, a, means[a] + rng.normal(), np.array([0.5, 0.5]),
    ...               np.array([[0.0, 1.0], [0.5, 0.5]]))
    >>> round(pv.interval("arm 1").estimate, 1)
    1.0
    """

    def __init__(
        self, n_actions: int, policies: Sequence[str], *, n_trials: int | None = None
    ) -> None:
        self.n_actions = check_positive_int(n_actions, "n_actions", minimum=2)
        names = list(policies) if not isinstance(policies, str) else None
        if not names or not all(isinstance(p, str) and p for p in names):
            raise ValueError(f"policies must be a non-empty sequence of names; got {policies!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"policy names must be distinct; got {names!r}")
        self.policies = tuple(names)
        self.n_trials = check_n_trials(n_trials)
        self._reset()

    def _reset(self) -> None:
        B, P = self._B, len(self.policies)
        self._n = 0
        self._sum_g = np.zeros((B, P))  # Σ_t Γ_t(π_j)
        self._sum_gg = np.zeros((B, P, P))  # Σ_t Γ_t(π_j) Γ_t(π_k)
        self._weights = WeightShare(B, P)  # Lindeberg's share of each target (weight_share)
        self._staged: tuple[np.ndarray, np.ndarray] | None = None  # (terms, their factors)

    @property
    def _B(self) -> int:
        return 1 if self.n_trials is None else self.n_trials

    @property
    def batched(self) -> bool:
        """Whether results carry a leading trial axis."""
        return self.n_trials is not None

    @property
    def n_obs(self) -> int:
        """Rounds absorbed so far (``n``)."""
        return self._n

    # ------------------------------------------------------------------ one round
    def update(
        self,
        predictions: Any,
        action: Any,
        reward: Any = None,
        propensities: Any = None,
        targets: Any = None,
    ) -> None:
        """Absorb round ``t``.

        Parameters
        ----------
        predictions : array_like of shape (K,) or (B, K)
            ``m̂_{a,t} = <M̂_{a,t−1}, X_t>`` for every arm, from an estimate that has not
            seen round ``t`` (any predictable outcome model; zeros give plain IPW).
        action : int or array_like of int of shape (B,), or Round
            Pulled arm ``a_t``.  A :class:`~lrbandit_gym.rounds.Round` (checked at the
            edge, with propensities) stands for the whole round; then ``reward`` and
            ``propensities`` are not given and ``predictions`` and ``targets`` are batched
            and checked (see :meth:`propose`).
        reward : float or array_like of shape (B,)
            Observed ``y_t``.
        propensities : array_like of shape (K,) or (B, K)
            The logging policy's ``π_t(a)``, positive at ``a_t``.
        targets : array_like of shape (P, K) or (B, P, K)
            Every target policy's pmf at ``X_t``, in the order of ``policies``.

        Raises
        ------
        ValueError
            On any malformed input; the object is then unchanged.
        """
        if isinstance(action, Round):
            if reward is not None or propensities is not None:
                raise TypeError(
                    "update(predictions, round, targets) takes no reward or propensities"
                )
            if action.propensities is None:
                raise ValueError("the round must carry propensities (pi_t(a) for every arm)")
            self.commit(self.propose(action, predictions, targets))
            return
        K = self.n_actions
        pred = check_matrix_stack(predictions, (K,), self.n_trials, "predictions")
        a = check_actions(action, K, self.n_trials)
        y = check_batch_vector(reward, self.n_trials, "reward")
        p = check_propensities(propensities, a, K, self.n_trials)
        pmfs = check_target_pmfs(targets, len(self.policies), K, self.n_trials, names=self.policies)
        self.commit(self._checked_terms(pred, np.atleast_1d(a), y, p, pmfs))

    @staticmethod
    def terms(
        predictions: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        propensities: np.ndarray,
        targets: np.ndarray,
    ) -> np.ndarray:
        """The AIPW terms ``Γ_t(π_j)`` of one round, shape ``(B, P)`` (batched inputs)."""
        trials = np.arange(predictions.shape[0])
        res = reward - predictions[trials, action]  # y_t − m̂_{a_t,t}
        weight = targets[trials, :, action] / propensities[trials, action][:, None]
        return np.einsum("bjk,bk->bj", targets, predictions) + weight * res[:, None]  # (AIPW)

    def propose(self, round_: Round, predictions: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """The first phase of a round: its AIPW terms ``(B, P)`` (:meth:`terms`), checked so
        that the running sums can hold them (their squares finite); nothing changes.
        :meth:`commit` adds them.

        Parameters
        ----------
        round_ : Round
            The round, checked, with propensities positive at the pulled arms (its contexts
            are not read).
        predictions : ndarray of shape (B, K)
        targets : ndarray of shape (B, P, K)
            Checked pmfs of the target policies.

        Raises
        ------
        ValueError
            If a prediction or a term is too large for the sums, naming the trial.
        """
        return self._checked_terms(
            predictions, round_.actions, round_.rewards, round_.propensities, targets
        )

    def _checked_terms(
        self,
        predictions: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        propensities: np.ndarray,
        targets: np.ndarray,
    ) -> np.ndarray:
        """:meth:`terms` of checked batched arrays, refused (naming the trial) where their
        squares would overflow the running sums."""
        check_magnitude(predictions, "predictions", batched=self.batched)
        g = self.terms(predictions, action, reward, propensities, targets)
        with np.errstate(over="ignore", invalid="ignore"):
            ok = np.isfinite(g * g).all(axis=1)
        if not ok.all():
            b = int(np.argmin(ok))
            where = f" in trial {b}" if self.batched else ""
            raise ValueError(
                f"the round's AIPW terms {g[b]!r}{where} are too large for the running sums "
                "(their squares overflow): the predictions or the reward are absurd"
            )
        # The round's predictable variance factors Σ_a π(a|X)²/π_t(a), kept with the terms
        # for commit (inf where a target plays an arm of zero propensity).
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(targets > 0, targets * targets / propensities[:, None, :], 0.0)
        self._staged = (g, ratio.sum(axis=2))
        return g

    def commit(self, g: np.ndarray) -> None:
        """Add the terms from :meth:`propose` (cannot fail).

        The round's variance factors for the Lindeberg check come with the terms of the
        last :meth:`propose`; terms from elsewhere leave the check without them, and it
        stays silent from then on (:meth:`WeightShare.forget`) rather than read a partial
        sum."""
        self._sum_g += g
        self._sum_gg += g[:, :, None] * g[:, None, :]
        if self._staged is not None and self._staged[0] is g:
            self._weights.add(self._staged[1])
        else:
            self._weights.forget()
        self._staged = None
        self._n += 1

    # ------------------------------------------------------------------ read-out
    def _index(self, policy: str) -> int:
        if not isinstance(policy, str) or policy not in self.policies:
            raise ValueError(f"policy must be one of {self.policies}; got {policy!r}")
        return self.policies.index(policy)

    def _contrast(self, weights: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
        """Estimate and standard error of ``Σ_j w_j V(π_j)``; NaN, with a warning, where
        they are not estimable yet."""
        n = self._n
        if n < 2:
            warn_insufficient(
                f"{n} round(s) observed: at least {2 - n} more round(s) are needed to "
                f"estimate {what} and its variance; returning NaN",
                stacklevel=4,
            )
            nan = np.full(self._B, np.nan)
            return nan, nan
        mean = self._sum_g @ weights / n
        second = np.einsum("bjk,j,k->b", self._sum_gg, weights, weights) / n
        var = second - mean * mean
        flat = ~(var > 1e-14 * np.maximum(second, 1e-300))
        if flat.any():
            warn_insufficient(
                f"the variance of {what} is not estimable yet{trials_phrase(flat, self.batched)}"
                f": every round's AIPW term was the same so far; returning NaN",
                stacklevel=4,
            )
        se = np.sqrt(np.where(flat, np.nan, var) / n)
        return np.where(flat, np.nan, mean), se

    def _read(self, weights, what, level, kind, tuning_n, **extra) -> IntervalEstimate:
        est, se = self._contrast(weights, what)
        if self._n >= 2:
            warn_heavy_rounds(
                self._weights.shares()[:, weights != 0].max(axis=1),
                self._n,
                what,
                self.batched,
                "log with more exploration of the arms the target policy plays.",
                stacklevel=4,
            )
        method = (
            f"{what}: augmented inverse-propensity (doubly robust) online estimate, "
            f"two-sided Wald interval" + sequence_phrase(kind, tuning_n)
        )
        return kind_interval(
            kind,
            tuning_n,
            estimate=est,
            standard_error=se,
            n_obs=self._n,
            confidence_level=level,
            method=method,
            batched=self.batched,
            **extra,
        )

    def interval(
        self,
        policy: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for the value of ``policy`` (``kind="sequence"``: the
        anytime-valid confidence sequence tuned at ``tuning_n``); the p-value is two-sided
        for ``H0: V(π) = 0``."""
        level = check_confidence_level(confidence_level)
        kind, tuning_n = check_kind(kind, tuning_n)
        w = np.zeros(len(self.policies))
        w[self._index(policy)] = 1.0
        return self._read(w, f"value of {policy!r}", level, kind, tuning_n)

    def difference(
        self,
        policy_a: str,
        policy_b: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``V(policy_a) − V(policy_b)``, estimated on the same
        rounds; the p-value is two-sided for ``H0: no difference``."""
        level = check_confidence_level(confidence_level)
        kind, tuning_n = check_kind(kind, tuning_n)
        i, j = self._index(policy_a), self._index(policy_b)
        if i == j:
            raise ValueError(f"policy_a and policy_b must differ; got {policy_a!r} twice")
        w = np.zeros(len(self.policies))
        w[i], w[j] = 1.0, -1.0
        return self._read(w, f"V({policy_a!r}) - V({policy_b!r})", level, kind, tuning_n)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Configuration and running sums (copies; batched layout, ``n_trials`` 0 if None)."""
        return {
            "kind": "policy_value",
            "n_actions": self.n_actions,
            "policies": list(self.policies),
            "n_trials": 0 if self.n_trials is None else self.n_trials,
            "n": int(self._n),
            **{key: getattr(self, "_" + key).copy() for key in _SUMS},
            **self._weights.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (validated first; a failure changes nothing)."""
        mine = self.state_dict()
        check_config(state, mine, ("kind", "n_actions", "policies", "n_trials"))
        new = copy_arrays(state, mine, _SUMS)
        n = check_count(state["n"], "n")
        weights = self._weights.check_state(state)
        self._n = n
        for key, arr in new.items():
            setattr(self, "_" + key, arr)
        self._weights.load(weights)
        self._staged = None

    def __repr__(self) -> str:
        batch = "" if self.n_trials is None else f", n_trials={self.n_trials}"
        return (
            f"PolicyValueInference(n_actions={self.n_actions}, policies={list(self.policies)}"
            f"{batch}; n_obs={self._n})"
        )
