"""Tables and the verdict of ``lrbandit validate`` (:mod:`lrbandit_gym.experiments.validate.run`).

The verdict rule (:func:`verdict`) on the Monte Carlo statistics of
:func:`lrbandit_gym.experiments.coverage.coverage_stats` and the :class:`ValidationResult`
that holds them live here; running the trials lives in
:mod:`~lrbandit_gym.experiments.validate.run`.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import ndtri

from inference.cores.played_regret import WARN_RATIO
from inference.cores.weight_share import DESIGN_SHARE_LIMIT, SHARE_LIMIT
from inference.wrappers.round_check import SMALL_PROPENSITY
from lrbandit_gym.experiments.coverage import format_coverage

__all__ = [
    "FAMILY_LEVEL",
    "Quantity",
    "ValidationResult",
    "cell_flag",
    "flag_cells",
    "verdict",
]

#: Probability with which an exactly valid procedure gets the verdict VALID: the Monte Carlo
#: band of every coverage cell is Bonferroni-corrected so that all cells together fall
#: inside their bands with at least this probability (:func:`verdict`).
FAMILY_LEVEL = 0.99


@dataclass(frozen=True)
class Quantity:
    """One quantity whose intervals are checked.

    Attributes
    ----------
    label : str
        ``"<M_1, T1>"``, ``"<M_1 - M_0, T1>"`` or ``"V*"``.
    target : str or None
        The target's name (None for ``V*``).
    arms : tuple of int
        ``(a,)`` for ``<M_a, T>``, ``(b, a)`` for ``<M_b − M_a, T>``, ``()`` for ``V*``.
    truth : float
        Its true value (the same for every trial: they share one truth).
    policy : str or None
        For the value of a target policy (``"V(arm 0)"``), its name in the policy-evaluation
        wrapper; None otherwise.
    """

    label: str
    target: str | None
    arms: tuple[int, ...]
    truth: float
    policy: str | None = None


def verdict(
    rows: Sequence[dict[str, Any]], confidence_level: float, family_level: float = FAMILY_LEVEL
) -> tuple[str, str, float]:
    """The verdict on a coverage table: ``(status, line, band)``.

    The rule.  Each of the ``m`` cells with at least one interval has a coverage ``ĉ`` from
    ``N`` trials.  If the intervals were exactly valid, ``ĉ`` would be a binomial proportion
    around the nominal level ``L`` with standard deviation ``s = sqrt(L (1 − L)/N)``.  The
    band of a cell is ``L ± z s`` with ``z = Φ⁻¹(1 − (1 − family_level)/(2m))`` (Bonferroni):
    an exactly valid procedure has every cell inside its band with probability at least
    ``family_level`` (99%).  Then

    * ``UNDER-COVERS``: some cell is below its band;
    * ``OVER-COVERS``: none is below, some above (valid but conservative: wider than needed);
    * ``VALID``: every cell is inside its band.  This is a statement at the resolution of the
      run: the line gives the band's half-width, the smallest under-coverage the run could
      detect (at 200 trials and 20 cells about 0.05; it shrinks as ``1/√N``);
    * ``NO RESULT``: no cell has an interval.

    The band is the acceptance region of the score test of ``c = L``, so a cell is outside it
    exactly when ``L`` is outside the cell's Wilson interval at the Bonferroni level: the
    rule behaves at coverages of 0 and 1, where ``sqrt(ĉ (1 − ĉ)/N)`` would be 0.  The
    coverage quoted in the line carries its 95% Wilson interval.

    ``band`` is the half-width ``z s`` for the cells' median ``N`` (NaN without cells).
    """
    cells = _cells(rows)
    if not cells:
        return "NO RESULT", "NO RESULT: no interval could be computed (too little data)", math.nan
    m = len(cells)
    level = confidence_level
    z = _band_z(m, family_level)
    flags = [cell_flag(r, m, level, family_level) for r in cells]
    low = [r for r, f in zip(cells, flags, strict=True) if f == "low"]
    high = [r for r, f in zip(cells, flags, strict=True) if f == "high"]
    band = z * math.sqrt(level * (1 - level) / float(np.median([r["trials"] for r in cells])))
    trials = sorted({r["trials"] for r in cells})
    at = f"{trials[0]}" if len(trials) == 1 else f"{trials[0]}-{trials[-1]}"
    rule = (
        f"the {family_level:.0%} family-wise Monte Carlo band at {at} trials "
        f"(Bonferroni over {m} cells)"
    )

    def where(r):
        return f"{r['quantity']} at n = {r['n']}: {format_coverage(r)}"

    if low:
        worst = min(low, key=lambda r: r["coverage"])
        line = (
            f"UNDER-COVERS: {len(low)} of {m} coverage cells below {level:g} − {band:.3f}, "
            f"{rule}; lowest {where(worst)}"
        )
        return "UNDER-COVERS", line, band
    if high:
        worst = max(high, key=lambda r: r["coverage"])
        line = (
            f"OVER-COVERS: {len(high)} of {m} coverage cells above {level:g} + {band:.3f}, "
            f"{rule} (valid, but wider than needed); highest {where(worst)}"
        )
        return "OVER-COVERS", line, band
    lowest = min(cells, key=lambda r: r["coverage"])
    within = f"{level:g} ± {band:.3f}"
    if level + band >= 1:  # the band's top is past 1: no coverage can be shown too high
        within = f"[{level - band:.3f}, 1] (too few trials to detect over-coverage)"
    line = f"VALID: all {m} coverage cells within {within}, {rule}; lowest {where(lowest)}"
    return "VALID", line, band


def _cells(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with a coverage: the cells the verdict is taken on."""
    return [r for r in rows if r["trials"] > 0 and math.isfinite(r["coverage"])]


