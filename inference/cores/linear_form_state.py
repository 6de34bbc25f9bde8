"""The state of a :class:`~inference.cores.linear_form.LinearFormCore`: its running sums, and
saving and restoring them.

:class:`LinearFormState` holds, as public fields, what the round
(:mod:`inference.cores.linear_form_round`) writes and the read-outs
(:mod:`inference.cores.linear_form_readout`) read: the targets in the forms a round reads
them, :class:`~inference.cores.debiased_sum.DebiasedSum` with the ``σ̂²``, ``Ŝ²`` and robust
variance sums, the pull counts, the Lindeberg shares, the law in use and the context check.
The saved state is the configuration, the targets, ``n`` and those arrays; a restored state
is checked in full before anything is replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.state import check_config, check_count, copy_arrays, read_bool
from inference.cores.context_check import ContextCheck
from inference.cores.debiased_sum import DebiasedSum
from inference.cores.running_law import RunningSecondMoment
from inference.cores.tangent_space import TargetTriplets
from inference.cores.weight_share import WeightShare

__all__ = ["LinearFormState", "load_state_dict", "state_dict", "validate_state_dict"]

_CONFIG = tuple(
    "kind d1 d2 rank n_actions n_trials context context_law projection design_variance".split()
)
_ARRAYS = ("acc", "held", "last_U", "last_V", "ring_U", "ring_V", "sigma_sum", "S2_sum", "V_sum")


class LinearFormState:
    """The running sums of Algorithm 2 for ``B`` trials, ``K`` arms and the targets ``T``.

    Parameters
    ----------
    B, K, d1, d2, rank : int
        Trials (1 when unbatched), arms, context shape and rank.
    names : tuple of str
        The targets' names.
    stack : ndarray of shape (n_T, d1, d2)
        The targets, checked.
    projection : str
        The core's ``projection`` (``kappa`` of ``<G, X>``).
    law : ContextLaw
        The law in use; an estimated one gets its running estimate here.
    """

    def __init__(self, B, K, d1, d2, rank, names, stack, projection, law) -> None:
        self.B = B
        #: ``arange(B)``: the trial index of a round's gathers.
        self.trials = np.arange(B)
        self.names = names
        self.T = np.ascontiguousarray(stack)
        # <G, X> = <T, X P_V> + <T, P_U X> - kappa <T, P_U X P_V> (see tangent_space).
        self.kappa = 2.0 if projection == "paper" else 1.0
        self.triplets = TargetTriplets.from_targets(self.T)
        n_T = len(names)
        self.sum = DebiasedSum(B, K, d1, d2, rank)  # n·M^unbs, eq. (11)
        self.sigma_sum = np.zeros((B, K))  # n·σ̂², eq. (13)
        self.S2_sum = np.zeros((B, K, n_T))  # n·Ŝ², eq. (14)
        # n·(robust variance): Σ_t (c·w·res·<G_t, W_t>)², the standard error under a dense
        # law other than the paper's (docs/method.md §11); kept only there.
        self.V_sum = np.zeros((B, K, n_T))
        self.pulls = np.zeros((B, K), dtype=np.int64)
        # Pulls of each arm that the sums do not weigh but the estimate rests on too: the
        # rounds seen before inference started (a warm start's) and, in the exploration-only
        # baseline, the rounds not explored.  With `pulls`, N_i of the remainder's variance.
        self.unweighted_pulls = np.zeros((B, K), dtype=np.int64)
        self.weights = WeightShare(B, K)  # Lindeberg's share of each arm (weight_share)
        # ... and of each arm and target's design term (c·w·<G_t, X_t>)², the realized
        # variance of Ŝ², whose largest round flags heavy-tailed contexts (weight_share).
        self.design = WeightShare(B, K * n_T, prefix="design")
        # The law in use: the given one, or a running estimate of it (running_law).
        self.whitener = RunningSecondMoment(law, B) if law.estimated else law
        self.check = ContextCheck(d1, d2, B, self.whitener)  # context_check
        #: Read-outs of the current sums (linear_form_readout), emptied by every round.
        self.cache: dict[tuple[str, int], np.ndarray] = {}


def state_dict(core) -> dict[str, Any]:
    """Configuration and running sums as plain Python / numpy values (copies).

    Arrays are in the internal batched layout (leading trial axis, ``B = 1`` when
    unbatched; ``n_trials`` is stored as 0 then).
    """
    s = core.state
    return {
        "kind": core.state_kind,
        "d1": core.d1,
        "d2": core.d2,
        "rank": core.rank,
        "n_actions": core.n_actions,
        "n_trials": 0 if core.n_trials is None else core.n_trials,
        "context": core.context,
        "context_law": core.context_law.name,
        "projection": core.projection,
        "design_variance": core.design_variance,
        "target_names": list(s.names),
        "targets": s.T.copy(),
        "n": int(core.n_obs),
        **s.sum.state_dict(),
        "sigma_sum": s.sigma_sum.copy(),
        "S2_sum": s.S2_sum.copy(),
        "V_sum": s.V_sum.copy(),
        "pulls": s.pulls.copy(),
        "unweighted_pulls": s.unweighted_pulls.copy(),
        **s.weights.state_dict(),
        **s.design.state_dict(),
        **s.check.state_dict(),
        **(s.whitener.state_dict() if s.whitener.estimated else {}),
    }


def validate_state_dict(core, state: Mapping[str, Any]) -> dict[str, Any]:
    """Check a :meth:`state_dict` against this object, changing nothing.

    The configuration and targets must be this object's, every array must have its
    shape, dtype and finite entries, the counts (``n``, ``held``, ``pulls``,
    ``unweighted_pulls``) must be non-negative integers with no arm pulled more often than
    ``n``, the sums of squares (``sigma_sum``, ``S2_sum``) non-negative and ``initialized``
    a bool.  A state without ``unweighted_pulls`` (saved before they were kept) reads as
    none.

    Returns
    -------
    dict
        Validated copies (``n``, ``ring_n``, ``initialized`` and the arrays), for
        :meth:`load_state_dict`.

    Raises
    ------
    ValueError
        Naming the first key that fails a check.
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    s = core.state
    mine = state_dict(core)
    # The parts' arrays are checked by the parts, naming the key that fails.
    required = {
        k: v
        for k, v in mine.items()
        if not k.startswith(("weight_", "check_", "law_")) and k != "unweighted_pulls"
    }
    check_config(state, required, (*_CONFIG, "target_names"))
    try:
        same = np.array_equal(np.asarray(state["targets"], dtype=float), s.T)
    except (TypeError, ValueError):
        same = False
    if not same:
        raise ValueError("state['targets'] does not match this object's targets")
    # A state saved before the unweighted pulls were kept reads as none (a wider interval).
    state = {"unweighted_pulls": np.zeros_like(s.unweighted_pulls), **state}
    new = copy_arrays(state, mine, (*_ARRAYS, "pulls", "unweighted_pulls"))
    n = check_count(state["n"], "n")
    ring_n = DebiasedSum.check_ring_n(state["ring_n"])
    initialized = read_bool(state["initialized"], "state['initialized']")
    for key in ("held", "pulls", "unweighted_pulls", "sigma_sum", "S2_sum", "V_sum"):
        if (new[key] < 0).any():
            raise ValueError(f"state[{key!r}] must be >= 0, got minimum {new[key].min()!r}")
    if (new["pulls"].sum(axis=-1) > n).any():
        raise ValueError(
            f"state['pulls'] counts more pulls than state['n'] = {n} rounds, got "
            f"{new['pulls'].tolist()}"
        )
    if n > 0 and not initialized:
        raise ValueError(f"state['initialized'] is False but state['n'] = {n} rounds")
    weights = s.weights.check_state(state)
    design = s.design.check_state(state)
    check = s.check.check_state(state)
    law = s.whitener.check_state(state) if s.whitener.estimated else None
    return {
        "n": n,
        "ring_n": ring_n,
        "initialized": initialized,
        "weights": weights,
        "design": design,
        "context_check": check,
        "law": law,
        **new,
    }


def load_state_dict(core, state: Mapping[str, Any]) -> None:
    """Restore a :meth:`state_dict`: everything is validated first
    (:meth:`validate_state_dict`), so a failure changes nothing."""
    new = validate_state_dict(core, state)
    s = core.state
    core.n_obs = new["n"]
    core.position = (new["n"], core.position[1] + 1)  # a new generation: another stream
    s.sum.load(new, new["ring_n"], new["initialized"])
    s.sigma_sum = new["sigma_sum"]
    s.S2_sum = new["S2_sum"]
    s.V_sum = new["V_sum"]
    s.pulls = new["pulls"]
    s.unweighted_pulls = new["unweighted_pulls"]
    s.weights.load(new["weights"])
    s.design.load(new["design"])
    s.check.load(new["context_check"])
    if new["law"] is not None:
        s.whitener.load(new["law"])
    s.cache = {}
