"""Handing a shared :class:`~agents.LowRankSGD`'s before-step estimate to a
:class:`~inference.LinearFormInference` core (the estimator is updated by something else:
an agent, or the wrapper's own warm-started estimator).

Algorithm 2 needs, each round, the estimate *before* that round's step: the pulled arm's
factors and their products with the context, and every arm whose factors moved since the
core last saw them.  :class:`SharedEstimate` takes those from the estimator's public per-round
API before the step (:meth:`SharedEstimate.snapshot`) and hands them to the core after it
(:meth:`SharedEstimate.absorb`), copying only the arms that changed.  The inference wrappers
and the benchmarks use it; nothing else needs to know how the parts are gathered.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from agents.estimator import LowRankSGD
from inference.linear_form import LinearFormInference, RoundTerms

__all__ = ["EstimateSnapshot", "SharedEstimate"]


class EstimateSnapshot(NamedTuple):
    """What the core reads of one round's estimate, taken before the estimator's step."""

    changes: tuple[np.ndarray, ...]
    """``(trials, arms, U, V)``: the (trial, arm) pairs whose factors moved since the core's
    last round, with their current factors; ``(trials, arms, U, V, support)`` for a
    completion estimator, ``support`` the ``(j, k)`` of the one step that moved each pair
    (``(-1, -1)`` where it moved otherwise or more than once) from
    :attr:`agents.LowRankSGD.step_support`."""
    U: np.ndarray
    """Pulled arms' ``U_a`` (B, d1, r)."""
    V: np.ndarray
    """Pulled arms' ``V_a`` (B, d2, r)."""
    products: tuple[np.ndarray, np.ndarray, np.ndarray]
    """``(X V_a, Xᵀ U_a, singular values of the pulled arms)``."""
    versions: np.ndarray
    """The estimator's per-arm versions when the snapshot was taken."""


class SharedEstimate:
    """A :class:`LowRankSGD`'s estimate as one :class:`LinearFormInference` core reads it:
    snapshots taken before the estimator's step, handed to the core after it.

    Parameters
    ----------
    estimator : LowRankSGD
        The estimate ``M̂_{t-1}`` the round is debiased against.
    core : LinearFormInference
        The inference core it feeds (same sizes and trial count).

    Notes
    -----
    Which arms moved comes from the estimator's per-arm versions.  Whenever the core may
    hold other factors than the ones this object last handed it (its first round, a restored
    state, rounds fed to it directly), the arms are found by comparing factors instead,
    which is exact and costs one pass over them.
    """

    def __init__(self, estimator: LowRankSGD, core: LinearFormInference) -> None:
        self.estimator = estimator
        self.core = core
        self._seen: tuple[tuple[int, int], np.ndarray] | None = None

    def forget(self) -> None:
        """Compare factors at the next round (after the core or the estimator was restored)."""
        self._seen = None

    def snapshot(
        self, Xb: np.ndarray, actions: np.ndarray, fingerprint: np.ndarray | None = None
    ) -> EstimateSnapshot:
        """The parts of the current estimate the core needs for context ``Xb`` (B, d1, d2)
        (or :class:`~lrbandit_gym.onehot.OneHotContexts`) and pulled ``actions`` (B,), both
        validated; call it before the estimator's step."""
        est = self.estimator
        pulled = est.pulled(Xb, actions, fingerprint)
        U, V = pulled.U, pulled.V
        if est.n_trials is None:  # views of the factors: copies, read after the step
            U, V = U.copy(), V.copy()
        versions = est.arm_versions.copy()
        seen = self._seen
        support = None
        if seen is not None and seen[0] == self.core.position:
            moved = versions - seen[1]
            trials, arms = np.nonzero(moved)
            if est.context == "completion":  # one step on e_j e_kᵀ: row j, column k moved
                one_step = (moved[trials, arms] == 1)[:, None]
                support = np.where(one_step, est.step_support[trials, arms], -1)
        else:
            U_all, V_all = est.batched_factors
            trials, arms = np.nonzero(self.core.changed_arms(U_all, V_all))
        U_moved, V_moved = est.arm_factors(trials, arms)
        changes = (trials, arms, U_moved, V_moved)
        if support is not None:
            changes += (support,)
        return EstimateSnapshot(changes, U, V, (pulled.XV, pulled.XtU, pulled.sv), versions)

    def absorb(
        self,
        snapshot: EstimateSnapshot,
        Xb: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        propensities: np.ndarray,
    ) -> None:
        """Absorb the round into the core (validated batched arrays) from its snapshot:
        :meth:`propose` then :meth:`commit`."""
        self.commit(self.propose(snapshot, Xb, actions, rewards, propensities), snapshot)

    def propose(
        self,
        snapshot: EstimateSnapshot,
        Xb: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        propensities: np.ndarray,
    ) -> RoundTerms:
        """The round computed and checked by the core
        (:meth:`~inference.LinearFormInference.propose_update_parts`), nothing written:
        an inference wrapper runs it before committing any layer of its step.

        Raises
        ------
        ValueError
            If the core's running sums cannot absorb the round.
        """
        return self.core.propose_update_parts(
            snapshot.changes,
            snapshot.U,
            snapshot.V,
            Xb,
            actions,
            rewards,
            propensities,
            snapshot.products,
        )

    def commit(self, terms: RoundTerms, snapshot: EstimateSnapshot) -> None:
        """Write a round from :meth:`propose` into the core (nothing here fails on data)."""
        self.core.commit_round(terms)
        self._seen = (self.core.position, snapshot.versions)
