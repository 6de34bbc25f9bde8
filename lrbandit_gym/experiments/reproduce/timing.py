"""How ``lrbandit reproduce`` times a study: each setting runs between two timings of a
*draw baseline*, the seconds that merely drawing all its contexts with numpy takes on the
same processes (:func:`draw_baseline`), so the run's time reads as a ratio that does not
depend on the machine; the time of each phase of a chunk (warm-start rounds, warm-start
fit, online rounds) is set beside drawing that phase's contexts (:func:`phase_breakdown`).
"""

from __future__ import annotations

import time

import numpy as np

from lrbandit_gym.experiments.ensemble_study import EnsembleStudyConfig, run_ensemble_study
from lrbandit_gym.experiments.montecarlo import chunk_map
from lrbandit_gym.experiments.parallel import RunInterrupted
from lrbandit_gym.experiments.studies import PAPER_WARM_START_ROUNDS, StudyConfig, run_study

__all__ = [
    "draw_baseline",
    "phase_breakdown",
    "phase_line",
    "run_timed_setting",
    "study_rounds",
]


def study_rounds(config: StudyConfig | EnsembleStudyConfig) -> tuple[int, int]:
    """``(warm-start rounds, online rounds)`` of one trial of ``config``."""
    warm = PAPER_WARM_START_ROUNDS if config.warm_start is None else config.warm_start
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
    rounds = sum(study_rounds(config))
    per_loop = max(1, int(rounds * sample / repeats))
    batch = min(n_trials, batch_size)
    jobs_list = [(batch, config.d1, config.d2, per_loop, repeats)] * jobs
    if jobs > 1:
        seconds = chunk_map(jobs)(_draw_job, jobs_list)
    else:
        seconds = [_draw_job(j) for j in jobs_list]
    per_context = float(np.mean(seconds)) / (per_loop * batch)  # in one of `jobs` processes
    return per_context * n_trials * rounds / jobs


def phase_breakdown(config: StudyConfig, phases: dict, draw_seconds: float) -> dict:
    """Each of :data:`lrbandit_gym.experiments.studies.PHASES` (process-seconds summed over chunks)
    beside the seconds that drawing its rounds' contexts takes (``draw_seconds``, the draw
    baseline for all rounds in process-seconds, shared out by rounds)."""
    warm, online = study_rounds(config)
    share = {"warm_start_rounds": warm, "warm_start_fit": 0, "online_rounds": online}
    return {
        name: {"seconds": float(sec), "draw_seconds": draw_seconds * share[name] / (warm + online)}
        for name, sec in phases.items()
    }


def phase_line(breakdown: dict) -> str:
    """One line of process-seconds by phase, each beside drawing its rounds' contexts."""
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


def run_timed_setting(config, trials, seed, batch_size, jobs, map_fn, stream):
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
        timing["phases"] = phase_breakdown(config, phases, baseline * jobs)
        print(phase_line(timing["phases"]), file=stream)
    return result, timing, stopped
