"""``lrbandit reproduce``: the paper's simulation studies (docs/method.md §6), from one command.

Each study runs on the vector environment with a batched agent (ε-greedy low-rank SGD; for
``ensemble``, ensemble sampling of Appendix B.3 with the inference of Appendix A) and the
inference wrappers sharing its estimate; one run to the largest ``n`` reads the intervals at
every requested ``n``.  Chunks of trials are seeded from one ``SeedSequence`` and run with
one BLAS thread on the Monte Carlo engine (:mod:`~lrbandit_gym.experiments.montecarlo`), so
the numbers do not depend on ``--jobs`` or ``--backend``.

Outputs under ``--out`` (a folder): ``{study}.csv`` and ``{study}.json`` (rows,
configuration, versions, seed, timing, the list of figures), ``{study}.npz`` (the raw
per-trial arrays of every setting, keys ``"{setting}/{array}"``;
:func:`~lrbandit_gym.experiments.reproduce.outputs.load_raw` reads them back and
:func:`~lrbandit_gym.experiments.reproduce.outputs.redraw_figures` redraws the figures) and,
with the ``plot`` extra, PNG figures ``{study}[_{setting}]_{zscores,coverage,length}.png``
(:mod:`lrbandit_gym.experiments.figures`).  Every file names the run that wrote it and is
written atomically; a folder that already holds the study's files is refused before the run
unless ``overwrite`` is set, and then the earlier run's files that this run does not write
again are removed (:mod:`lrbandit_gym.experiments.outputs`).  Ctrl-C stops the run within
a second and writes the chunks that finished, marked partial (:func:`reproduce`).

A run takes four steps: the arguments become one configuration per setting
(:func:`study_configs`), each setting runs timed against the draw baseline
(:func:`~lrbandit_gym.experiments.reproduce.timing.run_timed_setting`) and its rows are read
(:func:`run_settings`), the tables are printed
(:mod:`~lrbandit_gym.experiments.reproduce.tables`), and the files are written
(:func:`write_outputs`).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lrbandit_gym import engine as engines
from lrbandit_gym.experiments.coverage import summarize_uniform
from lrbandit_gym.experiments.ensemble_study import EnsembleStudyConfig
from lrbandit_gym.experiments.montecarlo import BACKENDS, progress_map
from lrbandit_gym.experiments.outputs import (
    ArgumentError,
    RunStamp,
    check_outputs,
    remove_stale,
    stamped,
    write_csv,
    write_json,
)
from lrbandit_gym.experiments.parallel import RunInterrupted, interrupted_line
from lrbandit_gym.experiments.reproduce.outputs import (
    output_patterns,
    run_versions,
    save_raw,
    write_figures,
)
from lrbandit_gym.experiments.reproduce.tables import (
    print_ensemble,
    print_table,
    print_uniform,
    study_diagnostics,
    study_rows,
)
from lrbandit_gym.experiments.reproduce.timing import run_timed_setting
from lrbandit_gym.experiments.studies import StudyConfig

__all__ = [
    "STUDIES",
    "STUDY_DEFAULTS",
    "TABLE2_RANKS",
    "StudyRun",
    "reproduce",
    "run_settings",
    "study_configs",
    "write_outputs",
]

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


def _is_int(value, least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and value >= least


def _check_run(trials, n, seed, jobs, batch_size) -> None:
    """Refuse a run's arguments (:class:`~.outputs.ArgumentError` naming the first wrong
    one) before anything runs."""
    for name, value, least in (
        ("trials", trials, 1),
        ("seed", seed, 0),
        ("jobs", jobs, 1),
        ("batch_size", batch_size, 1),
    ):
        if not _is_int(value, least):
            raise ArgumentError(f"{name} must be an integer >= {least}; got {value!r}", name)
    if (
        not n
        or any(isinstance(v, bool) or not isinstance(v, int | np.integer) for v in n)
        or (min(n) < 1)
    ):
        raise ArgumentError(f"n must be one or more positive integers; got {n!r}", "n")


def study_configs(
    study: str,
    n: tuple[int, ...],
    *,
    compare_projection: bool = False,
    ranks: tuple[int, ...] | None = None,
    warm_start: int | None = None,
    point_estimate: str | None = None,
    uniform_from: int | None = None,
    tuning_n: int | None = None,
    figures: bool = True,
) -> dict[str, StudyConfig | EnsembleStudyConfig]:
    """One configuration per setting of ``study`` at checkpoints ``n``, with the options of
    :func:`reproduce` applied; :class:`~.outputs.ArgumentError` for an option that does not
    apply to the study or is out of range."""
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
    changes: dict = {}
    if warm_start is not None:
        least = 0 if study == "ensemble" else 1
        if not _is_int(warm_start, least):
            raise ArgumentError(
                f"warm_start must be an integer >= {least} for {study}; got {warm_start!r}",
                "warm_start",
            )
        changes["warm_start"] = int(warm_start)
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
        changes["point_estimate"] = point_estimate
    if uniform_from is not None or tuning_n is not None:
        _check_uniform(study, n, uniform_from, tuning_n)
        changes.update(
            uniform_from=int(uniform_from),
            tuning_n=None if tuning_n is None else int(tuning_n),
            trace_trials=2 if figures else 0,
        )
    return {k: dataclasses.replace(c, **changes) for k, c in configs.items()}


def _check_uniform(study: str, n, uniform_from, tuning_n) -> None:
    if study == "ensemble":
        name = "uniform_from" if uniform_from is not None else "tuning_n"
        raise ArgumentError("uniform_from and tuning_n do not apply to the ensemble study", name)
    if uniform_from is None:
        raise ArgumentError("tuning_n needs uniform_from (the first round checked)", "tuning_n")
    for name, value in (("uniform_from", uniform_from), ("tuning_n", tuning_n)):
        if value is not None and not _is_int(value, 1):
            raise ArgumentError(f"{name} must be a positive integer; got {value!r}", name)
    if uniform_from > max(n):
        raise ArgumentError(
            f"uniform_from must be at most the last checkpoint {max(n)}; got {uniform_from}",
            "uniform_from",
        )


@dataclass
class StudyRun:
    """What the settings of a study gave: per setting its merged arrays (``results``), the
    trials that finished (``done``), ``timing`` and ``diagnostics``; the table's ``rows``
    and ``uniform_rows`` over all settings; ``stopped``, the Ctrl-C that ended the run
    early, or None."""

    results: dict = field(default_factory=dict)
    done: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    uniform_rows: list = field(default_factory=list)
    stopped: KeyboardInterrupt | None = None


def run_settings(
    study: str,
    configs: dict,
    trials: int,
    seed: int,
    batch_size: int,
    jobs: int,
    backend: str,
    stream,
) -> StudyRun:
    """Run every setting of ``study`` in turn on ``jobs`` local processes or Ray workers,
    each timed (:func:`~.timing.run_timed_setting`), and read its rows; after a
    Ctrl-C the settings not reached are skipped."""
    map_fn = progress_map(jobs, backend, sys.stderr)
    run = StudyRun()
    for label, config in configs.items():
        print(
            f"{study} {label}: {trials} trials, n = {list(config.checkpoints)}, "
            f"{jobs} job(s), backend {backend}, engine {engines.active_engine()}",
            file=stream,
        )
        result, run.timing[label], run.stopped = run_timed_setting(
            config, trials, seed, batch_size, jobs, map_fn, stream
        )
        if result is None:  # stopped before a chunk of this setting finished
            del run.timing[label]
            break
        stopped = run.stopped
        run.done[label] = trials if not isinstance(stopped, RunInterrupted) else stopped.done
        run.results[label] = result
        run.diagnostics[label] = study_diagnostics(config, result)
        for r in study_rows(config, result):
            method = r.pop("method", "ours")
            run.rows.append({"study": study, "setting": label, "method": method, **r})
        for r in summarize_uniform(result):
            run.uniform_rows.append({"study": study, "setting": label, **r})
        if stopped is not None:
            break
    return run


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
        size): default 2000
        (:data:`~lrbandit_gym.experiments.studies.PAPER_WARM_START_ROUNDS`), 300 for
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
    _check_run(trials, n, seed, jobs, batch_size)
    configs = study_configs(
        study,
        n,
        compare_projection=compare_projection,
        ranks=ranks,
        warm_start=warm_start,
        point_estimate=point_estimate,
        uniform_from=uniform_from,
        tuning_n=tuning_n,
        figures=figures,
    )
    if backend not in BACKENDS:
        raise ArgumentError(f"backend must be 'local' or 'ray'; got {backend!r}", "backend")
    out = Path(out)
    earlier = check_outputs(out, output_patterns(study), overwrite)  # before any trial
    options = {
        "compare_projection": compare_projection,
        "ranks": None if ranks is None else [int(r) for r in ranks],
        "warm_start": None if warm_start is None else int(warm_start),
        "uniform_from": uniform_from,
        "tuning_n": tuning_n,
        "point_estimate": point_estimate,
    }
    stamp = RunStamp.of(
        f"lrbandit reproduce {study}",
        {
            "trials": trials,
            "n": list(n),
            "batch_size": batch_size,
            "jobs": jobs,
            "backend": backend,
            "engine": engines.active_engine(),
            **options,
        },
        seed,
    )
    out.mkdir(parents=True, exist_ok=True)
    run = run_settings(study, configs, trials, seed, batch_size, jobs, backend, stream)
    total = trials * len(configs)
    partial = "" if run.stopped is None else interrupted_line(sum(run.done.values()), total)
    if run.stopped is not None:
        if not run.results:
            raise run.stopped
        stamp = dataclasses.replace(stamp, partial=partial)
    if partial:
        counts = ", ".join(f"{k} {run.done.get(k, 0)} of {trials}" for k in configs)
        print(f"PARTIAL RESULT ({partial}: {counts}); the table is over those", file=stream)
    print_table(study, run.rows, stream)
    if run.uniform_rows:
        print_uniform(run.uniform_rows, stream)
    if study == "ensemble":
        print_ensemble(run.rows, next(iter(run.diagnostics.values())), stream)
    settings = {
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
        "warm_start": options["warm_start"],
    }
    meta = write_outputs(
        study, out, run, configs, settings, stamp, earlier, partial, figures, stream
    )
    if partial:
        print(f"{partial}: the files above hold what finished, marked partial", file=stream)
        reason = getattr(run.stopped, "reason", None)
        raise RunInterrupted(meta, sum(run.done.values()), total, reason)
    return meta


def write_outputs(
    study: str,
    out: Path,
    run: StudyRun,
    configs: dict,
    settings: dict,
    stamp: RunStamp,
    earlier,
    partial: str,
    figures: bool,
    stream,
) -> dict:
    """Write the study's files into ``out`` (raw arrays, figures, JSON, CSV tables), remove
    the earlier run's files not written again, and return what the JSON holds."""
    raw = save_raw(out / f"{study}.npz", study, run.results, stamp)
    paths = []
    if figures:
        with stamped(stamp):
            paths = write_figures(study, list(run.results), run.results, out, stream)
    meta = {
        "partial": bool(partial),
        "interrupted": partial or None,
        "trials_done": run.done,
        **settings,
        "configs": {
            k: {f: (list(v) if isinstance(v, tuple) else v) for f, v in vars(c).items()}
            for k, c in configs.items()
        },
        "timing": run.timing,
        "diagnostics": run.diagnostics,
        "versions": run_versions(),
        "raw": str(raw),
        "figures": paths,
        "rows": run.rows,
        "uniform_from": stamp.settings["uniform_from"],
        "tuning_n": stamp.settings["tuning_n"],
        "uniform_rows": run.uniform_rows,
    }
    written = [str(raw), *paths]
    written.append(write_json(out / f"{study}.json", meta, stamp))
    written.append(write_csv(out / f"{study}.csv", run.rows, stamp))
    if run.uniform_rows:
        written.append(write_csv(out / f"{study}_uniform.csv", run.uniform_rows, stamp))
    remove_stale(earlier, written, stream)
    print(
        f"wrote {out / (study + '.csv')}, {out / (study + '.json')} and {raw}",
        file=stream,
    )
    return meta
