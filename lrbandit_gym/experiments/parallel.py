"""Running a list of independent work items in processes or on Ray, for the studies and the
comparisons.

Each item carries its own seed, so what a map returns does not depend on how many
processes run it, in what order items finish, or on the backend.  Local workers run with
one BLAS thread and keep their warm-start buffer between items
(:func:`~lrbandit_gym.experiments.studies.single_threaded_blas`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["local_map", "ray_map"]


def local_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    jobs: int,
    on_done: Callable[[int], None] | None = None,
) -> list:
    """``[fn(item) for item in items]`` in ``jobs`` worker processes (in this process when
    ``jobs == 1``); ``on_done(i)`` is called as item ``i`` completes, in any order."""
    results: list = [None] * len(items)
    done = on_done or (lambda i: None)
    if jobs == 1:
        from agents.warm_start import reuse_buffer_memory

        previous = reuse_buffer_memory(True)  # one warm-start buffer for all items
        try:
            for i, item in enumerate(items):
                results[i] = fn(item)
                done(i)
        finally:
            reuse_buffer_memory(previous)
        return results
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from lrbandit_gym.experiments.studies import single_threaded_blas

    with ProcessPoolExecutor(jobs, initializer=single_threaded_blas) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done(futures[future])
    return results


def ray_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    jobs: int,
    on_done: Callable[[int], None] | None = None,
) -> list:
    """:func:`local_map` on Ray (the ``ray`` extra), with ``jobs`` CPUs when this call
    starts Ray itself (a running Ray is used as it is, and left running)."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend='ray' needs ray: pip install 'lrbandit-gym[ray]'") from exc
    done = on_done or (lambda i: None)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(fn)
        refs = {remote.remote(item): i for i, item in enumerate(items)}
        results: list = [None] * len(items)
        pending = list(refs)
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                results[refs[ref]] = ray.get(ref)
                done(refs[ref])
        return results
    finally:
        if started:
            ray.shutdown()
