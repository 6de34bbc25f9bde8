"""Monte Carlo summaries of intervals: coverage with its Wilson interval, z-score moments,
lengths and errors, per cell of a study (:func:`coverage_stats`), and the tables of the
paper's studies built from them (:func:`summarize_parameters`, :func:`summarize_value`,
:func:`summarize_uniform`), which ``lrbandit reproduce``, ``lrbandit validate``, the
comparisons and the figures read.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

__all__ = [
    "MC_LEVEL",
    "coverage_interval",
    "coverage_stats",
    "format_coverage",
    "summarize_parameters",
    "summarize_uniform",
    "summarize_value",
    "wald_coverage_stats",
]


#: Level of the Monte Carlo interval reported beside every coverage (:func:`coverage_interval`).
MC_LEVEL = 0.95


def coverage_interval(covered, trials, level: float = MC_LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a coverage: ``covered`` of ``trials`` intervals held.

    The normal-approximation error ``sqrt(c (1 − c)/N)`` collapses to zero at ``c = 0`` or
    ``1`` (20 trials that all cover would read ``1.000 ± 0.000``) and its bars pass 1 near
    the edges; the Wilson interval inverts the score test instead, so it stays inside
    ``[0, 1]`` and keeps a width at the edges (20 of 20: ``[0.839, 1]`` at 95%).  It is the
    interval of ``scipy.stats.binomtest(covered, trials).proportion_ci(method="wilson")``.
    ``(nan, nan)`` without trials.
    """
    n = float(trials)
    if not n > 0:
        return math.nan, math.nan
    p = float(covered) / n
    z = float(ndtri(0.5 + level / 2))
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def format_coverage(row: dict, key: str = "coverage", digits: int = 3) -> str:
    """``"0.950 [0.93, 0.96]"``: a coverage and its Wilson interval (``{key}_low`` and
    ``{key}_high`` of ``row``), or ``"n/a"`` for a coverage that is not finite."""
    value = row[key]
    if not math.isfinite(value):
        return "n/a"
    low, high = row.get(f"{key}_low", math.nan), row.get(f"{key}_high", math.nan)
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{value:.{digits}f}"
    inner = max(2, digits - 1)
    return f"{value:.{digits}f} [{low:.{inner}f}, {high:.{inner}f}]"


def coverage_stats(
    estimate: np.ndarray, standard_error: np.ndarray, low: np.ndarray, high: np.ndarray, truth
) -> dict[str, float]:
    """Monte Carlo summary of one cell: the trials' intervals for one quantity at one ``n``.

    Trials whose interval is not finite (too little data) are left out and counted apart.
    ``coverage`` is the fraction of intervals ``[low, high]`` that contain ``truth``, with
    its 95% Wilson interval ``coverage_low``/``coverage_high`` (:func:`coverage_interval`,
    what tables and figures show) and the normal-approximation standard error
    ``coverage_mcse = sqrt(c (1 − c)/N)`` (kept for the files); ``z = (estimate − truth)/se`` has
    mean (s.e. ``sd/√N``) and standard deviation (s.e. ``sd/√(2(N − 1))``, exact for normal
    z); ``mean_length`` is the mean of ``high − low`` and ``mse`` that of
    ``(estimate − truth)²``.  The paper studies' tables and ``lrbandit validate`` use it.
    """
    est, se = np.asarray(estimate, float), np.asarray(standard_error, float)
    lo, hi = np.asarray(low, float), np.asarray(high, float)
    ok = np.isfinite(est) & np.isfinite(se) & np.isfinite(lo) & np.isfinite(hi) & (se > 0)
    n = int(ok.sum())
    out = {
        "trials": n,
        "no_interval": int(ok.size - n),
        "coverage": math.nan,
        "coverage_mcse": math.nan,
        "coverage_low": math.nan,
        "coverage_high": math.nan,
        "z_mean": math.nan,
        "z_mean_mcse": math.nan,
        "z_sd": math.nan,
        "z_sd_mcse": math.nan,
        "mean_length": math.nan,
        "mse": math.nan,
    }
    if n == 0:
        return out
    covered = (lo[ok] <= truth) & (truth <= hi[ok])
    c = float(covered.mean())
    z = (est[ok] - truth) / se[ok]
    low_c, high_c = coverage_interval(int(covered.sum()), n)
    out.update(
        coverage=c,
        coverage_mcse=math.sqrt(c * (1 - c) / n),
        coverage_low=low_c,
        coverage_high=high_c,
        z_mean=float(z.mean()),
        mean_length=float(np.mean(hi[ok] - lo[ok])),
        mse=float(np.mean((est[ok] - truth) ** 2)),
    )
    if n > 1:
        sd = float(z.std(ddof=1))
        out.update(
            z_mean_mcse=sd / math.sqrt(n),
            z_sd=sd,
            z_sd_mcse=sd / math.sqrt(2 * (n - 1)),
        )
    return out


