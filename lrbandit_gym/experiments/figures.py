"""PNG figures of the Monte Carlo studies (needs the ``plot`` extra: matplotlib).

The functions take the raw result dicts of :func:`~lrbandit_gym.experiments.studies.run_study` and
:func:`~.ensemble_study.run_ensemble_study` (arrays with the trials on the last
axis; see :func:`lrbandit_gym.experiments.coverage.summarize_parameters`) and draw:

* :func:`zscore_figure`: histograms of the z-scores ``(estimate - truth) / se`` with the
  ``N(0, 1)`` density, one panel per target x arm (and the arm difference) at each ``n``,
  as the paper's Figs. 4-5 (``sqrt(n) (m_hat - m) / (sigma_hat S_hat)``, Theorem 3.2) and
  its appendix figures for ``V*`` (Theorem 4.2; Appendix A with estimated propensities);
* :func:`coverage_figure`: coverage against ``n`` with its 95% Wilson interval as the error
  bar, the nominal level and its Monte Carlo band ``level +- 1.96 sqrt(level (1 - level) /
  trials)`` cut at 0 and 1;
* :func:`length_figure`: mean interval length ``2 z se`` against ``n``.

Coverage and lengths come from
:func:`lrbandit_gym.experiments.coverage.summarize_parameters` and
:func:`~lrbandit_gym.experiments.coverage.summarize_value`: computation lives there, this
module only draws.  Figures are built on :class:`matplotlib.figure.Figure` directly (no
``pyplot``), so nothing here touches a caller's global matplotlib state or needs a display.  Without
matplotlib every function raises :class:`MatplotlibMissing`, an ``ImportError`` whose
message says how to install the extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from lrbandit_gym.experiments.coverage import summarize_parameters, summarize_value
from lrbandit_gym.experiments.outputs import write_figure

__all__ = [
    "MISSING_MATPLOTLIB",
    "MatplotlibMissing",
    "coverage_figure",
    "length_figure",
    "study_figures",
    "zscore_figure",
]

#: What to tell a user without matplotlib.
MISSING_MATPLOTLIB = (
    "matplotlib is not installed; install the plot extra: pip install 'lrbandit-gym[plot]'"
)

#: Legend labels of the inference variants a study may hold ("" is the study's own).
VARIANT_LABELS = {
    "": "ours",
    "paper": "paper's G_t",
    "tangent": "tangent G_t",
    "exploration_only": "exploration-only",
    "no_ipw": "no IPW (control)",
    "no_debias": "no debiasing (control)",
    "plug_in": "plug-in (control)",
}


class MatplotlibMissing(ImportError):
    """Raised by the figure functions when matplotlib cannot be imported."""


def figure_class():
    """``matplotlib.figure.Figure``, or :class:`MatplotlibMissing`."""
    try:
        import matplotlib  # noqa: F401  (the package first: a blocked package must fail here)
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MatplotlibMissing(MISSING_MATPLOTLIB) from exc
    return Figure


def panel_figure(n_rows: int, n_cols: int, panel: tuple[float, float]):
    """A headless ``Figure`` with an ``(n_rows, n_cols)`` array of axes."""
    Figure = figure_class()
    # At least 6.5 inches wide, so that a one-panel figure still has room for its title.
    width = max(panel[0] * n_cols, 6.5)
    fig = Figure(figsize=(width, panel[1] * n_rows), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    return fig, axes


def _check_result(result: Mapping) -> None:
    if not isinstance(result, Mapping):
        raise ValueError(f"result must be a study's dict of arrays; got {type(result).__name__}")
    if "checkpoints" not in result:
        raise ValueError(
            "result must hold 'checkpoints' (a run_study or run_ensemble_study result); "
            f"got keys {sorted(result)}"
        )


def _parameter_variants(result: Mapping) -> list[str]:
    """Parameter-inference variants with at least one target ("" first)."""
    found = []
    for key in result:
        if key == "estimate" or key.endswith(":estimate"):
            if np.ndim(result[key]) == 4 and np.shape(result[key])[1] > 0:
                found.append(key[: -len(":estimate")] if key != "estimate" else "")
    return sorted(found, key=lambda v: (v != "", v))


def _value_variants(result: Mapping) -> list[str]:
    """Value-inference variants with finite estimates ("" first)."""
    found = []
    for key in result:
        if key == "value_estimate" or key.endswith(":value_estimate"):
            if np.isfinite(result[key]).any():
                found.append(key[: -len(":value_estimate")] if key != "value_estimate" else "")
    return sorted(found, key=lambda v: (v != "", v))


def _value_view(result: Mapping, variant: str) -> dict:
    """The arrays :func:`summarize_value` reads, for one value variant."""
    p = f"{variant}:" if variant else ""
    return {
        "value_estimate": result[p + "value_estimate"],
        "value_se": result[p + "value_se"],
        "optimal_value": result["optimal_value"],
        "checkpoints": result["checkpoints"],
    }


def _summary(result: Mapping, confidence_level: float) -> dict[str, list[dict]]:
    """Rows of every variant, keyed by variant, each row tagged with its panel key."""
    rows: dict[str, list[dict]] = {}
    for v in _parameter_variants(result):
        rows.setdefault(v, []).extend(summarize_parameters(result, confidence_level, variant=v))
    for v in _value_variants(result):
        rows.setdefault(v, []).extend(summarize_value(_value_view(result, v), confidence_level))
    if not rows:
        raise ValueError(
            "result holds no finite interval: neither parameter targets nor optimal-value estimates"
        )
    return rows


def _zscores(result: Mapping, variant: str) -> dict[tuple[str, str], list[np.ndarray]]:
    """``(target, quantity) -> [z at each checkpoint]`` (finite values only)."""
    out: dict[tuple[str, str], list[np.ndarray]] = {}

    def finite(est, se, truth):
        z = (np.asarray(est, float) - truth) / np.asarray(se, float)
        return z[np.isfinite(z)]

    C = len(result["checkpoints"])
    if variant in _parameter_variants(result):
        p = f"{variant}:" if variant else ""
        est, se = result[p + "estimate"], result[p + "se"]
        names = ["T1", "T2"][: est.shape[1]]
        for j, name in enumerate(names):
            for arm in range(est.shape[2]):
                out[(name, f"arm {arm}")] = [
                    finite(est[c, j, arm], se[c, j, arm], result["truth"][j, arm]) for c in range(C)
                ]
            diff = result["truth"][j, 1] - result["truth"][j, 0]
            out[(name, "arm 1 - arm 0")] = [
                finite(result[p + "diff_estimate"][c, j], result[p + "diff_se"][c, j], diff)
                for c in range(C)
            ]
    if variant in _value_variants(result):
        view = _value_view(result, variant)
        truth = float(view["optimal_value"])
        out[("V*", "optimal value")] = [
            finite(view["value_estimate"][c], view["value_se"][c], truth) for c in range(C)
        ]
    return out


def _panel_title(key: tuple[str, str]) -> str:
    target, quantity = key
    if target == "V*":
        return "V*"
    return f"{target}: <M_1 - M_0, T>" if quantity == "arm 1 - arm 0" else f"{target}: {quantity}"


def _panel_keys(rows: Mapping[str, list[dict]]) -> list[tuple[str, str]]:
    keys: list[tuple[str, str]] = []
    for r in next(iter(rows.values())):
        key = (r["target"], r["quantity"])
        if key not in keys:
            keys.append(key)
    return keys


def _grid(keys: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """Rows = targets, columns = quantities per target."""
    targets = list(dict.fromkeys(k[0] for k in keys))
    per = max(sum(k[0] == t for k in keys) for t in targets)
    return len(targets), per


def _axis_for(keys, key, axes):
    targets = list(dict.fromkeys(k[0] for k in keys))
    i = targets.index(key[0])
    j = [k for k in keys if k[0] == key[0]].index(key)
    return axes[i, j]


def _hide_unused(keys, axes) -> None:
    used = {id(_axis_for(keys, k, axes)) for k in keys}
    for ax in axes.flat:
        if id(ax) not in used:
            ax.set_visible(False)


def check_png_path(path) -> Path:
    """``path`` as a ``Path`` ending in ``.png``, its folder created."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must name a .png file; got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _check_level(confidence_level) -> float:
    level = float(confidence_level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1); got {confidence_level!r}")
    return level


