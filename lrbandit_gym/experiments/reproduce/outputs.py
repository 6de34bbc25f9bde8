"""The files of ``lrbandit reproduce``: which files a study writes into ``--out``, its raw
per-trial arrays (``{study}.npz``, :func:`save_raw` and :func:`load_raw`), its figures
(:func:`write_figures`, :func:`redraw_figures` from a saved ``.npz``) and the versions it
records.  Every file names the run that wrote it and is written atomically
(:mod:`lrbandit_gym.experiments.outputs`).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

from lrbandit_gym import engine as engines
from lrbandit_gym.experiments.outputs import RunStamp, check_outputs, stamped, write_npz
from lrbandit_gym.experiments.reproduce.paper_numbers import paper_references

__all__ = [
    "FIGURE_KINDS",
    "figure_prefix",
    "load_raw",
    "output_patterns",
    "redraw_figures",
    "run_versions",
    "save_raw",
    "write_figures",
]

#: Figure kinds a study writes (``{prefix}_{kind}.png``).
FIGURE_KINDS = ("zscores", "coverage", "length", "sequences", "uniform")


def output_patterns(study: str, figures: bool = True) -> list[str]:
    """Glob patterns of every file a run of ``study`` may write into ``--out``: its tables,
    raw arrays and figures (for every setting), and nothing else of the folder's."""
    names = [f"{study}.csv", f"{study}.json", f"{study}.npz", f"{study}_uniform.csv"]
    if figures:
        names += [f"{study}_{kind}.png" for kind in FIGURE_KINDS]
        names += [f"{study}_*_{kind}.png" for kind in FIGURE_KINDS]
    return names


def figure_prefix(study: str, label: str, n_settings: int) -> str:
    """The file-name prefix of a setting's figures: the study's name alone for a study of
    one setting, else with the setting's label."""
    if n_settings == 1:
        return study
    return f"{study}_" + "".join(ch for ch in label if ch.isalnum() or ch in "-_.")


def write_figures(study, settings, results, out: Path, stream, required=False) -> list[str]:
    """PNG figures of every setting; one line and no files without matplotlib (or, when
    ``required``, :class:`~.figures.MatplotlibMissing`)."""
    from lrbandit_gym.experiments.figures import (
        MISSING_MATPLOTLIB,
        MatplotlibMissing,
        study_figures,
    )

    paths = []
    for label in settings:
        cov, length = paper_references(study, label)
        prefix = figure_prefix(study, label, len(settings))
        title = study if len(settings) == 1 else f"{study} {label}"
        try:
            written = study_figures(
                results[label],
                out,
                prefix,
                coverage_reference=cov,
                length_reference=length,
                title=title,
            )
        except MatplotlibMissing:
            if required:
                raise
            print(
                f"figures skipped: {MISSING_MATPLOTLIB} (or pass --no-figures)",
                file=stream,
            )
            return []
        paths += [str(p) for p in written]
        if "uniform_rounds" in results[label]:
            from lrbandit_gym.experiments.reproduce.sequence_figures import uniform_figures

            written = uniform_figures(results[label], out, prefix, title=title)
            paths += [str(p) for p in written]
    print(f"figures: {', '.join(Path(p).name for p in paths)}", file=stream)
    return paths


def save_raw(
    path: str | Path, study: str, results: dict[str, dict], stamp: RunStamp | None = None
) -> Path:
    """Write every setting's raw arrays to one ``.npz`` (keys ``"{setting}/{array}"``),
    atomically, with the run's ``stamp`` under ``"metadata"``."""
    arrays = {"study": np.array(study)}
    for label, result in results.items():
        for key, value in result.items():
            arrays[f"{label}/{key}"] = np.asarray(value)
    path = Path(path)
    write_npz(path, arrays, stamp)
    return path


def load_raw(path: str | Path) -> tuple[str, dict[str, dict]]:
    """Read a :func:`save_raw` file: ``(study, {setting: result dict})``."""
    with np.load(Path(path)) as data:
        if "study" not in data.files:
            raise ValueError(f"{path} is not a 'lrbandit reproduce' .npz (no 'study' entry)")
        study = str(data["study"])
        results: dict[str, dict] = {}
        for key in data.files:
            if key in ("study", "metadata"):
                continue
            label, _, name = key.partition("/")
            results.setdefault(label, {})[name] = data[key]
    return study, results


def redraw_figures(
    path: str | Path, out: str | Path | None = None, stream=None, overwrite: bool = False
) -> list[str]:
    """Redraw the figures of a ``{study}.npz`` into the folder ``out`` (default: beside the
    file).  Figures already there are refused unless ``overwrite`` (:class:`~.outputs.
    OutputError`), before anything is drawn; without matplotlib it raises
    :class:`~.figures.MatplotlibMissing`.  Each figure's PNG metadata names the npz."""
    from lrbandit_gym.experiments.figures import figure_class

    stream = sys.stdout if stream is None else stream
    figure_class()  # without matplotlib, fail before anything else
    study, results = load_raw(path)
    out = Path(path).parent if out is None else Path(out)
    patterns = [p for p in output_patterns(study) if p.endswith(".png")]
    check_outputs(out, patterns, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    stamp = RunStamp.of("lrbandit figures", {"npz": str(path)}, None)
    with stamped(stamp):
        return write_figures(study, list(results), results, out, stream, required=True)


def run_versions() -> dict:
    """The versions of what computed the numbers (recorded in ``{study}.json``)."""
    import gymnasium
    import scipy

    import lrbandit_gym

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "gymnasium": gymnasium.__version__,
        "lrbandit_gym": lrbandit_gym.__version__,
        "numba": _numba_version(),
        "platform": platform.platform(),
    }


def _numba_version() -> str | None:
    if not engines.numba_available():
        return None
    import numba

    return numba.__version__
