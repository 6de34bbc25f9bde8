"""Numerical floors shared by the numpy and the compiled (numba) paths of the inference.

Both :mod:`inference.cores.tangent_space` and :mod:`inference.cores._kernels` read them from
here, so the
two engines drop the same directions.
"""

from __future__ import annotations

__all__ = ["CHOL_FLOOR", "EIG_FLOOR", "TARGET_FLOOR"]

# An eigenvalue of U^T U below this fraction of the largest counts as zero: that direction
# is dropped from the basis instead of being divided by ~0.
EIG_FLOOR = 1e-12
# A trial whose smallest Cholesky pivot L_jj^2 is below this fraction of the largest diagonal
# entry of U^T U is redone with eigh (det = prod L_jj^2, so a tiny eigenvalue forces some
# small pivot).
CHOL_FLOOR = 1e-6
# Singular values of a target below this fraction of its largest are dropped.
TARGET_FLOOR = 1e-13
