"""Running a list of independent work items in processes or on Ray, for the studies and the
comparisons, and stopping such a run on Ctrl-C.

Each item carries its own seed, so what a map returns does not depend on how many
processes run it, in what order items finish, or on the backend.  Local workers run with
one BLAS thread and keep their warm-start buffer between items
(:func:`single_threaded_blas`).  :mod:`~lrbandit_gym.experiments.montecarlo` runs the
studies' chunks through these maps.

Ctrl-C (``KeyboardInterrupt`` in the calling process) stops a map within a fraction of a
second: the items not started are cancelled, the running ones are ended, and the map raises
:class:`Interrupted`, which holds every item that had finished.  The callers (validate,
compare, reproduce) merge those into a result marked partial and raise
:class:`RunInterrupted` with it; both are ``KeyboardInterrupt``, so code that does not look
for them stops as it would on any Ctrl-C.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "Interrupted",
    "RunInterrupted",
    "WorkerDied",
    "interrupted_line",
    "local_map",
    "process_pool_map",
    "ray_map",
    "require_ray",
    "single_threaded_blas",
]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a map: ``results`` maps the index of every item that finished to its
    result; ``total`` is how many items the map had."""

    def __init__(self, results: dict[int, Any], total: int):
        super().__init__(f"interrupted: {len(results)} of {total} items finished")
        self.results = dict(sorted(results.items()))
        self.total = total