def _band_z(m: int, family_level: float) -> float:
    return float(ndtri(1 - (1 - family_level) / (2 * m)))


def cell_flag(
    row: dict[str, Any], m: int, confidence_level: float, family_level: float = FAMILY_LEVEL
) -> str:
    """``"low"``/``"high"`` when the cell ``row`` is below/above its band in a table of ``m``
    cells (:func:`verdict`), else ``""``."""
    if not row["trials"] or not math.isfinite(row["coverage"]):
        return ""
    level = confidence_level
    half = _band_z(m, family_level) * math.sqrt(level * (1 - level) / row["trials"])
    if row["coverage"] < level - half:
        return "low"
    return "high" if row["coverage"] > level + half else ""


def flag_cells(rows: Sequence[dict[str, Any]], confidence_level: float) -> None:
    """Set every row's ``flag`` (:func:`cell_flag`), in place."""
    m = len(_cells(rows))
    for row in rows:
        row["flag"] = cell_flag(row, m, confidence_level) if m else ""


_COLUMNS = (
    "n",
    "quantity",
    "truth",
    "trials",
    "coverage",
    "coverage_low",
    "coverage_high",
    "coverage_mcse",
    "z_mean",
    "z_mean_mcse",
    "z_sd",
    "z_sd_mcse",
    "mean_length",
    "no_interval",
)


