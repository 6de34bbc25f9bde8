"""The Monte Carlo engine of the experiments: a setting, chunked trials, read-outs and a
reduction, run alike on local processes or on Ray.

Every study of the package (``lrbandit reproduce``'s tables, the ensemble study,
``lrbandit validate``) is the same computation on a different setting:

1. **Chunks.**  ``n_trials`` trials are cut into chunks of ``batch_size`` (the last may be
   smaller); chunk ``i`` is seeded by the ``i``-th child of ``SeedSequence(seed)``
   (:func:`plan_chunks`) and remembers the kernel engine of the process that planned it.
2. **A chunk runner.**  ``runner(setting, n_trials, seed, **options) -> dict`` plays one
   chunk's trials at once on the vector environment and returns its read-outs, arrays with
   a trial axis (:class:`ChunkRunner`).  It runs with one BLAS thread, so a chunk gives the
   same numbers in this process, in a worker process or on a Ray worker.
3. **A map.**  :func:`run_chunks` maps the runner over the chunks in this process, in
   ``jobs`` local worker processes or on Ray (:mod:`~lrbandit_gym.experiments.parallel`);
   a runner that reports its rounds (``report=``) moves a progress bar from any of them.
   On Ctrl-C it keeps the chunks that finished (:class:`ChunkResults`).
4. **A reduction.**  :func:`merge_trials` concatenates the chunks' arrays along their trial
   axis, in chunk order, so the merged result depends on ``seed`` and ``batch_size`` only.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from lrbandit_gym import engine as engines
from lrbandit_gym.experiments.parallel import (
    Interrupted,
    RunInterrupted,
    WorkerDied,
    local_map,
    ray_map,
    single_threaded_blas,
)

__all__ = [
    "BACKENDS",
    "Chunk",
    "ChunkProgress",
    "ChunkResults",
    "ChunkRunner",
    "chunk_map",
    "merge_trials",
    "plan_chunks",
    "progress_map",
    "run_chunk_task",
    "run_chunks",
    "run_trials",
]

#: Where chunks run: ``"local"`` (this process for one job, else worker processes) or
#: ``"ray"`` (Ray workers, the ``ray`` extra).
BACKENDS = ("local", "ray")


class ChunkRunner(Protocol):
    """What a setting provides to the engine: one chunk of trials.

    ``runner(setting, n_trials, seed, **options)`` plays ``n_trials`` trials of
    ``setting`` seeded by ``seed`` (a ``SeedSequence``) and returns the chunk's read-outs.
    It must be a module-level function (worker processes and Ray import it by name); a
    runner that accepts ``report`` is called with ``report(k)``, to be called with the
    rounds played since the last call, when the caller asks for round progress.
    """

    def __call__(
        self, setting: Any, n_trials: int, seed: np.random.SeedSequence, **options
    ): ...  # pragma: no cover - a protocol


@dataclass(frozen=True)
class Chunk:
    """One chunk of a run: ``n_trials`` trials of ``setting`` seeded by ``seed``, run with
    the kernel engine ``engine`` (:mod:`lrbandit_gym.engine`) wherever it runs."""

    setting: Any
    n_trials: int
    seed: np.random.SeedSequence
    engine: str


def plan_chunks(setting: Any, n_trials: int, batch_size: int, seed) -> list[Chunk]:
    """The chunks of a run: ``batch_size`` trials each (the last may be smaller), chunk
    ``i`` seeded by the ``i``-th child of ``SeedSequence(seed)`` and run with the engine
    active now."""
    sizes = [batch_size] * (n_trials // batch_size)
    if n_trials % batch_size:
        sizes.append(n_trials % batch_size)
    seeds = np.random.SeedSequence(seed).spawn(len(sizes))
    kernels = engines.active_engine()
    return [Chunk(setting, size, s, kernels) for size, s in zip(sizes, seeds, strict=True)]


# A worker process's queue for the rounds its chunks report (see _start_reporting_worker).
_ROUNDS_QUEUE = None


def _start_reporting_worker(queue) -> None:
    """Worker initializer when chunks report rounds: keep the queue, then one BLAS thread
    (:func:`~.parallel.single_threaded_blas`)."""
    global _ROUNDS_QUEUE
    _ROUNDS_QUEUE = queue
    single_threaded_blas()


def run_chunk_task(task: tuple, report: Callable[[int], None] | None = None):
    """Run one chunk: ``task = (runner, chunk, options, reports)``, with the chunk's kernel
    engine.  When ``reports``, the runner gets ``report``: the one given (this process),
    the worker's queue (worker processes), or None (Ray)."""
    runner, chunk, options, reports = task
    if reports:
        if report is None and _ROUNDS_QUEUE is not None:
            report = _ROUNDS_QUEUE.put
        options = {**options, "report": report}
    with engines.use(chunk.engine):
        return runner(chunk.setting, chunk.n_trials, chunk.seed, **options)


