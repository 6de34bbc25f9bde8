"""``lrbandit reproduce``: the paper's simulation studies (docs/method.md §6), from one command.

Each study runs on the vector environment with a batched agent (ε-greedy low-rank SGD; for
``ensemble``, ensemble sampling of Appendix B.3 with the inference of Appendix A) and the
inference wrappers sharing its estimate; one run to the largest ``n`` reads the intervals at
every requested ``n``.  Chunks of trials are seeded from one ``SeedSequence`` and run with
one BLAS thread, so the numbers do not depend on ``--jobs`` or ``--backend``.

Outputs under ``--out`` (a folder): ``{study}.csv`` and ``{study}.json`` (rows,
configuration, versions, seed, timing, the list of figures), ``{study}.npz`` (the raw
per-trial arrays of every setting, keys ``"{setting}/{array}"``; :func:`load_raw` reads them
back and :func:`redraw_figures` redraws the figures) and, with the ``plot`` extra, PNG
figures ``{study}[_{setting}]_{zscores,coverage,length}.png``
(:mod:`lrbandit_gym.experiments.figures`).  Every file names the run that wrote it and is
written atomically; a folder that already holds the study's files is refused before the run
unless ``overwrite`` is set, and then the earlier run's files that this run does not write
again are removed (:mod:`lrbandit_gym.experiments.outputs`).  Ctrl-C stops the run within
a second and writes the chunks that finished, marked partial (:func:`reproduce`).
"""

from __future__ import annotations

import dataclasses
import platform
import sys
import time
from pathlib import Path

import numpy as np

from lrbandit_gym import engine as engines
from lrbandit_gym.experiments.ensemble_study import EnsembleStudyConfig, run_ensemble_study
from lrbandit_gym.experiments.outputs import (
    ArgumentError,
    RunStamp,
    check_outputs,
    remove_stale,
    stamped,
    write_csv,
    write_json,
    write_npz,
)
from lrbandit_gym.experiments.parallel import RunInterrupted, interrupted_line
from lrbandit_gym.experiments.studies import (
    StudyConfig,
    format_coverage,
    process_map,
    run_study,
    summarize_parameters,
    summarize_uniform,
    summarize_value,
)

__all__ = [
    "PAPER",
    "PAPER_ENSEMBLE",
    "STUDIES",
    "STUDY_DEFAULTS",
    "load_raw",
    "redraw_figures",
    "reproduce",
]

#: The paper's published numbers: (table, target, n, quantity) -> value.
PAPER = {
    # Table 1: coverage / mean CI length, i = 0 and i = 1.
    **{
        ("coverage", "T1", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.909,
            (1000, 1): 0.913,
            (2000, 0): 0.923,
            (2000, 1): 0.925,
            (3000, 0): 0.929,
            (3000, 1): 0.936,
        }.items()
    },
    **{
        ("coverage", "T2", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.906,
            (1000, 1): 0.908,
            (2000, 0): 0.924,
            (2000, 1): 0.923,
            (3000, 0): 0.931,
            (3000, 1): 0.930,
        }.items()
    },
    **{
        ("mean_length", "T1", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.018,
            (1000, 1): 0.010,
            (2000, 0): 0.013,
            (2000, 1): 0.008,
            (3000, 0): 0.011,
            (3000, 1): 0.006,
        }.items()
    },
    **{
        ("mean_length", "T2", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.065,
            (1000, 1): 0.042,
            (2000, 0): 0.048,
            (2000, 1): 0.031,
            (3000, 0): 0.039,
            (3000, 1): 0.026,
        }.items()
    },
    # Table 3 (i = 1): MSE and CI length, ours / exploration-only.
    **{
        ("mse", t, n, "arm 1"): v * 1e-4
        for (t, n), v in {
            ("T1", 1000): 0.096,
            ("T1", 2000): 0.046,
            ("T1", 3000): 0.029,
            ("T2", 1000): 1.653,
            ("T2", 2000): 0.786,
            ("T2", 3000): 0.510,
        }.items()
    },
    **{
        ("mse_exploration_only", t, n, "arm 1"): v * 1e-4
        for (t, n), v in {
            ("T1", 1000): 0.191,
            ("T1", 2000): 0.095,
            ("T1", 3000): 0.062,
            ("T2", 1000): 3.517,
            ("T2", 2000): 1.735,
            ("T2", 3000): 1.149,
        }.items()
    },
    ("coverage", "V*", 1000, "optimal value"): 0.945,
}
#: Table 2 (T1, n = 3000): coverage and length for r = 3, 5, 7.
PAPER_TABLE2 = {
    3: ((0.929, 0.936), (0.011, 0.006)),
    5: ((0.917, 0.921), (0.015, 0.014)),
    7: ((0.913, 0.906), (0.021, 0.021)),
}

