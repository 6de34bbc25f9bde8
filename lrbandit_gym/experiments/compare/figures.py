"""Figures of a comparison (needs the ``plot`` extra: matplotlib).

:func:`comparison_figures` draws, from a :class:`~.report.ComparisonResult`:

* ``compare_regret.png``: mean cumulative regret against rounds, with the across-trial
  interquartile band, one line per agent;
* ``compare_estimation_error.png``: mean ``‖M̂_a − M_a‖_F`` (over trials and arms) against
  rounds, for the agents that have an estimate;
* ``compare_interval_width.png``: the mean width of every interval (one panel per
  ``<M_a, T>`` and ``V*``) against rounds, per agent, over the trials where inference is
  defined.

Built on :class:`matplotlib.figure.Figure` (no ``pyplot``): nothing touches global state.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from lrbandit_gym.experiments.outputs import write_figure

__all__ = ["comparison_figures"]


def _figure(rows: int, cols: int, panel=(5.0, 3.4)):
    from lrbandit_gym.experiments.figures import MISSING_MATPLOTLIB, MatplotlibMissing

    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MatplotlibMissing(MISSING_MATPLOTLIB) from exc
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    return fig, axes


def comparison_figures(result, out: Path) -> list[Path]:
    """Write the three PNG figures into ``out`` and return their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    curves = result.curves()
    x = result.checkpoints
    color = {name: f"C{i % 10}" for i, name in enumerate(result.agents)}  # same in every figure
    paths = []

    fig, (ax,) = _figure(1, 1, (7.0, 4.5))
    for name in result.agents:
        reg = result.data[name]["regret"]
        rounds = np.arange(1, reg.shape[1] + 1)
        q25, q75 = np.percentile(reg, [25, 75], axis=0)
        label = f"{name} ({reg.shape[0]} trials)"
        ax.plot(rounds, reg.mean(axis=0), color=color[name], label=label)
        ax.fill_between(rounds, q25, q75, color=color[name], alpha=0.2, linewidth=0)
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative regret")
    ax.set_title("Cumulative regret (mean; band: interquartile range across trials)")
    ax.legend(fontsize="small")
    paths.append(out / "compare_regret.png")
    write_figure(fig, paths[-1], dpi=110)

    fig, (ax,) = _figure(1, 1, (7.0, 4.5))
    for name in result.agents:
        err = curves[name]["estimation_error"]
        if np.isfinite(err).any():
            ax.plot(x, err, marker="o", markersize=3, color=color[name], label=name)
    ax.set_xlabel("round")
    ax.set_ylabel("mean ‖M̂_a − M_a‖_F")
    ax.set_yscale("log")
    ax.set_title("Estimation error (agents with an estimate)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    paths.append(out / "compare_estimation_error.png")
    write_figure(fig, paths[-1], dpi=110)

    labels = [q.label for q in result.quantities()]
    cols = min(3, len(labels))
    fig, axes = _figure(math.ceil(len(labels) / cols), cols)
    for ax, label in zip(axes, labels, strict=False):
        for name in result.agents:
            width = curves[name]["widths"][label]
            if np.isfinite(width).any():
                ax.plot(x, width, marker="o", markersize=3, color=color[name], label=name)
        ax.set_title(f"mean interval width: {label}")
        ax.set_xlabel("round")
        ax.set_yscale("log")
    for ax in axes[len(labels) :]:
        ax.set_visible(False)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize="x-small")
    paths.append(out / "compare_interval_width.png")
    write_figure(fig, paths[-1], dpi=110)
    return paths