def zscore_figure(
    result: Mapping,
    path: str | Path,
    *,
    bins: int = 40,
    z_max: float = 4.5,
    title: str | None = None,
) -> Path:
    """Histograms of ``(estimate - truth) / se`` beside the ``N(0, 1)`` density.

    Rows are the checkpoints ``n``; columns the targets x arms and arm differences (or,
    for a value study, one row with a panel per ``n``).  The study's own procedure is
    filled; other variants held in ``result`` (the paper's ``G_t``, exploration-only, a
    plug-in control) are drawn as outlines.  Each panel reports the z mean and s.d. and how
    many z-scores fall outside ``[-z_max, z_max]``.

    Parameters
    ----------
    result : dict of ndarray
        A :func:`~lrbandit_gym.experiments.studies.run_study` or
        :func:`~lrbandit_gym.experiments.ensemble_study.run_ensemble_study` result.
    path : str or Path
        Output ``.png`` file (its folder is created).
    bins : int, default 40
    z_max : float, default 4.5
        Half-width of the histogram range.
    title : str, optional

    Returns
    -------
    Path
    """
    _check_result(result)
    path = check_png_path(path)
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
        raise ValueError(f"bins must be an integer >= 2; got {bins!r}")
    if not (np.isfinite(z_max) and z_max > 0):
        raise ValueError(f"z_max must be finite and > 0; got {z_max!r}")
    rows = _summary(result, 0.95)
    variants = list(rows)
    z = {v: _zscores(result, v) for v in variants}
    keys = list(z[variants[0]])
    ns = [int(n) for n in result["checkpoints"]]
    single = len(keys) == 1
    n_rows, n_cols = (1, len(ns)) if single else (len(ns), len(keys))
    fig, axes = panel_figure(n_rows, n_cols, (2.9, 2.3))
    edges = np.linspace(-z_max, z_max, bins + 1)
    grid = np.linspace(-z_max, z_max, 301)
    for c, n in enumerate(ns):
        for q, key in enumerate(keys):
            ax = axes[0, c] if single else axes[c, q]
            for v in variants:
                if key not in z[v]:
                    continue
                values = z[v][key][c]
                label = VARIANT_LABELS.get(v, v)
                if v == variants[0]:
                    ax.hist(values, bins=edges, density=True, alpha=0.45, label=label)
                else:
                    ax.hist(values, bins=edges, density=True, histtype="step", lw=1.2, label=label)
            density = np.exp(-grid * grid / 2) / np.sqrt(2 * np.pi)  # N(0, 1)
            ax.plot(grid, density, color="red", lw=1.2, label="N(0, 1)")
            main = z[variants[0]][key][c]
            outside = int(np.sum(np.abs(main) > z_max))
            text = (
                f"mean {main.mean():+.2f}\nsd {main.std(ddof=1):.2f}"
                if main.size > 1
                else "too few trials"
            )
            if outside:
                text += f"\n{outside} beyond ±{z_max:g}"
            ax.text(0.02, 0.97, text, transform=ax.transAxes, va="top", fontsize=7)
            ax.set_title(f"{_panel_title(key)}, n={n}", fontsize=9)
            ax.set_xlim(-z_max, z_max)
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=6, loc="upper right")
    trials = next(iter(rows.values()))[0]["trials"]
    fig.suptitle(
        (title + ": " if title else "") + f"z-scores (estimate - truth) / se, {trials} trials",
        fontsize=10,
    )
    write_figure(fig, path, dpi=110)
    return path