class WorkerDied(Interrupted):
    """A worker process of a map died (killed, say by the out-of-memory killer): the map
    stops as on Ctrl-C and keeps the items that finished (``results``), so the callers
    write them marked partial; the message says that a worker died, not that a user
    interrupted."""

    def __init__(self, results: dict[int, Any], total: int):
        super().__init__(results, total)
        self.args = (
            "a worker process died (killed, or out of memory); "
            f"{len(self.results)} of {total} items finished",
        )


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run that kept what finished: ``result`` is the run's result over the
    ``done`` trials that finished (of ``total``), marked partial; :attr:`line` says so.
    ``reason`` says what stopped the run when it was not Ctrl-C (a :class:`WorkerDied`),
    else None."""

    def __init__(self, result: Any, done: int, total: int, reason: str | None = None):
        self.result, self.done, self.total = result, int(done), int(total)
        self.reason = reason
        super().__init__(self.line)

    @property
    def line(self) -> str:
        """``"interrupted: N of M trials"``."""
        return interrupted_line(self.done, self.total)


def interrupted_line(done: int, total: int) -> str:
    """``"interrupted: N of M trials"``, the words every partial output and report uses."""
    return f"interrupted: {done} of {total} trials"


def local_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    jobs: int,
    on_done: Callable[[int], None] | None = None,
    **pool_options: Any,
) -> list:
    """``[fn(item) for item in items]`` in ``jobs`` worker processes (:func:`process_pool_map`,
    which ``pool_options`` go to) or, when ``jobs == 1``, in this process with one
    warm-start buffer for all items; ``on_done(i)`` is called as item ``i`` completes, in any
    order.  Ctrl-C raises :class:`Interrupted` with the items that finished."""
    if jobs > 1:
        return process_pool_map(fn, items, jobs, on_done, **pool_options)
    from agents.warm_start import reuse_buffer_memory

    results: list = [None] * len(items)
    finished: dict[int, Any] = {}
    done = on_done or (lambda i: None)
    previous = reuse_buffer_memory(True)  # one warm-start buffer for all items
    try:
        for i, item in enumerate(items):
            results[i] = finished[i] = fn(item)
            done(i)
    except KeyboardInterrupt:
        raise Interrupted(finished, len(items)) from None
    finally:
        reuse_buffer_memory(previous)
    return results


def process_pool_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    jobs: int,
    on_done: Callable[[int], None] | None = None,
    *,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
    poll: Callable[[], None] | None = None,
) -> list:
    """``[fn(item) for item in items]`` in ``min(jobs, len(items))`` worker processes, even
    for one, each set up by ``initializer(*initargs)`` (default: one BLAS thread,
    :func:`single_threaded_blas`); ``on_done(i)`` is called
    as item ``i`` completes, and ``poll()`` (if given) about every 0.2 s while items run and
    once at the end.

    How a run stops.  The workers ignore SIGINT, so a Ctrl-C at the terminal (sent to the
    whole process group) reaches only this process, which reads a first one between its
    waits (never inside them or inside ``on_done``, :func:`_deferred_sigint`).  Then the items
    not yet started are cancelled (``shutdown(cancel_futures=True)``) and the running ones are
    ended: every worker keeps a thread waiting on a ``multiprocessing.Semaphore``, which
    this process releases once per worker, and the thread ends its worker with SIGTERM;
    :class:`Interrupted` is then raised with the items that had finished.  Releasing a
    semaphore waits for no one, so a worker that died cannot hold the stop up (a
    ``multiprocessing.Event`` waits in ``set()`` for every waiter to wake, the dead ones
    too).  The pool stays a ``ProcessPoolExecutor``, which reports a worker that dies
    (say, killed for memory) as ``BrokenProcessPool``, where ``multiprocessing.Pool``
    waits for it forever; the map then stops the same way and raises :class:`WorkerDied`
    with the items that had finished.  Before Python 3.14 (``terminate_workers``) the
    executor has no public way to end its workers, and the semaphore reaches them with
    documented calls only, workers that are still starting included.  A second Ctrl-C
    while the workers are ending aborts at once (a plain ``KeyboardInterrupt``).  An item
    that raises stops the others the same way before its exception propagates.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    if initializer is None:
        initializer = single_threaded_blas
    results: list = [None] * len(items)
    finished: dict[int, Any] = {}
    done = on_done or (lambda i: None)
    context = multiprocessing.get_context()
    workers = max(1, min(jobs, len(items)))
    stop = _Stop(context.Semaphore(0), workers)
    pool = ProcessPoolExecutor(
        workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(stop, initializer, initargs),
    )
    futures: dict = {}
    broken = False
    with _deferred_sigint() as interrupted:  # a first Ctrl-C is read between the waits
        try:
            for i, item in enumerate(items):
                futures[pool.submit(fn, item)] = i
            pending = set(futures)
            while pending:
                ready, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                if interrupted.is_set():
                    raise KeyboardInterrupt
                for future in sorted(ready, key=futures.get):
                    i = futures[future]
                    try:
                        results[i] = finished[i] = future.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    done(i)
                if broken:
                    raise BrokenProcessPool
                if poll is not None:
                    poll()
            if interrupted.is_set():
                raise KeyboardInterrupt
        except (KeyboardInterrupt, BrokenProcessPool) as exc:
            _stop_pool(pool, stop)
            for future, i in futures.items():  # those that completed while the pool stopped
                if i not in finished and future.done() and not future.cancelled():
                    if future.exception() is None:
                        finished[i] = future.result()
            if isinstance(exc, BrokenProcessPool):
                raise WorkerDied(finished, len(items)) from None
            raise Interrupted(finished, len(items)) from None
        except BaseException:
            _stop_pool(pool, stop)
            raise
        pool.shutdown(wait=True)
    if poll is not None:
        poll()
    return results


@contextlib.contextmanager
def _deferred_sigint():
    """Within: the first SIGINT only sets the event this yields, which the map reads
    between its waits; a second raises ``KeyboardInterrupt`` at once.

    An interrupt raised asynchronously can land inside ``concurrent.futures.wait`` while it
    holds the futures' locks, which the executor's thread then waits for forever; read at
    the map's own safe points it cannot.  Only in the main thread and where SIGINT has
    Python's default handler; elsewhere the event is never set and Ctrl-C acts as before.
    """
    import signal
    import threading

    event = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield event
        return

    def handler(signum, frame):
        if event.is_set():
            raise KeyboardInterrupt
        event.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Stop:
    """The workers' stop signal: ``set()`` releases ``semaphore`` once per worker, which
    waits for no worker (a dead one included); each worker's thread takes one release."""

    def __init__(self, semaphore, workers: int):
        self.semaphore, self.workers = semaphore, workers

    def set(self) -> None:
        for _ in range(self.workers):
            self.semaphore.release()

    def wait(self) -> None:
        self.semaphore.acquire()


