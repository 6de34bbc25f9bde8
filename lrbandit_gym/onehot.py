"""Completion contexts ``X = e_j e_kᵀ`` held as their index ``(j, k)`` instead of a matrix.

A completion context (docs/method.md §1, Appendix C) reveals one entry of the arms'
matrices: ``<A, e_j e_kᵀ> = A[j, k]``, ``(e_j e_kᵀ) V = e_j V[k]ᵀ`` and
``(e_j e_kᵀ)ᵀ U = e_k U[j]ᵀ``.  Everything a round computes from such a context is
therefore a gather of one row of ``U`` and one row of ``V``: O((d1 + d2) r) work, where the
dense ``d1 x d2`` matrix costs O(d1 d2) merely to read.  :class:`OneHotContexts` carries a
stack of them as two integer arrays; the environment emits the index
(``observation="index"``), and the estimators, the warm start and the inference cores
convert a dense one-hot matrix to it (:func:`one_hot_contexts`, one pass) wherever they see
a completion context.

The index form of one context is an integer array ``[j, k]`` of shape ``(2,)`` (``(B, 2)``
for ``B`` trials); :func:`check_index` validates it as strictly as
:func:`lrbandit_gym.input_checks.check_context` validates a matrix.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

__all__ = ["OneHotContexts", "check_index", "is_index_like", "one_hot_contexts"]


class OneHotContexts:
    """A stack of one-hot contexts ``e_j e_kᵀ`` (``d1 x d2``), stored as ``(rows, cols)``.

    It stands for the dense array of shape ``rows.shape + (d1, d2)`` that holds a 1 at
    ``[..., rows, cols]`` and zeros elsewhere: :attr:`shape` is that array's shape,
    indexing the leading axes (``ctx[b]``, ``ctx[b : b + 1]``, ``ctx[:, :n]``) indexes the
    contexts, and :meth:`dense` builds it.

    Parameters
    ----------
    rows, cols : array_like of int
        Row ``j`` and column ``k`` of every context (same shape; assumed in range: build
        from user input with :func:`check_index`).
    d1, d2 : int
        The matrix shape.
    """

    __slots__ = ("cols", "d1", "d2", "rows")

    def __init__(self, rows: Any, cols: Any, d1: int, d2: int) -> None:
        self.rows = np.asarray(rows, dtype=np.int64)
        self.cols = np.asarray(cols, dtype=np.int64)
        if self.rows.shape != self.cols.shape:
            raise ValueError(
                f"rows and cols must have the same shape, got {self.rows.shape} and "
                f"{self.cols.shape}"
            )
        self.d1 = int(d1)
        self.d2 = int(d2)

    @classmethod
    def unchecked(cls, rows: np.ndarray, cols: np.ndarray, d1: int, d2: int) -> OneHotContexts:
        """Build from int64 arrays of one shape, without the constructor's conversion and
        check: the per-round hot path, for indices already validated (:func:`check_index`)
        or built from validated ones."""
        self = object.__new__(cls)
        self.rows, self.cols, self.d1, self.d2 = rows, cols, d1, d2
        return self

    @classmethod
    def from_flat(cls, flat: Any, d1: int, d2: int) -> OneHotContexts:
        """The contexts whose single 1 sits at flat position ``flat = j d2 + k``."""
        rows, cols = np.divmod(np.asarray(flat, dtype=np.int64), d2)
        return cls(rows, cols, d1, d2)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the dense stack this stands for: ``rows.shape + (d1, d2)``."""
        return (*self.rows.shape, self.d1, self.d2)

    @property
    def ndim(self) -> int:
        return self.rows.ndim + 2

    @property
    def flat(self) -> np.ndarray:
        """Flat position ``j d2 + k`` of every context's 1 (int64, shape ``rows.shape``)."""
        return self.rows * self.d2 + self.cols

    @property
    def index(self) -> np.ndarray:
        """The index form ``[..., (j, k)]``: int64 of shape ``rows.shape + (2,)``."""
        return np.stack([self.rows, self.cols], axis=-1)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: Any) -> OneHotContexts:
        if isinstance(key, tuple) and len(key) > self.rows.ndim:
            raise IndexError("OneHotContexts is indexed on its leading (context) axes only")
        return OneHotContexts(self.rows[key], self.cols[key], self.d1, self.d2)

    def dense(self, dtype: Any = np.float64) -> np.ndarray:
        """The dense stack, of shape :attr:`shape` (O(d1 d2) memory per context)."""
        out = np.zeros((self.rows.size, self.d1 * self.d2), dtype=dtype)
        out[np.arange(self.rows.size), self.flat.ravel()] = 1
        return out.reshape(self.shape)

    def __repr__(self) -> str:
        return f"OneHotContexts(shape={self.shape}, index={self.index.tolist()!r})"


