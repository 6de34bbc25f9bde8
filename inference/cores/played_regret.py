"""The regret of the greedy rules played, estimated online for the ``V*`` interval.

``V̂_n`` of Section 4 (docs/method.md §5) is an unbiased estimate of the mean value of the
greedy rules ``â_t`` it evaluates, not of ``V*``: it falls short of ``V*`` by their mean
regret ``(1/n) Σ_t Reg(â_t)``, ``Reg(â) = E[max_a <M_a, X> − <M_{â(X)}, X>]``
(docs/method.md §8, §10).  This module estimates that regret with a *reference* estimate
``M̃`` of the arms (the one-step estimate of §4, which converges at the parametric rate
while the SGD iterate the rules come from may not):

    R̂_n = (1/m) Σ_{s ∈ S} [ max_a <M̃_a, X_s> − <M̃_{â_s}, X_s> ]                (regret)

over a uniform sample ``S`` of ``m`` of the rounds absorbed (:class:`PlayedRules`, a
reservoir: memory ``O(m d1 d2)``, or ``O(m)`` for completion indices, whatever the number
of rounds), each kept with the greedy arm ``â_s`` played there.  Its sampling variance
``var(r_s)/m · (1 − m/n)`` (finite population) enters the corrected interval's standard
error.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.state import check_count, generator_state, generator_state_from
from lrbandit_gym.input_checks import check_positive_int
from lrbandit_gym.onehot import OneHotContexts
from lrbandit_gym.rounds import Round

__all__ = [
    "DEFAULT_RESERVOIR",
    "MIN_REFERENCE_PROPENSITY",
    "PlayedRules",
    "RegretCorrection",
    "ValueBiasWarning",
    "correct_interval",
    "played_regret",
]

#: Rounds the reservoir keeps by default, at most (:func:`default_reservoir_size`).
DEFAULT_RESERVOIR = 256

#: Memory the default reservoir keeps within (its size shrinks, down to
#: :data:`MIN_DEFAULT_RESERVOIR` rounds, for many trials of large contexts).
DEFAULT_RESERVOIR_BYTES = 2**28
MIN_DEFAULT_RESERVOIR = 16

#: Largest reservoir (bytes) a wrapper allocates without being asked for a smaller one.
MAX_RESERVOIR_BYTES = 2**30


def default_reservoir_size(d1: int, d2: int, n_trials: int | None, completion: bool) -> int:
    """:data:`DEFAULT_RESERVOIR` rounds, fewer where that would keep more than
    :data:`DEFAULT_RESERVOIR_BYTES` of contexts (never below :data:`MIN_DEFAULT_RESERVOIR`;
    a smaller reservoir only adds sampling variance, which the standard error carries)."""
    per_round = (1 if n_trials is None else n_trials) * (16 if completion else 4 * d1 * d2)
    fits = DEFAULT_RESERVOIR_BYTES // per_round
    return int(min(DEFAULT_RESERVOIR, max(MIN_DEFAULT_RESERVOIR, fits)))


class ValueBiasWarning(UserWarning):
    """The paper's ``V*`` interval, kept without the allowance for the regret of the greedy
    rules played, may not cover: that regret is large against its standard error
    (docs/method.md §10).  The bias-aware intervals (``correction="auto"`` or
    ``"regret"``) allow for it and do not warn."""


class PlayedRules:
    """A uniform reservoir of the rounds absorbed: their contexts and greedy arms.

    Parameters
    ----------
    d1, d2 : int
        Context shape.
    n_trials : int or None
        Trials in lock step (one reservoir schedule for all of them: the rounds kept are the
        same in every trial, which keeps the update one copy).
    size : int
        Rounds kept (``m``).
    completion : bool
        Keep the revealed index ``(j, k)`` instead of the dense context.
    seed : int
        Seed of the reservoir's schedule (Algorithm R).
    """

    def __init__(
        self,
        d1: int,
        d2: int,
        n_trials: int | None,
        size: int = DEFAULT_RESERVOIR,
        *,
        completion: bool = False,
        seed: int = 0,
    ) -> None:
        self.size = check_positive_int(size, "regret_reservoir")
        self.d1, self.d2 = d1, d2
        self.n_trials = n_trials
        self.completion = completion
        B = 1 if n_trials is None else n_trials
        need = B * self.size * (16 if completion else 4 * d1 * d2)
        if need > MAX_RESERVOIR_BYTES:
            raise ValueError(
                f"regret_reservoir={self.size} keeps {need / 2**20:.0f} MiB of contexts "
                f"({B} trial(s) of {d1} x {d2}), above {MAX_RESERVOIR_BYTES / 2**20:.0f} MiB: "
                "pass a smaller regret_reservoir= (or correction='none')"
            )
        self._shape = (B, self.size, 2) if completion else (B, self.size, d1, d2)
        self._seed = int(seed)
        self._reset()

    def _reset(self) -> None:
        self.seen = 0
        self._rng = np.random.default_rng(self._seed)
        self._contexts = np.zeros(self._shape, dtype=np.int64 if self.completion else np.float32)
        self._arms = np.zeros(self._shape[:2], dtype=np.int64)
        #: The smallest propensity of any arm in any round offered, per trial.
        self.min_propensity = np.ones(self._shape[0])

    @property
    def count(self) -> int:
        """Rounds held (``m``, at most :attr:`size`)."""
        return min(self.seen, self.size)

    def add(
        self,
        Xb: np.ndarray | OneHotContexts,
        arms: np.ndarray,
        propensities: np.ndarray | None = None,
    ) -> None:
        """Offer one round: contexts ``Xb`` (B, d1, d2) or one-hot indices, greedy arms (B,),
        and the logging policy's propensities of every arm (B, K), if known."""
        if propensities is None:
            pass
        elif propensities.shape[0] == 1:  # one trial: Python floats, without small-array costs
            low = min(propensities[0].tolist())
            if low < self.min_propensity[0]:
                self.min_propensity[0] = low
        else:
            np.minimum(self.min_propensity, propensities.min(axis=1), out=self.min_propensity)
        t = self.seen
        slot = t if t < self.size else int(self._rng.integers(t + 1))
        if slot < self.size:
            if self.completion:
                self._contexts[:, slot, 0] = Xb.rows
                self._contexts[:, slot, 1] = Xb.cols
            else:
                self._contexts[:, slot] = Xb
            self._arms[:, slot] = arms
        self.seen = t + 1

    def contexts_and_arms(self) -> tuple[np.ndarray, np.ndarray]:
        """The rounds held: contexts ``(B, m, d1, d2)`` (or indices ``(B, m, 2)``), arms."""
        m = self.count
        return self._contexts[:, :m], self._arms[:, :m]

    def state_dict(self) -> dict[str, Any]:
        return {
            "seen": self.seen,
            "min_propensity": self.min_propensity.copy(),
            "contexts": self._contexts.copy(),
            "arms": self._arms.copy(),
            **generator_state(self._rng),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (validated first; a failure changes nothing)."""
        seen = check_count(state["seen"], "seen")
        contexts, arms = np.asarray(state["contexts"]), np.asarray(state["arms"])
        if contexts.shape != self._contexts.shape or contexts.dtype != self._contexts.dtype:
            raise ValueError(
                f"state['contexts'] must be a {self._contexts.dtype} array of shape "
                f"{self._contexts.shape}, got {contexts.dtype} {contexts.shape}"
            )
        if arms.shape != self._arms.shape or arms.dtype.kind not in "iu":
            raise ValueError(f"state['arms'] must be an integer array of shape {self._arms.shape}")
        if not np.isfinite(contexts).all():
            raise ValueError("state['contexts'] must be finite")
        low = np.asarray(state["min_propensity"], dtype=float)
        if low.shape != self.min_propensity.shape or not ((low >= 0) & (low <= 1)).all():
            raise ValueError(
                f"state['min_propensity'] must hold {self.min_propensity.shape} values in [0, 1]"
            )
        rng = np.random.default_rng()
        rng.bit_generator.state = generator_state_from(state)
        self.min_propensity = low.copy()
        self.seen = seen
        self._contexts, self._arms, self._rng = contexts.copy(), arms.astype(np.int64), rng


def played_regret(reference: np.ndarray, rules: PlayedRules, n_obs: int):
    """``R̂_n`` (eq. (regret)) and its sampling variance, per trial.

    Parameters
    ----------
    reference : ndarray of shape (B, K, d1, d2)
        The reference estimate ``M̃`` of every arm.
    rules : PlayedRules
        The reservoir of rounds absorbed.
    n_obs : int
        Rounds absorbed (for the finite-population factor).

    Returns
    -------
    regret, variance : ndarray of shape (B,)
        NaN where the reference is not finite (e.g. before it has seen a round).
    """
    X, arms = rules.contexts_and_arms()
    m = X.shape[1]
    if m == 0:
        nan = np.full(reference.shape[0], np.nan)
        return nan, nan
    if rules.completion:
        b = np.arange(reference.shape[0])[:, None]
        pred = reference[b, :, X[..., 0], X[..., 1]]  # (B, m, K)
    else:
        B, K = reference.shape[:2]
        flat = reference.astype(np.float32, copy=False).reshape(B, K, -1)
        pred = np.matmul(X.reshape(B, m, -1), flat.swapaxes(-1, -2))  # <M̃_k, X_j>, (B, m, K)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = pred.max(axis=-1) - np.take_along_axis(pred, arms[..., None], axis=-1)[..., 0]
        r = r.astype(np.float64)
        regret = r.mean(axis=1)
        fpc = max(0.0, 1.0 - m / max(n_obs, 1))
        variance = (r.var(axis=1, ddof=1) if m > 1 else np.zeros_like(regret)) / m * fpc
    return regret, variance


#: Choices of ``correction`` for the ``V*`` interval: "auto" keeps the paper's ``V̂_n`` and
#: makes the interval bias-aware with ``R̂_n`` where the wrapper can compute it (a low-rank
#: estimator and known propensities); "regret" adds ``R̂_n`` to the estimate; "none" is the
#: paper's ``V̂_n`` without the allowance.
CORRECTIONS = ("auto", "regret", "none")

#: ``R̂_n`` above this many standard errors of ``V*`` makes the interval bias-aware with
#: ``correction="regret"``, and raises :class:`ValueBiasWarning` on an interval without the
#: allowance (``aware=False`` in :func:`correct_interval`): a bias of half a standard error
#: takes a symmetric 95% interval to about 92%.
WARN_RATIO = 0.5

#: A trial whose logging propensities fell below this (weights ``1/π`` above 200) is not
#: corrected: the one-step reference, an inverse-propensity-weighted average, is then too
#: noisy for its regret to mean anything (softmax at a low temperature), and the interval
#: is the paper's (the ``method`` says in how many trials).
MIN_REFERENCE_PROPENSITY = 0.005


class RegretCorrection:
    """The ``V*`` wrapper's regret correction: reservoir, reference and read-out.

    The reference is the one-step estimate (docs/method.md §4) of a parameter-inference
    wrapper below in the stack that shares the estimator, or else of an own
    :class:`~inference.LinearFormInference` core fed the same rounds (with a single unit
    target: only its debiased sum is read).

    Parameters
    ----------
    tracker : inference.wrappers.tracker.Tracker
        The ``V*`` tracker (its sizes, context law, estimator and rank).
    size : int or None
        Rounds the reservoir keeps (None: :func:`default_reservoir_size`).
    below : inference.wrappers.parameter_tracker.ParameterTracker or None
        A parameter tracker of the same wrapper that shares the estimator, whose core's
        one-step estimate is the reference; None: an own core.
    """

    def __init__(self, tracker, size: int | None, below=None) -> None:
        from inference.cores.linear_form import LinearFormInference
        from inference.wrappers.shared_estimator import SharedEstimate

        wrapper = tracker
        self.d1, self.d2, self.K = wrapper.d1, wrapper.d2, wrapper.n_actions
        self.n_trials = wrapper.n_trials
        completion = wrapper.context == "completion"
        if size is None:
            size = default_reservoir_size(self.d1, self.d2, self.n_trials, completion)
        self.rules = PlayedRules(self.d1, self.d2, self.n_trials, size, completion=completion)
        self._below = below
        self.own = None
        self._feed = None
        if self._below is None:
            unit = np.zeros((self.d1, self.d2))
            unit[0, 0] = 1.0
            self.own = LinearFormInference(
                self.d1,
                self.d2,
                wrapper.rank,
                self.K,
                {"e11": unit},
                context=wrapper.context,
                n_trials=self.n_trials,
            )
            self._feed = SharedEstimate(wrapper.estimator, self.own)

    @property
    def reference_core(self):
        """The :class:`~inference.LinearFormInference` whose one-step estimate is read."""
        return self.own if self._below is None else self._below.core

    def snapshot(self, Xb, actions, fingerprint):
        """Before the step: what the own reference core needs (None when shared)."""
        return None if self._feed is None else self._feed.snapshot(Xb, actions, fingerprint)

    def stage(self, parts, round_: Round):
        """After the step, before any layer commits: the own reference core's round
        computed and checked (what can fail), or None when the reference is shared."""
        if self._feed is None:
            return None
        return self._feed.propose(parts, round_), parts

    def absorb(self, staged, round_: Round, predictions) -> None:
        """Commit the round (cannot fail): keep it in the reservoir with the greedy arms of
        ``predictions``, feed the own reference the terms :meth:`stage` computed."""
        self.rules.add(round_.contexts, predictions.argmax(axis=1), round_.propensities)
        if staged is not None:
            self._feed.commit(*staged)

    def forget(self) -> None:
        if self._feed is not None:
            self._feed.forget()

    def regret(self, n_obs: int) -> tuple[np.ndarray, np.ndarray]:
        """``R̂_n`` and its sampling variance per trial, shape ``(B,)``."""
        from inference.results import InsufficientDataWarning

        core = self.reference_core
        B = 1 if self.n_trials is None else self.n_trials
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsufficientDataWarning)
            ref = np.stack(
                [np.asarray(core.one_step(a)).reshape(B, self.d1, self.d2) for a in range(self.K)],
                axis=1,
            )
        regret, variance = played_regret(ref, self.rules, n_obs)
        usable = self.rules.min_propensity >= MIN_REFERENCE_PROPENSITY
        return np.where(usable, regret, np.nan), np.where(usable, variance, np.nan)

    def state_dict(self) -> dict[str, Any]:
        return {
            "rules": self.rules.state_dict(),
            "own": None if self.own is None else self.own.state_dict(),
        }

    def check_state(self, state: Any) -> tuple[PlayedRules, Any]:
        """Validate a :meth:`state_dict` on copies; :meth:`apply_state` then assigns them."""
        if not isinstance(state, Mapping) or set(state) != {"rules", "own"}:
            raise ValueError("state['regret'] must be a mapping with keys 'rules' and 'own'")
        rules = copy.deepcopy(self.rules)
        rules.load_state_dict(state["rules"])
        own = None
        if self.own is not None:
            if state["own"] is None:
                raise ValueError("state['regret']['own'] is missing the reference core's state")
            own = copy.deepcopy(self.own)
            own.load_state_dict(state["own"])
        return rules, own

    def apply_state(self, checked: tuple[PlayedRules, Any]) -> None:
        """Assign what :meth:`check_state` returned (cannot fail)."""
        self.rules, own = checked
        if own is not None:
            self.own = own
            self._feed.core = own
            self._feed.forget()


def correct_interval(
    ci, regret, variance, *, shift, kind, tuning_n, level, batched, aware=True, **extra
):
    """The ``V*`` read-out ``ci`` (the paper's) read against ``R̂_n`` (docs/method.md §10).

    ``shift=False`` (the default, ``correction="auto"``): the estimate stays the paper's
    ``V̂_n`` and the interval is *bias-aware* in every checked trial.  ``V*`` lies between
    the mean value of the rules played, which ``V̂_n`` estimates without bias, and that value
    plus their regret, which ``V̂_n + R̂_n`` estimates from above (``R̂_n``, read against a
    noisy reference, tends to overstate the regret; its standard error adds the reservoir's
    sampling variance).  The fixed-``n`` two-sided interval is Imbens and Manski's for a
    quantity between two such bounds (:mod:`inference.cores.bounded_interval`): from
    ``V̂_n − c·se`` to ``V̂_n + R̂_n + c·se'`` with ``c`` between the one- and the two-sided
    normal quantile, and the matching p-value; a confidence sequence and the one-sided test
    run from the lower of the two lower ends to the higher of the two upper ends, their
    p-value the larger of the two.  ``shift=True`` (``correction="regret"``): ``R̂_n`` is
    added to the estimate and its sampling variance to the squared standard error, and the
    interval is bias-aware only where ``R̂_n`` exceeds :data:`WARN_RATIO` standard errors.
    Either way the interval allows for the regret, and nothing is warned: the ``method``
    says what was done, and in how many trials the regret could not be read (their
    interval is the paper's).

    ``aware=False`` keeps the paper's interval (``shift`` must then be False) and raises one
    :class:`ValueBiasWarning` naming the trials where ``R̂_n`` exceeds :data:`WARN_RATIO`
    standard errors: there ``V̂_n`` sits visibly below ``V*`` and nothing allows for it.
    """
    import dataclasses

    from inference.cores.bounded_interval import bounded_interval, bounded_p_value
    from inference.results import finish_array
    from inference.sequences import kind_interval

    if shift and not aware:
        raise ValueError("correct_interval: shift=True makes the interval bias-aware")
    est = np.atleast_1d(np.asarray(ci.estimate, dtype=float))
    se = np.atleast_1d(np.asarray(ci.standard_error, dtype=float))
    skipped = np.isnan(regret) & np.isfinite(est)
    regret, variance = np.where(skipped, 0.0, regret), np.where(skipped, 0.0, variance)
    total = np.sqrt(se * se + variance)
    ratio = regret / total
    large = ratio > WARN_RATIO
    if not aware:
        _warn_unallowed(regret, ratio, large, batched)
        method = ci.method.split("; anytime")[0] + (
            "; without the allowance for the estimated regret of the greedy rules played"
            " (docs/method.md §10)"
        )
        if kind == "sequence":
            method += f"; anytime-valid asymptotic confidence sequence tuned at n = {tuning_n}"
        return dataclasses.replace(ci, method=method)
    # Where the interval runs to the corrected upper end: every checked trial by default,
    # only where the regret is large when the estimate itself is corrected.
    widened = large if shift else (regret > 0)
    base = ci.method.split("; anytime")[0]
    if shift:
        base += "; corrected by the estimated regret of the greedy rules played"
        method = base + ", bias-aware where it exceeds half a standard error (docs/method.md §10)"
    elif kind == "fixed" and extra.get("alternative", "two-sided") == "two-sided":
        base += "; bias-aware: V* between the paper's estimate and the estimate corrected by"
        method = base + (
            " the estimated regret of the greedy rules played, Imbens-Manski interval"
            " (docs/method.md §10)"
        )
    else:
        base += "; bias-aware: from the paper's lower end to the upper end corrected by"
        method = base + " the estimated regret of the greedy rules played (docs/method.md §10)"
    if not shift and large.any():
        # What the allowance amounts to, where V̂_n sits visibly below V*.
        i = int(np.argmax(np.where(np.isfinite(ratio), ratio, -np.inf)))
        method += (
            f"; estimated regret above {WARN_RATIO:g} standard errors in {int(large.sum())} of "
            f"{large.size} trials (largest {ratio[i]:.2f})"
            if batched
            else f"; estimated regret {ratio[i]:.2f} standard errors"
        )
    if skipped.any():
        n_skip = f"{int(skipped.sum())} of {skipped.size} trials" if batched else "this run"
        method += (
            f"; not checked in {n_skip}: propensities below {MIN_REFERENCE_PROPENSITY:g} "
            "make the reference too noisy"
        )
    if kind == "sequence":
        method += f"; anytime-valid asymptotic confidence sequence tuned at n = {tuning_n}"
    shifted = kind_interval(
        kind,
        tuning_n,
        estimate=est + regret,
        standard_error=total,
        n_obs=int(np.ravel(ci.n_obs)[0]),
        confidence_level=level,
        method=method,
        batched=batched,
        **extra,
    )
    out = shifted if shift else dataclasses.replace(ci, method=method)
    if not widened.any():
        return out
    mine = {f: np.atleast_1d(np.asarray(getattr(out, f), dtype=float)) for f in _BOUNDS}
    if kind == "fixed" and extra.get("alternative", "two-sided") == "two-sided":
        # V* lies between the mean value of the rules played (V̂_n) and that value plus
        # their regret (V̂_n + R̂_n, from above): eq. (IM) of inference.cores.bounded_interval.
        low, high = bounded_interval(est, se, est + regret, total, level)
        p = bounded_p_value(extra.get("null_value", 0.0), est, se, est + regret, total)
        found = {"low": low, "high": high, "p_value": p}
    else:
        # A confidence sequence, or the one-sided test: from the lower of the two lower ends
        # to the higher of the two upper ends, the larger of the two p-values.
        found = {}
        for f, combine in zip(_BOUNDS, (np.minimum, np.maximum, np.maximum), strict=True):
            a = np.atleast_1d(np.asarray(getattr(shifted, f), dtype=float))
            paper = np.atleast_1d(np.asarray(getattr(ci, f), dtype=float))
            found[f] = combine(a, paper)
    return dataclasses.replace(
        out, **{f: finish_array(np.where(widened, found[f], mine[f]), batched) for f in _BOUNDS}
    )


def _warn_unallowed(regret, ratio, large, batched) -> None:
    """One :class:`ValueBiasWarning` for the trials of an interval without the allowance
    whose ``R̂_n`` exceeds :data:`WARN_RATIO` standard errors: what, by how much, the knob."""
    if not large.any():
        return
    i = int(np.argmax(np.where(np.isfinite(ratio), ratio, -np.inf)))
    where = (
        f" (in {int(large.sum())} of {large.size} trials; largest: trial {i})" if batched else ""
    )
    warnings.warn(
        f"the V* interval may not cover: the greedy rules played have an estimated regret of "
        f"{regret[i]:.3g} = {ratio[i]:.2f} standard errors{where}, and V_hat sits below V* by "
        "about that much. correction='auto' (the default) allows for it (docs/method.md §10).",
        ValueBiasWarning,
        stacklevel=5,
    )


#: The fields of a read-out that the bias-aware interval changes.
_BOUNDS = ("low", "high", "p_value")