def _mc_band(level: float, trials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 95% acceptance band of the coverage of a valid procedure, cut to ``[0, 1]``."""
    half = 1.96 * np.sqrt(level * (1 - level) / np.maximum(trials, 1))
    return np.maximum(level - half, 0.0), np.minimum(level + half, 1.0)


def coverage_error_bars(rows: Sequence[Mapping], key: str = "coverage") -> np.ndarray:
    """``yerr`` of ``errorbar``/``bar``, shape ``(2, len(rows))``: the distances from each
    coverage down to ``{key}_low`` and up to ``{key}_high``, its Wilson interval
    (:func:`~lrbandit_gym.experiments.coverage.coverage_interval`), which stays inside
    ``[0, 1]`` where ``±1.96 sqrt(c (1 − c)/N)`` would pass 1 or vanish; 0 where undefined."""
    y = np.array([r[key] for r in rows], dtype=float)
    low = np.array([r.get(f"{key}_low", np.nan) for r in rows], dtype=float)
    high = np.array([r.get(f"{key}_high", np.nan) for r in rows], dtype=float)
    return np.nan_to_num(np.vstack([y - low, high - y]), nan=0.0)


def coverage_figure(
    result: Mapping,
    path: str | Path,
    *,
    confidence_level: float = 0.95,
    reference: Mapping[tuple[str, str], Mapping[int, float]] | None = None,
    title: str | None = None,
) -> Path:
    """Coverage of the ``confidence_level`` intervals against ``n``, one panel per quantity.

    Each variant's coverage carries its 95% Wilson interval as the error bar (never past 0
    or 1); the nominal level is a line and ``level ± 1.96 sqrt(level (1 - level) / trials)``,
    cut to ``[0, 1]``, the band a valid procedure stays in 95% of the time.

    Parameters
    ----------
    result : dict of ndarray
        A study result (see :func:`zscore_figure`).
    path : str or Path
        Output ``.png`` file.
    confidence_level : float, default 0.95
    reference : mapping, optional
        ``{(target, quantity): {n: coverage}}`` drawn as crosses, e.g. the paper's Table 1
        (``("T1", "arm 0"): {1000: 0.909, ...}``).
    title : str, optional

    Returns
    -------
    Path
    """
    return _against_n(result, path, "coverage", confidence_level, reference, title)


def length_figure(
    result: Mapping,
    path: str | Path,
    *,
    confidence_level: float = 0.95,
    reference: Mapping[tuple[str, str], Mapping[int, float]] | None = None,
    title: str | None = None,
) -> Path:
    """Mean length ``2 z se`` of the intervals against ``n``, one panel per quantity.

    A dashed guide ``∝ n^{-1/2}`` passes through the study's own first point: the
    parametric rate of Theorems 3.2 and 4.2.  ``reference`` (as in :func:`coverage_figure`)
    adds published lengths, e.g. the paper's Table 1.
    """
    return _against_n(result, path, "mean_length", confidence_level, reference, title)


def _against_n(result, path, what, confidence_level, reference, title) -> Path:
    _check_result(result)
    path = check_png_path(path)
    level = _check_level(confidence_level)
    rows = _summary(result, level)
    keys = _panel_keys(rows)
    n_rows, n_cols = _grid(keys)
    fig, axes = panel_figure(n_rows, n_cols, (3.2, 2.6))
    z = ndtri(0.5 + level / 2)
    for key in keys:
        ax = _axis_for(keys, key, axes)
        main_rows = [r for r in next(iter(rows.values())) if (r["target"], r["quantity"]) == key]
        ns_run = {r["n"] for r in main_rows}
        for v, vrows in rows.items():
            mine = [r for r in vrows if (r["target"], r["quantity"]) == key]
            if not mine:
                continue
            if what == "mean_length" and v != next(iter(rows)):
                if [r[what] for r in mine] == [r[what] for r in main_rows]:
                    continue  # a control sharing the study's standard errors (plug-in)
            ns = np.array([r["n"] for r in mine], dtype=float)
            y = np.array([r[what] for r in mine])
            label = VARIANT_LABELS.get(v, v)
            if what == "coverage":
                err = coverage_error_bars(mine)
                ax.errorbar(ns, y, yerr=err, marker="o", ms=4, capsize=3, label=label)
            else:
                ax.plot(ns, y, marker="o", ms=4, label=label)
                if v == next(iter(rows)) and np.isfinite(y[0]):
                    guide = y[0] * np.sqrt(ns[0] / ns)
                    ax.plot(ns, guide, "k--", lw=0.8, label="∝ n^-1/2")
        if what == "coverage":
            ns = np.array([r["n"] for r in main_rows], dtype=float)
            lo, hi = _mc_band(level, np.array([r["trials"] for r in main_rows], dtype=float))
            pad = 0.04 * (ns.max() - ns.min()) if ns.size > 1 else 0.05 * ns[0]
            xs = np.concatenate([[ns[0] - pad], ns, [ns[-1] + pad]])
            ax.fill_between(
                xs,
                np.concatenate([[lo[0]], lo, [lo[-1]]]),
                np.concatenate([[hi[0]], hi, [hi[-1]]]),
                color="grey",
                alpha=0.2,
                label="MC band",
            )
            ax.axhline(level, color="k", lw=0.8, label=f"nominal {level:g}")
        # Only the published values at this study's n (a reference at n = 3000 must not
        # stretch the axis of a short run).
        ref = sorted((n, v) for n, v in (reference or {}).get(key, {}).items() if n in ns_run)
        if ref:
            ax.plot([n for n, _ in ref], [v for _, v in ref], "x", color="red", ms=6, label="paper")
        ax.set_title(_panel_title(key), fontsize=9)
        ax.set_xlabel("n", fontsize=8)
        ax.set_ylabel("coverage" if what == "coverage" else f"mean {level:g} CI length", fontsize=8)
        ax.tick_params(labelsize=7)
    _hide_unused(keys, axes)
    _axis_for(keys, keys[0], axes).legend(fontsize=6)
    trials = next(iter(rows.values()))[0]["trials"]
    name = "coverage" if what == "coverage" else "mean interval length"
    fig.suptitle(
        (title + ": " if title else "")
        + f"{name} of {level:g} intervals, {trials} trials (z = {z:.3f})",
        fontsize=10,
    )
    write_figure(fig, path, dpi=110)
    return path


def study_figures(
    result: Mapping,
    out: str | Path,
    prefix: str,
    *,
    confidence_level: float = 0.95,
    coverage_reference: Mapping | None = None,
    length_reference: Mapping | None = None,
    title: str | None = None,
) -> list[Path]:
    """Write ``{prefix}_zscores.png``, ``{prefix}_coverage.png`` and ``{prefix}_length.png``.

    Parameters
    ----------
    result : dict of ndarray
        A study result (see :func:`zscore_figure`).
    out : str or Path
        Output folder (created).
    prefix : str
        File-name prefix, e.g. ``"table1"`` or ``"table2_r5"``.
    confidence_level : float, default 0.95
    coverage_reference, length_reference : mapping, optional
        Published values (see :func:`coverage_figure`).
    title : str, optional

    Returns
    -------
    list of Path
        The three files, in that order.

    Raises
    ------
    MatplotlibMissing
        Without matplotlib (before anything is written).
    """
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "/\\"):
        raise ValueError(f"prefix must be a non-empty file-name prefix; got {prefix!r}")
    figure_class()  # fail before any file is written
    out = Path(out)
    title = prefix if title is None else title
    return [
        zscore_figure(result, out / f"{prefix}_zscores.png", title=title),
        coverage_figure(
            result,
            out / f"{prefix}_coverage.png",
            confidence_level=confidence_level,
            reference=coverage_reference,
            title=title,
        ),
        length_figure(
            result,
            out / f"{prefix}_length.png",
            confidence_level=confidence_level,
            reference=length_reference,
            title=title,
        ),
    ]