def _stop_pool(pool, stop: _Stop) -> None:
    """Cancel the items not started and end the workers (see :func:`process_pool_map`)."""
    stop.set()
    pool.shutdown(wait=True, cancel_futures=True)


def _start_worker(stop, initializer: Callable[..., None], initargs: tuple) -> None:
    """A worker's set-up: ignore SIGINT (the calling process decides), end this process
    when ``stop`` is set, then the caller's ``initializer``."""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_when_set, args=(stop,), daemon=True).start()
    initializer(*initargs)


def _end_when_set(stop) -> None:
    import os
    import signal

    stop.wait()
    os.kill(os.getpid(), signal.SIGTERM)


def single_threaded_blas() -> None:
    """Worker initializer: one BLAS thread per process (2 processes on 2 cores, not 2×2),
    one warm-start buffer reused by all the chunks the process runs, and freed memory kept
    for reuse (:func:`_keep_freed_memory`)."""
    from threadpoolctl import threadpool_limits

    from agents.warm_start import reuse_buffer_memory

    threadpool_limits(1)
    reuse_buffer_memory(True)
    _keep_freed_memory()


# glibc's mallopt parameters (malloc.h) and the largest mmap threshold it accepts on 64-bit.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MMAP_THRESHOLD_MAX = 32 << 20


def _keep_freed_memory() -> bool:
    """Make glibc's ``malloc`` keep freed memory in the process for reuse (study workers).

    The warm-start fit allocates and frees arrays of ~10 MB per trial and arm.  By default
    glibc hands such blocks back to the kernel as soon as they are freed, so the next trial
    faults every page in again and the kernel zeroes it (docs/performance.md gives the
    counts).  Serving blocks up to 32 MB
    from the heap and keeping up to 1 GB of freed heap removes them; the numbers computed do
    not change.  Larger blocks (the warm-start buffer) are still mapped on their own.

    Called by the initializer of the worker processes that :func:`process_pool_map` starts
    (the studies' ``--jobs`` above 1), never in the caller's own process.  Returns whether
    the options were set: False where the C library is not glibc (the workers then run as
    before).
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX),
            (_M_TRIM_THRESHOLD, 1 << 30),
            (_M_TOP_PAD, 64 << 20),
        )
    )


def ray_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    jobs: int,
    on_done: Callable[[int], None] | None = None,
) -> list:
    """:func:`local_map` on Ray (the ``ray`` extra).  A Ray already initialized in this
    process is used as it is, and left running; else, with ``RAY_ADDRESS`` set, this call
    connects to that cluster (whose CPUs are its own: ``num_cpus`` is for a new local
    Ray only), and otherwise starts a local Ray with ``jobs`` CPUs; what it connected or
    started it shuts down at the end.  Ctrl-C cancels the tasks not finished
    (``ray.cancel(force=True)``) and raises :class:`Interrupted`."""
    import os

    ray = require_ray()
    done = on_done or (lambda i: None)
    started = not ray.is_initialized()
    if started and os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    elif started:
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
    results: list = [None] * len(items)
    finished: dict[int, Any] = {}
    pending: list = []
    try:
        remote = ray.remote(num_cpus=1)(fn)
        refs = {remote.remote(item): i for i, item in enumerate(items)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                results[refs[ref]] = finished[refs[ref]] = ray.get(ref)
                done(refs[ref])
        return results
    except KeyboardInterrupt:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - a task that ended meanwhile
                pass
        raise Interrupted(finished, len(items)) from None
    finally:
        if started:
            ray.shutdown()


def require_ray():
    """The ``ray`` module; ``ImportError`` with the install command when the ``ray`` extra
    is missing (the command line checks it before a run starts)."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend='ray' needs ray: pip install 'lrbandit-gym[ray]'") from exc
    return ray