@dataclass
class ChunkResults:
    """The chunks that finished: ``results[i]`` is the result of ``chunks[finished[i]]``,
    in chunk order; ``stopped`` is the Ctrl-C (or the :class:`~.parallel.WorkerDied`) that
    ended the run early, or None."""

    chunks: list[Chunk]
    finished: list[int]
    results: list[dict]
    stopped: Interrupted | None = None

    @property
    def partial(self) -> bool:
        return self.stopped is not None

    @property
    def trials(self) -> int:
        """Trials planned."""
        return sum(c.n_trials for c in self.chunks)

    @property
    def trials_done(self) -> int:
        """Trials of the chunks that finished."""
        return sum(self.chunks[i].n_trials for i in self.finished)

    def interrupted(self, result: Any) -> RunInterrupted:
        """The :class:`~.parallel.RunInterrupted` that carries ``result``, merged from the
        chunks that finished, with the reason when a worker died."""
        reason = str(self.stopped) if isinstance(self.stopped, WorkerDied) else None
        return RunInterrupted(result, self.trials_done, self.trials, reason)


def chunk_map(
    jobs: int = 1,
    backend: str = "local",
    on_done: Callable[[int], None] | None = None,
    **pool_options: Any,
) -> Callable[[Callable, Sequence], list]:
    """``map_fn(fn, items)`` on ``backend``: in this process (``jobs == 1``) or ``jobs``
    local worker processes (:func:`~.parallel.local_map`, which ``pool_options`` go to), or
    ``jobs`` Ray CPUs (:func:`~.parallel.ray_map`); ``on_done(i)`` as item ``i`` finishes."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")

    def map_fn(fn, items):
        if backend == "ray":
            return ray_map(fn, items, jobs, on_done)
        return local_map(fn, items, jobs, on_done, **pool_options)

    return map_fn


def run_chunks(
    runner: ChunkRunner,
    chunks: Sequence[Chunk],
    *,
    jobs: int = 1,
    backend: str = "local",
    map_fn: Callable[[Callable, Sequence], list] | None = None,
    on_done: Callable[[int], None] | None = None,
    report: Callable[[int], None] | None = None,
    options: Mapping[str, Any] | None = None,
) -> ChunkResults:
    """Run ``runner`` on every chunk and keep what finished.

    The chunks run through ``map_fn(run_chunk_task, tasks)`` when given (say, one with its
    own progress bar, :func:`chunk_map`), else :func:`chunk_map` of ``jobs`` and
    ``backend``, with ``on_done(i)`` as chunk ``i`` finishes.  ``options`` go to every
    runner call.  With ``report``, the runner is asked for its rounds (``report=``):
    in this process ``report`` itself, from worker processes through a queue that this
    process drains into ``report`` about every 0.2 s, on Ray not at all.

    Ctrl-C (an :class:`~.parallel.Interrupted` from the map) or a worker that died (a
    :class:`~.parallel.WorkerDied`) returns the chunks that finished with ``stopped`` set;
    before any chunk finished it lets the exception through.
    """
    tasks = [(runner, c, dict(options or {}), report is not None) for c in chunks]
    fn: Callable = run_chunk_task
    pool_options: dict[str, Any] = {}
    drain = None
    if report is not None and map_fn is None and backend == "local":
        if jobs == 1:
            fn = functools.partial(run_chunk_task, report=report)
        else:
            drain, pool_options = _rounds_queue(report)
    if map_fn is None:
        map_fn = chunk_map(jobs, backend, on_done, **pool_options)
    try:
        results = list(map_fn(fn, tasks))
    except Interrupted as exc:
        if not exc.results:
            raise
        return ChunkResults(list(chunks), list(exc.results), list(exc.results.values()), exc)
    finally:
        if drain is not None:
            drain()
    return ChunkResults(list(chunks), list(range(len(chunks))), results)


def _rounds_queue(report: Callable[[int], None]) -> tuple[Callable[[], None], dict]:
    """A queue the worker processes put their rounds on: ``(drain, pool options)``, drain
    moving what is queued into ``report``."""
    import multiprocessing
    import queue as queue_module

    rounds = multiprocessing.get_context().Queue()

    def drain() -> None:
        while True:
            try:
                report(rounds.get_nowait())
            except queue_module.Empty:
                break

    options = {"initializer": _start_reporting_worker, "initargs": (rounds,), "poll": drain}
    return drain, options


def merge_trials(
    results: Sequence[Mapping[str, Any]],
    *,
    trial_axis: int = -1,
    axes: Mapping[str, int] | None = None,
    shared: Iterable[str] = (),
    summed: Iterable[str] = (),
    listed: Iterable[str] = (),
) -> dict[str, Any]:
    """The reduction: one result from the chunks' results, in chunk order.

    Every key of the first result is concatenated along its trial axis (``axes[key]``,
    default ``trial_axis``), except the ``shared`` ones (the same in every chunk: truths,
    checkpoints; the first chunk's is kept), the ``summed`` ones (timings) and the
    ``listed`` ones (lists joined).  A key that is None in some chunk stays None.
    """
    shared, summed, listed = set(shared), set(summed), set(listed)
    axes = dict(axes or {})
    first = results[0]
    merged: dict[str, Any] = {}
    for key, value in first.items():
        values = [r[key] for r in results]
        if key in shared:
            merged[key] = value
        elif key in summed:
            merged[key] = _sum(values)
        elif key in listed:
            merged[key] = [item for v in values for item in v]
        elif any(v is None for v in values):
            merged[key] = None
        else:
            merged[key] = np.concatenate(values, axis=axes.get(key, trial_axis))
    return merged


def _sum(values: list) -> Any:
    if all(isinstance(v, int | float) for v in values):
        return float(sum(values))
    return np.sum(values, axis=0)


def run_trials(
    runner: ChunkRunner,
    setting: Any,
    n_trials: int,
    seed: int,
    batch_size: int,
    merge: Callable[[list[dict]], Any],
    *,
    map_fn: Callable[[Callable, Sequence], list] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """A whole run: :func:`plan_chunks`, :func:`run_chunks` (through ``map_fn``, or in this
    process with ``progress(done, total)`` after each chunk) and ``merge`` of the chunks'
    results.

    Ctrl-C raises :class:`~.parallel.RunInterrupted` whose ``result`` merges the chunks
    that finished (the ``KeyboardInterrupt`` itself when none did).
    """
    chunks = plan_chunks(setting, n_trials, batch_size, seed)
    on_done = None if progress is None else (lambda i: progress(i + 1, len(chunks)))
    ran = run_chunks(runner, chunks, map_fn=map_fn, on_done=on_done)
    merged = merge(ran.results)
    if ran.partial:
        raise ran.interrupted(merged) from None
    return merged


class ChunkProgress:
    """A tqdm bar of chunks with ETA on ``stream`` (shown when it is a terminal), and one
    final line whatever the stream."""

    def __init__(self, total: int, stream=None):
        from tqdm.auto import tqdm

        self.total, self.done = total, 0
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.bar = tqdm(total=total, desc="chunks", unit="chunk", file=self.stream, disable=None)

    def update(self, i: int | None = None) -> None:
        """One more chunk finished (``i``, its index, is not needed)."""
        self.done += 1
        self.bar.update(1)

    def close(self) -> None:
        disabled = self.bar.disable
        self.bar.close()
        if disabled:
            elapsed = time.perf_counter() - self.start
            print(f"{self.done}/{self.total} chunks in {elapsed:.0f} s", file=self.stream)


def progress_map(jobs: int, backend: str = "local", stream=None) -> Callable:
    """``map_fn(fn, items)`` on ``backend`` (:func:`chunk_map`) that shows a
    :class:`ChunkProgress` of its items on ``stream`` (default: standard error)."""

    def map_fn(fn, items):
        progress = ChunkProgress(len(items), stream)
        try:
            return chunk_map(jobs, backend, progress.update)(fn, items)
        finally:
            progress.close()

    return map_fn
