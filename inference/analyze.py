"""Inference on a saved log: the intervals the wrappers give live, from logged rounds.

:func:`analyze` validates the whole log (:func:`lrbandit_gym.logs.validate_log`), then
replays it through the inference wrappers (:class:`~lrbandit_gym.logs.LogReplayEnv` under
:class:`~inference.ParameterInference`, :class:`~inference.ValueInference` and
:class:`~inference.PolicyEvaluation`, which share one estimator of their own) with the
logged pmf as the propensities.  A run recorded with the same stack on (the wrappers with
their own estimator, :class:`~lrbandit_gym.logs.RecordRounds` anywhere in the stack)
therefore gives the same intervals from its saved log as it gave live.

What each interval needs from the log (docs/logs.md): the parameter intervals read only
the chosen arm's propensity ``π_t(a_t)``; ``V*`` reads ``π_t(â_t)`` at the estimated
optimal arm, and a target policy's value needs the whole pmf to check that the logging
policy could play every arm the target plays, so both need the ``pmf`` column.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inference.cores.checks import check_confidence_level
from inference.cores.projection_choice import choose_projection, contexts_condition_number
from inference.results import IntervalEstimate, format_table, interval_rows
from inference.sequences import DEFAULT_TUNING_N
from inference.wrappers.build import build_stack, stack_layers
from lrbandit_gym.context_law import as_context_law
from lrbandit_gym.decision import Decision
from lrbandit_gym.input_checks import MIN_PROPENSITY
from lrbandit_gym.logs import LogFormatError, LogReplayEnv, load_log, validate_log
from lrbandit_gym.onehot import OneHotContexts

__all__ = ["AnalysisResult", "analyze", "spread_pmf"]

_KINDS = ("fixed", "sequence")


def spread_pmf(action: np.ndarray, propensity: np.ndarray, n_actions: int) -> np.ndarray:
    """A pmf per round from the chosen arm's propensity alone: ``propensity[t]`` on
    ``action[t]`` and the rest spread evenly on the other arms.

    Only the chosen arm's entry is the logging policy's; it is all the parameter intervals
    read.  The other entries stand in for the unknown ones, which is why :func:`analyze`
    refuses ``V*`` and target policies on a log without ``pmf``.
    """
    n = action.shape[0]
    pmf = np.empty((n, n_actions))
    pmf[:] = ((1.0 - propensity) / (n_actions - 1))[:, None]
    pmf[np.arange(n), action] = propensity
    return pmf


@dataclass(frozen=True, eq=False)
class AnalysisResult:
    """Every interval :func:`analyze` computed from a log.

    Attributes
    ----------
    results : list of (str, IntervalEstimate)
        One row per quantity, labelled as the wrappers' ``results()`` label them:
        ``<M_a, T>`` and ``<M_b - M_a, T>`` per target, ``V*``, ``V(policy)`` and
        ``V(b) - V(a)``.
    n_rounds : int
        Rows in the log.
    n_obs : int
        Rounds that entered the inference (after the warm start).
    confidence_level, kind, tuning_n
        As passed to :func:`analyze`.
    wrappers : dict
        The wrappers after the replay, by role (``"parameters"``, ``"value"``,
        ``"policies"``), to read other quantities (``interval`` at another level,
        ``test_greater``, ``played_regret``, ``state_dict``).
    """

    results: list[tuple[str, IntervalEstimate]]
    n_rounds: int
    n_obs: int
    confidence_level: float
    kind: str
    tuning_n: int
    wrappers: dict[str, Any] = field(repr=False)

    def __getitem__(self, label: str) -> IntervalEstimate:
        """The interval of the quantity ``label`` (as in :attr:`results`)."""
        for name, ci in self.results:
            if name == label:
                return ci
        raise KeyError(f"no quantity {label!r}; the result has {[n for n, _ in self.results]}")

    def to_frame(self):
        """The results as a pandas DataFrame (needs pandas): one row per quantity, with
        columns ``quantity``, ``estimate``, ``low``, ``high``, ``standard_error``,
        ``p_value``, ``n_obs`` and ``method``."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_frame() needs pandas: pip install pandas") from exc
        records = [
            {"quantity": label, **interval_rows(ci)[0], "n_obs": ci.n_obs, "method": ci.method}
            for label, ci in self.results
        ]
        return pd.DataFrame.from_records(records)

    def summary(self) -> str:
        """A text table of the results, with a line saying what they are."""
        kind = "confidence sequences" if self.kind == "sequence" else "fixed-n intervals"
        head = (
            f"{self.n_rounds} logged rounds, {self.n_obs} after the warm start; "
            f"{100 * self.confidence_level:g}% {kind}"
        )
        return head + "\n" + format_table(self.results, None, self.confidence_level)

    def __str__(self) -> str:
        return self.summary()