def one_hot_contexts(X: np.ndarray) -> OneHotContexts | None:
    """The index form of a stack of dense contexts if every one is ``e_j e_kᵀ``, else None.

    ``X`` has shape ``(..., d1, d2)``; a context counts as one-hot when it has exactly one
    non-zero entry and that entry is 1 (the law of completion contexts).  One pass over
    ``X`` (``np.flatnonzero``), so it costs about as much as reading the matrices once.
    """
    *lead, d1, d2 = X.shape
    n = int(np.prod(lead, dtype=np.int64)) if lead else 1
    if n == 0:
        return None
    flat = X.reshape(n, d1 * d2)
    nz = np.flatnonzero(flat)
    if nz.size != n:
        return None
    owner, pos = np.divmod(nz, d1 * d2)
    if not np.array_equal(owner, np.arange(n)) or not (flat[owner, pos] == 1).all():
        return None
    return OneHotContexts.from_flat(pos.reshape(lead), d1, d2)


def is_index_like(X: Any, n_trials: int | None) -> bool:
    """Whether ``X`` has the shape of the index form: ``(2,)``, or ``(n_trials, 2)``.

    A matrix context never has that shape (it has one more axis), so a completion
    estimator reads such an input as an index and validates it with :func:`check_index`.
    """
    shape = np.shape(X)
    return shape == ((2,) if n_trials is None else (n_trials, 2))


def check_index(
    X: Any, d1: int, d2: int, n_trials: int | None = None, name: str = "X"
) -> OneHotContexts:
    """Validate index-form completion context(s) and return them with a trial axis.

    Parameters
    ----------
    X : array_like of int
        ``[j, k]`` of shape ``(2,)`` (``n_trials=None``), or ``(n_trials, 2)``.
    d1, d2 : int
        The matrix shape: ``0 <= j < d1`` and ``0 <= k < d2``.
    n_trials : int or None
        Batch size ``B``; None for one context.
    name : str
        Argument name used in error messages.

    Returns
    -------
    OneHotContexts
        With ``rows`` and ``cols`` of shape ``(B,)`` (``B = 1`` for one context).

    Raises
    ------
    ValueError
        If ``X`` is not an integer array of that shape (booleans and floats, even integral
        ones, are refused: an index is an integer) or an index is out of range; the message
        names ``name``, the value and, batched, the first offending trial.
    """
    if (
        n_trials is None and isinstance(X, np.ndarray) and X.shape == (2,) and X.dtype == np.int64
    ):  # the environment's index observation: checked in plain Python
        j, k = X.tolist()
        if 0 <= j < d1 and 0 <= k < d2:
            return OneHotContexts.unchecked(X[:1].copy(), X[1:].copy(), d1, d2)
    expected = (2,) if n_trials is None else (n_trials, 2)
    if isinstance(X, list | tuple) and n_trials is None and len(X) == 2:
        try:  # Python ints (or numpy integer scalars) as a plain pair
            X = np.array([operator.index(v) for v in X], dtype=np.int64)
        except TypeError:
            pass  # reported below
    arr = np.asarray(X)
    if arr.shape != expected:
        raise ValueError(
            f"{name} must be a completion index (row, column) of shape {expected} or a "
            f"({d1}, {d2}) one-hot matrix, got shape {arr.shape}"
        )
    if arr.dtype.kind not in "iu":
        first = arr.reshape(-1, 2)[0].tolist() if arr.size else []
        raise ValueError(
            f"{name} must be an integer completion index (row, column), got dtype "
            f"{arr.dtype} ({first!r}{'' if n_trials is None else ', trial 0'})"
        )
    idx = arr.reshape(-1, 2).astype(np.int64, copy=False)
    rows, cols = idx[:, 0], idx[:, 1]
    bad = (rows < 0) | (rows >= d1) | (cols < 0) | (cols >= d2)
    if bad.any():
        i = int(np.argmax(bad))
        where = "" if n_trials is None else f" (trial {i})"
        raise ValueError(
            f"{name} must be a completion index (row, column) with 0 <= row < {d1} and "
            f"0 <= column < {d2}, got {idx[i].tolist()!r}{where}"
        )
    return OneHotContexts(rows.copy(), cols.copy(), d1, d2)