#: Appendix B.3 (ensemble sampling; inference of Appendix A), its figure of z-scores: the
#: paper's only statement about this study.
PAPER_ENSEMBLE = "z-scores close to N(0, 1) at n = 300 and n = 700 (a histogram; no numbers)"

STUDIES = ("table1", "table2", "table3", "value", "ensemble")

#: The paper's trials and checkpoints n of each study (docs/method.md §6).
STUDY_DEFAULTS = {
    "table1": (5000, (1000, 2000, 3000)),
    "table2": (5000, (1000, 2000, 3000)),
    "table3": (5000, (1000, 2000, 3000)),
    "value": (5000, (1000, 2000, 3000)),
    "ensemble": (500, (300, 700)),
}


#: Table 2's ranks.
TABLE2_RANKS = (3, 5, 7)


def _configs(
    study: str,
    n: tuple[int, ...],
    compare_projection: bool = False,
    ranks: tuple[int, ...] = TABLE2_RANKS,
) -> dict[str, StudyConfig | EnsembleStudyConfig]:
    if study == "table1":
        # The paper's G_t (projection="paper") on the same trajectories, only on request: it
        # doubles the inference work.
        variants = ("paper",) if compare_projection else ()
        return {"r=3": StudyConfig(checkpoints=n, variants=variants)}
    if study == "table2":
        # r = 3 is exactly table1's setting (same seeds, same numbers).
        return {f"r={r}": StudyConfig(rank=r, checkpoints=n, targets="paper") for r in ranks}
    if study == "table3":
        return {"r=3": StudyConfig(checkpoints=n, variants=("exploration_only",))}
    if study == "value":
        return {
            "value": StudyConfig(
                targets=None,
                value=True,
                epsilon=0.05,
                epsilon_decay=0.1,
                step_scale=0.002,
                singular_values=((1.0,) * 3, (15.0,) * 3),
                checkpoints=n,
            )
        }
    if study == "ensemble":
        return {"r=1": EnsembleStudyConfig(checkpoints=n)}
    raise ArgumentError(f"study must be one of {STUDIES}; got {study!r}", "study")


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


def _ray_map(jobs: int):
    """``map_fn(fn, items)`` on Ray (see :func:`~.parallel.ray_map`)."""
    from lrbandit_gym.experiments.parallel import ray_map

    def map_fn(fn, items):
        progress = _Progress(len(items), sys.stderr)
        try:
            return ray_map(fn, items, jobs, lambda i: progress.update())
        finally:
            progress.close()

    return map_fn


class _Progress:
    """A tqdm bar of chunks with ETA on ``stream`` (shown when it is a terminal), and one
    final line whatever the stream."""

    def __init__(self, total: int, stream):
        from tqdm.auto import tqdm

        self.total, self.stream = total, stream
        self.start = time.perf_counter()
        self.bar = tqdm(total=total, desc="chunks", unit="chunk", file=stream, disable=None)
        self.done = 0

    def update(self) -> None:
        self.done += 1
        self.bar.update(1)

    def close(self) -> None:
        disabled = self.bar.disable
        self.bar.close()
        if disabled:
            elapsed = time.perf_counter() - self.start
            print(f"{self.done}/{self.total} chunks in {elapsed:.0f} s", file=self.stream)


def _local_map(jobs: int, stream):
    """``map_fn(fn, items)`` in worker processes with a tqdm progress bar."""
    from lrbandit_gym.experiments.parallel import local_map

    def map_fn(fn, items):
        progress = _Progress(len(items), stream)
        try:
            return local_map(fn, items, jobs, lambda i: progress.update())
        finally:
            progress.close()

    return map_fn


