"""Target policies' values as an inference wrapper keeps them (:class:`PolicyTracker`).

Each round feeds :class:`~inference.PolicyValueInference` the AIPW terms of every target
policy: a callable from the observation to a pmf or an action, an agent (anything with
``action_probs(obs)``), or ``"greedy"``, the greedy rule of the estimate read.  The targets
are asked for their pmf at the context *before* the step, so a target never sees the round
it is evaluated on; an agent given as a target is only asked, never updated.  A target may
play only arms the logging policy could have played: a pmf that puts mass on an arm whose
logging propensity is below ``MIN_PROPENSITY`` is refused before the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from inference.cores.policy_value import PolicyValueInference, check_target_pmfs
from inference.results import IntervalEstimate
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.round_check import CheckedRound
from inference.wrappers.tracker import Tracker
from lrbandit_gym.input_checks import MIN_PROPENSITY
from lrbandit_gym.rounds import Round

__all__ = ["GREEDY", "PolicyTracker"]

#: The target that stands for the greedy rule ``argmax_a <M̂_{a,t−1}, X_t>`` of the estimate
#: the wrapper reads (ties to the lowest arm); its value estimate is the mean value of the
#: greedy rules over the rounds absorbed.
GREEDY = "greedy"


def _check_policies(policies: Any) -> dict[str, Any]:
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError(
            "policies must be a non-empty mapping of names to target policies (a callable "
            f"obs -> pmf or action, an agent with action_probs, or {GREEDY!r}); got "
            f"{policies!r}"
        )
    out = {}
    for name, policy in policies.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"policy names must be non-empty strings; got {name!r}")
        if not (policy == GREEDY if isinstance(policy, str) else True):
            raise ValueError(
                f"policies[{name!r}] must be a callable, an agent with action_probs, or "
                f"{GREEDY!r}; got {policy!r}"
            )
        if not isinstance(policy, str) and not (
            callable(getattr(policy, "action_probs", None)) or callable(policy)
        ):
            raise ValueError(
                f"policies[{name!r}] must be a callable obs -> pmf or action, an agent with "
                f"action_probs(obs), or {GREEDY!r}; got {type(policy).__name__}"
            )
        out[name] = policy
    return out


class PolicyTracker(Tracker):
    """Intervals for the values of target policies, fed round by round.

    Parameters
    ----------
    shape, estimator, own
        As for :class:`~inference.wrappers.tracker.Tracker`.
    policies : mapping of str to target policy
        The targets, by name (see :class:`~inference.PolicyEvaluation`).
    """

    info_key = "policy_evaluation"

    def __init__(self, shape, estimator, own, policies: Mapping[str, Any]) -> None:
        policies = _check_policies(policies)
        super().__init__(shape, estimator, own)
        self.targets = policies
        self.policy_names = tuple(policies)
        self.core = PolicyValueInference(self.n_actions, self.policy_names, n_trials=self.n_trials)

    # ------------------------------------------------------------------ one round
    def _target_pmf(self, name: str, policy: Any, predictions: np.ndarray, obs) -> np.ndarray:
        """One target's pmf at the current context, batched ``(B, K)``."""
        B, K = predictions.shape
        if isinstance(policy, str):  # GREEDY
            pmf = np.zeros((B, K))
            pmf[np.arange(B), predictions.argmax(axis=1)] = 1.0
            return pmf
        ask = getattr(policy, "action_probs", None)
        out = ask(obs) if callable(ask) else policy(obs)
        arr = np.asarray(out)
        single = self.n_trials is None
        if arr.dtype.kind in "iu" and arr.shape == (() if single else (B,)):
            arms = arr.reshape(B)
            if ((arms < 0) | (arms >= K)).any():
                raise ValueError(
                    f"target policy {name!r} returned action {out!r}, outside [0, {K})"
                )
            pmf = np.zeros((B, K))
            pmf[np.arange(B), arms] = 1.0
            return pmf
        if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
            raise ValueError(
                f"target policy {name!r} must return a pmf over the {K} arms or an integer "
                f"action; got {out!r}"
            )
        expected = (K,) if single else (B, K)
        if arr.shape != expected:
            raise ValueError(
                f"target policy {name!r} returned a pmf of shape {arr.shape}; expected "
                f"{expected} (or an integer action)"
            )
        return arr.astype(float).reshape(B, K)

    def snapshot(self, checked: CheckedRound, fingerprint) -> Any:
        pred = self.predictions(checked.contexts, fingerprint)
        pmfs = np.stack(
            [self._target_pmf(n, p, pred, checked.obs) for n, p in self.targets.items()], axis=1
        )
        pmfs = check_target_pmfs(
            pmfs,
            len(self.targets),
            self.n_actions,
            self.n_trials,
            layout="batched",
            names=self.policy_names,
        )
        # Overlap: a target may only play arms the logging policy could have played.
        props = checked.propensities
        short = (pmfs > 0) & (props[:, None, :] < MIN_PROPENSITY)
        if short.any():
            b, j, a = (int(i[0]) for i in np.nonzero(short))
            where = "" if self.n_trials is None else f" in trial {b}"
            raise ValueError(
                f"target policy {self.policy_names[j]!r} plays arm {a} with probability "
                f"{pmfs[b, j, a]:.3g}{where}, where the logging policy's propensity is "
                f"{props[b, a]!r} < MIN_PROPENSITY = {MIN_PROPENSITY:g}: its value there "
                "cannot be estimated from this data; log with a policy that explores every "
                "arm the targets may play (e.g. epsilon-greedy)"
            )
        return pred, pmfs

    def stage(self, snapshot, round_: Round):
        pred, pmfs = snapshot
        return self.core.propose(round_, pred, pmfs)

    def commit(self, staged, round_: Round) -> dict[str, Any]:
        self.core.commit(staged)
        return self.running_info()

    # ------------------------------------------------------------------ read-out
    def interval(
        self, policy, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N
    ) -> IntervalEstimate:
        with self.one_warning():
            return self.core.interval(policy, confidence_level, kind=kind, tuning_n=tuning_n)

    def difference(
        self, policy_a, policy_b, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N
    ) -> IntervalEstimate:
        with self.one_warning():
            return self.core.difference(
                policy_a, policy_b, confidence_level, kind=kind, tuning_n=tuning_n
            )

    def results(self, confidence_level=0.95, *, kind="fixed", tuning_n=DEFAULT_TUNING_N):
        opts = {"kind": kind, "tuning_n": tuning_n}
        names = self.policy_names
        rows = [(f"V({p})", self.interval(p, confidence_level, **opts)) for p in names]
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                rows.append((f"V({b}) - V({a})", self.difference(b, a, confidence_level, **opts)))
        return rows
