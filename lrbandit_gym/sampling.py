"""Draws of contexts and reward noise, shared by the single and the vector environment.

Every draw takes the caller's ``numpy.random.Generator`` (``env.np_random``) and a leading
batch size, so the vector environment draws B contexts in one call.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CONTEXTS", "NOISES", "draw_contexts", "draw_noise"]

CONTEXTS = ("gaussian", "completion")
#: Unit-variance noise laws; ``noise_std`` scales them.  "uniform" and "rademacher" are
#: sub-Gaussian alternatives to "gaussian"; "student_t" (3 degrees of freedom) and "laplace"
#: are heavy(ier)-tailed, for robustness studies.
NOISES = ("gaussian", "uniform", "rademacher", "laplace", "student_t")
STUDENT_T_DF = 3.0


def draw_contexts(
    rng: np.random.Generator, batch: int, d1: int, d2: int, kind: str, dtype, matrix: bool = True
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Draw ``batch`` contexts of shape ``(batch, d1, d2)``.

    Returns ``(X, flat_index)``: for completion contexts ``X[b] = e_j e_kᵀ`` and
    ``flat_index[b] = j·d2 + k`` (so oracle rewards need no pass over ``X``); ``None`` for
    Gaussian contexts.  With ``matrix=False`` (completion only) ``X`` is None and only the
    index is drawn: the same draw from ``rng``, so both forms give the same contexts.
    """
    if kind == "gaussian":
        return rng.standard_normal((batch, d1, d2), dtype=dtype), None
    flat_index = rng.integers(0, d1 * d2, size=batch)
    if not matrix:
        return None, flat_index
    x = np.zeros((batch, d1 * d2), dtype=dtype)
    x[np.arange(batch), flat_index] = 1
    return x.reshape(batch, d1, d2), flat_index


def draw_noise(rng: np.random.Generator, kind: str, size) -> np.ndarray:
    """Draw unit-variance, zero-mean noise of the named law."""
    if kind == "gaussian":
        return rng.standard_normal(size)
    if kind == "uniform":
        return rng.uniform(-math.sqrt(3.0), math.sqrt(3.0), size)
    if kind == "rademacher":
        return rng.integers(0, 2, size=size) * 2.0 - 1.0
    if kind == "laplace":
        return rng.laplace(0.0, 1.0 / math.sqrt(2.0), size)
    if kind == "student_t":
        return rng.standard_t(STUDENT_T_DF, size) / math.sqrt(STUDENT_T_DF / (STUDENT_T_DF - 2))
    raise ValueError(f"noise must be one of {NOISES}; got {kind!r}")