def _study_rounds(config: StudyConfig | EnsembleStudyConfig) -> tuple[int, int]:
    """``(warm-start rounds, online rounds)`` of one trial of ``config``."""
    from agents import DEFAULT_WARM_START_ROUNDS

    warm = DEFAULT_WARM_START_ROUNDS if config.warm_start is None else config.warm_start
    return warm, max(config.checkpoints)


def draw_baseline(
    config: StudyConfig | EnsembleStudyConfig,
    n_trials: int,
    jobs: int,
    batch_size: int = 125,
    sample: float = 0.25,
    repeats: int = 5,
) -> float:
    """Seconds to merely draw all the study's contexts with numpy on ``jobs`` processes.

    Every process draws a ``sample`` fraction of one trial batch's rounds (the run's batch
    shape, float64 like the environment) in ``repeats`` timed loops, all processes at once,
    so the cores are shared as in the run and starting the processes is not counted.  Each
    process keeps its median loop (a burst of load from elsewhere on the machine moves a
    single loop, not the median); drawing is linear in the number of contexts, so the mean
    over processes scales up to the whole study: its warm-start rounds and online rounds for
    every trial.  At the defaults one call draws for about 5 s; ``lrbandit reproduce`` calls
    it before and after the run and reports the mean, since the machine's speed can drift
    while a long study runs.
    """
    rounds = sum(_study_rounds(config))
    per_loop = max(1, int(rounds * sample / repeats))
    batch = min(n_trials, batch_size)
    jobs_list = [(batch, config.d1, config.d2, per_loop, repeats)] * jobs
    if jobs > 1:
        seconds = process_map(jobs)(_draw_job, jobs_list)
    else:
        seconds = [_draw_job(j) for j in jobs_list]
    per_context = float(np.mean(seconds)) / (per_loop * batch)  # in one of `jobs` processes
    return per_context * n_trials * rounds / jobs


def _phase_breakdown(config: StudyConfig, phases: dict, draw_seconds: float) -> dict:
    """Each of :data:`lrbandit_gym.experiments.studies.PHASES` (process-seconds summed over chunks)
    beside the seconds that drawing its rounds' contexts takes (``draw_seconds``, the draw
    baseline for all rounds in process-seconds, shared out by rounds)."""
    warm, online = _study_rounds(config)
    share = {"warm_start_rounds": warm, "warm_start_fit": 0, "online_rounds": online}
    return {
        name: {"seconds": float(sec), "draw_seconds": draw_seconds * share[name] / (warm + online)}
        for name, sec in phases.items()
    }


def _phase_line(breakdown: dict) -> str:
    parts = []
    for name, row in breakdown.items():
        sec = row["seconds"]
        text = f"{name.replace('_', ' ')} {sec:.{0 if sec >= 100 else 1}f} s"
        if row["draw_seconds"] > 0:
            text += f" ({row['seconds'] / row['draw_seconds']:.2f}x drawing their contexts)"
        parts.append(text)
    return "  process-seconds by phase: " + "; ".join(parts)


def _draw_job(job) -> float:
    """Draw ``rounds`` batches of contexts ``repeats`` times after one untimed loop (while
    the other processes start); the median timed loop's seconds."""
    batch, d1, d2, rounds, repeats = job
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        rng.standard_normal((batch, d1, d2))
    loops = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(rounds):
            rng.standard_normal((batch, d1, d2))
        loops.append(time.perf_counter() - start)
    return float(np.median(loops))


def _summaries(study: str, config, result: dict) -> list[dict]:
    """Rows of one setting: the study's procedure ("ours") and its comparison variants."""
    if isinstance(config, EnsembleStudyConfig):
        plug_in = {
            "value_estimate": result["plug_in:value_estimate"],
            "value_se": result["plug_in:value_se"],
            "optimal_value": result["optimal_value"],
            "checkpoints": result["checkpoints"],
        }
        return summarize_value(result) + [
            dict(r, method="plug_in") for r in summarize_value(plug_in)
        ]
    if config.value:
        return summarize_value(result)
    rows = summarize_parameters(result)
    if "exploration_only" in config.variants:
        rows += [
            dict(r, method="exploration_only")
            for r in summarize_parameters(result, variant="exploration_only")
        ]
    if "paper" in config.variants:
        rows += [
            dict(r, method="paper_projection")
            for r in summarize_parameters(result, variant="paper")
        ]
    return rows