def wald_coverage_stats(est, se, truth, confidence_level):
    """:func:`coverage_stats` of the Wald intervals ``est ± z·se``."""
    z = ndtri(0.5 + confidence_level / 2)
    est, se = np.asarray(est, float), np.asarray(se, float)
    return coverage_stats(est, se, est - z * se, est + z * se, truth)


def summarize_parameters(
    result: dict, confidence_level: float = 0.95, variant: str = ""
) -> list[dict]:
    """One row per checkpoint × target × (arm or difference) with coverage, length, MSE and
    z-score moments, each with its Monte Carlo standard error (``variant``: see
    :attr:`~lrbandit_gym.experiments.studies.StudyConfig.variants`; "" is the study's own
    procedure)."""
    p = f"{variant}:" if variant else ""
    rows = []
    names = ["T1", "T2"][: result[p + "estimate"].shape[1]]
    k = result[p + "estimate"].shape[2]
    for c, n in enumerate(result["checkpoints"]):
        for j, name in enumerate(names):
            for arm in range(k):
                s = wald_coverage_stats(
                    result[p + "estimate"][c, j, arm],
                    result[p + "se"][c, j, arm],
                    result["truth"][j, arm],
                    confidence_level,
                )
                rows.append({"n": int(n), "target": name, "quantity": f"arm {arm}", **s})
            truth = result["truth"][j, 1] - result["truth"][j, 0]
            s = wald_coverage_stats(
                result[p + "diff_estimate"][c, j],
                result[p + "diff_se"][c, j],
                truth,
                confidence_level,
            )
            rows.append({"n": int(n), "target": name, "quantity": "arm 1 - arm 0", **s})
    return rows


def summarize_value(result: dict, confidence_level: float = 0.95) -> list[dict]:
    """Coverage and z-score moments of the optimal-value interval at every checkpoint."""
    rows = []
    for c, n in enumerate(result["checkpoints"]):
        s = wald_coverage_stats(
            result["value_estimate"][c],
            result["value_se"][c],
            float(result["optimal_value"]),
            confidence_level,
        )
        rows.append({"n": int(n), "target": "V*", "quantity": "optimal value", **s})
    return rows


def summarize_uniform(result: dict, confidence_level: float = 0.95) -> list[dict]:
    """Time-uniform coverage, one row per target × (arm or difference) and for ``V*``.

    Columns: ``n0``/``N`` (the rounds checked, every round from ``n0`` to ``N``),
    ``tuning_n``, the fixed-n coverage at ``N`` (``fixed_at_N``), the time-uniform coverage
    of the fixed-n intervals (``uniform_fixed``) and of the confidence sequences
    (``uniform_sequence``), each with its Monte Carlo s.e. and Wilson interval (``_low``,
    ``_high``), and the sequence's width
    relative to the fixed-n interval at ``N`` (``width_ratio``).  Empty when the study ran
    without ``uniform_from``.
    """
    if "uniform_rounds" not in result:
        return []
    from inference.results import critical_value
    from inference.sequences import sequence_factor

    n0, big_n, tuning = (int(v) for v in result["uniform_rounds"])
    alpha = 1.0 - confidence_level
    ratio = float(np.sqrt(big_n) * sequence_factor(big_n, alpha, tuning))
    ratio /= critical_value(confidence_level)
    base = {"n0": n0, "N": big_n, "tuning_n": tuning, "width_ratio": ratio}
    fixed_rows = summarize_parameters(result, confidence_level) if "estimate" in result else []
    if np.isfinite(result["optimal_value"]):
        fixed_rows += summarize_value(result, confidence_level)
    at_n = {(r["target"], r["quantity"]): r["coverage"] for r in fixed_rows if r["n"] == big_n}

    def row(target, quantity, fixed, seq):
        out = {"target": target, "quantity": quantity, **base}
        out["fixed_at_N"] = at_n.get((target, quantity), np.nan)
        for label, cov in (("uniform_fixed", fixed), ("uniform_sequence", seq)):
            p = float(np.mean(cov))
            out[label] = p
            out[label + "_mcse"] = float(np.sqrt(p * (1 - p) / cov.size))
            interval = coverage_interval(int(np.sum(cov)), cov.size)
            out[label + "_low"], out[label + "_high"] = interval
        return out

    rows = []
    fixed, seq = result["uniform:fixed:covered"], result["uniform:sequence:covered"]
    names = ["T1", "T2"][: fixed.shape[0]]
    for j, name in enumerate(names):
        for arm in range(fixed.shape[1]):
            rows.append(row(name, f"arm {arm}", fixed[j, arm], seq[j, arm]))
        rows.append(
            row(
                name,
                "arm 1 - arm 0",
                result["uniform:fixed:diff_covered"][j],
                result["uniform:sequence:diff_covered"][j],
            )
        )
    if np.isfinite(result["optimal_value"]):
        rows.append(
            row(
                "V*",
                "optimal value",
                result["uniform:fixed:value_covered"],
                result["uniform:sequence:value_covered"],
            )
        )
    return rows
