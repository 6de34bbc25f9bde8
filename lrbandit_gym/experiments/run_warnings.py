"""The warnings a chunk of trials raises, recorded where it runs and counted over chunks.

A chunk runs in this process, a worker process or on Ray; its warnings would print from
wherever it ran, once per chunk, or not at all.  :func:`recorded_warnings` keeps each
distinct warning a chunk raises as ``(category, message)`` (picklable: the categories are
importable classes), and :func:`count_warnings` counts them over chunks, so a run can say
how many of its chunks raised each (``lrbandit validate``'s report, ``lrbandit compare``'s
notes) and show each once.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

__all__ = ["count_warnings", "recorded_warnings"]


@contextmanager
def recorded_warnings() -> Iterator[list[tuple[type, str]]]:
    """Record every warning raised inside the block (none is shown): the yielded list
    receives each distinct ``(category, message)`` once, in order of first appearance,
    when the block ends."""
    found: list[tuple[type, str]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield found
        finally:
            seen = dict.fromkeys((w.category, str(w.message)) for w in caught)
            found.extend(seen)


def count_warnings(
    per_chunk: Iterable[Sequence[tuple[type, str]]],
) -> list[tuple[type, str, int]]:
    """``(category, message, chunks that raised it)`` over the chunks' recorded warnings:
    warnings that differ only in their numbers (say, a median over a chunk's trials) are
    one, shown with the first chunk's text."""
    counts: dict[tuple, list] = {}
    for chunk in per_chunk:
        keys = {}
        for category, message in chunk:
            keys.setdefault((category, re.sub(r"\d+(\.\d+)?", "#", message)), message)
        for key, message in keys.items():
            counts.setdefault(key, [message, 0])[1] += 1
    return [(category, message, count) for (category, _), (message, count) in counts.items()]