def _diagnostics(config, result: dict) -> dict:
    """Run facts worth recording beside the table (the ensemble's exploration and errors)."""
    if not isinstance(config, EnsembleStudyConfig):
        return {"mean_regret": float(np.mean(result["regret"]))}
    return {
        "mean_regret": float(np.mean(result["regret"])),
        "warm_start_rounds": config.warm_start,
        "initial_error_mean": [float(e) for e in np.mean(result["initial_error"], axis=-1)],
        "estimation_error_mean": {
            int(n): [float(e) for e in np.mean(result["estimation_error"][c], axis=-1)]
            for c, n in enumerate(result["checkpoints"])
        },
        "mean_exploration": {
            int(n): float(np.mean(result["exploration"][c]))
            for c, n in enumerate(result["checkpoints"])
        },
    }


def _figure_prefix(study: str, label: str, n_settings: int) -> str:
    if n_settings == 1:
        return study
    return f"{study}_" + "".join(ch for ch in label if ch.isalnum() or ch in "-_.")


def _references(study: str, label: str) -> tuple[dict, dict]:
    """The paper's coverage and length by ``(target, quantity) -> {n: value}``."""
    cov: dict = {}
    length: dict = {}
    if study == "table2":
        rank = int(label.split("=")[1])
        if rank not in PAPER_TABLE2:
            return cov, length
        for arm in (0, 1):
            cov[("T1", f"arm {arm}")] = {3000: PAPER_TABLE2[rank][0][arm]}
            length[("T1", f"arm {arm}")] = {3000: PAPER_TABLE2[rank][1][arm]}
        return cov, length
    if study not in ("table1", "value"):
        return cov, length
    for (what, target, n, quantity), value in PAPER.items():
        if (target == "V*") != (study == "value"):
            continue
        if what == "coverage":
            cov.setdefault((target, quantity), {})[n] = value
        elif what == "mean_length":
            length.setdefault((target, quantity), {})[n] = value
    return cov, length


def _write_figures(study, settings, results, out: Path, stream, required=False) -> list[str]:
    """PNG figures of every setting; one line and no files without matplotlib (or, when
    ``required``, :class:`~.figures.MatplotlibMissing`)."""
    from lrbandit_gym.experiments.figures import (
        MISSING_MATPLOTLIB,
        MatplotlibMissing,
        study_figures,
    )

    paths = []
    for label in settings:
        cov, length = _references(study, label)
        prefix = _figure_prefix(study, label, len(settings))
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
            from lrbandit_gym.experiments.sequence_figures import uniform_figures

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
        return _write_figures(study, list(results), results, out, stream, required=True)


