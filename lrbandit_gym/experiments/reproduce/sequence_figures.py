"""Figures of time-uniform coverage (needs the ``plot`` extra: matplotlib).

They read a study run with ``uniform_from`` (:class:`~lrbandit_gym.experiments.studies.
UniformTracker`): :func:`sequence_figure` draws, for a few trials, the fixed-n interval and
the confidence sequence against ``n`` around the truth; :func:`uniform_figure` draws the
time-uniform coverage of both as bars, with the nominal level and its Monte Carlo band.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lrbandit_gym.experiments.coverage import summarize_uniform
from lrbandit_gym.experiments.figures import (
    check_png_path,
    coverage_error_bars,
    figure_class,
    panel_figure,
)
from lrbandit_gym.experiments.outputs import write_figure

__all__ = ["sequence_figure", "uniform_figure", "uniform_figures"]


def _check_uniform(result: Mapping) -> None:
    if not isinstance(result, Mapping) or "uniform_rounds" not in result:
        raise ValueError(
            "result must be a study run with uniform_from set (it holds 'uniform_rounds')"
        )


def sequence_figure(
    result: Mapping, path: str | Path, *, n_traces: int = 3, title: str | None = None
) -> Path:
    """The fixed-n interval and the confidence sequence against ``n`` for ``n_traces``
    recorded trials: ``<M_0, T1>`` (or ``V*`` in a value study), the truth as a line.

    A fixed-n interval that leaves the truth at any ``n`` marks a trial the
    time-uniform coverage counts as missed.
    """
    _check_uniform(result)
    if "trace:point" not in result:
        raise ValueError("result holds no traces: run the study with trace_trials > 0")
    path = check_png_path(path)
    first, last, tuning = (int(v) for v in result["uniform_rounds"])
    ns = np.arange(first, last + 1)
    has_params = result["trace:point"].shape[1] > 0
    if has_params:
        est = result["trace:point"][:, 0, 0]

        def get(kind, bound):
            return result[f"trace:{kind}:{bound}"][:, 0, 0]

        truth = float(result["truth"][0, 0])
        label = "<M_0, T1>"
    else:
        est = result["trace:value_point"]

        def get(kind, bound):
            return result[f"trace:{kind}:value_{bound}"]

        truth = float(result["optimal_value"])
        label = "V*"
    m = min(int(n_traces), est.shape[-1])
    fig, axes = panel_figure(1, m, (3.6, 3.0))
    for i in range(m):
        ax = axes[0, i]
        ax.fill_between(
            ns,
            get("sequence", "low")[:, i],
            get("sequence", "high")[:, i],
            color="tab:blue",
            alpha=0.25,
            label="confidence sequence",
        )
        ax.plot(ns, get("fixed", "low")[:, i], color="tab:orange", lw=0.8, label="fixed-n interval")
        ax.plot(ns, get("fixed", "high")[:, i], color="tab:orange", lw=0.8)
        ax.plot(ns, est[:, i], color="k", lw=0.6, label="estimate")
        ax.axhline(truth, color="red", lw=0.9, ls="--", label="truth")
        ax.set_title(f"trial {i}", fontsize=9)
        ax.set_xlabel("n", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel(label, fontsize=8)
    axes[0, 0].legend(fontsize=6)
    fig.suptitle(
        (title + ": " if title else "") + f"{label}, read at every round "
        f"{first}..{last} (sequence tuned at n = {tuning})",
        fontsize=10,
    )
    write_figure(fig, path, dpi=110)
    return path


def uniform_figure(
    result: Mapping, path: str | Path, *, confidence_level: float = 0.95, title: str | None = None
) -> Path:
    """Time-uniform coverage of the fixed-n intervals and of the confidence sequences, one
    pair of bars per quantity with 95% Wilson error bars (inside [0, 1]), the nominal level
    as a line and its Monte Carlo band shaded."""
    _check_uniform(result)
    path = check_png_path(path)
    rows = summarize_uniform(result, confidence_level)
    labels = [f"{r['target']}\n{r['quantity']}" for r in rows]
    x = np.arange(len(rows))
    fig, axes = panel_figure(1, 1, (max(6.5, 1.1 * len(rows)), 3.4))
    ax = axes[0, 0]
    for shift, key, name in (
        (-0.2, "uniform_fixed", "fixed-n intervals"),
        (0.2, "uniform_sequence", "confidence sequences"),
    ):
        y = np.array([r[key] for r in rows])
        err = coverage_error_bars(rows, key)
        ax.bar(x + shift, y, width=0.38, yerr=err, capsize=3, label=name)
    n_trials = result["uniform:fixed:covered"].shape[-1]
    half = 1.96 * np.sqrt(confidence_level * (1 - confidence_level) / n_trials)
    band = (max(confidence_level - half, 0.0), min(confidence_level + half, 1.0))
    ax.axhspan(*band, color="grey", alpha=0.2)
    ax.axhline(confidence_level, color="k", lw=0.8, label=f"nominal {confidence_level:g}")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlim(-0.7, len(rows) - 0.3)
    ax.set_ylabel("P(truth inside at every n)", fontsize=8)
    low = min(min(r["uniform_fixed"] for r in rows) - 0.05, confidence_level - 0.1)
    ax.set_ylim(max(0.0, low), 1.0)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
    r0 = rows[0]
    fig.suptitle(
        (title + ": " if title else "") + f"time-uniform coverage over n = "
        f"{r0['n0']}..{r0['N']}, {n_trials} trials",
        fontsize=10,
    )
    write_figure(fig, path, dpi=110)
    return path


def uniform_figures(
    result: Mapping, out: str | Path, prefix: str, title: str | None = None
) -> list[Path]:
    """Write ``{prefix}_sequences.png`` (when traces were recorded) and
    ``{prefix}_uniform.png``."""
    figure_class()  # fail before any file is written
    out = Path(out)
    paths = []
    if "trace:point" in result:
        paths.append(sequence_figure(result, out / f"{prefix}_sequences.png", title=title))
    paths.append(uniform_figure(result, out / f"{prefix}_uniform.png", title=title))
    return paths
