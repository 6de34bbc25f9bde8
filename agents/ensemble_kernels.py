"""Compiled (numba) kernel of :class:`agents.ensemble.EnsembleSampling`'s round (engine
"numba"): the rank-one update of the sufficient statistics in one pass.

``out = S + vec(X) vec(X)^T`` element by element, a product then a sum (no fused
multiply-add), so the numbers are those of the numpy expression
``S + xf[:, :, None] * xf[:, None, :]``; the statistics are streamed once and no
``(d1 d2)^2`` temporary is made.  Imported only when numba runs
(:mod:`lrbandit_gym.engine`).
"""

from __future__ import annotations

from numba import njit

__all__ = ["add_outer"]


@njit(cache=True)
def add_outer(S, xf, out):
    """``out[b] = S[b] + xf[b] xf[b]^T`` for every trial ``b``; ``out`` may be ``S``.

    ``S``, ``out``: (n, p, p); ``xf``: (n, p).
    """
    n, p = xf.shape
    for b in range(n):
        for i in range(p):
            xi = xf[b, i]
            for j in range(p):
                out[b, i, j] = S[b, i, j] + xi * xf[b, j]