def reproduce(
    study: str,
    trials: int | None = None,
    n: tuple[int, ...] | None = None,
    seed: int = 0,
    out: str | Path = "lrbandit-out",
    jobs: int = 2,
    backend: str = "local",
    batch_size: int = 125,
    figures: bool = True,
    compare_projection: bool = False,
    ranks: tuple[int, ...] | None = None,
    warm_start: int | None = None,
    engine: str | None = None,
    uniform_from: int | None = None,
    tuning_n: int | None = None,
    point_estimate: str | None = None,
    stream=None,
    overwrite: bool = False,
) -> dict:
    """Run one study and write its outputs into ``out``.

    Parameters
    ----------
    study : {"table1", "table2", "table3", "value", "ensemble"}
    trials : int, optional
        Monte Carlo trials (default: the paper's, :data:`STUDY_DEFAULTS`).
    n : tuple of int, optional
        Checkpoints (default: the paper's).
    seed, jobs, backend, batch_size
        Chunks of ``batch_size`` trials are seeded from ``SeedSequence(seed)`` and run on
        ``jobs`` local processes or Ray workers; the numbers do not depend on either.
    out : str or Path
        Output folder: ``{study}.csv``, ``{study}.json``, ``{study}.npz`` and figures, each
        naming this run (command, settings, seed, version) and written atomically.
    overwrite : bool, default False
        Replace the study's files already in ``out``; without it they are refused before
        the run (:class:`~.outputs.OutputError`).  Files of the earlier run that this run
        does not write again (say ``{study}_uniform.csv``) are removed after it.
    figures : bool, default True
        Write the PNG figures (needs matplotlib; without it one line says they were
        skipped and how to install the ``plot`` extra).
    compare_projection : bool, default False
        ``table1`` only: also run the paper's ``G_t`` (``projection="paper"``) on the same
        trajectories, reported as the method "paper_projection".
    ranks : tuple of int, optional
        ``table2`` only: the ranks to run (default :data:`TABLE2_RANKS`; r = 3 is table1's
        setting, so ``ranks=(5, 7)`` completes a table1 run).
    warm_start : int, optional
        Uniformly random rounds before inference starts (the paper does not give this
        size): default 2000 (:data:`agents.DEFAULT_WARM_START_ROUNDS`), 300 for
        ``ensemble``.  2000 suits r = 3 at d = 50; r = 7 needs about 4000 (see README).
    engine : {"auto", "numpy", "numba"}, optional
        The engine of :mod:`lrbandit_gym.engine` (default: the current choice, "auto"
        unless set); recorded in the JSON.  Both give the same numbers up to rounding.
    uniform_from : int, optional
        Also report time-uniform coverage: every interval is read at *every* online round
        from ``uniform_from`` (n₀) to the last checkpoint, as a fixed-n interval and as a
        confidence sequence, and a trial counts as covered only if the truth stayed inside
        at all of them (``{study}_uniform.csv``, figures ``*_sequences.png`` and
        ``*_uniform.png``).  Not for ``ensemble``.
    tuning_n : int, optional
        Round at which the confidence sequences are tightest (default: the inference
        package's, 1000).
    point_estimate : {"one-step", "projection"}, optional
        How ``<M_a, T>`` is read from the debiased average (default "one-step", the
        library's; "projection" is the paper's Algorithm 3, eq. (12)); docs/method.md §4.
        Not for ``value`` and ``ensemble``, which estimate no linear form.

    Returns
    -------
    dict
        What ``{study}.json`` holds.

    Raises
    ------
    RunInterrupted
        On Ctrl-C once a chunk has finished (a ``KeyboardInterrupt``,
        :class:`~.parallel.RunInterrupted`): the workers stop within a second, the settings
        not reached are skipped, and what finished is printed and written as above, marked
        partial (the stamp's ``partial``; ``"partial"``, ``"interrupted"`` and
        ``"trials_done"`` in the JSON, which is ``result``).  Before any chunk finished,
        the ``KeyboardInterrupt`` itself, and nothing is written.
    """
    stream = sys.stdout if stream is None else stream
    if engine is not None:
        with engines.use(engine):
            return reproduce(
                study,
                trials=trials,
                n=n,
                seed=seed,
                out=out,
                jobs=jobs,
                backend=backend,
                batch_size=batch_size,
                figures=figures,
                compare_projection=compare_projection,
                ranks=ranks,
                warm_start=warm_start,
                uniform_from=uniform_from,
                tuning_n=tuning_n,
                point_estimate=point_estimate,
                stream=stream,
                overwrite=overwrite,
            )
    if study not in STUDIES:
        raise ArgumentError(f"study must be one of {STUDIES}; got {study!r}", "study")
    default_trials, default_n = STUDY_DEFAULTS[study]
    trials = default_trials if trials is None else trials
    n = default_n if n is None else tuple(n)
    for name, value, least in (
        ("trials", trials, 1),
        ("seed", seed, 0),
        ("jobs", jobs, 1),
        ("batch_size", batch_size, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
            raise ArgumentError(f"{name} must be an integer >= {least}; got {value!r}", name)
    if (
        not n
        or any(isinstance(v, bool) or not isinstance(v, int | np.integer) for v in n)
        or min(n) < 1
    ):
        raise ArgumentError(f"n must be one or more positive integers; got {n!r}", "n")
    if compare_projection and study != "table1":
        raise ArgumentError(
            f"compare_projection applies to table1 only; got study {study!r}",
            "compare_projection",
        )
    if ranks is not None:
        if study != "table2":
            raise ArgumentError(f"ranks applies to table2 only; got study {study!r}", "ranks")
        ranks = tuple(ranks)
        if not ranks or any(
            isinstance(r, bool) or not isinstance(r, int | np.integer) or not 1 <= r <= 50
            for r in ranks
        ):
            raise ArgumentError(f"ranks must be integers in [1, 50]; got {ranks!r}", "ranks")
    configs = _configs(study, tuple(sorted(n)), compare_projection, ranks or TABLE2_RANKS)
    if warm_start is not None:
        least = 0 if study == "ensemble" else 1
        if (
            isinstance(warm_start, bool)
            or not isinstance(warm_start, int | np.integer)
            or (warm_start < least)
        ):
            raise ArgumentError(
                f"warm_start must be an integer >= {least} for {study}; got {warm_start!r}",
                "warm_start",
            )
        configs = {
            k: dataclasses.replace(c, warm_start=int(warm_start)) for k, c in configs.items()
        }
    if point_estimate is not None:
        if study in ("value", "ensemble"):
            raise ArgumentError(
                f"point_estimate does not apply to the {study} study", "point_estimate"
            )
        if point_estimate not in ("one-step", "projection"):
            raise ArgumentError(
                f"point_estimate must be 'one-step' or 'projection'; got {point_estimate!r}",
                "point_estimate",
            )
        configs = {
            k: dataclasses.replace(c, point_estimate=point_estimate) for k, c in configs.items()
        }
    if uniform_from is not None or tuning_n is not None:
        if study == "ensemble":
            name = "uniform_from" if uniform_from is not None else "tuning_n"
            raise ArgumentError(
                "uniform_from and tuning_n do not apply to the ensemble study", name
            )
        if uniform_from is None:
            raise ArgumentError("tuning_n needs uniform_from (the first round checked)", "tuning_n")
        for name, value in (("uniform_from", uniform_from), ("tuning_n", tuning_n)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1
            ):
                raise ArgumentError(f"{name} must be a positive integer; got {value!r}", name)
        if uniform_from > max(n):
            raise ArgumentError(
                f"uniform_from must be at most the last checkpoint {max(n)}; got {uniform_from}",
                "uniform_from",
            )
        configs = {
            k: dataclasses.replace(
                c,
                uniform_from=int(uniform_from),
                tuning_n=None if tuning_n is None else int(tuning_n),
                trace_trials=2 if figures else 0,
            )
            for k, c in configs.items()
        }
    if backend not in ("local", "ray"):
        raise ArgumentError(f"backend must be 'local' or 'ray'; got {backend!r}", "backend")
    out = Path(out)
    earlier = check_outputs(out, output_patterns(study), overwrite)  # before any trial
    stamp = RunStamp.of(
        f"lrbandit reproduce {study}",
        {
            "trials": trials,
            "n": list(n),
            "batch_size": batch_size,
            "jobs": jobs,
            "backend": backend,
            "engine": engines.active_engine(),
            "compare_projection": compare_projection,
            "ranks": None if ranks is None else [int(r) for r in ranks],
            "warm_start": None if warm_start is None else int(warm_start),
            "uniform_from": uniform_from,
            "tuning_n": tuning_n,
            "point_estimate": point_estimate,
        },
        seed,
    )
    map_fn = _ray_map(jobs) if backend == "ray" else _local_map(jobs, sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    rows, timing, results, diagnostics, uniform_rows = [], {}, {}, {}, []
    done: dict[str, int] = {}  # trials each setting ran
    stopped: KeyboardInterrupt | None = None  # Ctrl-C: what finished is written, partial
    for label, config in configs.items():
        print(
            f"{study} {label}: {trials} trials, n = {list(config.checkpoints)}, "
            f"{jobs} job(s), backend {backend}, engine {engines.active_engine()}",
            file=stream,
        )
        result, timing[label], stopped = _run_setting(
            config, trials, seed, batch_size, jobs, map_fn, stream
        )
        if result is None:  # stopped before a chunk of this setting finished
            del timing[label]
            break
        done[label] = trials if not isinstance(stopped, RunInterrupted) else stopped.done
        results[label] = result
        diagnostics[label] = _diagnostics(config, result)
        for r in _summaries(study, config, result):
            rows.append({"study": study, "setting": label, "method": r.pop("method", "ours"), **r})
        for r in summarize_uniform(result):
            uniform_rows.append({"study": study, "setting": label, **r})
        if stopped is not None:
            break
    total = trials * len(configs)
    partial = "" if stopped is None else interrupted_line(sum(done.values()), total)
    if stopped is not None:
        if not results:
            raise stopped
        stamp = dataclasses.replace(stamp, partial=partial)
    if partial:
        counts = ", ".join(f"{k} {done.get(k, 0)} of {trials}" for k in configs)
        print(f"PARTIAL RESULT ({partial}: {counts}); the table is over those", file=stream)
    _print_table(study, rows, stream)
    if uniform_rows:
        _print_uniform(uniform_rows, stream)
    if study == "ensemble":
        _print_ensemble(rows, next(iter(diagnostics.values())), stream)
    raw = save_raw(out / f"{study}.npz", study, results, stamp)
    paths = []
    if figures:
        with stamped(stamp):
            paths = _write_figures(study, list(results), results, out, stream)
    meta = {
        "partial": bool(partial),
        "interrupted": partial or None,
        "trials_done": done,
        "study": study,
        "trials": trials,
        "n": list(n),
        "seed": seed,
        "jobs": jobs,
        "backend": backend,
        "engine": engines.active_engine(),
        "batch_size": batch_size,
        "compare_projection": compare_projection,
        "ranks": None if ranks is None else list(ranks),
        "warm_start": None if warm_start is None else int(warm_start),
        "configs": {
            k: {f: (list(v) if isinstance(v, tuple) else v) for f, v in vars(c).items()}
            for k, c in configs.items()
        },
        "timing": timing,
        "diagnostics": diagnostics,
        "versions": _versions(),
        "raw": str(raw),
        "figures": paths,
        "rows": rows,
        "uniform_from": uniform_from,
        "tuning_n": tuning_n,
        "uniform_rows": uniform_rows,
    }
    written = [str(raw), *paths]
    written.append(write_json(out / f"{study}.json", meta, stamp))
    written.append(write_csv(out / f"{study}.csv", rows, stamp))
    if uniform_rows:
        written.append(write_csv(out / f"{study}_uniform.csv", uniform_rows, stamp))
    remove_stale(earlier, written, stream)
    print(
        f"wrote {out / (study + '.csv')}, {out / (study + '.json')} and {raw}",
        file=stream,
    )
    if partial:
        print(f"{partial}: the files above hold what finished, marked partial", file=stream)
        raise RunInterrupted(meta, sum(done.values()), total)
    return meta


def _run_setting(config, trials, seed, batch_size, jobs, map_fn, stream):
    """Run one setting between two timings of the draw baseline (:func:`draw_baseline`):
    ``(result, timing, stopped)``.  ``stopped`` is the ``KeyboardInterrupt`` of a Ctrl-C (a
    :class:`~.parallel.RunInterrupted` when chunks of this setting finished, whose merged
    result is returned) or None; ``result`` is None when nothing of the setting finished.
    After Ctrl-C the second baseline is not drawn."""
    phases: dict = {}
    try:
        before = draw_baseline(config, trials, jobs, batch_size)
    except KeyboardInterrupt as exc:
        return None, {}, exc
    stopped = None
    start = time.perf_counter()
    try:
        if isinstance(config, EnsembleStudyConfig):
            result = run_ensemble_study(
                config, trials, seed=seed, batch_size=batch_size, map_fn=map_fn
            )
        else:
            result = run_study(
                config, trials, seed=seed, batch_size=batch_size, map_fn=map_fn, timing=phases
            )
    except RunInterrupted as exc:
        result, stopped = exc.result, exc
    except KeyboardInterrupt as exc:
        return None, {}, exc
    seconds = time.perf_counter() - start
    after = None
    if stopped is None:
        try:
            after = draw_baseline(config, trials, jobs, batch_size)
        except KeyboardInterrupt as exc:
            stopped = exc
    if after is None:
        timing = {"seconds": seconds, "draw_baseline_before_after": [before, None]}
        print(f"  run {seconds:.1f} s, interrupted", file=stream)
        return result, timing, stopped
    baseline = (before + after) / 2
    timing = {
        "seconds": seconds,
        "draw_baseline_seconds": baseline,
        "draw_baseline_before_after": [before, after],
    }
    print(
        f"  run {seconds:.1f} s; drawing its contexts alone: {baseline:.1f} s "
        f"(timed before and after the run: {before:.1f} s, {after:.1f} s; "
        f"ratio {seconds / baseline:.2f})",
        file=stream,
    )
    if phases:
        timing["phases"] = _phase_breakdown(config, phases, baseline * jobs)
        print(_phase_line(timing["phases"]), file=stream)
    return result, timing, stopped


def _versions() -> dict:
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


def _print_table(study, rows, stream) -> None:
    head = (
        f"{'setting':<9}{'method':<17}{'target':<7}{'n':>5} {'quantity':<14}"
        f"{'coverage [95% MC interval]':>27} {'(paper)':>7} {'length':>8} {'(paper)':>7} "
        f"{'MSE':>9} {'z mean':>7} {'z sd':>6}"
    )
    print(head, file=stream)
    print("-" * len(head), file=stream)
    for r in rows:
        key = (r["target"], r["n"], r["quantity"])
        if study == "table2":
            rank = int(r["setting"].split("=")[1])
            single = r["quantity"].startswith("arm ") and " - " not in r["quantity"]
            arm = int(r["quantity"].split()[1]) if single else None
            paper_cov = (
                PAPER_TABLE2[rank][0][arm]
                if arm is not None
                and r["target"] == "T1"
                and r["n"] == 3000
                and rank in PAPER_TABLE2
                else None
            )
            paper_len = PAPER_TABLE2[rank][1][arm] if paper_cov is not None else None
        elif study in ("table1", "table3", "value") and r["method"] == "ours":
            # The V* entry is the value study's; T1/T2 entries are Table 1's setting.
            mine = (r["target"] == "V*") == (study == "value")
            paper_cov = PAPER.get(("coverage",) + key) if mine else None
            paper_len = PAPER.get(("mean_length",) + key) if mine else None
        else:
            paper_cov = paper_len = None

        def fmt(v, spec):
            return format(v, spec) if v is not None else " " * len(format(0.0, spec))

        print(
            f"{r['setting']:<9}{r['method']:<17}{r['target']:<7}{r['n']:>5} "
            f"{r['quantity']:<14}{format_coverage(r):>27}"
            f"{fmt(paper_cov, '>7.3f')} {r['mean_length']:>8.4f} {fmt(paper_len, '>7.3f')}"
            f" {r['mse']:>9.2e} {r['z_mean']:>+7.3f} {r['z_sd']:>6.3f}",
            file=stream,
        )


def _print_ensemble(rows, diagnostics, stream) -> None:
    """Our z-score moments and coverage beside the paper's statement (Appendix B.3)."""
    print(f"paper (Appendix B.3, ensemble sampling): {PAPER_ENSEMBLE}", file=stream)
    for r in rows:
        if r["method"] != "ours":
            continue
        print(
            f"  ours, n = {r['n']}: z mean {r['z_mean']:+.3f} ± {r['z_mean_mcse']:.3f} "
            f"(N(0,1): 0), z sd {r['z_sd']:.3f} ± {r['z_sd_mcse']:.3f} (N(0,1): 1), "
            f"coverage {format_coverage(r)} (nominal 0.95)",
            file=stream,
        )
    errors = ", ".join(f"{e:.3f}" for e in diagnostics["initial_error_mean"])
    explore = ", ".join(f"n={n}: {e:.4f}" for n, e in diagnostics["mean_exploration"].items())
    print(
        f"  warm start {diagnostics['warm_start_rounds']} uniform rounds: mean "
        f"||M_hat_a - M_a||_F = {errors} when inference starts; mean e_hat_t {explore}; "
        f"plug_in = (1/n) sum_t q_t without the correction (a control, same se)",
        file=stream,
    )


def _print_uniform(rows, stream) -> None:
    """The time-uniform coverage table: fixed-n intervals against confidence sequences."""
    first = rows[0]
    print(
        f"\ntime-uniform coverage, read at every round n = {first['n0']}..{first['N']} "
        f"(sequences tuned at n = {first['tuning_n']}; at N a sequence is "
        f"{first['width_ratio']:.2f}x the fixed-n interval's width)",
        file=stream,
    )
    head = (
        f"{'setting':<8}{'target':<7}{'quantity':<15}{'fixed at N':>11}"
        f"{'fixed, all n':>21}{'sequence, all n':>21}"
    )
    print(head, file=stream)
    print("-" * len(head), file=stream)
    for r in rows:
        print(
            f"{r['setting']:<8}{r['target']:<7}{r['quantity']:<15}{r['fixed_at_N']:>11.3f}"
            f"{format_coverage(r, 'uniform_fixed'):>21}"
            f"{format_coverage(r, 'uniform_sequence'):>21}",
            file=stream,
        )