@dataclass
class ValidationResult:
    """What :func:`~lrbandit_gym.experiments.validate.run.validate` returns.

    Attributes
    ----------
    setting : ValidationSetting
        The configuration run.
    rows : list of dict
        One row per checkpoint ``n`` and quantity (the fields of
        :func:`~lrbandit_gym.experiments.coverage.coverage_stats`, plus ``n``,
        ``quantity``, ``truth`` and ``flag``: ``"low"``/``"high"`` outside the
        verdict's band, else ``""``).
    status, verdict : str
        The verdict (:func:`verdict`): its status word and its one-line explanation; status
        ``FAILED`` when a chunk stopped early (a diverging estimator).
    band : float
        Half-width of the verdict's band.
    quantities : tuple of Quantity
    arrays : dict of ndarray
        Every trial's ``estimate``, ``standard_error``, ``low``, ``high`` (shape
        ``(checkpoints, quantities, trials)``), ``checkpoints``; ``estimation_error``
        ``‖M̂_a − M_a‖_F`` of the estimate inference reads, ``(checkpoints, trials, K)``
        (NaN for a policy without one); ``value_bias`` ``(checkpoints, trials)``, the ``V*``
        regret correction over its standard error (:meth:`InferenceStack.value_bias`, NaN
        without it); ``round_share`` ``(checkpoints, trials)``, the parameter intervals'
        largest Lindeberg share over the arms (:mod:`inference.cores.weight_share`, NaN without
        them); ``context_flag`` ``(checkpoints, trials)``, 1 where the context check
        contradicts the law in use (:mod:`inference.cores.context_check`);
        ``min_propensity`` (trials,), the smallest
        probability any arm had in any round of inference; ``min_chosen_propensity``
        (trials,), the smallest probability of an arm the policy chose; ``warm_start_ratio``
        (trials, K): the held-out check of the warm start
        (:mod:`agents.warm_start.check`), NaN where it did not run.
    trials, seed, batch_size : int
    confidence_level : float
    warnings : list of str
        Distinct warnings the trials raised (e.g. the warm-start check's), with how many
        chunks raised each.
    seconds : float
        Wall time.
    uniform_rows : list of dict
        With ``uniform_from``: per quantity, the time-uniform coverage (every round from
        ``n0`` to ``N``) of the fixed-n intervals and of the confidence sequences, each with
        its Monte Carlo s.e., and the sequences' width relative to the fixed-n interval at
        ``N`` (:mod:`~lrbandit_gym.experiments.validate.uniform`).
    uniform_verdict : str
        The line judging the sequences (empty without ``uniform_from``).
    partial : bool
        True for a run stopped by Ctrl-C: the table, verdict and arrays are over the
        ``trials_done`` trials that finished, not all ``trials``.
    trials_done : int
        Trials the result holds (``trials`` unless ``partial``).
    """

    setting: Any
    rows: list[dict[str, Any]]
    status: str
    verdict: str
    band: float
    quantities: tuple[Quantity, ...]
    arrays: dict[str, np.ndarray]
    trials: int
    seed: int
    batch_size: int
    confidence_level: float
    warnings: list[str] = field(default_factory=list)
    seconds: float = math.nan
    uniform_rows: list[dict[str, Any]] = field(default_factory=list)
    uniform_verdict: str = ""
    partial: bool = False
    trials_done: int | None = None

    def __post_init__(self) -> None:
        if self.trials_done is None:
            self.trials_done = self.trials

    @property
    def interrupted(self) -> str:
        """``"interrupted: N of M trials"`` for a partial result, else ``""``."""
        if not self.partial:
            return ""
        from lrbandit_gym.experiments.parallel import interrupted_line

        return interrupted_line(self.trials_done, self.trials)

    @property
    def valid(self) -> bool:
        """Whether the verdict is VALID or OVER-COVERS (no cell under-covers)."""
        return self.status in ("VALID", "OVER-COVERS")

    def to_frame(self):
        """The coverage table as a pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_frame() needs pandas: pip install pandas") from exc
        return pd.DataFrame.from_records(self.rows, columns=[*_COLUMNS, "flag"])

    def stamp(self):
        """What names this run in the files it writes (:class:`~.outputs.RunStamp`): the
        setting, trials, batch size, level and seed."""
        from lrbandit_gym.experiments.outputs import RunStamp

        describe = getattr(self.setting, "describe", None)
        settings = {
            "setting": describe() if describe is not None else None,
            "trials": self.trials,
            "batch_size": self.batch_size,
            "confidence_level": self.confidence_level,
        }
        return RunStamp.of("lrbandit validate", settings, self.seed, partial=self.interrupted)

    def to_csv(self, path=None) -> str:
        """The coverage table as CSV text; with ``path``, also written there atomically
        below a ``#`` line naming the run (:meth:`stamp`; read it back with
        ``pandas.read_csv(path, comment="#")``)."""
        from lrbandit_gym.experiments.outputs import write_csv

        columns = [*_COLUMNS, "flag"]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: row[k] for k in columns})
        if path is not None:
            write_csv(path, self.rows, self.stamp(), fieldnames=columns)
        return buf.getvalue()

    def to_npz(self, path) -> str:
        """Every trial's read-outs and diagnostics (:attr:`arrays`), with the quantities'
        ``labels`` and ``truth`` (aligned with the arrays' quantity axis), written atomically
        to ``path`` (``np.savez_compressed``; the run's stamp as JSON under ``metadata``):
        for analyses of single trials that the table summarises away."""
        from lrbandit_gym.experiments.outputs import write_npz

        arrays = dict(self.arrays)
        arrays["labels"] = np.array([q.label for q in self.quantities])
        arrays["truth"] = np.array([q.truth for q in self.quantities], dtype=float)
        return write_npz(path, arrays, self.stamp())

    def diagnostics(self) -> str:
        """One line per diagnostic: the warm-start check, the estimate's error, the smallest
        propensity."""
        a = self.arrays
        lines = []
        ratio = a["warm_start_ratio"]
        if not np.isnan(ratio).all():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an arm without a check
                med = np.nanmedian(ratio, axis=0)
            parts = ", ".join(f"arm {k} {m:.2g}" for k, m in enumerate(med))
            lines.append(
                "warm-start check (held-out estimate of ‖M_init − M‖²_F/σ², median over "
                f"trials; warns above 1): {parts}"
            )
        err = a["estimation_error"]
        if np.isfinite(err).any():
            parts = ", ".join(
                f"n = {n}: " + "/".join(f"{v:.3g}" for v in np.nanmedian(err[c], axis=0))
                for c, n in enumerate(a["checkpoints"])
            )
            lines.append(f"‖M̂_a − M_a‖_F of the estimate inference reads (median, by arm): {parts}")
        bias = a.get("value_bias")
        if bias is not None and np.isfinite(bias).any():
            silent = self._value_covered_without_warning()
            parts = ", ".join(
                f"n = {n}: median {np.nanmedian(bias[c]):.2f}, above {WARN_RATIO:g} in "
                f"{np.mean(bias[c] > WARN_RATIO):.0%} of trials"
                + (
                    f", not corrected in {np.mean(np.isnan(bias[c])):.0%}"
                    if np.isnan(bias[c]).any()
                    else ""
                )
                + silent.get(n, "")
                for c, n in enumerate(a["checkpoints"])
            )
            lines.append(
                "V* regret check R̂/s.e. (docs/method.md §10: the default interval allows for "
                f"it; the paper's would raise ValueBiasWarning above {WARN_RATIO:g}): " + parts
            )
        elif bias is not None and any(q.label == "V*" for q in self.quantities):
            lines.append(
                "V* regret check not made (correction='none', or propensities below "
                "MIN_REFERENCE_PROPENSITY in every trial: the paper's estimate; method.md §10)"
            )
        if np.isfinite(a["min_propensity"]).any():
            lines.append(
                "smallest propensity in any round of inference: "
                f"{np.nanmin(a['min_propensity']):.3g} (median over trials "
                f"{np.nanmedian(a['min_propensity']):.3g})"
            )
        chosen = a.get("min_chosen_propensity")
        if chosen is not None and np.isfinite(chosen).any():
            lines.append(self._small_propensity_line(chosen))
        share = a.get("round_share")
        if share is not None and np.isfinite(share).any():
            lines.append(self._round_share_line(share))
        design = a.get("design_share")
        if design is not None and np.isfinite(design).any():
            lines.append(
                self._round_share_line(design, "an arm and target's design", DESIGN_SHARE_LIMIT)
            )
        flags = a.get("context_flag")
        if flags is not None and np.isfinite(flags).any():
            lines.append(self._context_flag_line(flags))
        return "\n".join(lines)

    def _context_flag_line(self, flags: np.ndarray) -> str:
        """Per checkpoint, how many trials' contexts contradicted the law the parameter
        intervals divide by (:class:`~inference.ContextLawWarning`) and how the parameter
        intervals of the others covered."""
        parts = []
        for c, n in enumerate(self.arrays["checkpoints"]):
            bad = flags[c] > 0.5
            part = f"n = {n}: {bad.mean():.0%} of trials"
            covered = self._parameter_coverages([c], ~bad) if 0 < bad.sum() < bad.size else []
            if covered:
                part += f", the others covered {min(covered):.3f}–{max(covered):.3f}"
            parts.append(part)
        return (
            "context check (the contexts against the law the debiasing divides by, and the "
            "law's conditioning: ContextLawWarning at the parameter read-outs; docs/method.md "
            "§11): " + "; ".join(parts)
        )

    def _round_share_line(
        self, share: np.ndarray, what: str = "an arm's predictable", limit: float = SHARE_LIMIT
    ) -> str:
        """Per checkpoint, how many trials' parameter read-outs warned that one round holds
        over :data:`~inference.cores.weight_share.SHARE_LIMIT` of ``what`` variance (Lindeberg's
        condition), and how the parameter intervals of the others covered."""
        parts = []
        for c, n in enumerate(self.arrays["checkpoints"]):
            heavy = share[c] > limit
            part = (
                f"n = {n}: {heavy.mean():.0%} of trials (median share {np.nanmedian(share[c]):.2g})"
            )
            covered = self._parameter_coverages([c], ~heavy) if 0 < heavy.sum() < heavy.size else []
            if covered:
                part += f", the others covered {min(covered):.3f}–{max(covered):.3f}"
            parts.append(part)
        return (
            f"Lindeberg check (one round above {limit:g} of {what} "
            "variance: SmallPropensityWarning at the parameter read-outs; docs/method.md §8): "
            + "; ".join(parts)
        )

    def _small_propensity_line(self, chosen: np.ndarray) -> str:
        """How many trials raised :class:`~inference.SmallPropensityWarning` (a chosen arm's
        propensity below :data:`~inference.wrappers.round_check.SMALL_PROPENSITY`) and how the
        parameter intervals of the others covered: an interval either covers or says it may
        not."""
        small = chosen < SMALL_PROPENSITY
        line = (
            f"SmallPropensityWarning (a chosen arm's propensity below {SMALL_PROPENSITY:g}) in "
            f"{small.mean():.0%} of trials"
        )
        if not small.any() or small.all():
            return line
        quiet = ~small
        covered = self._parameter_coverages(range(len(self.arrays["checkpoints"])), quiet)
        if covered:
            line += (
                f"; the parameter intervals of the {int(quiet.sum())} trials without it "
                f"covered {min(covered):.3f}–{max(covered):.3f}"
            )
        return line

    def _value_covered_without_warning(self) -> dict[int, str]:
        """Per checkpoint, how often the ``V*`` interval covers in the trials whose ``R̂_n`` is
        at most :data:`~inference.cores.played_regret.WARN_RATIO` standard errors (where the paper's
        interval would raise no :class:`~inference.ValueBiasWarning`)."""
        a = self.arrays
        labels = [q.label for q in self.quantities]
        if "V*" not in labels:
            return {}
        i = labels.index("V*")
        out = {}
        for c, n in enumerate(a["checkpoints"]):
            share, count = self._covered_in(c, i, ~(a["value_bias"][c] > WARN_RATIO))
            if share is not None:
                out[int(n)] = f"; at or below it covered in {share:.3f} of {count}"
        return out

    def _parameter_coverages(self, checkpoints, trials: np.ndarray) -> list[float]:
        """The coverage of every parameter interval (``V*`` and policy values have their
        own lines) at the checkpoints ``checkpoints``, over the trials selected by the
        boolean mask ``trials``."""
        found = (
            self._covered_in(c, j, trials)[0]
            for c in checkpoints
            for j, q in enumerate(self.quantities)
            if q.target is not None
        )
        return [share for share in found if share is not None]

    def _covered_in(self, c: int, j: int, trials: np.ndarray) -> tuple[float | None, int]:
        """``(coverage, trials read)`` of quantity ``j`` at checkpoint ``c`` over the trials
        selected by the boolean mask ``trials`` that have an interval; ``(None, 0)`` when
        none has."""
        low, high = self.arrays["low"][c, j][trials], self.arrays["high"][c, j][trials]
        read = np.isfinite(low) & np.isfinite(high)
        if not read.any():
            return None, 0
        truth = self.quantities[j].truth
        covered = (low[read] <= truth) & (truth <= high[read])
        return float(covered.mean()), int(read.sum())

    def to_markdown(self) -> str:
        """The coverage table in markdown: coverage with its 95% Wilson interval (which keeps
        a width at 0 and 1, :func:`~lrbandit_gym.experiments.coverage.coverage_interval`), z
        mean and z s.d. ± Monte Carlo s.e.; a trailing ``<`` or ``>`` marks a cell below or
        above the verdict's band."""
        head = "| n | quantity | truth | coverage | z mean | z s.d. | mean length |"
        lines = [head, "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            mark = {"low": " <", "high": " >"}.get(r["flag"], "")
            na = f" ({r['no_interval']} n/a)" if r["no_interval"] else ""
            lines.append(
                f"| {r['n']} | {r['quantity']} | {r['truth']:.4g} | "
                f"{format_coverage(r)}{mark}{na} | "
                f"{_pm(r['z_mean'], r['z_mean_mcse'], 2)} | "
                f"{_pm(r['z_sd'], r['z_sd_mcse'], 2)} | {r['mean_length']:.3g} |"
            )
        return "\n".join(lines)

    def uniform_markdown(self) -> str:
        """The time-uniform table in markdown (empty without ``uniform_from``)."""
        if not self.uniform_rows:
            return ""
        r0 = self.uniform_rows[0]
        lines = [
            f"time-uniform coverage, read at every round n = {r0['n0']}..{r0['N']} "
            f"(sequences tuned at n = {r0['tuning_n']}, {r0['width_ratio']:.2f}x the "
            f"fixed-n width at N):",
            "",
            "| quantity | fixed-n, all n | sequence, all n |",
            "|---|---|---|",
        ]
        for r in self.uniform_rows:
            lines.append(
                f"| {r['quantity']} | {format_coverage(r, 'uniform_fixed')} | "
                f"{format_coverage(r, 'uniform_sequence')} |"
            )
        return "\n".join(lines)

    def report(self) -> str:
        """Everything ``lrbandit validate`` prints: the table, diagnostics, warnings and the
        verdict line (last); a partial result says so first and before the verdict."""
        parts = [self.to_markdown()]
        if self.partial:
            parts.insert(0, f"PARTIAL RESULT ({self.interrupted}): over the trials that finished")
        diag = self.diagnostics()
        if diag:
            parts.append(diag)
        for w in self.warnings:
            parts.append(f"warning: {w}")
        if self.uniform_rows:
            parts.append(self.uniform_markdown())
            parts.append(self.uniform_verdict)
        if self.partial:
            parts.append(f"PARTIAL ({self.interrupted}); the verdict is over those trials:")
        parts.append(self.verdict)
        return "\n\n".join(parts)


def _pm(value: float, se: float, digits: int) -> str:
    if not math.isfinite(value):
        return "n/a"
    if not math.isfinite(se):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} ± {se:.{digits}f}"