def _check_options(rank, warm_start, confidence_level, kind, value, targets, policies):
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank < 1:
        raise ValueError(f"rank must be a positive integer (the low-rank model's); got {rank!r}")
    if warm_start is not None and (
        isinstance(warm_start, bool) or not isinstance(warm_start, int | np.integer)
    ):
        raise ValueError(f"warm_start must be a positive number of rounds; got {warm_start!r}")
    check_confidence_level(confidence_level)
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}; got {kind!r}")
    if not isinstance(value, bool):
        raise ValueError(f"value must be True or False; got {value!r}")
    if not targets and not value and not policies:
        raise ValueError(
            "nothing to estimate: give targets=, policies=, or value=True (the default)"
        )


def analyze(
    log: Mapping[str, Any] | str | os.PathLike,
    targets: Mapping[str, np.ndarray] | None = None,
    *,
    rank: int,
    warm_start: int | None = None,
    value: bool = True,
    policies: Mapping[str, Any] | None = None,
    confidence_level: float = 0.95,
    kind: str = "fixed",
    tuning_n: int = DEFAULT_TUNING_N,
    projection: str = "auto",
    point_estimate: str = "one-step",
    correction: str = "auto",
    context_law: Any = None,
    design_variance: str = "auto",
    **sgd_kwargs,
) -> AnalysisResult:
    """Every interval the inference wrappers give live, computed from a log.

    The log is validated whole first (nothing is computed on a bad file), then replayed
    round by round through the wrappers, which run their own low-rank estimator
    (``rank``), warm-started on the first ``warm_start`` rounds weighted by ``1/π``; the
    intervals use the rounds after it.  A run recorded with ``ParameterInference(env,
    targets, rank, warm_start=...)``, ``ValueInference`` and ``PolicyEvaluation`` stacked on
    it (sharing its estimator) gives the same intervals live and here.

    Parameters
    ----------
    log : mapping or path
        A log (:mod:`lrbandit_gym.logs`), or the path of a ``.npz`` or ``.parquet`` one.
    targets : mapping of str to array (d1, d2), optional
        The linear forms ``T`` of ``<M_a, T>`` and ``<M_b − M_a, T>``.
    rank : int
        Rank of the low-rank model of every arm.
    warm_start : int, optional
        Rounds of the estimator's warm start (default: sized from the problem, as the
        wrappers' is); the log must hold more.
    value : bool, default True
        Whether to give the interval for the optimal value ``V*`` (needs ``pmf``).
    policies : mapping of str to target policy, optional
        Target policies to evaluate, as :class:`~inference.PolicyEvaluation` takes them
        (a callable of the context, an agent, or ``"greedy"``); needs ``pmf``.
    confidence_level : float, default 0.95
    kind : {"fixed", "sequence"}, default "fixed"
        Fixed-n intervals, or anytime-valid confidence sequences tuned at ``tuning_n``.
    projection, point_estimate
        As for :class:`~inference.ParameterInference`; ``projection="auto"`` (default) with
        an estimated law reads the condition number of the log's own contexts (all of them,
        known before the replay) to choose between the debiased mean and the tangent-space
        read-out (docs/method.md §12).
    correction : {"auto", "regret", "none"}, default "auto"
        As for :class:`~inference.ValueInference`.
    context_law : str or ContextLaw, optional
        The law the parameter intervals' debiasing divides by (docs/method.md §1): default
        the log's ``context_law``; ``"estimated"`` estimates it from the log's contexts
        (any dense law: images, correlated or scaled features).  The contexts are checked
        against it and a read-out warns (:class:`~inference.ContextLawWarning`) where they
        do not match.
    design_variance : {"auto", "pulled", "all-rounds"}, default "auto"
        As for :class:`~inference.ParameterInference` (docs/method.md §13).  "auto" and
        "all-rounds" read every arm's propensity in every round: "all-rounds" needs the
        ``pmf`` column, and "auto" is eq. (14)'s "pulled" on a log without it.
    **sgd_kwargs
        ``step_scale``, ``step_offset``, ``step_decay`` of the estimator.

    Returns
    -------
    AnalysisResult
        ``results`` rows, ``to_frame()`` and ``summary()``.

    Raises
    ------
    LogFormatError
        For a log that does not follow the format, naming the column and the row; also for
        a chosen-arm propensity below ``MIN_PROPENSITY`` (the wrappers' floor).
    ValueError
        For a bad option (naming it; ``rank`` above ``min(d1, d2)`` included), ``V*`` or
        policies asked of a log without ``pmf``, or a log no longer than the warm start;
        for a round the wrappers refuse during the replay or whose step the estimator
        refuses as diverging (a ``FloatingPointError``), naming its row.
    """
    _check_options(rank, warm_start, confidence_level, kind, value, targets, policies)
    checked = load_log(log) if isinstance(log, str | os.PathLike) else validate_log(log)
    n = int(checked["action"].shape[0])
    K = int(checked["n_actions"])
    d1, d2 = int(checked["d1"]), int(checked["d2"])
    if rank > min(d1, d2):
        raise ValueError(
            f"rank must be at most min(d1, d2) = {min(d1, d2)} of the log ({d1} x {d2} "
            f"contexts); got {rank!r}"
        )
    has_pmf = "pmf" in checked
    if not has_pmf and design_variance == "auto":  # no other arm's propensity to read
        design_variance = "pulled"
    if not has_pmf and design_variance == "all-rounds":
        raise ValueError(
            "design_variance='all-rounds' reads every arm's propensity in every round, and "
            "the log has only the chosen arm's: log the 'pmf' column, or pass "
            "design_variance='pulled'"
        )
    if not has_pmf and (value or policies):
        need = ["V* (value=True)"] if value else []
        need += ["target policies (policies=)"] if policies else []
        raise ValueError(
            f"{' and '.join(need)} need the logging policy's whole pmf, and the log has only "
            "the chosen arm's propensity: V* reads π_t at the estimated optimal arm, and a "
            "target policy's value needs every arm's propensity to check that the logging "
            "policy could play the arms the target plays. Log the 'pmf' column, or pass "
            "value=False and no policies (the parameter intervals need only 'propensity')"
        )
    low = checked["propensity"] < MIN_PROPENSITY
    if low.any():
        row = int(np.argmax(low))
        raise LogFormatError(
            "propensity",
            f"{checked['propensity'][row]!r} is below MIN_PROPENSITY = {MIN_PROPENSITY:g}: "
            "one round would weigh more than 10**6 others in every estimate",
            row,
        )
    pmf = checked["pmf"] if has_pmf else spread_pmf(checked["action"], checked["propensity"], K)
    replay = LogReplayEnv(checked)
    law = replay.context_law if context_law is None else as_context_law(context_law, d1, d2)
    if projection == "auto" and law.estimated:  # judged by the log's contexts, all known
        condition = contexts_condition_number(_log_contexts(checked), law.structure)
        projection = choose_projection("auto", law, point_estimate, condition)

    top = build_stack(
        replay,
        targets,
        value=value,
        policies=policies,
        rank=rank,
        warm_start=warm_start,
        projection=projection,
        point_estimate=point_estimate,
        context_law=context_law,
        design_variance=design_variance,
        correction=correction,
        **sgd_kwargs,
    )
    wrappers: dict[str, Any] = stack_layers(top)
    rounds = next(iter(wrappers.values())).warm_start_rounds
    if n <= rounds:
        raise ValueError(
            f"the log has {n} rounds and the warm start takes {rounds} (warm_start="
            f"{warm_start!r}): inference needs rounds after it; pass a shorter warm_start="
        )

    top.reset()
    actions = checked["action"]
    for t in range(n):
        try:
            top.step(Decision(int(actions[t]), pmf[t]))
        except (ValueError, ArithmeticError) as exc:  # a refusal, or a diverging estimator
            raise ValueError(f"row {t} of the log: {exc}") from exc

    rows: list[tuple[str, IntervalEstimate]] = []
    for wrapper in wrappers.values():
        rows += wrapper.results(confidence_level, kind=kind, tuning_n=tuning_n)
    return AnalysisResult(
        results=rows,
        n_rounds=n,
        n_obs=int(next(iter(wrappers.values())).core.n_obs),
        confidence_level=float(confidence_level),
        kind=kind,
        tuning_n=int(tuning_n),
        wrappers=wrappers,
    )


def _log_contexts(log: Mapping[str, Any]) -> np.ndarray | OneHotContexts:
    """A log's contexts: the matrices, or the revealed entries of an index log."""
    if "context_index" not in log:
        return log["context"]
    index = np.asarray(log["context_index"])
    return OneHotContexts(index[:, 0], index[:, 1], int(log["d1"]), int(log["d2"]))
