"""Handing a shared :class:`~agents.LowRankSGD`'s before-step estimate to a
:class:`~inference.LinearFormInference` core (the estimator is updated by something else:
an agent, or the wrapper's own warm-started estimator).

Algorithm 2 needs, each round, the estimate *before* that round's step: the pulled arm's
factors and their products with the context, and every arm whose factors moved since the
core last saw them.  :class:`SharedEstimate` takes those from the estimator's
:attr:`~agents.LowRankSGD.store` (its per-round API) before the step
(:meth:`SharedEstimate.snapshot`) and hands them to the core after it
(:meth:`SharedEstimate.absorb`), copying only the arms that changed.  The inference wrappers
and the benchmarks use it; nothing else needs to know how the parts are gathered.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from agents.estimator import LowRankSGD
from inference.cores.linear_form import LinearFormInference
from inference.cores.linear_form_round import PulledEstimate, RoundTerms
from lrbandit_gym.rounds import Round

__all__ = ["EstimateSnapshot", "SharedEstimate"]


class EstimateSnapshot(NamedTuple):
    """What the core reads of one round's estimate, taken before the estimator's step."""

    estimate: PulledEstimate
    """The arms that moved since the core's last round, with their current factors (for a
    completion estimator with the ``support`` ``(j, k)`` of the one step that moved each pair,
    ``(-1, -1)`` where it moved otherwise or more than once, from
    :attr:`agents.LowRankSGD.step_support`), the pulled arms' factors and their products
    ``(X V_a, Xᵀ U_a, singular values)``, balanced."""
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
        store = self.estimator.store
        pulled = store.pulled(Xb, actions, fingerprint)
        U, V = pulled.U, pulled.V
        if store.n_trials is None:  # views of the factors: copies, read after the step
            U, V = U.copy(), V.copy()
        versions = store.arm_versions.copy()
        seen = self._seen
        support = None
        if seen is not None and seen[0] == self.core.position:
            moved = versions - seen[1]
            trials, arms = np.nonzero(moved)
            if store.context == "completion":  # one step on e_j e_kᵀ: row j, column k moved
                one_step = (moved[trials, arms] == 1)[:, None]
                support = np.where(one_step, store.step_support[trials, arms], -1)
        else:
            U_all, V_all = store.batched_factors
            trials, arms = np.nonzero(self.core.changed_arms(U_all, V_all))
        U_moved, V_moved = store.arm_factors(trials, arms)
        changes = (trials, arms, U_moved, V_moved)
        if support is not None:
            changes += (support,)
        products = (pulled.XV, pulled.XtU, pulled.sv)
        return EstimateSnapshot(PulledEstimate(changes, U, V, products, True), versions)

    def absorb(self, snapshot: EstimateSnapshot, round_: Round) -> None:
        """Absorb a checked round into the core from its snapshot: :meth:`propose` then
        :meth:`commit`."""
        self.commit(self.propose(snapshot, round_), snapshot)

    def propose(self, snapshot: EstimateSnapshot, round_: Round) -> RoundTerms:
        """The round computed and checked by the core
        (:meth:`~inference.LinearFormInference.propose`), nothing written: an inference
        wrapper runs it before committing any layer of its step.

        Raises
        ------
        ValueError
            If the core's running sums cannot absorb the round.
        """
        return self.core.propose(round_, snapshot.estimate)

    def commit(self, terms: RoundTerms, snapshot: EstimateSnapshot) -> None:
        """Write a round from :meth:`propose` into the core (nothing here fails on data)."""
        self.core.commit(terms)
        self._seen = (self.core.position, snapshot.versions)
